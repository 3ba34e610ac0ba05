"""Nothing a command started outlives it: run a command, signal it at a chosen moment, and check
that it exits with the expected code, that none of its descendants is left running and that its
temp dir is gone.

Descendants are found through /proc's parent links and recorded before the signal (a process
that loses its parent is re-parented, so it could not be found afterwards); each is identified by
its pid and start time, so a pid reused later is not mistaken for it.
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
TENGEN = [sys.executable, "-m", "tengen.cli"]
Process = tuple[int, int]  # (pid, start time in clock ticks): a pid reused later is another process
# A moment to signal at: a test of the descendants found so far (process -> command line) and the log.
Moment = Callable[[dict[Process, str], str], bool]


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


def has(program: str) -> Callable[[dict[Process, str]], bool]:
    """Whether a live process among those found runs `program` (its path ends so). Not any
    mention in the command line: a command forks copies of itself (ctypes runs ldconfig)."""
    return lambda found: any(cmd.split(" ", 1)[0].endswith(program) for process, cmd in found.items() if alive(process))


def runs(words: str) -> Callable[[dict[Process, str]], bool]:
    """Whether a live process among those found has `words` in its command line (`-m tengen.cli
    gtp`: a Python program is named by its arguments)."""
    return lambda found: any(words in cmd for process, cmd in found.items() if alive(process))


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the command exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout_s:.0f} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def interrupt(tmp_path: Path, argv: list[str], moments: list[tuple[str, Moment]], signum: int, *,
              expect_code: int | None = None, to_group: bool = False, stdin: bytes | None = None,
              env: dict[str, str] | None = None, temp_prefix: str = "", made_temp: bool = False,
              exit_timeout_s: float = 120.0) -> str:
    """Start `argv` in a session of its own with a fresh $TMPDIR, wait for each moment in turn, send
    `signum` (to the whole process group with `to_group`, as Ctrl-C at a terminal does; else to the
    command alone, as `kill` does) and check: the exit code (default 128 + signum), no descendant
    left running, nothing under $TMPDIR whose name starts with `temp_prefix` (with `made_temp`, one
    such entry must have been there before the signal). `stdin` is written to a pipe kept open
    until the end. Returns the command's output."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    log = tmp_path / "command.log"
    full_env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1", **(env or {})}
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                start_new_session=True)
    if stdin is not None:
        assert proc.stdin is not None
        proc.stdin.write(stdin)
        proc.stdin.flush()
    seen: dict[Process, str] = {}  # every descendant ever seen, recorded before the signal

    def reached(test: Moment) -> Callable[[], bool]:
        def check() -> bool:
            seen.update(descendants(proc.pid))
            return test(seen, log.read_text(errors="replace"))
        return check

    try:
        for what, test in moments:
            wait_for(reached(test), 300, what, proc, log)
        seen.update(descendants(proc.pid))
        if made_temp:
            assert list(tmpdir.glob(f"{temp_prefix}*")), "the command made no temp dir under $TMPDIR"
        (os.killpg if to_group else os.kill)(proc.pid, signum)
        code = proc.wait(timeout=exit_timeout_s)
        name = signal.Signals(signum).name
        expected = 128 + signum if expect_code is None else expect_code
        assert code == expected, f"exit code {code} after {name}, not {expected}:\n{log.read_text()[-3000:]}"
        deadline = time.monotonic() + 30  # generous: the command stopped them before it exited
        while any(alive(p) for p in seen) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {cmd for process, cmd in seen.items() if alive(process)}
        assert not left, f"left running after {name}: {left}\n{log.read_text()[-3000:]}"
        assert not list(tmpdir.glob(f"{temp_prefix}*")), f"left in $TMPDIR: {sorted(os.listdir(tmpdir))}"
        return log.read_text(errors="replace")
    finally:
        # Whatever a failing run left: the command's session, then any recorded descendant.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for process in seen:
            if alive(process):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(process[0], signal.SIGKILL)
        proc.wait(timeout=30)
        if proc.stdin is not None:
            proc.stdin.close()
