"""Supervision of a local run's children: start in order, restart the ones that die, stop in reverse.

Two kinds of child share one interface (`Child`): a service started as `python -m services.X` with
its output in a log file (`ServiceProcess`), and a server object with its own start/stop logic,
the broker or Triton (`ServerChild`), whose `after_start` hook redoes what a fresh server lacks
(the in-memory broker's topics and model announcement).

A child that exits without being asked to is restarted after a backoff that doubles from
`initial_backoff_s` up to `max_backoff_s`, and resets once the child has stayed up for
`stable_after_s`. One that keeps dying right after its start (`max_quick_failures` in a row) stops
the run: a missing module or a bad flag would otherwise restart forever.
"""
from __future__ import annotations

import logging
import os
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Protocol

from tengen.infra.process import stop_process

log = logging.getLogger(__name__)


class SupervisorError(RuntimeError):
    """A child could not be started or keeps dying; the message says which and where its log is."""


class Child(Protocol):
    name: str
    stop_grace_s: float

    def start(self) -> None: ...
    def alive(self) -> bool: ...
    def exit_reason(self) -> str: ...
    def stop(self) -> None: ...
    def log_path(self) -> Path | None: ...
    def pid(self) -> int | None: ...


class ServiceProcess:
    """One service as a child process in its own session (a Ctrl-C on the terminal reaches only
    `tengen run`, which then stops the children in order), its output appended to `log_file`."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_file: Path,
                 stop_grace_s: float = 20.0) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_file = log_file
        self.stop_grace_s = stop_grace_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None

    def start(self) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._close_log()
        self._out = open(self.log_file, "ab")
        self._out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} tengen run starts: {' '.join(self.argv)}\n"
                        .encode())
        self._out.flush()
        self._proc = subprocess.Popen(self.argv, env=self.env, stdout=self._out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_reason(self) -> str:
        code = self._proc.poll() if self._proc is not None else None
        if code is None:
            return "not started" if self._proc is None else "running"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc, self.name, self.stop_grace_s)
        self._close_log()

    def log_path(self) -> Path | None:
        return self.log_file

    def pid(self) -> int | None:
        return self._proc.pid if self.alive() and self._proc is not None else None

    def _close_log(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None


class Server(Protocol):
    """LocalBroker and LocalTriton: blocking start (returns once ready), stop, liveness."""

    @property
    def log_path(self) -> Path | None: ...  # read only: LocalTriton's is always a Path

    def start(self, timeout_s: float = ...) -> object: ...
    def stop(self, grace_s: float = ...) -> None: ...
    def is_running(self) -> bool: ...


class ServerChild:
    """A server object as a supervised child; `after_start` runs after every (re)start."""

    def __init__(self, name: str, server: Server, *, start_timeout_s: float, stop_grace_s: float,
                 after_start: Callable[[], None] | None = None, pid: Callable[[], int | None] | None = None) -> None:
        self.name = name
        self.server = server
        self.start_timeout_s = start_timeout_s
        self.stop_grace_s = stop_grace_s
        self.after_start = after_start
        self._pid = pid

    def start(self) -> None:
        self.server.stop()  # reaps a dead process and closes its log; no-op when never started
        self.server.start(timeout_s=self.start_timeout_s)
        if self.after_start is not None:
            self.after_start()

    def alive(self) -> bool:
        return self.server.is_running()

    def exit_reason(self) -> str:
        return "running" if self.alive() else "process exited"

    def stop(self) -> None:
        self.server.stop(grace_s=self.stop_grace_s)

    def log_path(self) -> Path | None:
        return self.server.log_path

    def pid(self) -> int | None:
        return self._pid() if self._pid is not None and self.alive() else None


@dataclass
class ChildState:
    """What the status view shows of one child."""

    name: str
    state: str  # "up", "starting", "restarting in 4 s", "stopped"
    restarts: int
    pid: int | None


@dataclass
class _Entry:
    child: Child
    started_at: float = 0.0
    restarts: int = 0
    quick_failures: int = 0
    backoff_s: float = 0.0
    restart_at: float | None = None  # set while waiting to restart after a death
    running: bool = False


@dataclass
class Supervisor:
    children: list[Child]
    initial_backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    stable_after_s: float = 60.0
    quick_failure_s: float = 15.0
    max_quick_failures: int = 6
    events: deque[str] = field(default_factory=lambda: deque(maxlen=8))

    def __post_init__(self) -> None:
        self._entries = [_Entry(c, backoff_s=self.initial_backoff_s) for c in self.children]

    def _event(self, level: int, message: str, *args: object) -> None:
        log.log(level, message, *args)
        self.events.append(f"{time.strftime('%H:%M:%S')} {message % args}")

    def start_all(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Start every child in order (servers block until ready). Raises SupervisorError when one
        cannot start; the ones already started keep running (call stop_all)."""
        for entry in self._entries:
            if should_stop():
                return
            self._start(entry)

    def _start(self, entry: _Entry) -> None:
        child = entry.child
        try:
            child.start()
        except Exception as exc:  # a server's start error (BrokerError, TritonError) or an OSError
            raise SupervisorError(f"{child.name} could not start: {exc}") from exc
        entry.started_at = time.monotonic()
        entry.running = True
        entry.restart_at = None
        pid = child.pid()
        self._event(logging.INFO, "%s started%s", child.name, f" (pid {pid})" if pid else "")

    def check(self) -> None:
        """Notice deaths, schedule restarts with backoff, restart the ones that are due."""
        now = time.monotonic()
        for entry in self._entries:
            child = entry.child
            if entry.running and not child.alive():
                entry.running = False
                uptime = now - entry.started_at
                if uptime >= self.stable_after_s:
                    entry.backoff_s = self.initial_backoff_s
                entry.quick_failures = entry.quick_failures + 1 if uptime < self.quick_failure_s else 0
                if entry.quick_failures >= self.max_quick_failures:
                    raise SupervisorError(
                        f"{child.name} died {entry.quick_failures} times in a row within {self.quick_failure_s:.0f} s "
                        f"of starting ({child.exit_reason()}); see {child.log_path()}:\n{log_tail(child.log_path())}")
                entry.restart_at = now + entry.backoff_s
                self._event(logging.WARNING, "%s died (%s) after %.0f s; restarting in %.1f s (see %s)",
                            child.name, child.exit_reason(), uptime, entry.backoff_s, child.log_path())
                entry.backoff_s = min(entry.backoff_s * 2, self.max_backoff_s)
            if entry.restart_at is not None and now >= entry.restart_at:
                entry.restarts += 1
                self._start(entry)

    def stop_all(self) -> None:
        """Stop every child in reverse start order, each with its own grace period."""
        for entry in reversed(self._entries):
            child = entry.child
            entry.restart_at = None
            was_running = entry.running and child.alive()
            entry.running = False
            try:
                child.stop()
            except Exception as exc:  # keep stopping the others whatever one of them does
                log.error("stopping %s failed: %r", child.name, exc)
                continue
            if was_running:
                self._event(logging.INFO, "%s stopped (%s)", child.name, child.exit_reason())

    def states(self) -> list[ChildState]:
        now = time.monotonic()
        states = []
        for entry in self._entries:
            if entry.running:
                state = "up"
            elif entry.restart_at is not None:
                state = f"restarting in {max(0.0, entry.restart_at - now):.0f} s"
            else:
                state = "stopped"
            states.append(ChildState(entry.child.name, state, entry.restarts, entry.child.pid()))
        return states

    def pids(self) -> dict[str, int]:
        return {s.name: s.pid for s in self.states() if s.pid is not None}


def log_tail(path: Path | None, n_bytes: int = 2000) -> str:
    """The end of a child's log, for error messages."""
    if path is None:
        return ""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - n_bytes))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
