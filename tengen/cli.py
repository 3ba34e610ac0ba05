"""The `tengen` command: one argparse tree, one module per command group.

Each module in COMMAND_MODULES exposes `register(subparsers)`, which adds its sub-parser and sets
`func` (called with the parsed args, returning the exit code). Heavy imports (torch, grpc, kafka)
happen inside the command functions so `tengen --help` stays fast.

Errors are one line on stderr and a non-zero exit, never a traceback: a bad flag is argparse's
message without the usage block; a CommandError, a config error or an OSError (a missing file, a
refused address) is `tengen <command>: <message>`; anything else is that line too, naming the
exception type and a file holding the traceback for a bug report (-v prints it instead). A reader
that stops early (`| head`) ends the command quietly, and so does Ctrl-C (exit 130).
"""
from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import tempfile
import traceback
from typing import NoReturn

from tengen.commands import CommandError
from tengen.logs import configure_logging

COMMAND_MODULES = [
    "tengen.commands.bench",
    "tengen.commands.sgf",
    "tengen.commands.ratings",
    "tengen.commands.models",
    "tengen.commands.triton",
    "tengen.commands.gtp",
    "tengen.commands.analysis",
    "tengen.commands.match",
    "tengen.commands.eval",
    "tengen.commands.run",
    "tengen.commands.status",
    "tengen.commands.chaos",
]


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line: the usage block is what --help is for. Sub-parsers
    are of the same class (add_subparsers' default), so every command's flags get this."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _name_commands(parser: argparse.ArgumentParser) -> None:
    """Every sub-parser sets `command_name` to its prog ("tengen models promote"); the deepest
    one's default wins, so errors name the command the user typed."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.set_defaults(command_name=sub.prog)
                _name_commands(sub)


class _Version(argparse.Action):
    """--version: the package version and, in a git checkout, its commit (looked up only when asked)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> NoReturn:
        from tengen.loop.record import source_commit, tengen_version

        commit, dirty = source_commit()
        where = f" (commit {commit[:12]}{' with local changes' if dirty else ''})" if commit else ""
        print(f"tengen {tengen_version() or 'unknown'}{where}")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tengen",
        description="tengen: distributed KataGo-style self-play training for Go.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="print tengen's version (and its commit, in a checkout) and exit")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    _name_commands(parser)
    return parser


def _expected(error: Exception) -> bool:
    """A user's error, whose message says it all (no traceback wanted)."""
    from tengen.config import ConfigError

    return isinstance(error, (CommandError, ConfigError, OSError))


def _report(name: str, error: Exception, verbose: bool) -> int:
    """One line for `error`; the traceback of an unexpected one goes to a file it names (or, with
    -v, to stderr before the line). Returns the exit code."""
    message = str(error).strip().replace("\n", " ") or type(error).__name__
    if _expected(error):
        print(f"{name}: {message}", file=sys.stderr)
        return error.code if isinstance(error, CommandError) else 1
    details = "".join(traceback.format_exception(error))
    if verbose:
        sys.stderr.write(details)
        where = "traceback above"
    else:
        with tempfile.NamedTemporaryFile("w", prefix=f"{name.replace(' ', '-')}-", suffix=".log",
                                         delete=False) as log_file:
            log_file.write(details)
        where = f"traceback in {log_file.name}"
    print(f"{name}: {message} (unexpected {type(error).__name__}; {where})", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader went away (`tengen ratings top --json | head`): not an error of ours. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except KeyboardInterrupt:  # Ctrl-C in a command that does not handle it itself
        return 128 + signal.SIGINT
    except Exception as error:
        return _report(args.command_name, error, args.verbose)


if __name__ == "__main__":
    sys.exit(main())
