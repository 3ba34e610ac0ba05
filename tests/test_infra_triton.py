"""Triton adapters against the real tritonserver from the nvidia-pytriton wheel (CPU)."""
from __future__ import annotations

import os
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
from torch import nn

from tengen.gate.promotion import load_new_version
from tengen.infra.triton import repository as tr
from tengen.infra.triton.client import (
    ModelStats,
    TritonEvaluator,
    load_model,
    model_stats,
    phase_means_ms,
    ready_versions,
)
from tengen.infra.triton.errors import TritonError, UnknownModelError
from tengen.infra.triton.repository import ModelRepository, render_config
from tengen.infra.triton.server import LocalTriton


class Tiny(nn.Module):
    """The export signature with outputs that reveal which version computed them (value = tag)."""

    def __init__(self, tag: float) -> None:
        super().__init__()
        self.tag = tag

    def forward(self, spatial: torch.Tensor, globals: torch.Tensor):  # noqa: A002
        b, _, h, w = spatial.shape
        plane_sum = spatial.sum(dim=1)
        policy = torch.cat([plane_sum.reshape(b, h * w), globals[:, :1]], dim=1)
        value = torch.zeros(b, 3) + self.tag
        score = globals[:, :2] * 2.0
        return policy, value, score, torch.tanh(plane_sum)


def _export(path: Path, tag: float) -> Path:
    torch.jit.save(torch.jit.script(Tiny(tag)), str(path))
    return path


def _inputs(n: int, size: int = 9, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.random((n, 18, size, size), dtype=np.float32), rng.random((n, 10), dtype=np.float32))


def _new_model(repo: ModelRepository, **kw) -> str:
    name = f"tiny-{uuid.uuid4().hex[:8]}"
    repo.create_model(name, render_config(name, **kw))
    return name


def test_render_config_templates() -> None:
    cpu = render_config("net", max_batch_size=64, instances=2)
    assert 'backend: "python"' in cpu and "max_batch_size: 64" in cpu
    assert "latest { num_versions: 2 }" in cpu and "dynamic_batching" in cpu and "KIND_CPU count: 2" in cpu
    assert "dims: [ 18, -1, -1 ]" in cpu and "model_warmup" in cpu
    gpu = render_config("net", backend="pytorch")
    assert 'backend: "pytorch"' in gpu and "KIND_GPU" in gpu and "latest { num_versions: 2 }" in gpu
    with pytest.raises(ValueError, match="unknown backend"):
        render_config("net", backend="onnx-typo")
    with pytest.raises(ValueError, match="bad model name"):
        render_config("../escape")
    with pytest.raises(ValueError):
        render_config("net", max_batch_size=0)


def test_repository_versions_and_files(tmp_path: Path) -> None:
    repo = ModelRepository(tmp_path / "repo")
    name = _new_model(repo)
    export = _export(tmp_path / "m.pt", 1.0)
    Path(f"{export}.json").write_text('{"format": "x"}')
    assert repo.versions(name) == []
    assert repo.write_version(name, export) == 1
    assert repo.write_version(name, export) == 2
    assert repo.versions(name) == [1, 2] and repo.latest_version(name) == 2
    files = sorted(p.name for p in (repo.model_dir(name) / "2").iterdir())
    assert files == ["model.pt", "model.pt.json", "model.py"]
    assert (repo.model_dir(name) / "2" / "model.pt").read_bytes() == export.read_bytes()
    # A GPU (libtorch) model gets the same export and no Python glue.
    gpu = _new_model(repo, backend="pytorch")
    repo.write_version(gpu, export)
    assert sorted(p.name for p in (repo.model_dir(gpu) / "1").iterdir()) == ["model.pt", "model.pt.json"]
    with pytest.raises(FileNotFoundError):
        repo.write_version(name, tmp_path / "missing.pt")
    with pytest.raises(UnknownModelError, match="not in the repository"):
        repo.write_version("never-created", export)
    with pytest.raises(TritonError, match="different config"):
        repo.create_model(name, render_config(name, max_batch_size=3))


