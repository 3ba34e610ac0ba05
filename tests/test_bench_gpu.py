"""`tengen bench gpu`: its paths compute the export's answers, and the figures it prints."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch


def test_every_path_answers_as_the_fp32_net(tmp_path: Path) -> None:
    """Each timed path against the eager fp32 net on the same inputs (on the CPU, where the same
    code runs): fp32 to float rounding, the reduced precisions to a few hundredths of probability.
    The weights are scaled up so the policy is far from uniform and a wrong path shows."""
    from tengen.bench.gpu import _torch_paths
    from tengen.gate.promotion import softmax
    from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL, ON_BOARD
    from tengen.nn.export import export_model
    from tengen.nn.model import InferenceNet, build_model

    torch.manual_seed(3)
    net = build_model("b1c16").eval()
    with torch.no_grad():
        for parameter in net.parameters():
            if parameter.dim() > 1:
                parameter.mul_(3.0)
    export_model(net, tmp_path / "m.pt", samples_seen=0)
    rng = np.random.default_rng(3)
    spatial = (rng.random((6, NUM_SPATIAL, 9, 9)) < 0.3).astype(np.float32)
    spatial[:, ON_BOARD] = 1.0
    global_inputs = rng.random((6, NUM_GLOBAL)).astype(np.float32)
    with torch.no_grad():
        logits, value = InferenceNet(net)(torch.from_numpy(spatial), torch.from_numpy(global_inputs))[:2]
    expected_policy, expected_value = softmax(logits.numpy()), softmax(value.numpy())
    assert expected_policy.max() > 10 / expected_policy.shape[1]  # far from uniform

    paths = _torch_paths(tmp_path / "m.pt", net, torch.device("cpu"), compile_half=False)
    assert sorted(paths) == ["export_bf16", "export_fp16", "export_fp32", "half"]
    for name, evaluate in paths.items():
        policy, value = evaluate(spatial, global_inputs)
        tolerance = 1e-5 if name == "export_fp32" else 0.05
        assert np.abs(softmax(policy) - expected_policy).max() <= tolerance, name
        assert np.abs(softmax(value) - expected_value).max() <= tolerance, name


def test_bench_gpu_prints_figures_and_ratios() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "gpu", "--device", "cpu", "--arch", "b1c16",
         "--batch", "2", "--board", "9", "--seconds", "0.5"],
        capture_output=True, text=True, check=True, timeout=300,
    )
    assert "onnx_cuda skipped: ONNX Runtime's CUDA provider needs a CUDA device" in result.stdout
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "gpu" and figures["device"] == "CPU" and figures["board"] == 9
    paths = figures["results"]["b1c16_b2"]
    assert sorted(paths) == ["export_bf16", "export_fp16", "export_fp32", "half"]
    base = paths["export_fp32"]["evals_per_s"]
    assert paths["export_fp32"]["ratio"] == 1.0 and paths["export_fp32"]["max_policy_diff"] == 0.0
    for figure in paths.values():
        assert figure["evals_per_s"] > 0
        assert abs(figure["ratio"] - figure["evals_per_s"] / base) <= 0.002 + 0.01 * figure["ratio"]
        assert figure["max_policy_diff"] <= 0.05 and figure["max_winrate_diff"] <= 0.05


def test_bench_gpu_without_a_gpu_says_so() -> None:
    # The project installs torch's CPU build, so this box has no CUDA device.
    assert not torch.cuda.is_available()
    result = subprocess.run([sys.executable, "-m", "tengen.cli", "bench", "gpu", "--seconds", "0.5"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "no CUDA device" in result.stderr and "tengen bench nn" in result.stderr
    assert "Traceback" not in result.stderr
