"""Stopping the child servers that tengen starts (broker, Triton, services), one way everywhere."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess

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
