"""`tengen bench train` runs both measurements and ends with its JSON figures."""
from __future__ import annotations

import json
import subprocess
import sys


def test_bench_train_prints_figures() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "train", "--seconds", "0.4", "--arch", "b1c16",
         "--batch-size", "8", "--device", "cpu"],
        capture_output=True, text=True, check=True, timeout=300,
    )
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert figures["bench"] == "train"
    for size in (9, 19):
        assert any(line.strip().startswith(f"{size}x{size}: full step") for line in lines)
        assert figures[f"samples_per_s_{size}"] > 0 and figures[f"baseline_samples_per_s_{size}"] > 0
    assert figures["pipeline_efficiency"] == figures["pipeline_efficiency_19"] > 0
