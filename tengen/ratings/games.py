"""Games to watch: the self-play and gating games of each model version, read from a games dir.

The games dir is a data dir as the services write it (`tengen run`'s, or the volumes compose and
Kubernetes mount at /data):

- `sgf/v<N>/<game id>.sgf`: self-play's sampled games of version N (services.selfplay);
- `gating/matches/<candidate>.jsonl`: each gating match, one line per game with its moves
  (tengen.loop.ledger: MatchFile, MatchGameResult), and `gating/decisions.jsonl`,
  which says which candidate became which version;
- `strength/sgf/v<N>/v<N>-l<level>-<time>-<game>.sgf`: the strength service's games of version N
  against GNU Go at that level (tengen.strength.measure, named by its match id and game number).

Version N's gating games are those of the matches it defended (opponent_version N) and the match
that promoted it. Everything a request names (version, game id, candidate, game index) is checked
before it touches the file system, and a file is only read when it resolves to a regular file
inside the games dir (no `..`, no symbolic link out of it).
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

from tengen.go.board import BLACK, WHITE
from tengen.go.rules import parse_rules
from tengen.go.sgf import SgfError, SgfGame, read_game, write_game
from tengen.infra.files import read_lines
from tengen.loop.ids import id_problem
from tengen.loop.layout import DataDir
from tengen.loop.ledger import END_RESIGN, MatchFile, MatchGameResult, check_candidate_name
from tengen.ratings.records import InvalidRequest, RatingsError

log = logging.getLogger(__name__)

MAX_SGF_BYTES = 4 * 1024 * 1024  # a 19x19 self-play game with comments is ~30 KB
MAX_HEADER_BYTES = 64 * 1024  # the first line of a match file
MAX_VERSION = 10**12
_VERSION_DIR = re.compile(r"v(\d{1,12})")
_STRENGTH_GAME = re.compile(r"v(\d{1,12})-l(\d{1,2})-.+-(\d{3,6})")  # match id v<N>-l<level>-<time>, game


class GameNotFound(RatingsError):
    """A game, version or match the games dir does not hold (HTTP 404)."""


class GameUnreadable(RuntimeError):
    """A game file on disk that cannot be read or replayed (HTTP 500, with the reason)."""


def check_version(text: str) -> int:
    """`v12` or `12` -> 12; InvalidRequest otherwise."""
    match = re.fullmatch(r"v?(\d{1,12})", text)
    if not match:
        raise InvalidRequest(f"bad version {text!r}: expected v<number>, e.g. v3")
    return int(match.group(1))


def check_game_id(text: str) -> str:
    """A game id as the loop names games (tengen.loop.ids: no path separator, dot first or control
    character can reach the file system); InvalidRequest otherwise."""
    if problem := id_problem(text):
        raise InvalidRequest(f"bad game id: {problem}")
    return text


def check_candidate(text: str) -> str:
    try:
        return check_candidate_name(text)
    except ValueError as error:
        raise InvalidRequest(str(error)) from None


def check_index(text: str) -> int:
    if not re.fullmatch(r"\d{1,6}", text):
        raise InvalidRequest(f"bad game index {text!r}: expected a number, e.g. 0")
    return int(text)


@dataclass(frozen=True)
class SelfplayEntry:
    version: int
    game_id: str
    modified: datetime
    size: int


@dataclass(frozen=True)
class StrengthEntry:
    """A game of version `version` against GNU Go at `level`, as the strength service wrote it."""

    version: int
    level: int
    name: str  # the file's name without .sgf
    number: int  # the game's number in its match
    modified: datetime


class VersionGames(NamedTuple):
    """How many games of each kind one version has."""

    selfplay: int
    gating: int  # matches
    strength: int


@dataclass(frozen=True)
class GatingGame:
    index: int
    black: str  # the player names shown for this game
    white: str
    result: MatchGameResult

    @property
    def watchable(self) -> bool:
        return bool(self.result.move_list) or self.result.moves == 0


@dataclass(frozen=True)
class GatingMatch:
    candidate: str
    opponent_version: int
    promoted_version: int | None  # the version the candidate became, when it passed
    decided: bool
    started: float | None
    games: list[GatingGame]

    def score(self) -> tuple[int, int, int]:
        """The candidate's wins, losses and draws."""
        sides = [g.result.winner_side() for g in self.games]
        return sides.count(0), sides.count(1), sides.count(None)


def sgf_result(result: MatchGameResult) -> str:
    """SGF's RE of a match game: B+R, W+3.5, 0 (a draw)."""
    if result.winner == "draw":
        return "0"
    if result.score is None or result.end == END_RESIGN:
        return f"{result.winner}+R"
    return f"{result.winner}+{abs(result.score):g}"


