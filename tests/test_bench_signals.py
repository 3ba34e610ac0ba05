"""A benchmark that starts servers stops them on SIGTERM and SIGINT: nothing it started outlives it.

`tengen bench inference` runs in a session of its own; its descendants (tritonserver, which sits in
a session of its own, and Triton's Python backend stubs) are found through /proc's parent links
and recorded before the signal, and must all be gone once it has exited, as must its temp dir.
The signal comes once while Triton is still loading the model and once while the bench measures.

A signal that lands while a server is starting unwinds out of its `start()`, which the
benchmarks call from `with Server(...)` (whose __exit__ does not run when __enter__ fails): the
servers stop themselves then, checked directly with an interruption at the first readiness poll.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
Process = tuple[int, int]  # (pid, start time in clock ticks): a pid reused later is another process


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int) -> dict[Process, str]:
    """Every live descendant of `root` with its command line, from the ppid links in /proc."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is None or fields[0] == "Z":
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        starts[int(entry.name)] = int(fields[19])
    found: dict[Process, str] = {}
    stack = list(children.get(root, []))
    while stack:
        pid = stack.pop()
        found[(pid, starts[pid])] = _cmdline(pid)
        stack.extend(children.get(pid, []))
    return found


def alive(process: Process) -> bool:
    fields = _stat(process[0])
    return fields is not None and fields[0] != "Z" and int(fields[19]) == process[1]


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, bench: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if bench.poll() is not None:
            pytest.fail(f"the bench exited ({bench.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def test_triton_interrupted_while_starting_stops_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tengen.infra.triton import LocalTriton, ModelRepository

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


def has(program: str) -> Callable[[dict[Process, str]], bool]:
    """Whether a live process among those found runs `program` (its path ends so). Not any
    mention in the command line: the bench forks copies of itself (ctypes runs ldconfig)."""
    return lambda found: any(cmd.split(" ", 1)[0].endswith(program) for process, cmd in found.items() if alive(process))


def interrupt_bench(tmp_path: Path, argv: list[str], moments: list[tuple[str, Callable[[dict[Process, str], str], bool]]],
                    signum: int, temp_prefix: str) -> None:
    """Start `tengen bench ARGV`, wait for each moment in turn (a test of the bench's descendants
    and its log), send `signum`, and check nothing it started outlives it and its temp dir is gone."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    log = tmp_path / "bench.log"
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1")
    with open(log, "wb") as out:
        bench = subprocess.Popen([sys.executable, "-m", "tengen.cli", "bench", *argv], cwd=ROOT, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    seen: dict[Process, str] = {}  # every descendant ever seen, recorded before the signal

    def reached(test: Callable[[dict[Process, str], str], bool]) -> Callable[[], bool]:
        def check() -> bool:
            seen.update(descendants(bench.pid))
            return test(seen, log.read_text(errors="replace"))
        return check

    try:
        for what, test in moments:
            wait_for(reached(test), 300, what, bench, log)
        seen.update(descendants(bench.pid))
        assert list(tmpdir.glob(f"{temp_prefix}*")), "the bench made no temp dir under $TMPDIR"
        bench.send_signal(signum)
        code = bench.wait(timeout=120)
        assert code == 128 + signum, log.read_text()[-3000:]
        deadline = time.monotonic() + 30  # generous: the bench stopped them before it exited
        while any(alive(p) for p in seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {cmd for process, cmd in seen.items() if alive(process)}
        assert not left, f"left running after {signal.Signals(signum).name}: {left}\n{log.read_text()[-3000:]}"
        assert not list(tmpdir.glob(f"{temp_prefix}*")), "temp dir left behind"
    finally:
        # Whatever a failing run left: the bench's session, then any recorded descendant.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(bench.pid, signal.SIGKILL)
        for process in seen:
            if alive(process):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(process[0], signal.SIGKILL)
        bench.wait(timeout=30)


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
        moments.append(("selfplay service", lambda found, log: "waiting for its first games" in log))
    interrupt_bench(tmp_path, ["loop", "--preset", "tiny", "--seconds", "600"], moments, signal.SIGINT,
                    "tengen-bench-loop-")
