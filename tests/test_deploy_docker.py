"""Docker images: the Dockerfiles lint cleanly with hadolint, the shell scripts with shellcheck,
every COPY names a file that exists and that .dockerignore lets into the build context, and the
images are what the deployment relies on (non-root, health checks, the project's torch, numpy < 2
for Triton's Python backend). The health-check script is run against a real HTTP server."""
from __future__ import annotations

import fnmatch
import http.server
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploy_support import REPO, tool

DOCKERFILES = [REPO / "docker" / "Dockerfile", REPO / "docker" / "Dockerfile.triton",
               REPO / "docker" / "Dockerfile.triton-cpu"]
# The stand-ins docker/build-local-images.sh builds where no image registry can be reached; each
# has its own build context (its directory).
LOCAL_DOCKERFILES = sorted((REPO / "docker" / "local").glob("*/Dockerfile"))
SCRIPTS = [REPO / "docker" / "triton-entrypoint.sh", REPO / "docker" / "bootstrap-model.sh",
           REPO / "docker" / "check-torch-variant.sh", REPO / "k8s" / "base" / "kafka" / "create-topics.sh",
           REPO / "docker" / "build-local-images.sh", *sorted((REPO / "docker" / "local").glob("*/*.sh"))]


@dataclass
class Instruction:
    stage: int
    keyword: str
    args: str