def test_failed_write_leaves_nothing_visible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = ModelRepository(tmp_path / "repo")
    name = _new_model(repo)
    export = _export(tmp_path / "m.pt", 1.0)
    repo.write_version(name, export)
    before = sorted(p.name for p in repo.model_dir(name).iterdir())
    real_copy = tr._copy_file

    def copy_then_die(src: Path, dst: Path) -> None:
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            fout.write(fin.read()[:100])  # half a file on disk, then the writer dies
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(tr, "_copy_file", copy_then_die)
    with pytest.raises(OSError, match="simulated"):
        repo.write_version(name, export)
    assert sorted(p.name for p in repo.model_dir(name).iterdir()) == before
    assert repo.versions(name) == [1]
    assert not list((repo.root / tr.STAGING_DIR).glob(f"{name}.v*"))
    monkeypatch.setattr(tr, "_copy_file", real_copy)
    assert repo.write_version(name, export) == 2


def _open_fifo_for_writing(path: Path, timeout_s: float = 20.0) -> int:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO until the writer process opens the pipe for reading
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def test_killed_writer_never_exposes_a_partial_version(tmp_path: Path) -> None:
    """SIGKILL a writer process in the middle of copying the export: nothing becomes visible.

    The export is fed through a pipe, so the test knows the writer is mid-copy when it kills it.
    """
    repo = ModelRepository(tmp_path / "repo")
    name = _new_model(repo)
    data = os.urandom(4 << 20)
    complete = _export(tmp_path / "m.pt", 1.0)
    assert repo.write_version(name, complete) == 1
    before = sorted(p.name for p in repo.model_dir(name).iterdir())
    fifo = tmp_path / "export.pt"
    os.mkfifo(fifo)
    script = ("import sys; from tengen.infra.triton.repository import ModelRepository; "
              "ModelRepository(sys.argv[1]).write_version(sys.argv[2], sys.argv[3])")
    staging = repo.root / tr.STAGING_DIR
    for cut in (0, 1 << 20, 3 << 20):  # whole 1 MiB chunks: the copy reads in those
        proc = subprocess.Popen([sys.executable, "-c", script, str(repo.root), name, str(fifo)])
        fd = _open_fifo_for_writing(fifo)
        try:
            os.set_blocking(fd, True)
            os.write(fd, data[:cut])
            deadline = time.monotonic() + 20
            partial = []
            while time.monotonic() < deadline and not partial:
                partial = [p for p in staging.glob(f"{name}.v*/model.pt") if p.stat().st_size == cut]
                time.sleep(0.01)
            assert partial, "the writer never got to copying"
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        finally:
            os.close(fd)
        assert sorted(p.name for p in repo.model_dir(name).iterdir()) == before
        assert repo.versions(name) == [1]
    assert repo.write_version(name, complete) == 2
    assert not list(staging.glob(f"{name}.v*")), "the next writer sweeps what killed writers left"


def test_unknown_model_gets_a_clear_error(triton_server) -> None:
    with pytest.raises(UnknownModelError, match="no-such-model"):
        TritonEvaluator(triton_server.grpc_url, "no-such-model", retry_deadline_s=5)
    with pytest.raises(ValueError, match="bad model name"):
        TritonEvaluator(triton_server.grpc_url, "bad/name")


