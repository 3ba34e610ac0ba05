"""Drive a GTP engine running as a subprocess (the match runner's side of the protocol).

    with GtpClient("gnugo --mode gtp --level 1", name="gnugo") as engine:
        engine.send("boardsize 9")
        move = engine.send("genmove black", timeout=30)

A reader thread moves the engine's stdout into a queue, so every command can wait with a time
limit. `send` returns the response text (without ``=``); a ``?`` answer raises CommandFailed,
a dead engine EngineDied, an answer too late EngineTimeout (the engine is then killed: its state
is unknown). stderr goes to a log file or is discarded.
"""
from __future__ import annotations

import logging
import queue
import shlex
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0
QUIT_TIMEOUT_S = 5.0


class EngineError(RuntimeError):
    """The engine did not answer properly (died, timed out)."""


class EngineDied(EngineError):
    pass


class EngineTimeout(EngineError):
    pass


class CommandFailed(EngineError):
    """The engine answered ``? message``; it is still running."""

    def __init__(self, command: str, message: str) -> None:
        self.command = command
        self.message = message
        super().__init__(f"{command!r} failed: {message}")


class GtpClient:
    def __init__(
        self,
        command: str | Sequence[str],
        name: str = "",
        *,
        stderr_path: Path | None = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        cwd: Path | None = None,
    ) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ValueError("empty engine command")
        self.name = name or Path(self.argv[0]).name
        self.timeout = timeout
        self._stderr = open(stderr_path, "ab") if stderr_path is not None else subprocess.DEVNULL
        try:
            # A process group of its own: Ctrl-C at a terminal signals the whole foreground group,
            # and an engine killed by it mid-game would forfeit the game in progress (the strength
            # service let it finish, then recorded a loss). Whoever started the engine stops it.
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
                text=True, bufsize=1, cwd=cwd, process_group=0,
            )
        except OSError as error:
            self._close_stderr()
            raise EngineDied(f"{self.name}: cannot start {self.argv[0]!r}: {error}") from None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name=f"gtp-read-{self.name}", daemon=True)
        self._reader.start()
        self._commands: set[str] | None = None
        self._pending = False  # a command was sent whose whole answer has not been read

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _close_stderr(self) -> None:
        if not isinstance(self._stderr, int):
            self._stderr.close()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def _next_line(self, deadline: float, command: str) -> str:
        try:
            line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            self.kill()
            raise EngineTimeout(f"{self.name}: no answer to {command!r} in time") from None
        if line is None:
            self._lines.put(None)  # later calls see the end too
            raise EngineDied(f"{self.name} exited (code {self.process.poll()}) during {command!r}")
        return line.rstrip("\r\n")

    def send(self, command: str, timeout: float | None = None) -> str:
        """The response to one command; CommandFailed for ``?``, EngineError when it dies or is
        late."""
        if "\n" in command:
            raise ValueError("one command per line")
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise EngineDied(f"{self.name} is not running (sending {command!r})") from None
        self._pending = True
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        line = self._next_line(deadline, command)
        while not line.strip():  # stray empty lines before a response
            line = self._next_line(deadline, command)
        if line[:1] not in ("=", "?"):
            raise EngineError(f"{self.name}: answer to {command!r} is not GTP: {line!r}")
        ok = line[0] == "="
        parts = [line[1:].lstrip("0123456789").strip()]
        while True:
            line = self._next_line(deadline, command)
            if not line.strip():
                break
            parts.append(line)
        text = "\n".join(p for p in parts if p).strip()
        self._pending = False
        if not ok:
            raise CommandFailed(command, text)
        return text

    def known_command(self, name: str) -> bool:
        if self._commands is None:
            self._commands = set(self.send("list_commands").split())
        return name in self._commands

    def kill(self) -> None:
        if self.alive:
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        """`quit`, then wait briefly; kill an engine that does not leave, or that has not answered
        its last command (a match interrupted mid-move: `quit` would wait for that move)."""
        if self.alive and not self._pending:
            try:
                self.send("quit", timeout=QUIT_TIMEOUT_S)
            except EngineError:
                pass
            try:
                self.process.wait(timeout=QUIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("%s did not quit; killing it", self.name)
        self.kill()
        self._reader.join(timeout=QUIT_TIMEOUT_S)  # it ends at the dead engine's end of output
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._close_stderr()

    def __enter__(self) -> GtpClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