def parse_dockerfile(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined; comments and parser directives dropped."""
    instructions: list[Instruction] = []
    stage = -1
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = pending + line
        pending = ""
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        instructions.append(Instruction(stage, keyword, args.strip()))
    return instructions


def copy_sources(instruction: Instruction) -> list[str]:
    parts = [p for p in instruction.args.split() if not p.startswith("--")]
    return parts[:-1]


def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .dockerignore keeps `path` (or a directory holding it) out of the build context."""
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").lstrip("/")
        # Patterns are relative to the context root; `**/x` matches x in any directory.
        matched = any(fnmatch.fnmatchcase(p, pattern) for p in prefixes)
        if pattern.startswith("**/"):
            matched = matched or any(fnmatch.fnmatchcase(Path(p).name, pattern[3:]) for p in prefixes)
        if matched:
            result = not negate
    return result


@pytest.mark.parametrize("dockerfile", DOCKERFILES + LOCAL_DOCKERFILES, ids=lambda p: str(p.relative_to(REPO)))
def test_dockerfile_lints_cleanly(dockerfile: Path) -> None:
    result = subprocess.run([tool("hadolint"), "--no-color", str(dockerfile)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_reports_a_bad_dockerfile(tmp_path: Path) -> None:
    # The lint test above means something only if hadolint fails on what it should.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install gcc\nADD . /app\n")
    result = subprocess.run([tool("hadolint"), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3020"):
        assert rule in result.stdout


def test_shell_scripts_pass_shellcheck() -> None:
    result = subprocess.run([tool("shellcheck"), *map(str, SCRIPTS)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    for script in SCRIPTS:
        assert script.stat().st_mode & 0o111, f"{script} is not executable"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_copy_sources_exist_and_reach_the_build_context(dockerfile: Path) -> None:
    instructions = parse_dockerfile(dockerfile)
    stage_names = {i.args.split()[-1] for i in instructions if i.keyword == "FROM" and " AS " in i.args.upper()}
    patterns = dockerignore_patterns()
    copies = [i for i in instructions if i.keyword in ("COPY", "ADD")]
    assert copies
    for instruction in copies:
        assert instruction.keyword == "COPY", f"{dockerfile.name}: ADD {instruction.args}: use COPY"
        from_stage = re.search(r"--from=(\S+)", instruction.args)
        if from_stage:
            assert from_stage.group(1) in stage_names, f"{dockerfile.name}: no stage {from_stage.group(1)}"
            continue
        for source in copy_sources(instruction):
            assert (REPO / source).exists(), f"{dockerfile.name}: COPY {source}: no such file in the checkout"
            assert not ignored(source, patterns), f"{dockerfile.name}: COPY {source} is excluded by .dockerignore"


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = dockerignore_patterns()
    for path in (".venv/bin/python", "tengen-data/models/tengen/1/model.pt", "build/tmp/x.o", ".git/HEAD",
                 "tengen/go/board.c", "tengen/go/board.cpython-311-x86_64-linux-gnu.so", ".env"):
        assert ignored(path, patterns), f"{path} would be sent to the docker build context"
    for path in ("tengen/go/board.pyx", "services/inference/model.py", "tengen/configs/cpu.yaml", "pyproject.toml"):
        assert not ignored(path, patterns), f"{path} is needed by the image build but ignored"


def dockerfile_args(path: Path) -> dict[str, str]:
    """ARG defaults of every stage."""
    return {i.args.partition("=")[0]: i.args.partition("=")[2] for i in parse_dockerfile(path) if i.keyword == "ARG"}


def final_stage(path: Path) -> list[Instruction]:
    instructions = parse_dockerfile(path)
    last = max(i.stage for i in instructions)
    return [i for i in instructions if i.stage == last]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_run_as_non_root_with_a_healthcheck(dockerfile: Path) -> None:
    runtime = final_stage(dockerfile)
    users = [i.args for i in runtime if i.keyword == "USER"]
    assert users, f"{dockerfile.name}: the final stage runs as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{dockerfile.name}: USER {users[-1]} must be a numeric non-root id"
    healthchecks = [i.args for i in runtime if i.keyword == "HEALTHCHECK"]
    assert healthchecks and "healthcheck.py" in healthchecks[-1]


def test_app_image_builds_extensions_and_pins_the_projects_torch() -> None:
    instructions = parse_dockerfile(DOCKERFILES[0])
    assert len({i.stage for i in instructions}) >= 2, "multi-stage: builder and runtime"
    args = dockerfile_args(DOCKERFILES[0])
    assert args.get("TORCH_VARIANT") == "cpu", "CPU torch by default, CUDA through --build-arg TORCH_VARIANT"
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    torch_pin = next(d for d in pyproject["project"]["dependencies"] if d.startswith("torch"))
    assert torch_pin == f"torch=={args['TORCH_VERSION']}", \
        f"image torch {args['TORCH_VERSION']} vs pyproject {torch_pin}"
    builder = " ".join(i.args for i in instructions if i.stage == 0 and i.keyword == "RUN")
    assert "build_ext --inplace" in builder
    runtime = " ".join(i.args for i in final_stage(DOCKERFILES[0]))
    assert "gcc" not in runtime, "compilers stay in the builder stage"


def _variant_check(version: str, variant: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(REPO / "docker" / "check-torch-variant.sh"), version, variant],
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_torch_variant_without_a_build_stops_the_image_build() -> None:
    """PyTorch 2.13 has CUDA 12.6, 13.0 and 13.2 builds (its release matrix); cu128 has none."""
    version = dockerfile_args(DOCKERFILES[0])["TORCH_VERSION"]
    for variant in ("cpu", "cu126", "cu130"):
        assert _variant_check(version, variant).returncode == 0, variant
    for variant in ("cu128", "cu118", "rocm7.2", ""):
        result = _variant_check(version, variant)
        assert result.returncode == 1 and "use one of: cpu cu126 cu130" in result.stderr, (variant, result)
    # The builder runs the check before it installs torch.
    runs = [i.args for i in parse_dockerfile(DOCKERFILES[0]) if i.stage == 0 and i.keyword == "RUN"]
    torch_run = next(r for r in runs if "download.pytorch.org" in r)
    assert torch_run.index("check-torch-variant.sh") < torch_run.index("pip install")
    # The variants the deployment files build with are ones that exist.
    env = dict(
        line.split("=", 1)
        for line in (REPO / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert _variant_check(version, env["TORCH_CUDA_VARIANT"]).returncode == 0
    gpu_compose = (REPO / "docker-compose.gpu.yml").read_text()
    default = re.search(r"TORCH_VARIANT: \$\{TORCH_CUDA_VARIANT:-([^}]+)\}", gpu_compose).group(1)
    assert _variant_check(version, default).returncode == 0


def test_app_image_installs_gnugo_for_the_strength_service() -> None:
    """The strength service finds Debian's gnugo at DEBIAN_GNUGO (not on PATH); the runtime stage
    installs the package the way hadolint accepts (no recommends, lists removed in the same layer)."""
    from tengen.config import StrengthConfig
    from tengen.gtp.gnugo import DEBIAN_GNUGO

    runtime = final_stage(DOCKERFILES[0])
    installs = [i.args for i in runtime if i.keyword == "RUN" and re.search(r"apt-get install\b.*\bgnugo\b", i.args)]
    assert len(installs) == 1, "the runtime stage installs Debian's gnugo"
    (run,) = installs
    assert "--no-install-recommends" in run and "rm -rf /var/lib/apt/lists/*" in run
    assert run.index("apt-get update") < run.index("apt-get install") < run.index("rm -rf /var/lib/apt/lists/*")
    assert DEBIAN_GNUGO == "/usr/games/gnugo" and f"{DEBIAN_GNUGO} --version" in run, (
        "the build checks the binary where the service looks for it"
    )
    # Its health port is exposed with the other services'.
    exposed = {int(port) for i in runtime if i.keyword == "EXPOSE" for port in i.args.split()}
    assert StrengthConfig().http_port in exposed


def test_local_stand_ins_copy_what_their_contexts_hold() -> None:
    """Each stand-in's COPY sources are in its directory, or (the Python base's certificates, the
    Kafka stand-in's broker binary) put into a copy of it by build-local-images.sh."""
    script = (REPO / "docker" / "build-local-images.sh").read_text()
    assert {p.parent.name for p in LOCAL_DOCKERFILES} == {"python", "postgres", "kafka"}
    for dockerfile in LOCAL_DOCKERFILES:
        for instruction in (i for i in parse_dockerfile(dockerfile) if i.keyword == "COPY"):
            for source in copy_sources(instruction):
                made = {"ca-certificates/": '"$work/python/ca-certificates"', "tansu": '"$work/kafka/tansu"'}
                assert (dockerfile.parent / source).exists() or made.get(source, "@") in script, (dockerfile, source)


def test_cpu_triton_image_serves_with_the_wheels_server_and_the_projects_pins() -> None:
    """The CPU stack's Triton: the nvidia-pytriton wheel's server with this Python's backend stub,
    numpy, OpenVINO and nvidia-pytriton as pyproject.toml pins them, the CPU torch of the app."""
    dockerfile = REPO / "docker" / "Dockerfile.triton-cpu"
    args = dockerfile_args(dockerfile)
    assert args["TORCH_VERSION"] == dockerfile_args(DOCKERFILES[0])["TORCH_VERSION"]
    run = " ".join(i.args for i in parse_dockerfile(dockerfile) if i.keyword == "RUN")
    for name in ("numpy", "openvino", "nvidia-pytriton"):
        assert f"'{name}'" in run, f"{name} is read from pyproject.toml"
    assert "download.pytorch.org/whl/cpu" in run and "python_backend_stubs/3.11/triton_python_backend_stub" in run
    assert "/opt/tritonserver/backends/python/" in run, "tritonserver finds its backends under /opt/tritonserver"
    import yaml

    cpu = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]["triton"]["build"]
    gpu = yaml.safe_load((REPO / "docker-compose.gpu.yml").read_text())["services"]["triton"]["build"]
    assert (cpu["dockerfile"], gpu["dockerfile"]) == ("docker/Dockerfile.triton-cpu", "docker/Dockerfile.triton")


def test_triton_image_gives_the_python_backend_numpy_1_and_torch() -> None:
    args = dockerfile_args(DOCKERFILES[1])
    # 26.10: CUDA 13 like the trainer's cu130 torch, and an ONNX Runtime backend for the GPU fast path
    assert args["TRITON_BASE_IMAGE"] == "nvcr.io/nvidia/tritonserver:26.10-py3"
    assert args["NUMPY_VERSION"].startswith("1."), "the Python backend stub returns empty outputs with numpy 2"
    # The Python backend loads the export with the torch that wrote it, and compiles it with the
    # project's OpenVINO.
    assert args["TORCH_VERSION"] == dockerfile_args(DOCKERFILES[0])["TORCH_VERSION"]
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert f"openvino=={args['OPENVINO_VERSION']}" in pyproject["project"]["dependencies"]
    entrypoint = (REPO / "docker" / "triton-entrypoint.sh").read_text()
    assert "--model-control-mode=explicit" in entrypoint


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.send_response(200 if self.path == "/ok" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def http_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_script_exit_codes(http_server: str, tmp_path: Path) -> None:
    script = str(REPO / "docker" / "healthcheck.py")

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, script, *args],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin", **(env or {})},
        )

    assert run(f"{http_server}/ok").returncode == 0
    unhealthy = run(f"{http_server}/down")
    assert unhealthy.returncode == 1 and "503" in unhealthy.stderr
    assert run(env={"TENGEN_HEALTHCHECK_URL": f"{http_server}/ok"}).returncode == 0
    # Nothing listening: the port of a server that just closed.
    closed = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
    port = closed.server_address[1]
    closed.server_close()
    refused = run(f"http://127.0.0.1:{port}/healthz")
    assert refused.returncode == 1 and "unhealthy" in refused.stderr