def test_serve_and_hot_swap_without_failed_requests(triton_server, tmp_path: Path) -> None:
    repo = triton_server.repository
    url = triton_server.grpc_url
    name = _new_model(repo, max_batch_size=32)
    repo.write_version(name, _export(tmp_path / "v1.pt", 1.0))
    load_model(url, name)
    assert ready_versions(url, name) == [1]

    spatial, glob = _inputs(40)  # larger than max_batch_size: split into two requests
    with TritonEvaluator(url, name) as evaluator:
        assert evaluator.max_batch_size == 32
        result = evaluator.infer(spatial, glob)
        assert result.model_version == 1
        out = result.outputs
        assert out["policy"].shape == (40, 82) and out["ownership"].shape == (40, 9, 9)
        np.testing.assert_allclose(out["policy"][:, :81], spatial.sum(axis=1).reshape(40, 81), rtol=1e-5)
        np.testing.assert_allclose(out["score"], glob[:, :2] * 2.0, rtol=1e-6)
        assert np.all(out["value"] == 1.0)
        other = evaluator.evaluate(*_inputs(3, size=13))  # another board size, same model
        assert other["policy"].shape == (3, 13 * 13 + 1)
        with pytest.raises(ValueError):
            evaluator.evaluate(spatial[:, :5], glob)

        # A client keeps asking (latest version) while version 2 is promoted.
        seen: list[tuple[int, float]] = []
        errors: list[BaseException] = []
        stop = threading.Event()

        def client() -> None:
            while not stop.is_set():
                try:
                    r = evaluator.infer(*_inputs(4, seed=len(seen)))
                    seen.append((r.model_version, float(r.outputs["value"][0, 0])))
                except BaseException as exc:  # any failure is what this test is about
                    errors.append(exc)
                    return

        thread = threading.Thread(target=client)
        thread.start()
        try:
            time.sleep(0.5)
            version = load_new_version(repo, url, name, _export(tmp_path / "v2.pt", 2.0))
            assert version == 2
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and (not seen or seen[-1][0] != 2):
                time.sleep(0.05)
            time.sleep(0.3)
        finally:
            stop.set()
            thread.join(30)
        assert not errors, f"requests failed during the swap: {errors}"
        versions = [v for v, _ in seen]
        assert versions[0] == 1 and versions[-1] == 2
        switch = versions.index(2)
        assert all(v == 2 for v in versions[switch:]), "a response went back to version 1 after the swap"
        assert all(value == float(v) for v, value in seen)  # each version computed its own outputs
        assert ready_versions(url, name) == [1, 2]  # the old version stays loaded

        evaluator.set_version(1)  # pinning the old version still works until it is retired
        assert evaluator.infer(spatial[:2], glob[:2]).model_version == 1
        evaluator.set_version(9)
        with pytest.raises(UnknownModelError, match="version 9"):
            evaluator.evaluate(spatial[:2], glob[:2])


def test_failed_promotion_leaves_repository_and_serving_untouched(triton_server, tmp_path: Path) -> None:
    repo = triton_server.repository
    url = triton_server.grpc_url
    name = _new_model(repo)
    repo.write_version(name, _export(tmp_path / "v1.pt", 1.0))
    load_model(url, name)
    broken = tmp_path / "broken.pt"
    broken.write_bytes(b"this is not TorchScript")
    with pytest.raises(TritonError):
        load_new_version(repo, url, name, broken, timeout_s=60)
    assert repo.versions(name) == [1]
    with TritonEvaluator(url, name) as evaluator:
        assert evaluator.infer(*_inputs(2)).model_version == 1


@pytest.mark.slow
def test_evaluator_waits_for_a_restarted_server(tmp_path: Path) -> None:
    repo = ModelRepository(tmp_path / "repo")
    name = _new_model(repo)
    repo.write_version(name, _export(tmp_path / "v1.pt", 1.0))
    server = LocalTriton(repo.root, tmp_path / "work", load_models=[name]).start()
    try:
        evaluator = TritonEvaluator(server.grpc_url, name, retry_deadline_s=120)
        assert evaluator.infer(*_inputs(2)).model_version == 1
        server.kill()  # a crash: the next request finds nobody listening
        pending = evaluator.submit(*_inputs(2))
        time.sleep(1.0)
        assert not pending.done()
        server.start()
        assert pending.result(timeout=120).model_version == 1
        evaluator.close()
    finally:
        server.stop()


def test_triton_serves_the_real_export_like_torch(triton_server, tmp_path: Path) -> None:
    from tengen.nn.evaluator import make_evaluator
    from tengen.nn.export import export_model
    from tengen.nn.model import build_model

    torch.manual_seed(3)
    export = tmp_path / "b1c16.pt"
    export_model(build_model("b1c16"), export, samples_seen=0)
    repo = triton_server.repository
    name = _new_model(repo)
    repo.write_version(name, export)
    load_model(triton_server.grpc_url, name)
    local = make_evaluator(export, num_threads=1)  # the runtime and precision Triton picks
    with TritonEvaluator(triton_server.grpc_url, name) as remote:
        for size in (9, 19):
            spatial, glob = _inputs(6, size=size, seed=size)
            spatial[:, 0] = 1.0  # on-board plane: the whole board
            want = local.evaluate(spatial, glob)
            got = remote.evaluate(spatial, glob)
            for key in want:
                np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-4, err_msg=key)


