"""`tengen bench loop` starts broker, Triton and a selfplay service, and compares them with the runner."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_bench_loop_prints_both_paths_and_their_ratio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "loop", "--preset", "tiny", "--seconds", "1"],
        capture_output=True, text=True, check=True, timeout=600,
    )
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert figures["bench"] == "loop" and figures["preset"] == "tiny" and figures["rounds"] >= 2
    loop, local = figures["loop_positions_per_s"], figures["in_process_positions_per_s"]
    assert loop > 0 and local > 0  # the service's games reached its counter while it ran
    assert abs(figures["ratio_loop_vs_in_process"] - loop / local) <= 0.01 * loop / local
    assert sum(line.startswith("  round ") for line in lines) == figures["rounds"]
