"""`tengen models export`: a version as ONNX, checked against the TorchScript export on real
positions before it is written (and here compared again with ONNX Runtime), and as a plain
weights file that loads back into the model class with the same outputs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from nn_support import batch

import tengen.nn.export
from tengen.cli import main
from tengen.commands.models_export import game_positions
from tengen.nn.export import OUTPUT_NAMES, export_model, load_export, load_weights, sidecar_path
from tengen.nn.model import Architecture, InferenceNet, KataGoNet, build_model

# Mixed board sizes padded into one batch, and every size on its own.
BATCHES = [([(9, 9), (7, 7), (8, 9), (9, 9)], None), ([(19, 19), (13, 13)], None), ([(7, 7)] * 3, None)]


def _version(data: Path, version: int, arch: str = "b1c16", **heads: bool) -> Path:
    torch.manual_seed(version)
    path = data / "models" / "tengen" / str(version) / "model.pt"
    export_model(build_model(arch, **heads), path, samples_seen=5000 + version)
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    _version(tmp_path / "data", 3)
    return tmp_path / "data"


def _inputs() -> list[tuple[np.ndarray, np.ndarray]]:
    out = [tuple(t.numpy() for t in batch(sizes, seed=i, pad_to=pad)) for i, (sizes, pad) in enumerate(BATCHES)]
    return [*out, *game_positions(seed=7)]


def test_onnx_answers_like_the_export_in_onnx_runtime(data_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import onnxruntime

    out = tmp_path / "out" / "v3.onnx"
    assert main(["models", "export", "3", "--onnx", str(out), "--data-dir", str(data_dir)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "checked with ONNX Runtime" in printed and "40 positions" in printed
    module, metadata = load_export(data_dir / "models" / "tengen" / "3" / "model.pt")
    side = json.loads(sidecar_path(out).read_text())
    assert side["format"] == "tengen-onnx-1" and side["onnx_opset"] == 18
    for key in ("architecture", "board_sizes", "samples_seen", "inputs", "outputs", "optimistic_policy"):
        assert side[key] == metadata[key], key
    assert side["samples_seen"] == 5003 and side["check"]["runtime"].startswith("ONNX Runtime")
    assert set(side["check"]["max_abs_difference"]) == set(OUTPUT_NAMES)

    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["spatial", "globals"]
    assert [o.name for o in session.get_outputs()] == list(OUTPUT_NAMES)
    for spatial, global_inputs in _inputs():
        got = session.run(None, {"spatial": spatial, "globals": global_inputs})
        with torch.inference_mode():
            want = module(torch.from_numpy(spatial), torch.from_numpy(global_inputs))
        for name, g, w in zip(OUTPUT_NAMES, got, want):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"{name} at {spatial.shape}")


def test_an_onnx_copy_that_fails_the_check_is_not_written(data_dir: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A converter that writes another net's ONNX: the check finds it and nothing is left behind."""
    other = _version(tmp_path / "other", 9)
    convert = tengen.nn.export.export_onnx
    monkeypatch.setattr(tengen.nn.export, "export_onnx", lambda export, onnx: convert(other, onnx))
    out = tmp_path / "v3.onnx"
    assert main(["models", "export", "3", "--onnx", str(out), "--data-dir", str(data_dir)]) == 1
    err = capsys.readouterr().err
    assert "answers otherwise than the TorchScript export on real positions (" in err and "nothing written" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "other"]


def test_without_onnx_runtime_openvino_checks_the_copy(data_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` raises ImportError
    out = tmp_path / "v3.onnx"
    assert main(["models", "export", "3", "--onnx", str(out), "--data-dir", str(data_dir)]) == 0
    assert "checked with OpenVINO" in capsys.readouterr().out
    assert json.loads(sidecar_path(out).read_text())["check"]["runtime"].startswith("OpenVINO")


@pytest.mark.parametrize("arch, heads", [("b1c16", {}), ("b1c16", {"short_term": True, "optimistic_policy": True}),
                                         ("b1c32nbt", {"short_term": True})])
def test_weights_load_back_into_the_model_class_with_identical_outputs(
        tmp_path: Path, arch: str, heads: dict[str, bool], capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    export = _version(data, 4, arch, **heads)
    out = tmp_path / "v4.weights.pt"
    assert main(["models", "export", str(export), "--weights", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    meta = json.loads(sidecar_path(out).read_text())
    assert meta["format"] == "tengen-weights-1" and meta["architecture"]["name"] == arch
    assert meta["short_term_heads"] is heads.get("short_term", False) and meta["samples_seen"] == 5004
    assert meta["board_sizes"] == [7, 19]

    # As a program outside tengen's commands would: the model class, the sidecar's architecture.
    net = InferenceNet(KataGoNet(Architecture(**meta["architecture"]), meta["short_term_heads"],
                                 meta["optimistic_policy"]))
    net.load_state_dict(torch.load(out, weights_only=True))
    net.eval()
    loaded, _ = load_weights(out)
    module, _ = load_export(export)
    policies = [False, True] if meta["optimistic_policy"] else [False]
    for optimistic in policies:
        net.optimistic = loaded.optimistic = module.optimistic = optimistic
        for spatial, global_inputs in _inputs():
            s, g = torch.from_numpy(spatial), torch.from_numpy(global_inputs)
            with torch.inference_mode():
                want, got, again = module(s, g), net(s, g), loaded(s, g)
            for name, w, a, b in zip(OUTPUT_NAMES, want, got, again):
                assert torch.equal(w, a) and torch.equal(w, b), f"{name} at {list(s.shape)}"


def test_export_refuses_bad_requests_and_overwrites_only_with_force(data_dir: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--data-dir", str(data_dir)]
    source = data_dir / "models" / "tengen" / "3" / "model.pt"
    out = tmp_path / "w.pt"
    cases = [
        (["3"], "nothing to write: give --onnx FILE, --weights FILE or both"),
        (["8", "--onnx", str(out)], f"tengen has no version 8 in {data_dir / 'models'} (it has versions 3)"),
        ([str(tmp_path / "none.pt"), "--onnx", str(out)], f"no export file at {tmp_path / 'none.pt'}"),
        (["3", "--onnx", str(out), "--weights", str(out)], "--onnx and --weights name the same file"),
        (["3", "--weights", str(source)], "is the export itself"),
        (["3", "--onnx", str(tmp_path)], "is a directory"),
        ([str(sidecar_path(source)), "--onnx", str(out)], "is not a tengen export"),
    ]
    for argv, message in cases:
        assert main(["models", "export", *argv, *common]) == 1, argv
        err = capsys.readouterr().err.strip()
        assert err.startswith("tengen models export: ") and message in err, (argv, err)
    assert not out.exists()
    assert main(["models", "export", "3", "--weights", str(out), *common]) == 0
    before = out.read_bytes()
    assert main(["models", "export", "3", "--weights", str(out), *common]) == 1
    assert "--force" in capsys.readouterr().err and out.read_bytes() == before
    assert main(["models", "export", "3", "--weights", str(out), "--force", *common]) == 0