def test_mixed_board_sizes_in_one_request_are_masked(triton_server, tmp_path: Path) -> None:
    """A 7x7 position zero-padded into a 9x9 request (ON_BOARD is the mask) gets the answers it gets
    alone; requests of different board sizes in flight at once each come back right."""
    from nn_support import batch, randomize_batchnorm

    from tengen.nn.export import export_model
    from tengen.nn.model import OFF_BOARD_LOGIT, build_model

    torch.manual_seed(5)
    net = build_model("b1c16")
    randomize_batchnorm(net)  # non-trivial statistics: padding that leaked in would show
    export = tmp_path / "b1c16.pt"
    export_model(net, export, samples_seen=0)
    repo = triton_server.repository
    name = _new_model(repo)
    repo.write_version(name, export)
    load_model(triton_server.grpc_url, name)
    seven, seven_globals = (t.numpy() for t in batch([(7, 7)], seed=1))
    nine, nine_globals = (t.numpy() for t in batch([(9, 9)], seed=2))
    mixed = np.zeros((2, 18, 9, 9), np.float32)
    mixed[0, :, :7, :7], mixed[1] = seven[0], nine[0]
    mixed_globals = np.concatenate([seven_globals, nine_globals])
    tol = dict(rtol=1e-4, atol=1e-4)
    with TritonEvaluator(triton_server.grpc_url, name) as remote:
        alone_7 = remote.evaluate(seven, seven_globals)
        alone_9 = remote.evaluate(nine, nine_globals)
        in_flight = [remote.submit(seven, seven_globals), remote.submit(mixed, mixed_globals),
                     remote.submit(nine, nine_globals)]
        results = [f.result(timeout=60).outputs for f in in_flight]
    both = results[1]
    np.testing.assert_allclose(results[0]["policy"], alone_7["policy"], **tol)
    np.testing.assert_allclose(results[2]["policy"], alone_9["policy"], **tol)
    assert alone_7["policy"].shape == (1, 50) and both["policy"].shape == (2, 82)
    padded_board = both["policy"][0, :81].reshape(9, 9)
    np.testing.assert_allclose(np.append(padded_board[:7, :7].ravel(), both["policy"][0, 81]),
                               alone_7["policy"][0], **tol)
    assert (padded_board[7:, :] == OFF_BOARD_LOGIT).all() and (padded_board[:, 7:] == OFF_BOARD_LOGIT).all()
    np.testing.assert_allclose(both["ownership"][0, :7, :7], alone_7["ownership"][0], **tol)
    assert (both["ownership"][0, 7:, :] == 0).all() and (both["ownership"][0, :, 7:] == 0).all()
    for key in ("value", "score"):
        np.testing.assert_allclose(both[key][0], alone_7[key][0], err_msg=key, **tol)
    for key in alone_9:
        np.testing.assert_allclose(both[key][1], alone_9[key][0], err_msg=key, **tol)


def test_gpu_config_binds_to_the_export(tmp_path: Path) -> None:
    """The libtorch backend binds inputs to forward()'s argument names and outputs by position: the
    GPU config must name the export's arguments and list its outputs in the order it returns them."""
    import re

    from tengen.nn.export import OUTPUT_NAMES, export_model
    from tengen.nn.model import build_model

    config = render_config("net", backend="pytorch")
    blocks = dict(re.findall(r"^(input|output) \[(.*?)^\]", config, re.MULTILINE | re.DOTALL))
    inputs, outputs = (re.findall(r'name: "(\w+)"', blocks[kind]) for kind in ("input", "output"))
    export = tmp_path / "model.pt"
    export_model(build_model("b1c16"), export, samples_seen=0)
    schema = torch.jit.load(str(export)).forward.schema
    assert inputs == [arg.name for arg in schema.arguments[1:]] == ["spatial", "globals"]
    assert outputs == list(OUTPUT_NAMES)
    assert str(schema.returns[0].type) == f"Tuple[{', '.join(['Tensor'] * len(OUTPUT_NAMES))}]"
    assert tr.EXPORT_FILENAME == "model.pt"  # the libtorch backend's default file name


