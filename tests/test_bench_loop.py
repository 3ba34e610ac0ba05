"""`tengen bench loop` starts broker, Triton and a selfplay service, and compares them with the runner."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


@pytest.mark.slow
def test_bench_loop_prints_both_paths_and_their_ratio() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "loop", "--preset", "tiny", "--seconds", "1",
         "--round", "2"],
        capture_output=True, text=True, check=True, timeout=600,
    )
    lines = result.stdout.strip().splitlines()
    figures = json.loads(lines[-1])
    assert figures["bench"] == "loop" and figures["preset"] == "tiny" and figures["rounds"] >= 2
    loop, local = figures["loop_positions_per_s"], figures["in_process_positions_per_s"]
    assert loop > 0 and local > 0  # the service's moves reached its counter while it ran
    assert abs(figures["ratio_loop_vs_in_process"] - loop / local) <= 0.01 * loop / local
    loop_evals, local_evals = figures["loop_evals_per_s"], figures["in_process_evals_per_s"]
    # Each position played cost the net at least one evaluation, at most the 16 visits of tiny's search
    # (the NN cache answers the rest), on both paths.
    assert loop <= loop_evals <= 16 * loop and local <= local_evals <= 16 * local
    assert abs(figures["evals_ratio_loop_vs_in_process"] - loop_evals / local_evals) <= 0.01 * loop_evals / local_evals
    assert sum(line.startswith("  round ") for line in lines) == figures["rounds"]
    assert figures["round_s"] == 2.0
    # Triton's own statistics of the loop's requests: each took time in the Python backend, none
    # waits in the queue longer than a round, and an execution runs at least one request (more when
    # the dynamic batcher merged the halves' requests; at most the 2 halves in flight).
    assert 0 < figures["triton_backend_ms"] < 2000 and 0 <= figures["triton_queue_ms"] < 2000
    assert 1 <= figures["triton_requests_per_execution"] <= 2


def _processes_mentioning(text: str) -> list[int]:
    """Processes whose command line or environment names `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            blob = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
        except OSError:
            continue
        if text.encode() in blob:
            found.append(int(proc.name))
    return found


@pytest.mark.slow
def test_sigterm_stops_the_servers_and_removes_the_data_dir() -> None:
    bench = subprocess.Popen(
        [sys.executable, "-m", "tengen.cli", "bench", "loop", "--preset", "tiny", "--seconds", "600"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    data_dir = None
    try:
        for line in bench.stdout:
            match = re.search(r"data dir (\S+)", line)
            data_dir = data_dir or (match.group(1) if match else None)
            if "waiting for its first evaluations" in line:
                break
        assert data_dir is not None and _processes_mentioning(data_dir), "the bench never started its services"
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    deadline = time.monotonic() + 30
    while _processes_mentioning(data_dir) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _processes_mentioning(data_dir), "a server the bench started outlived it"
    assert not Path(data_dir).exists()
