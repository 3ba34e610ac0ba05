"""`tengen bench inference` starts its own Triton, measures both paths and ends with its JSON figures."""
from __future__ import annotations

import json
import os
import subprocess
import sys


def test_bench_inference_prints_figures() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "inference", "--seconds", "0.5", "--arch", "b1c16",
         "--batches", "2,8", "--threads", "1"],
        capture_output=True, text=True, check=True, timeout=300,
    )
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert figures["bench"] == "inference" and figures["in_flight"] == 2
    assert any("Triton ready" in line for line in lines) and any("same outputs" in line for line in lines)
    for batch in (2, 8):
        assert figures[f"triton_evals_per_s_{batch}"] > 0 and figures[f"torch_evals_per_s_{batch}"] > 0
        ratio = figures[f"triton_evals_per_s_{batch}"] / figures[f"torch_evals_per_s_{batch}"]
        assert abs(figures[f"ratio_{batch}"] - ratio) < 0.01
        assert figures[f"triton_forward_ms_{batch}"] > 0  # Triton's statistics counted the rounds' requests
        assert figures[f"cpu_ratio_{batch}"] > 0


def test_server_cpu_counts_the_children() -> None:
    """The CPU clock of the Triton path adds the server's children (the backend stubs run the net)."""
    from tengen.bench.inference import _server_cpu_s

    burn = ("import sys, time\nwhile time.process_time() < 0.3: pass\n"
            "sys.stdout.write('done\\n'); sys.stdout.flush()\ntime.sleep(60)")
    before = _server_cpu_s(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "done\n"
        assert _server_cpu_s(os.getpid()) - before >= 0.25  # the child's 0.3 CPU seconds, less clock-tick rounding
    finally:
        child.kill()
        child.wait()
