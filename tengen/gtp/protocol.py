"""The text layer of GTP version 2: command lines, responses, vertices and colours.

Follows the GTP 2 draft: a command line is ``[id] command_name [arguments]``; control characters
other than tab and newline are dropped, tabs become spaces, ``#`` starts a comment, empty lines
are skipped. A response is ``=[id] text`` or ``?[id] message`` ending with an empty line.
Vertices are GTP coordinates ("D4", column letters without I, rows from the bottom) or "pass".
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tengen.go.board import BLACK, WHITE
from tengen.go.sgf import GTP_COLUMNS, move_to_gtp

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_VERTEX = re.compile(r"([A-HJ-Ta-hj-t])(\d{1,2})")


class GtpError(Exception):
    """A command that fails; the message is what follows ``?`` in the response."""


@dataclass(frozen=True)
class Command:
    id: int | None
    name: str
    args: list[str]


def clean_line(line: str) -> str:
    """The line after GTP's preprocessing: no control characters or comment, tabs as spaces."""
    line = _CONTROL.sub("", line.replace("\t", " ").rstrip("\r\n"))
    return line.split("#", 1)[0].strip()


def parse_command(line: str) -> Command | None:
    """The command of one input line, or None for a line that is empty after preprocessing.

    A leading integer is the id; a line holding only an id has an empty command name (answered
    as an unknown command, keeping the id)."""
    words = clean_line(line).split()
    if not words:
        return None
    cid = None
    if words[0].isascii() and words[0].isdigit():
        cid = int(words[0])
        words = words[1:]
    if not words:
        return Command(cid, "", [])
    return Command(cid, words[0], words[1:])


def format_response(cid: int | None, ok: bool, text: str = "") -> str:
    """The full response, ending with the blank line; no empty line inside multi-line text."""
    body = "\n".join(line for line in text.replace("\r", "").split("\n") if line.strip()) if text else ""
    head = ("=" if ok else "?") + ("" if cid is None else str(cid)) + " "
    # Multi-line text (a board diagram) starts on its own line so its lines stay aligned.
    if "\n" in body:
        head += "\n"
    return f"{head}{body}\n\n"


def parse_color(text: str) -> int:
    """BLACK or WHITE from ``b``, ``black``, ``w``, ``white`` (any case)."""
    word = text.lower()
    if word in ("b", "black"):
        return BLACK
    if word in ("w", "white"):
        return WHITE
    raise GtpError(f"invalid color {text!r}")


def color_name(color: int) -> str:
    return "black" if color == BLACK else "white"


def parse_vertex(text: str, x_size: int, y_size: int) -> int:
    """Move index (``y * x_size + x``, rows from the top; pass = ``x_size * y_size``) of a GTP
    vertex; GtpError for anything that is not a point of this board or "pass"."""
    if text.lower() == "pass":
        return x_size * y_size
    match = _VERTEX.fullmatch(text)
    if match is None:
        raise GtpError(f"invalid vertex {text!r}")
    x = GTP_COLUMNS.index(match.group(1).upper())
    row = int(match.group(2))
    if x >= x_size or not 1 <= row <= y_size:
        raise GtpError(f"vertex {text} is off the {x_size}x{y_size} board")
    return (y_size - row) * x_size + x


def format_vertex(move: int, x_size: int, y_size: int) -> str:
    return move_to_gtp(move, x_size, y_size)


def parse_int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise GtpError(f"{what} must be an integer, got {text!r}") from None


def parse_float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise GtpError(f"{what} must be a number, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise GtpError(f"{what} must be finite, got {text!r}")
    return value