def test_onnx_config_serves_an_onnx_copy_that_answers_like_the_export(tmp_path: Path) -> None:
    """The GPU fast path: every version of an onnxruntime model holds model.onnx beside model.pt;
    ONNX Runtime (here on the CPU; TensorRT on a GPU) must bind the config's names and answer like
    the export on every board size, and TensorRT's profile must span every batch and board."""
    import re

    import onnxruntime

    from tengen.config import BACKENDS
    from tengen.nn.export import OUTPUT_NAMES, export_model, load_export
    from tengen.nn.model import build_model

    assert BACKENDS == tr.BACKENDS  # the configuration names the backends the repository can render
    config = render_config("net", backend="onnxruntime", max_batch_size=128, warmup_board=9, warmup_batch=32)
    blocks = dict(re.findall(r"^(input|output) \[(.*?)^\]", config, re.MULTILINE | re.DOTALL))
    inputs, outputs = (re.findall(r'name: "(\w+)"', blocks[kind]) for kind in ("input", "output"))
    profile = dict(re.findall(r'key: "trt_profile_(\w+)_shapes" value: "([^"]+)"', config))
    assert profile == {"min": "spatial:1x18x7x7,globals:1x10", "opt": "spatial:32x18x9x9,globals:32x10",
                       "max": "spatial:128x18x19x19,globals:128x10"}
    assert 'backend: "onnxruntime"' in config and "KIND_GPU" in config and '"FP16"' in config

    repo = ModelRepository(tmp_path / "repo")
    repo.create_model("net", config)
    torch.manual_seed(3)
    export = tmp_path / "model.pt"
    export_model(build_model("b2c32"), export, samples_seen=0)
    version = repo.write_version("net", export)
    files = sorted(p.name for p in (repo.model_dir("net") / str(version)).iterdir())
    assert files == ["model.onnx", "model.pt", "model.pt.json"]
    session = onnxruntime.InferenceSession(str(repo.model_dir("net") / str(version) / tr.ONNX_FILENAME),
                                           providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == inputs == ["spatial", "globals"]
    assert [o.name for o in session.get_outputs()] == outputs == list(OUTPUT_NAMES)
    module, _ = load_export(export)
    for size, batch in ((7, 1), (9, 5), (19, 3)):
        spatial, globals_ = _inputs(batch, size=size, seed=size)
        got = session.run(None, {"spatial": spatial, "globals": globals_})
        want = module(torch.from_numpy(spatial), torch.from_numpy(globals_))
        for name, g, w in zip(OUTPUT_NAMES, got, want):
            np.testing.assert_allclose(g, w.detach().numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{name} at {size}x{size}")


def _own_regions() -> list[str]:
    return [p.name for p in Path("/dev/shm").glob(f"tengen-{os.getpid()}-*")]


def test_shared_memory_carries_the_same_tensors_and_is_removed_on_close(triton_server, tmp_path: Path) -> None:
    repo = triton_server.repository
    name = _new_model(repo)
    repo.write_version(name, _export(tmp_path / "v1.pt", 1.0))
    load_model(triton_server.grpc_url, name)
    with TritonEvaluator(triton_server.grpc_url, name, shared_memory=False) as plain:
        want = {size: plain.evaluate(*_inputs(5, size=size, seed=size)) for size in (7, 19)}
    shared = TritonEvaluator(triton_server.grpc_url, name)  # loopback: shared memory by default
    try:
        assert shared.shared_memory
        in_flight = [shared.submit(*_inputs(5, size=size, seed=size)) for size in (7, 19, 7, 19)]
        for future, size in zip(in_flight, (7, 19, 7, 19)):
            got = future.result(timeout=60).outputs
            for key in want[size]:
                np.testing.assert_array_equal(got[key], want[size][key], err_msg=key)
        ours = {region.name for region in shared._regions}  # other evaluators of this process may have more
        assert shared.shared_memory and ours and ours <= set(_own_regions())
        assert ours <= set(_grpc_status(triton_server.grpc_url))
    finally:
        shared.close()
    assert not ours & set(_own_regions())
    assert not ours & set(_grpc_status(triton_server.grpc_url))


def _grpc_status(url: str) -> list[str]:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url)
    try:
        return list(client.get_system_shared_memory_status(as_json=True).get("regions", {}))
    finally:
        client.close()


def test_shared_memory_falls_back_to_grpc_where_the_server_cannot_map_it(
        triton_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from tengen.infra import shm

    repo = triton_server.repository
    name = _new_model(repo)
    repo.write_version(name, _export(tmp_path / "v1.pt", 1.0))
    load_model(triton_server.grpc_url, name)
    real_init = shm.ShmRegion.__init__

    def elsewhere(self, max_batch: int) -> None:  # a key the server's host does not have
        real_init(self, max_batch)
        self.key = f"/{self.name}-on-another-host"

    monkeypatch.setattr(shm.ShmRegion, "__init__", elsewhere)
    with TritonEvaluator(triton_server.grpc_url, name, shared_memory=True) as evaluator:
        with caplog.at_level("WARNING", logger="tengen.infra.triton"):
            out = evaluator.evaluate(*_inputs(3))
        assert out["value"].shape == (3, 3) and np.all(out["value"] == 1.0)
        assert not evaluator.shared_memory
        assert "cannot map this host's shared memory" in caplog.text
        ours = {region.name for region in evaluator._regions}
        evaluator.evaluate(*_inputs(2))  # plain gRPC from now on
    assert ours and not ours & set(_own_regions())


def test_a_presets_triton_settings_reach_the_config_and_an_existing_model(tmp_path: Path) -> None:
    """The paper preset's batching (a GPU's) reaches config.pbtxt; a changed preset updates an
    existing model's config (same backend only); `tengen models configure` does it from the shell."""
    from tengen.config import load_config
    from tengen.infra.triton.repository import model_config
    from tengen.run.bootstrap import configure_model

    paper = load_config("paper", env={})
    text = model_config(paper, "net", "pytorch")
    assert re.search(r"^max_batch_size: 1024$", text, re.MULTILINE)
    assert "max_queue_delay_microseconds: 1000 preferred_batch_size: [ 256, 512, 1024 ]" in text
    assert "kind: KIND_GPU count: 2" in text and "batch_size: 128" in text and "warmup_19x19" in text
    # The same preset on a CPU: its own layout (one instance of two threads), not the GPU's two.
    on_cpu = model_config(paper, "net", "python")
    assert "kind: KIND_CPU count: 1" in on_cpu and 'key: "torch_threads" value: { string_value: "2" }' in on_cpu
    # Without gpu_instances a GPU config takes `instances`, as before.
    cpu_on_gpu = model_config(load_config("cpu", env={}), "net", "pytorch")
    assert "kind: KIND_GPU count: 1" in cpu_on_gpu

    repo = ModelRepository(tmp_path / "repo")
    cpu = load_config("cpu", env={})
    assert configure_model(repo, cpu, "net")  # created
    assert not configure_model(repo, cpu, "net")  # unchanged
    changed = load_config("cpu", env={"TENGEN_TRITON__INSTANCES": "3", "TENGEN_TRITON__QUEUE_DELAY_US": "50"})
    assert configure_model(repo, changed, "net")
    config = (repo.model_dir("net") / "config.pbtxt").read_text()
    assert "count: 3" in config and "max_queue_delay_microseconds: 50 " in config and 'backend: "python"' in config
    with pytest.raises(TritonError, match="python backend"):
        repo.update_config("net", model_config(changed, "net", "pytorch"))
    assert repo.backend("net") == "python"

    env = {**os.environ, "TENGEN_TRITON__INSTANCES": "4"}
    out = subprocess.run([sys.executable, "-m", "tengen.cli", "models", "configure", "--model", "net",
                          "--model-repository", str(repo.root), "--preset", "cpu", "--triton", "127.0.0.1:1"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "updated to preset cpu's triton settings" in out.stdout and "next load" in out.stdout
    assert "count: 4" in (repo.model_dir("net") / "config.pbtxt").read_text()


def test_a_repository_configured_before_the_uncertainty_output_still_serves(triton_server, tmp_path: Path) -> None:
    """A run's model repository keeps the config.pbtxt it was created with; one written before the
    uncertainty output declares four outputs. The evaluator asks only for those and fills in the
    unknown uncertainty, and the backend's newer model.py leaves the undeclared output out."""
    from tengen.nn.export import UNKNOWN_UNCERTAINTY, export_model
    from tengen.nn.model import build_model

    torch.manual_seed(5)
    export = tmp_path / "b1c16.pt"
    export_model(build_model("b1c16"), export, samples_seen=0)
    repo = triton_server.repository
    name = f"old-{uuid.uuid4().hex[:8]}"
    config = render_config(name)
    old = config.replace(' },\n  { name: "uncertainty" data_type: TYPE_FP32 dims: [ 2 ] }', " }")
    assert old != config and "uncertainty" not in old
    repo.create_model(name, old)
    repo.write_version(name, export)
    load_model(triton_server.grpc_url, name)
    for shared in (False, True):
        with TritonEvaluator(triton_server.grpc_url, name, shared_memory=shared) as remote:
            assert "uncertainty" not in remote.outputs
            spatial, glob = _inputs(3, size=19)
            spatial[:, 0] = 1.0
            got = remote.evaluate(spatial, glob)
            assert got["policy"].shape == (3, 19 * 19 + 1)
            np.testing.assert_array_equal(got["uncertainty"], np.full((3, 2), UNKNOWN_UNCERTAINTY, np.float32))


def test_a_shared_memory_region_holds_a_full_batch_at_the_largest_board() -> None:
    from tengen.go.planes import MAX_BOARD
    from tengen.infra.shm import ShmRegion

    region = ShmRegion(max_batch=4)
    try:
        inputs, outputs = region.write_inputs(*_inputs(4, size=MAX_BOARD))
        assert [p.name for p in outputs] == ["policy", "value", "score", "ownership", "uncertainty"]
        assert outputs[-1].offset + outputs[-1].nbytes <= region.byte_size
    finally:
        region.close()


def test_phase_means_per_request_by_hand() -> None:
    before = ModelStats({"success": (10, 50_000_000), "queue": (10, 2_000_000)}, executions=8)
    after = ModelStats({"success": (14, 62_000_000), "queue": (14, 2_800_000), "compute_infer": (4, 4_000_000)},
                       executions=11)
    # 4 more requests: 12 ms of success -> 3 ms each, 0.8 ms queued -> 0.2, a new phase from zero
    # counts whole; executions are not a per-request time.
    assert phase_means_ms(before, after) == pytest.approx({"success": 3.0, "queue": 0.2, "compute_infer": 1.0})


def test_model_stats_count_each_request_and_execution(triton_server, tmp_path: Path) -> None:
    import tritonclient.grpc as grpcclient

    from tengen.nn.export import export_model
    from tengen.nn.model import build_model

    export = tmp_path / "b1c16.pt"
    export_model(build_model("b1c16"), export, samples_seen=0)
    name = _new_model(triton_server.repository)
    triton_server.repository.write_version(name, export)
    load_model(triton_server.grpc_url, name)
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    try:
        with TritonEvaluator(triton_server.grpc_url, name) as remote:
            before = model_stats(client, name)
            for n in (1, 3, 5):  # one at a time: nothing for the dynamic batcher to merge
                remote.evaluate(*_inputs(n, size=9, seed=n))
            after = model_stats(client, name)
    finally:
        client.close()
    assert after.requests - before.requests == 3
    assert after.executions - before.executions == 3
    means = phase_means_ms(before, after)
    assert set(means) >= {"success", "queue", "compute_input", "compute_infer", "compute_output"}
    assert 0 < means["compute_infer"] < means["success"]
