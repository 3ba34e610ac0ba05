"""The `tengen` command's top level: help, and an error for an unknown command."""
import subprocess
import sys

from tengen.cli import build_parser


def test_help_lists_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: tengen" in out
    assert "bench" in out


def test_unknown_command_is_an_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "no-such-command"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_parser_builds() -> None:
    assert build_parser().prog == "tengen"
