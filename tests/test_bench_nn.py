"""`tengen bench nn`: Leela Zero's weights file, its n/s, and the figures the bench prints."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_leelaz_weights_have_the_layout_of_a_6x96_net(tmp_path: Path) -> None:
    from tengen.bench.nn import write_leelaz_weights

    path = tmp_path / "w.txt"
    write_leelaz_weights(path, blocks=6, channels=96, seed=1)
    lines = path.read_text().splitlines()
    counts = [len(line.split()) for line in lines[1:]]
    assert lines[0] == "1"
    # input conv + 12 block convs, 4 lines each; policy conv 4 + fc 2; value conv 4 + 2 fcs 2 each
    assert len(counts) == 4 + 12 * 4 + 6 + 8
    assert counts[:4] == [18 * 96 * 9, 96, 96, 96]
    assert counts[4:8] == [96 * 96 * 9, 96, 96, 96]
    assert counts[52:58] == [96 * 2, 2, 2, 2, 2 * 361 * 362, 362]
    assert counts[58:] == [96, 1, 1, 1, 361 * 256, 256, 256, 1]
    variances = [float(v) for line in lines[4:53:4] for v in line.split()]
    assert min(variances) > 0  # batch-norm variances Leela Zero divides by


def test_leelaz_reads_the_weights_and_reports_its_rate(leelaz: str, tmp_path: Path) -> None:
    from tengen.bench.nn import LeelaZero, write_leelaz_weights

    weights = tmp_path / "w.txt"
    write_leelaz_weights(weights, blocks=1, channels=16, seed=1)
    engine = LeelaZero(leelaz, weights, threads=1, visits=50)
    try:
        assert engine.round() > 0 and engine.round() > 0
    finally:
        engine.close()
    assert engine.proc.returncode == 0


def test_bench_nn_prints_figures_and_ratios(leelaz: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "nn", "--seconds", "1", "--arch", "b1c16", "--preset", "tiny",
         "--visits", "50", "--threads", "1", "--leelaz", leelaz],
        capture_output=True, text=True, check=True, timeout=300,
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "nn" and figures["board"] == 19 and figures["rounds"] >= 3
    paths = ("torch_fp32", "torch_bf16", "openvino_fp32", "openvino_bf16", "runner")
    for name in (*paths, "leelaz"):
        assert figures[f"{name}_evals_per_s"] > 0
    for name in paths:
        ratio = figures[f"{name}_evals_per_s"] / figures["leelaz_evals_per_s"]
        # printed to 3 decimals: on a loaded box a ratio of 0.02 is off by up to 0.0005 from rounding alone
        assert abs(figures[f"ratio_{name}_vs_leelaz"] - ratio) <= 0.0005 + 0.01 * ratio
    assert 1 <= figures["runner_mean_batch"] <= figures["batch"]


def test_bench_nn_without_leelaz_says_how_to_install_it(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "nn", "--seconds", "0.5", "--arch", "b1c16", "--preset", "tiny",
         "--board", "9", "--threads", "1", "--leelaz", str(tmp_path / "missing")],
        capture_output=True, text=True, check=True, timeout=300,
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert "apt-get install leela-zero" in result.stdout
    assert "leelaz_evals_per_s" not in figures and figures["runner_evals_per_s"] > 0
