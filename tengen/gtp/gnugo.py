"""GNU Go as the outside anchor: finding the binary, its command line, its ratings name, and the
`tengen gtp` command line a model plays it with. Shared by `tengen eval gnugo` and the strength
service, so both measure with the same settings and report under the same names."""
from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

GNUGO_LEVELS = range(0, 11)
DEBIAN_GNUGO = "/usr/games/gnugo"  # Debian's package installs here, often off PATH
INSTALL_HINT = (
    "GNU Go is not installed. Install it with `make gnugo` (runs apt-get install gnugo when it is "
    "missing), or on Debian/Ubuntu `sudo apt-get install gnugo`, or pass --gnugo PATH."
)


def find_gnugo(explicit: str | None = None) -> str | None:
    """The gnugo binary: `explicit`, else gnugo on PATH, else Debian's /usr/games/gnugo."""
    if explicit:
        return explicit if Path(explicit).is_file() else None
    found = shutil.which("gnugo")
    if found:
        return found
    return DEBIAN_GNUGO if Path(DEBIAN_GNUGO).is_file() else None


def gnugo_command(gnugo: str, level: int) -> str:
    """GNU Go in GTP mode with the settings of area-scoring referees such as CGOS."""
    if level not in GNUGO_LEVELS:
        raise ValueError(f"GNU Go level must be within 0..10, got {level}")
    return shlex.join([gnugo, "--mode", "gtp", "--level", str(level), "--chinese-rules", "--capture-all-dead"])


def model_command(model: str, visits: int, threads: int, name: str, *, triton: str | None = None,
                  model_version: int | None = None, triton_wait: float | None = None,
                  policy: str = "auto") -> str:
    """The `tengen gtp` command line that plays `model` (an export path, or a Triton model name
    with `triton`) with `policy`'s head (tengen.nn.export.POLICIES), run by this Python."""
    argv = [sys.executable, "-m", "tengen.cli", "gtp", "--model", str(model), "--visits", str(visits),
            "--threads", str(threads), "--name", name, "--policy", policy]
    if triton:
        argv += ["--triton", triton]
    if model_version:
        argv += ["--model-version", str(model_version)]
    if triton and triton_wait is not None:
        argv += ["--triton-wait", f"{triton_wait:g}"]
    return shlex.join(argv)
