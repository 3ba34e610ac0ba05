"""Export round trip and the in-process evaluator."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from nn_support import batch, randomize_batchnorm

from tengen.nn.evaluator import Evaluator, TorchEvaluator
from tengen.nn.export import OUTPUT_NAMES, export_model, load_export, sidecar_path
from tengen.nn.model import InferenceNet, KataGoNet, build_model

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model() -> KataGoNet:
    torch.manual_seed(0)
    net = build_model("b2c32")
    randomize_batchnorm(net)
    return net.train()  # exporting must not depend on, or change, the live mode


@pytest.fixture(scope="module")
def exported(model: KataGoNet, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "model.pt"
    export_model(model, path, samples_seen=123_456)
    return path


def test_sidecar_describes_the_export(model: KataGoNet, exported: Path) -> None:
    assert model.training
    metadata = json.loads(sidecar_path(exported).read_text())
    assert metadata["architecture"]["name"] == "b2c32" and metadata["architecture"]["blocks"] == 2
    assert (metadata["num_spatial"], metadata["num_global"]) == (18, 10)
    assert [i["name"] for i in metadata["inputs"]] == ["spatial", "globals"]
    assert (
        [o["name"] for o in metadata["outputs"]]
        == list(OUTPUT_NAMES)
        == ["policy", "value", "score", "ownership", "uncertainty"]
    )
    assert metadata["outputs"][0]["shape"] == ["B", "H*W+1"]
    assert metadata["samples_seen"] == 123_456
    assert metadata["created"].endswith("+00:00")
    assert not list(exported.parent.glob(".*.tmp"))


@pytest.mark.parametrize("size", [9, 19])
def test_round_trip_matches_the_live_module(model: KataGoNet, exported: Path, size: int) -> None:
    module, metadata = load_export(exported)
    assert metadata["samples_seen"] == 123_456
    spatial, global_inputs = batch([(size, size)] * 3, seed=size)
    live = build_model("b2c32")
    live.load_state_dict(model.state_dict())
    live.eval()
    with torch.no_grad():
        loaded = module(spatial, global_inputs)
        expected = InferenceNet(live)(spatial, global_inputs)
        full = live(spatial, global_inputs)
    assert [tuple(t.shape) for t in loaded] == [(3, size * size + 1), (3, 3), (3, 2), (3, size, size), (3, 2)]
    assert all(t.dtype == torch.float32 for t in loaded)
    for a, b in zip(loaded, expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # The served outputs are the training net's outputs.
    torch.testing.assert_close(loaded[0], full.policy_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loaded[1], full.value_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loaded[2], torch.stack([full.score_mean, full.score_stdev], 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loaded[3], full.ownership, atol=1e-5, rtol=1e-5)


def test_load_export_errors(exported: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no exported model"):
        load_export(tmp_path / "missing.pt")
    lonely = tmp_path / "lonely.pt"
    lonely.write_bytes(exported.read_bytes())
    with pytest.raises(FileNotFoundError, match="has no sidecar"):
        load_export(lonely)
    sidecar_path(lonely).write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="not a tengen-torchscript"):
        load_export(lonely)


def test_export_rejects_a_non_net(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="needs a KataGoNet"):
        export_model(torch.nn.Linear(2, 2), tmp_path / "x.pt", samples_seen=0)  # type: ignore[arg-type]


def test_torch_evaluator_from_path_and_module(model: KataGoNet, exported: Path) -> None:
    from_path = TorchEvaluator(exported, precision="fp32")
    from_module = TorchEvaluator(model, precision="fp32")
    assert isinstance(from_path, Evaluator) and from_path.metadata["samples_seen"] == 123_456
    assert model.training  # the snapshot did not switch the live net to eval mode
    spatial, global_inputs = (t.numpy() for t in batch([(13, 13), (13, 13)], seed=4))
    a = from_path.evaluate(spatial, global_inputs)
    b = from_module.evaluate(spatial.astype(np.float64), global_inputs)
    assert list(a) == list(OUTPUT_NAMES)
    assert {k: v.shape for k, v in a.items()} == {
        "policy": (2, 170),
        "value": (2, 3),
        "score": (2, 2),
        "ownership": (2, 13, 13),
        "uncertainty": (2, 2),
    }
    for name in OUTPUT_NAMES:
        assert a[name].dtype == np.float32
        np.testing.assert_allclose(a[name], b[name], atol=1e-5, rtol=1e-5)
    # Batch-first and independent: one position alone gives its row of the batch.
    single = from_path.evaluate(spatial[1:], global_inputs[1:])
    for name in OUTPUT_NAMES:
        np.testing.assert_allclose(single[name][0], a[name][1], atol=1e-5, rtol=1e-5)


def test_torch_evaluator_rejects_bad_batches(exported: Path) -> None:
    evaluator = TorchEvaluator(exported)
    spatial, global_inputs = (t.numpy() for t in batch([(9, 9)], seed=1))
    with pytest.raises(ValueError, match="spatial must be"):
        evaluator.evaluate(spatial[:, :10], global_inputs)
    with pytest.raises(ValueError, match="outside 7..19"):
        evaluator.evaluate(spatial[:, :, :6, :6], global_inputs)
    with pytest.raises(ValueError, match="globals must be"):
        evaluator.evaluate(spatial, global_inputs[:, :3])
    with pytest.raises(ValueError, match="batch sizes differ"):
        evaluator.evaluate(spatial, np.concatenate([global_inputs, global_inputs]))


def test_a_nested_bottleneck_net_exports_its_served_heads_only(tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = build_model("b1c32nbt").train()
    spatial, global_inputs = batch([(9, 9), (7, 7)], seed=4)
    net.training_outputs(spatial, global_inputs)  # move the one batch norm's statistics
    export_model(net, tmp_path / "model.pt", samples_seen=1)
    module, metadata = load_export(tmp_path / "model.pt")
    assert metadata["architecture"]["name"] == "b1c32nbt" and metadata["architecture"]["nested"]
    with torch.no_grad():
        loaded = module(spatial, global_inputs)
        served = net.training_outputs(spatial, global_inputs)[1][1]  # the same in training mode
    torch.testing.assert_close(loaded[0], served.policy_logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(loaded[1], served.value_logits, atol=1e-5, rtol=1e-5)
    assert not [name for name in module.state_dict() if name.startswith("bn_")]
