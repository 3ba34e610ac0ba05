"""Stopping the child servers that tengen starts (broker, Triton, services), one way everywhere, and
a command's own stop on SIGTERM and SIGINT."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


def stop_process(proc: subprocess.Popen, name: str, grace_s: float, group: bool = False) -> int | None:
    """SIGTERM, wait up to grace_s, then SIGKILL; returns the exit code. Safe on an exited process.

    group=True kills the whole process group on the SIGKILL, and what is left of the group once
    the leader has exited (a server whose helpers share its session, such as Triton's Python
    backend stubs, must not outlive it: Triton exits with stubs still up when its exit timeout
    runs out while unloading models).
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            log.warning("%s (pid %d) ignored SIGTERM for %.0f s; killing it", name, proc.pid, grace_s)
            kill_process(proc, group)
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # usually nothing is left
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode


def kill_process(proc: subprocess.Popen, group: bool = False) -> None:
    """SIGKILL at once, as in a crash, and reap it."""
    if proc.poll() is None:
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()


def dies_with_parent(cmd: list[str]) -> list[str]:
    """`cmd` wrapped so that it gets SIGTERM when the thread that starts it dies, SIGKILL included.

    A server in a session of its own is not stopped by a signal to its parent's group, and a
    SIGKILLed parent runs no cleanup: without this a killed benchmark or test run would leave its
    broker and Triton running. util-linux's setpriv sets Linux's parent-death signal and execs
    `cmd`; the signal follows the starting *thread*, so start the server from one that outlives
    it (every caller starts servers from its main thread). Without setpriv `cmd` runs unwrapped.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--", *cmd] if setpriv else cmd


# -- a command stopped by a signal ---------------------------------------------------------------

class Interrupted(SystemExit):
    """A command stopped by SIGTERM or SIGINT; `code` is 128 + the signal number, as a shell reports
    it. A SystemExit, so a command that does not catch it exits with that code and no traceback."""

    code: int  # always a number (SystemExit's may be a message or None)

    def __init__(self, code: int) -> None:
        super().__init__(code)

    @property
    def signal_name(self) -> str:
        return signal.Signals(int(self.code) - 128).name


def exit_on_signals() -> None:
    """From now on SIGTERM, like Ctrl-C's SIGINT, raises Interrupted in the main thread: the command
    unwinds, and its finally blocks stop the servers and engines it started and remove its temp
    dirs (the default SIGTERM would end the process at once and leave them behind)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    # Later signals are ignored: a second Ctrl-C must not cut short the cleanup the first began
    # (each stop has its own grace period; SIGKILL is still there).
    for other in (signal.SIGTERM, signal.SIGINT):
        signal.signal(other, signal.SIG_IGN)
    raise Interrupted(128 + signum)


# -- what a crashed run leaves behind ------------------------------------------------------------
# A process inherits its parent's environment, so a variable set in `tengen run`'s own environment
# before it starts anything marks every process of that run: services, Triton and its backend
# stubs, the broker, GNU Go under the strength service, including those started while the
# supervisor was being killed. A later run finds them by it, whoever their parent is now.

RUN_OWNER_ENV = "TENGEN_RUN_OWNER"


@contextlib.contextmanager
def marking_descendants(owner: str) -> Iterator[None]:
    """Within the block, every process this one starts is marked as belonging to `owner`."""
    before = os.environ.get(RUN_OWNER_ENV)
    os.environ[RUN_OWNER_ENV] = owner
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(RUN_OWNER_ENV, None)
        else:
            os.environ[RUN_OWNER_ENV] = before


def marked_processes(owner: str) -> list[int]:
    """Live processes other than this one that carry `owner`'s mark."""
    needle = f"{RUN_OWNER_ENV}={owner}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_bytes().rpartition(b")")[2].split()[0]
        except OSError:  # gone, or not ours to read
            continue
        if state != b"Z" and (b"\0" + environ).find(b"\0" + needle) >= 0:
            found.append(int(entry.name))
    return found


def stop_marked(owner: str, grace_s: float = 10.0) -> list[int]:
    """SIGTERM every process marked for `owner`, SIGKILL what is left after `grace_s`; returns the
    pids found."""
    found = marked_processes(owner)
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and marked_processes(owner):
        time.sleep(0.1)
    for pid in marked_processes(owner):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return found
