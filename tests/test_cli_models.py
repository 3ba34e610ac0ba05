"""`tengen models init|list|promote|prepare` and `tengen triton` against the real Triton and the real broker.

The CLI runs in this process (tengen.cli.main) except for `tengen triton`, which must be a process
of its own to receive SIGTERM.
"""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from tengen.cli import main
from tengen.infra.triton.client import load_model, ready_versions
from tengen.infra.triton.repository import ModelRepository, render_config
from tengen.loop.messages import latest_model_version
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.export import export_model, sidecar_path
from tengen.nn.model import build_model

ROOT = Path(__file__).resolve().parents[1]


def _inputs(n: int, size: int = 9) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    spatial = (rng.random((n, 18, size, size)) < 0.3).astype(np.float32)
    spatial[:, 0] = 1.0  # on-board plane
    return spatial, rng.random((n, 10), dtype=np.float32)


def _init(path: Path, seed: int = 0, arch: str = "b1c16") -> Path:
    assert main(["models", "init", "--arch", arch, "--out", str(path), "--seed", str(seed)]) == 0
    return path


def _name() -> str:
    return f"cli-{uuid.uuid4().hex[:8]}"


def test_init_writes_a_loadable_export(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = _init(tmp_path / "a.pt", seed=3)
    assert "b1c16" in capsys.readouterr().out
    meta = json.loads(sidecar_path(first).read_text())
    assert meta["architecture"]["name"] == "b1c16" and meta["samples_seen"] == 0 and meta["init_seed"] == 3
    spatial, glob = _inputs(4)
    out = TorchEvaluator(first).evaluate(spatial, glob)
    assert out["policy"].shape == (4, 82) and out["ownership"].shape == (4, 9, 9)
    same = TorchEvaluator(_init(tmp_path / "b.pt", seed=3)).evaluate(spatial, glob)
    other = TorchEvaluator(_init(tmp_path / "c.pt", seed=4)).evaluate(spatial, glob)
    np.testing.assert_array_equal(same["policy"], out["policy"])  # the seed fixes the weights
    assert not np.allclose(other["policy"], out["policy"])
    # An existing export is not overwritten by accident.
    before = first.read_bytes()
    assert main(["models", "init", "--arch", "b2c32", "--out", str(first)]) == 1
    assert "--force" in capsys.readouterr().err and first.read_bytes() == before
    assert main(["models", "init", "--arch", "b2c32", "--out", str(first), "--force"]) == 0
    assert json.loads(sidecar_path(first).read_text())["architecture"]["name"] == "b2c32"


def test_init_refuses_an_unknown_arch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.pt"
    assert main(["models", "init", "--arch", "b99c7", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "unknown architecture 'b99c7'" in err and "b6c96" in err and "b1c16" in err
    assert not out.exists() and not sidecar_path(out).exists()


def test_promote_hot_swaps_announces_and_lists(triton_server, kafka_broker, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    name = _name()
    url, bootstrap = triton_server.grpc_url, kafka_broker.bootstrap
    repo_args = ["--model-repository", str(triton_server.repository_path), "--triton", url]
    v1 = _init(tmp_path / "v1.pt", seed=1)
    v2 = tmp_path / "v2.pt"
    torch.manual_seed(2)
    export_model(build_model("b1c16"), v2, samples_seen=12345)

    assert main(["models", "promote", str(v1), "--model", name, *repo_args, "--kafka", bootstrap]) == 0
    out = capsys.readouterr().out
    assert f"{name} version 1 is ready" in out and "announced" in out
    assert ready_versions(url, name) == [1]
    assert latest_model_version(bootstrap, name, timeout_s=20) == 1

    assert main(["models", "promote", str(v2), "--model", name, *repo_args, "--kafka", bootstrap]) == 0
    assert ready_versions(url, name) == [1, 2]  # the old version keeps serving beside the new one
    assert latest_model_version(bootstrap, name, timeout_s=20) == 2
    served = triton_server.repository.model_dir(name) / "2" / "model.pt"
    assert served.read_bytes() == v2.read_bytes()
    capsys.readouterr()

    assert main(["models", "list", *repo_args, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["triton"]["reachable"] is True
    (model,) = [m for m in listing["models"] if m["name"] == name]
    assert model["backend"] == "python"
    assert [(v["version"], v["arch"], v["samples_seen"], v["ready"]) for v in model["versions"]] == [
        (1, "b1c16", 0, True), (2, "b1c16", 12345, True)]
    assert all(v["created"] for v in model["versions"])

    assert main(["models", "list", *repo_args]) == 0
    text = capsys.readouterr().out
    assert f"{name} (python backend): 2 version(s), ready in Triton: 1, 2" in text
    assert re.search(r"^\s+2\s+b1c16\s+12,345\s+\S+\s+READY$", text, re.MULTILINE)
    assert f"Triton at {url}: reachable" in text


def test_promote_of_a_non_export_writes_nothing(triton_server, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    name = _name()
    repo = triton_server.repository
    url = triton_server.grpc_url
    args = ["--model", name, "--model-repository", str(repo.root), "--triton", url]
    good = _init(tmp_path / "good.pt")
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a model")
    not_torchscript = tmp_path / "nots.pt"  # a readable sidecar, but the file is not TorchScript
    not_torchscript.write_bytes(b"not a model either")
    sidecar_path(not_torchscript).write_text(sidecar_path(good).read_text())
    bad_sidecar = tmp_path / "badside.pt"
    bad_sidecar.write_bytes(good.read_bytes())
    sidecar_path(bad_sidecar).write_text("{truncated")
    other_planes = tmp_path / "planes.pt"
    other_planes.write_bytes(good.read_bytes())
    meta = json.loads(sidecar_path(good).read_text())
    sidecar_path(other_planes).write_text(json.dumps({**meta, "num_spatial": 22}))
    cases = {junk: "no sidecar", not_torchscript: "not a TorchScript file", bad_sidecar: "not valid JSON",
             other_planes: "22 spatial", tmp_path / "missing.pt": "no export at", tmp_path: "no export at"}
    for path, reason in cases.items():
        assert main(["models", "promote", str(path), *args]) == 1, path
        assert reason in capsys.readouterr().err, path
    assert not repo.model_dir(name).exists(), "a refused export must not even create the model"

    # Unreachable servers: refused before anything is written.
    assert main(["models", "promote", str(good), "--model", name, "--model-repository", str(repo.root),
                 "--triton", "127.0.0.1:1"]) == 1
    assert "not reachable" in capsys.readouterr().err
    assert main(["models", "promote", str(good), *args, "--kafka", "127.0.0.1:1"]) == 1
    assert "broker 127.0.0.1:1 is not reachable; nothing written" in capsys.readouterr().err
    assert not repo.model_dir(name).exists()

    # A repository this Triton does not serve: refused (its version 1 is another net, version 2
    # does not exist there), and the repository written to is left as it was.
    elsewhere = ModelRepository(tmp_path / "elsewhere")
    elsewhere.create_model(name, render_config(name))
    repo.create_model(name, render_config(name))
    repo.write_version(name, _init(tmp_path / "served.pt", seed=5))
    load_model(url, name)
    elsewhere_args = ["--model", name, "--model-repository", str(elsewhere.root), "--triton", url, "--timeout", "60"]
    for existing in ([], [1]):  # the new version would be 1 (Triton has a 1), then 2 (Triton has none)
        start = time.monotonic()
        assert main(["models", "promote", str(good), *elsewhere_args]) == 1
        assert time.monotonic() - start < 30
        assert "does it serve the repository" in capsys.readouterr().err
        assert elsewhere.versions(name) == existing and repo.versions(name) == [1]
        assert ready_versions(url, name) == [1]
        if not existing:
            elsewhere.write_version(name, good)


def test_list_without_triton_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = ModelRepository(tmp_path / "data" / "models")
    repo.create_model("net", render_config("net"))
    repo.write_version("net", _init(tmp_path / "m.pt"))
    capsys.readouterr()
    assert main(["models", "list", "--data-dir", str(tmp_path / "data"), "--triton", "127.0.0.1:1"]) == 0
    out = capsys.readouterr().out
    assert "net (python backend): 1 version(s)" in out
    assert "Triton at 127.0.0.1:1: not reachable" in out and "Traceback" not in out
    assert main(["models", "list", "--data-dir", str(tmp_path / "nothing"), "--triton", "127.0.0.1:1", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["models"] == [] and listing["triton"]["reachable"] is False and listing["triton"]["error"]


def test_prepare_writes_version_1_before_triton_follows_the_preset_and_announces(
        kafka_broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`tengen models prepare`, the init container of the Kubernetes Triton pod: no Triton runs yet.
    A new repository gets the model with the preset's config and a random version 1 (Triton loads it
    at its start), announced for the selfplay workers; on the next start, after a preset change, the
    config follows the preset, the version stays, and the backend is the model's own."""
    name = _name()
    monkeypatch.setenv("TENGEN_RUN__MODEL_NAME", name)
    monkeypatch.delenv("TENGEN_KAFKA_BOOTSTRAP", raising=False)
    repo_dir = tmp_path / "models"
    common = ["models", "prepare", "--model-repository", str(repo_dir), "--preset", "tiny", "--timeout", "60"]
    assert main([*common, "--kafka", kafka_broker.bootstrap]) == 0
    repo = ModelRepository(repo_dir)
    assert repo.versions(name) == [1] and repo.backend(name) == "python"
    assert json.loads(sidecar_path(repo.export_path(name, 1)).read_text())["samples_seen"] == 0
    assert latest_model_version(kafka_broker.bootstrap, name, timeout_s=30) == 1
    assert "wrote a random" in capsys.readouterr().out

    monkeypatch.setenv("TENGEN_TRITON__INSTANCES", "3")
    assert main([*common, "--backend", "pytorch"]) == 0
    out = capsys.readouterr().out
    assert f"model {name} keeps its python backend" in out and "latest version 1" in out and "not announced" in out
    assert repo.versions(name) == [1] and repo.backend(name) == "python"
    assert "count: 3" in (repo.model_dir(name) / "config.pbtxt").read_text()
    # The backend's default comes from the configuration, which refuses one it does not know.
    monkeypatch.setenv("TENGEN_TRITON__BACKEND", "tensorflow")
    assert main(common) == 1 and "triton.backend must be one of python, pytorch, onnxruntime" in capsys.readouterr().err


def _reader(stream) -> queue.Queue[str]:
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _wait_for(lines: queue.Queue[str], pattern: str, seen: list[str], timeout_s: float) -> re.Match[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s:\n{''.join(seen)}")


def test_triton_command_serves_until_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "data"
    repo = ModelRepository(data / "models")
    repo.create_model("net", render_config("net"))
    repo.write_version("net", _init(tmp_path / "m.pt"))
    repo.create_model("empty", render_config("empty"))  # no version yet: not loaded
    proc = subprocess.Popen(
        [sys.executable, "-m", "tengen.cli", "triton", "--data-dir", str(data), "--http-port", "0",
         "--grpc-port", "0", "--metrics-port", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    seen: list[str] = []
    try:
        lines = _reader(proc.stdout)
        pid = int(_wait_for(lines, r"Triton ready \(pid (\d+)\)", seen, 180).group(1))
        url = _wait_for(lines, r"Triton ready: gRPC (\S+)", seen, 10).group(1)
        assert ready_versions(url, "net") == [1]
        assert (data / "triton" / "tritonserver.log").is_file()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "".join(seen)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the server went with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
