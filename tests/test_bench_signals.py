"""A benchmark that starts servers stops them on SIGTERM and SIGINT: nothing it started outlives it.

`tengen bench inference` runs in a session of its own; its descendants (tritonserver, which sits in
a session of its own, and Triton's Python backend stubs) are found through /proc's parent links
and recorded before the signal, and must all be gone once it has exited, as must its temp dir
(tests/process_support.py, shared with the other commands' signal tests).
The signal comes once while Triton is still loading the model and once while the bench measures.
A SIGKILLed command runs no cleanup at all: the servers it started get SIGTERM from the kernel then
(Linux's parent-death signal), checked with a broker.

A signal that lands while a server is starting unwinds out of its `start()`, which the
benchmarks call from `with Server(...)` (whose __exit__ does not run when __enter__ fails): the
servers stop themselves then, checked directly with an interruption at the first readiness poll.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from process_support import ROOT, TENGEN, Moment, has, interrupt


def test_triton_interrupted_while_starting_stops_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tengen.infra.triton.repository import ModelRepository
    from tengen.infra.triton.server import LocalTriton

    started: list[subprocess.Popen] = []

    def interrupted(self: LocalTriton) -> bool:
        started.append(self._proc)
        raise KeyboardInterrupt

    monkeypatch.setattr(LocalTriton, "is_ready", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with LocalTriton(ModelRepository(tmp_path / "repository").root, tmp_path / "work"):
            pass
    try:
        assert started and started[0].poll() is not None, "tritonserver outlived its interrupted start"
    finally:
        if started and started[0].poll() is None:
            os.killpg(started[0].pid, signal.SIGKILL)
            started[0].wait()


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def test_a_server_dies_with_its_sigkilled_parent(tmp_path: Path) -> None:
    starter = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from tengen.infra.broker import LocalBroker
        broker = LocalBroker(log_path=Path(sys.argv[1])).start()
        print(broker._proc.pid, flush=True)
        time.sleep(600)
    """)
    parent = subprocess.Popen([sys.executable, "-c", starter, str(tmp_path / "broker.log")], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    pid = None
    try:
        pid = int(parent.stdout.readline())
        assert _running(pid)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 30
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _running(pid), "the broker outlived the SIGKILLed process that started it"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        parent.stdout.close()
        if pid is not None and _running(pid):
            os.kill(pid, signal.SIGKILL)


def test_without_setpriv_a_server_runs_unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    from tengen.infra import process

    monkeypatch.setattr(process.shutil, "which", lambda name: None)
    assert process.dies_with_parent(["tansu", "broker"]) == ["tansu", "broker"]
    monkeypatch.setattr(process.shutil, "which", lambda name: f"/usr/bin/{name}")
    assert process.dies_with_parent(["tansu", "broker"]) == ["/usr/bin/setpriv", "--pdeathsig", "TERM", "--",
                                                            "tansu", "broker"]


def test_broker_interrupted_while_starting_stops_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tengen.infra.broker as broker_module

    broker = broker_module.LocalBroker(log_path=tmp_path / "broker.log")
    started: list[subprocess.Popen] = []

    def interrupted(*args: object, **kwargs: object) -> bool:
        started.append(broker._proc)
        raise KeyboardInterrupt

    monkeypatch.setattr(broker_module, "kafka_api_versions_ok", interrupted)
    with pytest.raises(KeyboardInterrupt):
        with broker:
            pass
    try:
        assert started and started[0].poll() is not None, "the broker outlived its interrupted start"
    finally:
        if started and started[0].poll() is None:
            started[0].kill()
            started[0].wait()


def interrupt_bench(tmp_path: Path, argv: list[str], moments: list[tuple[str, Moment]], signum: int,
                    temp_prefix: str) -> None:
    """`tengen bench ARGV` signalled at the moments: nothing it started outlives it, its temp dir
    (made before the signal) is gone."""
    interrupt(tmp_path, [*TENGEN, "bench", *argv], moments, signum, temp_prefix=temp_prefix, made_temp=True)


# Each signal at each moment once across the benches, not every combination: each case starts
# servers, and the suite has a time budget.
@pytest.mark.slow
@pytest.mark.parametrize("signum, moment", [(signal.SIGTERM, "loading"), (signal.SIGINT, "measuring")],
                         ids=["SIGTERM-loading", "SIGINT-measuring"])
def test_bench_inference_stops_triton_on_a_signal(tmp_path: Path, signum: int, moment: str) -> None:
    moments = [("tritonserver", lambda found, log: has("bin/tritonserver")(found))]
    if moment == "measuring":
        moments += [("measuring", lambda found, log: "rounds" in log),
                    ("backend stub", lambda found, log: has("triton_python_backend_stub")(found))]
    interrupt_bench(tmp_path, ["inference", "--seconds", "600", "--arch", "b1c16", "--batches", "2", "--threads", "1"],
                    moments, signum, "tengen-bench-inference-")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM], ids=["SIGTERM"])
def test_bench_nn_stops_leelaz_on_a_signal(tmp_path: Path, signum: int, leelaz: str) -> None:
    # Many visits: Leela Zero is still searching when the signal comes.
    interrupt_bench(tmp_path, ["nn", "--seconds", "5", "--arch", "b1c16", "--preset", "tiny", "--visits", "1000000",
                               "--threads", "1", "--leelaz", leelaz],
                    [("leelaz", lambda found, log: has(leelaz)(found))], signum, "tengen-bench-nn-")


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["selfplay up"])
def test_bench_loop_stops_its_servers_on_sigint(tmp_path: Path, moment: str) -> None:
    # (test_bench_loop covers SIGTERM once everything is up; a Triton interrupted while it starts is
    # test_triton_interrupted_while_starting_stops_itself.)
    moments = [("tritonserver", lambda found, log: has("bin/tritonserver")(found))]
    if moment == "selfplay up":
        moments.append(("selfplay service", lambda found, log: "waiting for its first evaluations" in log))
    interrupt_bench(tmp_path, ["loop", "--preset", "tiny", "--seconds", "600"], moments, signal.SIGINT,
                    "tengen-bench-loop-")
