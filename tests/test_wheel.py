"""The package as it installs outside a checkout: a wheel built from this one (Cython extensions,
presets, Triton's templates and backend model, the ratings migrations) installed into a fresh venv
in a temporary dir runs `tengen run --preset tiny` from an empty data dir to a first candidate.

The fresh venv takes this environment's dependencies by path (one .pth line), so the test needs no
package index; the wheel's own `tengen` and `services` come first, and nothing is imported from the
checkout (the check below names the files each import came from)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import time
import zipfile
from pathlib import Path

import pytest
from test_layout import compiled_modules

from tengen.loop.layout import DataDir

REPO = Path(__file__).resolve().parents[1]
FIRST_CANDIDATE_S = 420  # a liveness bound: Triton's start and the first 1,000 samples, about 2 minutes here


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TENGEN_", "PYTHON"))}
    return {**env, **extra}


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_runs_the_loop_to_a_candidate(tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "--wheel-dir", str(tmp_path / "dist"), str(REPO)],
                           capture_output=True, text=True, timeout=1200)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("tengen-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for module in compiled_modules():
        assert f"{module.replace('.', '/')}{suffix}" in names, f"{module} is not compiled into the wheel"
    for data in ("tengen/configs/tiny.yaml", "tengen/configs/cpu.yaml", "tengen/configs/cpu7.yaml",
                 "tengen/configs/paper.yaml", "services/inference/model.py", "services/inference/config.python.pbtxt",
                 "services/inference/config.onnxruntime.pbtxt", "services/inference/config.pytorch.pbtxt",
                 "tengen/ratings/migrations/env.py", "tengen/ratings/migrations/script.py.mako",
                 "tengen/ratings/migrations/versions/0001_initial.py", "tengen/bench/loop.py"):
        assert data in names, f"{data} is missing from the wheel"
    assert not any(n.startswith(("tests/", "bench/", "configs/")) for n in names), (
        "the wheel holds more than the package"
    )

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    where = subprocess.run(
        [
            str(python),
            "-c",
            "import tengen.go.board, services.inference, tengen.config as c; "
            "print(tengen.go.board.__file__); print(services.inference.__file__); print(c.CONFIG_DIR)",
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=_clean_env(),
    ).stdout.split()
    assert all(Path(p).is_relative_to(site) for p in where), f"imported from outside the venv: {where}"

    data_dir = tmp_path / "data"
    log_path = tmp_path / "run.log"
    with open(log_path, "wb") as log:
        run = subprocess.Popen(
            [
                str(venv / "bin" / "tengen"),
                "run",
                "--preset",
                "tiny",
                "--data-dir",
                str(data_dir),
                "--plain",
                "--status-every",
                "10",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=_clean_env(),
        )
    try:
        deadline = time.monotonic() + FIRST_CANDIDATE_S
        while not DataDir(data_dir).candidate_files() and time.monotonic() < deadline:
            assert run.poll() is None, log_path.read_text()[-3000:]
            time.sleep(2)
        assert DataDir(data_dir).candidate_files(), log_path.read_text()[-3000:]
    finally:
        run.send_signal(signal.SIGINT)
        try:
            code = run.wait(timeout=180)
        except subprocess.TimeoutExpired:
            run.kill()
            run.wait()
            raise
    assert code == 0, log_path.read_text()[-3000:]
    # Triton ran the wheel's backend model, from the venv, beside the wheel's presets.
    assert DataDir(data_dir).models.joinpath("tengen", "1", "model.pt").is_file()
