"""The `tengen` subcommands, one module each (see tengen.cli)."""
from __future__ import annotations


class CommandError(Exception):
    """A user's error (a missing file, a bad value, a server that does not answer): tengen.cli
    prints `tengen <command>: <message>` as one line and exits with `code`, no traceback.

    It lives here rather than in tengen.cli because `python -m tengen.cli` runs that module as
    __main__: a class defined there would be a second, different class for the commands."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code