class GameLibrary:
    """Read-only access to the games under `root` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.layout = DataDir(self.root)

    # -- paths ------------------------------------------------------------------------------------
    def _inside(self, path: Path) -> Path | None:
        """`path` resolved, when it is a regular file inside the games dir; else None."""
        try:
            resolved = path.resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        if not resolved.is_relative_to(self.root) or not resolved.is_file():
            return None
        return resolved

    def _relative(self, path: Path) -> str:
        """`path` as error messages name it: relative to the games dir."""
        return path.relative_to(self.root).as_posix()

    def _selfplay_dir(self, version: int) -> Path:
        return self.layout.selfplay_sgf_version(version)

    def _match_path(self, candidate: str) -> Path:
        return self.layout.match(candidate)

    def _sgf_files(self, directory: Path) -> list[tuple[str, os.stat_result]]:
        """(name without .sgf, stat) of the regular SGF files directly in `directory` whose name is
        a safe id; none when the directory is missing or a symbolic link out of the games dir."""
        if not directory.resolve().is_relative_to(self.root):
            return []
        found = []
        try:
            with os.scandir(directory) as listing:
                for entry in listing:
                    if not entry.name.endswith(".sgf") or id_problem(entry.name[:-4]):
                        continue
                    try:
                        if entry.is_file(follow_symlinks=False):
                            found.append((entry.name[:-4], entry.stat(follow_symlinks=False)))
                    except OSError:
                        continue
        except (FileNotFoundError, NotADirectoryError):
            return []
        return found

    def _sgf_bytes(self, directory: Path, name: str, what: str) -> bytes:
        """The bytes of `directory`/`name`.sgf (GameNotFound naming `what` when it is not there)."""
        check_game_id(name)
        path = self._inside(directory / f"{name}.sgf")
        if path is None:
            raise GameNotFound(f"no {what} {name!r} (looked in {self._relative(directory)}/ of the games dir)")
        size = path.stat().st_size
        if size > MAX_SGF_BYTES:
            raise GameUnreadable(f"{self._relative(path)} is {size} bytes, over {MAX_SGF_BYTES}")
        return path.read_bytes()

    def _sgf_game(self, directory: Path, name: str, what: str) -> SgfGame:
        data = self._sgf_bytes(directory, name, what)
        try:
            return read_game(data)
        except SgfError as error:
            raise GameUnreadable(f"{self._relative(directory)}/{name}.sgf: {error}") from None

    # -- self-play --------------------------------------------------------------------------------
    def selfplay_games(self, version: int, limit: int = 30) -> tuple[int, list[SelfplayEntry]]:
        """How many SGFs version N has, and the newest `limit` of them."""
        entries = [SelfplayEntry(version, name, datetime.fromtimestamp(stat.st_mtime, UTC), stat.st_size)
                   for name, stat in self._sgf_files(self._selfplay_dir(version))]
        entries.sort(key=lambda e: (e.modified, e.game_id), reverse=True)
        return len(entries), entries[:limit]

    def selfplay_sgf(self, version: int, game_id: str) -> bytes:
        """The SGF bytes of one self-play game."""
        return self._sgf_bytes(self._selfplay_dir(version), game_id, f"self-play game of version {version}")

    def selfplay_game(self, version: int, game_id: str) -> SgfGame:
        return self._sgf_game(self._selfplay_dir(version), game_id, f"self-play game of version {version}")

    # -- against GNU Go ---------------------------------------------------------------------------
    def strength_games(self, version: int) -> list[StrengthEntry]:
        """Version N's games against GNU Go, by level, then match and game number."""
        entries = []
        for name, stat in self._sgf_files(self.layout.strength_sgf_version(version)):
            found = _STRENGTH_GAME.fullmatch(name)
            if found and int(found.group(1)) == version:
                entries.append(StrengthEntry(version, int(found.group(2)), name, int(found.group(3)),
                                             datetime.fromtimestamp(stat.st_mtime, UTC)))
        return sorted(entries, key=lambda e: (e.level, e.name))

    def strength_sgf(self, version: int, name: str) -> bytes:
        return self._sgf_bytes(self.layout.strength_sgf_version(version), name,
                               f"game of version {version} against GNU Go")

    def strength_game(self, version: int, name: str) -> SgfGame:
        return self._sgf_game(self.layout.strength_sgf_version(version), name,
                              f"game of version {version} against GNU Go")

    # -- gating -----------------------------------------------------------------------------------
    def _decisions(self) -> dict[str, dict]:
        return {d["candidate"]: d for d in read_lines(self.layout.decisions)
                if isinstance(d.get("candidate"), str)}

    def _headers(self) -> list[tuple[str, dict]]:
        """(candidate, header) of every match file, read from its first line only."""
        directory = self.layout.matches
        found = []
        try:
            names = sorted(os.listdir(directory))
        except (FileNotFoundError, NotADirectoryError):
            return []
        for name in names:
            candidate = name[:-len(".jsonl")]
            if not name.endswith(".jsonl") or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}", candidate):
                continue
            path = self._inside(directory / name)
            if path is None:
                continue
            try:
                with open(path, "rb") as f:
                    first = f.readline(MAX_HEADER_BYTES)
                header = json.loads(first).get("header")
            except (OSError, ValueError, AttributeError):
                continue
            if isinstance(header, dict) and isinstance(header.get("opponent_version"), int):
                found.append((candidate, header))
        return found

    def _match(self, candidate: str, header: dict, decision: dict | None) -> GatingMatch:
        match = MatchFile(self.root, candidate)
        opponent = int(header["opponent_version"])
        promoted = decision.get("promoted_version") if decision and decision.get("promoted") else None
        promoted = promoted if isinstance(promoted, int) else None
        names = {0: f"v{promoted} ({candidate})" if promoted is not None else candidate, 1: f"v{opponent}"}
        games = [GatingGame(r.index, names[r.black_side], names[1 - r.black_side], r)
                 for r in sorted(match.results.values(), key=lambda r: r.index)]
        started = header.get("started")
        return GatingMatch(candidate, opponent, promoted, decision is not None,
                           float(started) if isinstance(started, (int, float)) else None, games)

    def gating_matches(self, version: int, limit: int = 10) -> list[GatingMatch]:
        """The newest `limit` matches version N played in: as the defender, or as the candidate
        that became version N."""
        decisions = self._decisions()
        chosen = []
        for candidate, header in self._headers():
            decision = decisions.get(candidate)
            became = decision.get("promoted_version") if decision and decision.get("promoted") else None
            if header["opponent_version"] == version or became == version:
                chosen.append((candidate, header, decision))
        chosen.sort(key=lambda c: (c[1].get("started") or 0, c[0]), reverse=True)
        return [self._match(c, h, d) for c, h, d in chosen[:limit]]

    def gating_game(self, candidate: str, index: int) -> tuple[GatingMatch, GatingGame]:
        check_candidate(candidate)
        if self._inside(self._match_path(candidate)) is None:
            raise GameNotFound(f"no gating match of candidate {candidate!r} (looked for "
                               f"{self._relative(self._match_path(candidate))} in the games dir)")
        headers = dict(self._headers())
        if candidate not in headers:
            raise GameUnreadable(f"{self._relative(self._match_path(candidate))} has no readable header")
        match = self._match(candidate, headers[candidate], self._decisions().get(candidate))
        for game in match.games:
            if game.index == index:
                if not game.watchable:
                    raise GameNotFound(f"game {index} of {candidate} was played before gating kept the moves "
                                       "of its games: only its result is known")
                return match, game
        raise GameNotFound(f"the match of {candidate} has no finished game {index} "
                           f"(games: {', '.join(str(g.index) for g in match.games) or 'none yet'})")

    def gating_sgf_game(self, candidate: str, index: int) -> SgfGame:
        match, game = self.gating_game(candidate, index)
        r = game.result
        try:
            rules = parse_rules(r.rules)
        except ValueError as error:
            raise GameUnreadable(f"game {index} of {candidate}: rules {r.rules!r}: {error}") from None
        colours = (BLACK, WHITE)
        return SgfGame(
            x_size=r.board_size, y_size=r.board_size, komi=r.komi, rules=rules,
            moves=[(colours[i % 2], m) for i, m in enumerate(r.move_list)],
            player_black=game.black, player_white=game.white, result=sgf_result(r),
            comment=f"gating game {index}: candidate {candidate} against v{match.opponent_version}; "
                    f"ended by {r.end}",
        )

    def gating_sgf(self, candidate: str, index: int) -> bytes:
        return write_game(self.gating_sgf_game(candidate, index))

    # -- versions ---------------------------------------------------------------------------------
    def versions(self) -> dict[int, VersionGames]:
        """Every version with games: its self-play SGFs, gating matches and games against GNU Go."""
        counts: dict[int, list[int]] = {}
        for directory, kind in ((self.layout.selfplay_sgf, 0), (self.layout.strength_sgf, 2)):
            try:
                with os.scandir(directory) as listing:
                    found = [(int(m.group(1)), e) for e in listing if (m := _VERSION_DIR.fullmatch(e.name))]
            except (FileNotFoundError, NotADirectoryError):
                continue
            for version, entry in found:
                if entry.is_dir(follow_symlinks=False):
                    total = self.selfplay_games(version, limit=0)[0] if kind == 0 else len(self.strength_games(version))
                    if total:
                        counts.setdefault(version, [0, 0, 0])[kind] += total
        decisions = self._decisions()
        for candidate, header in self._headers():
            involved = {header["opponent_version"]}
            decision = decisions.get(candidate)
            if decision and decision.get("promoted") and isinstance(decision.get("promoted_version"), int):
                involved.add(decision["promoted_version"])
            for version in involved:
                counts.setdefault(version, [0, 0, 0])[1] += 1
        return {v: VersionGames(*c) for v, c in sorted(counts.items())}
