"""Gating's durable state under `<data_dir>/gating/` (tengen.loop.layout): one file per match and
the decision log, written by gating (tengen.gate) and read by the ratings pages and `tengen run`'s
status view.

- `matches/<candidate>.jsonl`: a header line (candidate, its path, the opponent version, the
  candidate's version in Triton), then one line per finished game (MatchGameResult.to_dict, with
  its moves, which the ratings service's /games pages show), then
  a `{"reported": ...}` line once every game is in the ratings store. A crash mid-match keeps the
  games already played; the match resumes from them.
- `decisions.jsonl`: one line per decided candidate (DECISION_FIELDS at least); `tengen run`'s
  status view reads the last line. A candidate with a line here is never played or promoted again.

Every line is written whole with one write, then fsynced (and the directory too when the file is
new). A crash can only leave a torn last line: readers skip a line that is not valid JSON, and the
next append starts on a fresh line.
"""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

from tengen.infra.files import append_line, read_lines
from tengen.loop.layout import DataDir

log = logging.getLogger("services.gating")

# How a match game ended.
END_RESIGN = "resign"
END_TWO_PASSES = "two passes"
END_PASS_ALIVE = "pass-alive"
END_MOVE_CAP = "move cap"


@dataclass(frozen=True)
class MatchGameResult:
    """One finished game. `black_side` is 0 or 1 (the side, i.e. evaluator, that played Black)."""

    index: int
    black_side: int
    winner: str  # "B", "W" or "draw"
    score: float | None  # Black minus White by the rules engine; None after a resignation
    end: str
    moves: int
    board_size: int
    rules: str
    komi: float
    # The moves in order (move indices, the pass = board_size**2), so the game can be replayed and
    # watched (the ratings page, as SGF); empty in match files written before they were kept.
    move_list: tuple[int, ...] = ()

    def winner_side(self) -> int | None:
        """0 or 1, or None for a draw."""
        if self.winner == "draw":
            return None
        return self.black_side if self.winner == "B" else 1 - self.black_side

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "black_side": self.black_side, "winner": self.winner, "score": self.score,
                "end": self.end, "moves": self.moves, "board_size": self.board_size, "rules": self.rules,
                "komi": self.komi, "move_list": list(self.move_list)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> "MatchGameResult":
        score = raw["score"]
        result = cls(index=int(raw["index"]), black_side=int(raw["black_side"]), winner=str(raw["winner"]),
                     score=None if score is None else float(score), end=str(raw["end"]), moves=int(raw["moves"]),
                     board_size=int(raw["board_size"]), rules=str(raw["rules"]), komi=float(raw["komi"]),
                     move_list=_move_list(raw.get("move_list", ()), int(raw["board_size"])))
        if result.winner not in ("B", "W", "draw") or result.black_side not in (0, 1) or result.index < 0:
            raise ValueError(f"bad match game result {raw!r}")
        if result.move_list and len(result.move_list) != result.moves:
            raise ValueError(f"match game {result.index}: {len(result.move_list)} moves listed, {result.moves} counted")
        return result


def _move_list(raw: Any, board_size: int) -> tuple[int, ...]:
    """The recorded moves as move indices of a board_size board (0 .. board_size**2, the pass)."""
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"move_list must be a list, got {type(raw).__name__}")
    moves = tuple(raw)
    if any(isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= board_size * board_size for m in moves):
        raise ValueError(f"move_list holds a move that is not a point of a {board_size}x{board_size} board or a pass")
    return moves


DECISION_FIELDS = ("candidate", "candidate_path", "opponent_version", "wins", "losses", "draws", "games",
                   "promoted", "promoted_version", "reason", "time")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")


def check_candidate_name(name: str) -> str:
    """A candidate name fit for a file name and a ratings player, or ValueError."""
    if not _NAME_RE.match(name):
        raise ValueError(f"bad candidate name {name!r}: 1-200 letters, digits, '_', '.', '-'")
    return name


class DecisionLog:
    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = DataDir(data_dir).decisions

    def find(self, candidate: str) -> dict[str, Any] | None:
        """The recorded decision about `candidate` (the last one), or None."""
        found = None
        for entry in read_lines(self.path):
            if entry.get("candidate") == candidate:
                found = entry
        return found

    def record(self, decision: dict[str, Any]) -> None:
        missing = [k for k in DECISION_FIELDS if k not in decision]
        if missing:
            raise ValueError(f"decision lacks {missing}")
        append_line(self.path, decision)

    def last(self) -> dict[str, Any] | None:
        entries = list(read_lines(self.path))
        return entries[-1] if entries else None


def in_index_order(results: Mapping[int, MatchGameResult]) -> list[MatchGameResult]:
    """The games of `results` (by index) from index 0 up to the first one still missing: what a
    sequential test counts, so games that end fast are not counted first."""
    out: list[MatchGameResult] = []
    while len(out) in results:
        out.append(results[len(out)])
    return out


class MatchFile:
    """The durable record of one candidate's match (see the module docstring)."""

    def __init__(self, data_dir: str | os.PathLike[str], candidate: str) -> None:
        self.candidate = check_candidate_name(candidate)
        self.path = DataDir(data_dir).match(candidate)
        self.header: dict[str, Any] | None = None
        self.results: dict[int, MatchGameResult] = {}
        self.reported = False
        self._load()

    def _load(self) -> None:
        for entry in read_lines(self.path):
            if "header" in entry:
                self.header = entry["header"]
            elif "game" in entry:
                try:
                    result = MatchGameResult.from_dict(entry["game"])
                except (KeyError, TypeError, ValueError) as err:
                    log.warning("gating: skipping a bad game line in %s: %s", self.path, err)
                    continue
                self.results[result.index] = result
            elif entry.get("reported"):
                self.reported = True
        if self.header is None and self.path.exists():
            log.warning("gating: %s has no header; starting the match again", self.path)
            self.results.clear()

    def start(self, header: dict[str, Any]) -> None:
        """Begin the match afresh (a previous file of this candidate is replaced)."""
        if self.path.exists():
            self.path.unlink()
        self.header = dict(header)
        self.results = {}
        self.reported = False
        append_line(self.path, {"header": self.header})

    def add(self, result: MatchGameResult) -> None:
        if self.header is None:
            raise RuntimeError("add before start")
        append_line(self.path, {"game": result.to_dict()})
        self.results[result.index] = result

    def mark_reported(self) -> None:
        append_line(self.path, {"reported": True})
        self.reported = True

    def in_order(self) -> list[MatchGameResult]:
        """The finished games from index 0 up to the first one still missing."""
        return in_index_order(self.results)

    @staticmethod
    def unreported(data_dir: str | os.PathLike[str]) -> list[str]:
        """Candidates whose match files are not marked reported."""
        directory = DataDir(data_dir).matches
        if not directory.is_dir():
            return []
        names = []
        for path in sorted(directory.glob("*.jsonl")):
            if not any(e.get("reported") for e in read_lines(path)):
                names.append(path.stem)
        return names
