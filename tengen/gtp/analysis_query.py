"""Queries of KataGo's JSON analysis engine protocol (docs/Analysis_Engine.md), parsed and
validated: the game (`moves`, `initialStones`, `rules`, `komi`, board sizes), the turns to analyse,
the per-query settings and root masks. `parse_query` turns one JSON object into the tasks of
tengen.gtp.analysis_engine, or raises QueryError naming the field; settings tengen reads but
cannot honour become warnings.
"""
from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tengen.go.board import BLACK, WHITE, Board
from tengen.go.rules import IllegalMoveError, Rules, parse_rules
from tengen.gtp.protocol import GtpError, format_vertex, parse_vertex

MIN_SIZE, MAX_SIZE = 7, 19  # the rules engine's board sides (rectangles included)
MAX_KOMI = 150.0
MAX_VISITS = 100_000  # bounds a tree's memory; larger maxVisits are capped with a warning
DEFAULT_PV_LEN = 15  # KataGo's analysisPVLen: moves after the first
PERSPECTIVES = ("BLACK", "WHITE", "SIDETOMOVE")
ACTIONS = ("query_version", "query_models", "clear_cache", "terminate", "terminate_all")

# Query fields this engine reads; others get an "unused field" warning.
KNOWN_FIELDS = {
    "id", "moves", "initialStones", "initialPlayer", "rules", "komi", "whiteHandicapBonus",
    "boardXSize", "boardYSize", "analyzeTurns", "maxVisits", "rootPolicyTemperature",
    "rootFpuReductionMax", "analysisPVLen", "includeOwnership", "includeOwnershipStdev",
    "includeMovesOwnership", "includeMovesOwnershipStdev", "includePolicy", "includePVVisits",
    "avoidMoves", "allowMoves", "overrideSettings", "reportDuringSearchEvery",
    "firstReportDuringSearchAfter", "priority", "priorities",
}
# overrideSettings keys tengen honours.
SUPPORTED_SETTINGS = {"reportAnalysisWinratesAs", "maxVisits", "maxPlayouts", "maxTime"}

MOVE_PAIRS = 'Must be an array of pairs of the form: ["b" or "w", GTP board vertex]'


class QueryError(Exception):
    """A query that cannot be answered: KataGo's ``{"id", "field", "error"}``."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name
        self.message = message


# ----------------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class KataRules:
    """A KataGo rule set (its kata-get-rules fields)."""

    ko: str = "POSITIONAL"  # SIMPLE, POSITIONAL, SITUATIONAL, SPIGHT
    scoring: str = "AREA"  # AREA, TERRITORY
    tax: str = "NONE"  # NONE, SEKI, ALL
    suicide: bool = True
    button: bool = False
    white_handicap_bonus: str = "0"  # 0, N, N-1


_NAMED: dict[str, KataRules] = {}
for _names, _rules in [
    (("tromptaylor", "tt"), KataRules()),
    (("chinese", "cn"), KataRules("SIMPLE", suicide=False, white_handicap_bonus="N")),
    (("chineseogs", "chinesekgs"), KataRules("POSITIONAL", suicide=False, white_handicap_bonus="N")),
    (("japanese", "jp", "korean", "kr"), KataRules("SIMPLE", "TERRITORY", "SEKI", suicide=False)),
    (("stonescoring", "ancientarea"), KataRules("SIMPLE", "AREA", "ALL", suicide=False)),
    (("ancientterritory",), KataRules("SIMPLE", "TERRITORY", "ALL", suicide=False)),
    (("aga", "bga", "french"), KataRules("SITUATIONAL", suicide=False, white_handicap_bonus="N-1")),
    (("agabutton",), KataRules("SITUATIONAL", suicide=False, button=True, white_handicap_bonus="N-1")),
    (("newzealand", "nz"), KataRules("SITUATIONAL", suicide=True)),
]:
    for _name in _names:
        _NAMED[_name] = _rules

_LEGACY = re.compile(r"ko(SIMPLE|POSITIONAL|SITUATIONAL|SPIGHT)score(AREA|TERRITORY)"
                     r"(?:tax(NONE|SEKI|ALL))?sui([01])(?:button([01]))?")
_WHB = {"0": "0", "n": "N", "n-1": "N-1"}


def _json_rules(fields: dict[str, Any]) -> tuple[KataRules, float | None]:
    """KataGo's JSON rules object (ValueError for a bad one); its komi, when it has one."""
    ko, scoring, tax, suicide, button, whb, komi = "POSITIONAL", "AREA", "NONE", True, False, "0", None
    for key, value in fields.items():
        text = value.upper() if isinstance(value, str) else None
        if key == "ko" and text in ("SIMPLE", "POSITIONAL", "SITUATIONAL", "SPIGHT"):
            ko = text
        elif key == "scoring" and text in ("AREA", "TERRITORY"):
            scoring = text
        elif key == "tax" and text in ("NONE", "SEKI", "ALL"):
            tax = text
        elif key in ("suicide", "multiStoneSuicideLegal") and isinstance(value, bool):
            suicide = value
        elif key == "hasButton" and isinstance(value, bool):
            button = value
        elif key == "whiteHandicapBonus" and isinstance(value, str) and value.lower() in _WHB:
            whb = _WHB[value.lower()]
        elif key == "friendlyPassOk" and isinstance(value, bool):
            pass  # passing is always fine under area scoring
        elif key == "komi" and isinstance(value, (int, float)) and not isinstance(value, bool):
            komi = float(value)
        else:
            raise ValueError(f"bad rules field {key!r}: {value!r}")
    return KataRules(ko, scoring, tax, suicide, button, whb), komi


def parse_kata_rules(value: Any) -> tuple[KataRules | Rules, float | None]:
    """A query's `rules` (a KataGo shorthand, KataGo's legacy koXscoreY... string, a JSON object,
    or one of tengen's own rules strings) as KataGo rules (or tengen Rules for tengen's own
    names) and the komi the object sets; ValueError for what none of these parse."""
    if isinstance(value, dict):
        return _json_rules(value)
    if not isinstance(value, str):
        raise TypeError("rules must be a string or an object")
    key = re.sub(r"[\s_\-]+", "", value.strip().lower())
    if key in _NAMED:
        return _NAMED[key], None
    legacy = _LEGACY.fullmatch(value.strip())
    if legacy:
        ko, scoring, tax, sui, button = legacy.groups()
        return KataRules(ko, scoring, tax or "NONE", sui == "1", button == "1"), None
    return parse_rules(value), None  # tengen's names and ko=...,suicide=... form; ValueError


def tengen_rules(rules: KataRules) -> tuple[Rules, list[str]]:
    """The rules tengen plays for KataGo's, and what that approximation leaves out."""
    notes: list[str] = []
    if rules == _NAMED["tromptaylor"]:
        return Rules(ko="positional", suicide=True, scoring="area"), notes
    ko = rules.ko.lower()
    if ko == "spight":
        ko = "simple"
        notes.append("Spight ko is played as simple ko")
    if rules.scoring == "TERRITORY":
        notes.append("territory scoring is played as area scoring (scores can differ by a point, "
                     "and in seki)")
    if rules.tax != "NONE":
        notes.append(f"tax {rules.tax} is not modelled")
    if rules.button:
        notes.append("the button is not modelled")
    return Rules(ko=ko, suicide=rules.suicide, scoring="katago"), notes


def default_komi(rules: KataRules | Rules) -> float:
    """KataGo's komi when a query gives none: 6.5 with territory scoring, 7 with a button, else 7.5."""
    if isinstance(rules, KataRules) and rules.scoring == "TERRITORY":
        return 6.5
    if isinstance(rules, KataRules) and rules.button:
        return 7.0
    return 7.5


def handicap_stones(black: list[int], white: list[int]) -> int:
    """Handicap stones among the setup stones, as KataGo counts them: black stones when there are
    two or more and no white ones."""
    return len(black) if len(black) >= 2 and not white else 0


# --------------------------------------------------------------------------------- parsing


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def parse_player(text: Any) -> int | None:
    if isinstance(text, str):
        word = text.strip().lower()
        if word in ("b", "black"):
            return BLACK
        if word in ("w", "white"):
            return WHITE
    return None


_XY = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def parse_location(text: Any, x_size: int, y_size: int) -> int | None:
    """A move index for a GTP vertex, "pass" or KataGo's "(x,y)" (x from the left, y from the
    top); None when it is not a point of this board."""
    if not isinstance(text, str):
        return None
    match = _XY.fullmatch(text.strip())
    if match:
        x, y = int(match.group(1)), int(match.group(2))
        return y * x_size + x if x < x_size and y < y_size else None
    try:
        return parse_vertex(text.strip(), x_size, y_size)
    except GtpError:
        return None


def _moves(query: dict[str, Any], name: str, x_size: int, y_size: int, allow_pass: bool) -> list[tuple[int, int]]:
    value = query[name]
    if not isinstance(value, list):
        raise QueryError(name, MOVE_PAIRS)
    out = []
    for pair in value:
        if not isinstance(pair, list) or len(pair) != 2 or not all(isinstance(p, str) for p in pair):
            raise QueryError(name, MOVE_PAIRS)
        color = parse_player(pair[0])
        if color is None:
            raise QueryError(name, f"Could not parse player: {pair[0]}")
        move = parse_location(pair[1], x_size, y_size)
        if move is None or (not allow_pass and move == x_size * y_size):
            raise QueryError(name, f"Could not parse board location: {pair[1]}")
        out.append((color, move))
    return out


def _bool(query: dict[str, Any], name: str, default: bool = False) -> bool:
    if name not in query:
        return default
    if not isinstance(query[name], bool):
        raise QueryError(name, "Must be a boolean")
    return query[name]


def _int(query: dict[str, Any], name: str, low: int, high: int, message: str) -> int | None:
    if name not in query:
        return None
    value = query[name]
    if not is_int(value) or not low <= value <= high:
        raise QueryError(name, message)
    return value


def _float(query: dict[str, Any], name: str, low: float, high: float, message: str) -> float | None:
    if name not in query:
        return None
    value = query[name]
    if not _is_number(value) or not low <= value <= high:
        raise QueryError(name, message)
    return float(value)


@dataclass
class Settings:
    """How one query's turns are searched and reported."""

    visits: int
    perspective: str
    max_time: float | None = None
    pv_len: int = DEFAULT_PV_LEN
    include_ownership: bool = False
    include_moves_ownership: bool = False
    include_policy: bool = False
    include_pv_visits: bool = False
    report_every: float | None = None
    first_report_after: float | None = None


@dataclass(eq=False)
class Task:
    """One turn of one query."""

    id: str
    turn: int
    priority: int
    seq: int
    board: Board
    previous: list[Board]
    settings: Settings
    allowed: np.ndarray | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    state: str = "queued"  # queued, running, done
    terminated: bool = False

    def __lt__(self, other: "Task") -> bool:  # higher priority first, then the earlier
        return (-self.priority, self.seq) < (-other.priority, other.seq)


def _settings_overrides(query: dict[str, Any], settings: Settings, warn: Callable[[str, str], None]) -> None:
    if "overrideSettings" not in query:
        return
    overrides = query["overrideSettings"]
    if not isinstance(overrides, dict):
        raise QueryError("overrideSettings", "Must be an object")
    ignored = sorted(k for k in overrides if k not in SUPPORTED_SETTINGS)
    if ignored:
        warn("overrideSettings", "Unknown config params (or ones tengen does not support, ignored): "
             + ",".join(ignored))
    if "reportAnalysisWinratesAs" in overrides:
        value = str(overrides["reportAnalysisWinratesAs"]).upper()
        if value not in PERSPECTIVES:
            raise QueryError("overrideSettings", "Could not set settings: reportAnalysisWinratesAs must be "
                             "BLACK, WHITE or SIDETOMOVE")
        settings.perspective = value
    for key in ("maxVisits", "maxPlayouts"):
        if key in overrides:
            value = overrides[key]
            if not is_int(value) or value < 1:
                raise QueryError("overrideSettings", f"Could not set settings: {key} must be a positive integer")
            settings.visits = value if key == "maxVisits" else min(settings.visits, value)
    if "maxTime" in overrides:
        value = overrides["maxTime"]
        if not _is_number(value) or value <= 0:
            raise QueryError("overrideSettings", "Could not set settings: maxTime must be a positive number")
        settings.max_time = float(value)


def _root_masks(query: dict[str, Any], x_size: int, y_size: int,
                warn: Callable[[str, str], None]) -> dict[int, np.ndarray]:
    """allowMoves / avoidMoves as the root moves each player may search (pass always may)."""
    allow, avoid = "allowMoves" in query, "avoidMoves" in query
    if not allow and not avoid:
        return {}
    if allow and avoid:
        raise QueryError("allowMoves", "Cannot specify both allowMoves and avoidMoves")
    name = "allowMoves" if allow else "avoidMoves"
    entries = query[name]
    shape = "Must be a list of dicts with subfields 'player', 'moves', 'untilDepth'"
    if not isinstance(entries, list):
        raise QueryError(name, shape)
    if allow and len(entries) > 1:
        raise QueryError(name, "Currently allowMoves only allows one entry")
    area = x_size * y_size
    masks: dict[int, np.ndarray] = {}
    deeper = False
    for entry in entries:
        if not isinstance(entry, dict) or not {"player", "moves", "untilDepth"} <= entry.keys():
            raise QueryError(name, shape)
        color = parse_player(entry["player"])
        if color is None:
            raise QueryError(name, 'Must be "b" or "w"')
        if not isinstance(entry["moves"], list):
            raise QueryError(name, "Must be an array of GTP board vertices")
        moves = []
        for text in entry["moves"]:
            move = parse_location(text, x_size, y_size)
            if move is None:
                raise QueryError(name, f"Could not parse board location: {text}")
            moves.append(move)
        depth = entry["untilDepth"]
        if not is_int(depth) or not 1 <= depth <= 1_000_000_000:
            raise QueryError(name, "Must be a positive integer")
        deeper |= depth > 1
        mask = masks.setdefault(color, np.full(area + 1, not allow, dtype=bool))
        mask[moves] = allow
    if deeper:
        warn(name, "tengen restricts the moves at the root only (untilDepth beyond 1 is not applied deeper)")
    if any(not mask[area] for mask in masks.values()):
        warn(name, "tengen cannot forbid passing; pass stays allowed")
    return masks


@dataclass
class ParsedQuery:
    tasks: list[Task]
    warnings: list[tuple[str, str]]


def parse_query(query: dict[str, Any], *, default_visits: int, perspective: str,
                seq: Callable[[], int], warnings: list[tuple[str, str]] | None = None) -> ParsedQuery:
    """The tasks of an analysis query, in turn order, and its warnings (field, message; also
    appended to `warnings` as they are found, so they are known when a QueryError follows);
    QueryError for a query that cannot be answered. `seq` numbers the tasks."""
    qid: str = query["id"]
    if warnings is None:
        warnings = []

    def warn(field_name: str, message: str) -> None:
        warnings.append((field_name, message))

    for name in query:
        if name not in KNOWN_FIELDS and name != "action":
            warn(name, "Unexpected or unused field")
    size_error = f"Must provide an integer from {MIN_SIZE} to {MAX_SIZE}"
    for name in ("boardXSize", "boardYSize"):
        if name not in query:
            raise QueryError(name, size_error)
    x_size = _int(query, "boardXSize", MIN_SIZE, MAX_SIZE, size_error)
    y_size = _int(query, "boardYSize", MIN_SIZE, MAX_SIZE, size_error)
    assert x_size is not None and y_size is not None
    area = x_size * y_size

    setup = _moves(query, "initialStones", x_size, y_size, False) if "initialStones" in query else []
    if "moves" not in query:
        raise QueryError("moves", "Must specify an array of [player,location] pairs")
    moves = _moves(query, "moves", x_size, y_size, True)
    initial_player = None
    if "initialPlayer" in query:
        initial_player = parse_player(query["initialPlayer"])
        if initial_player is None:
            raise QueryError("initialPlayer", 'Must be "b" or "w"')

    if "analyzeTurns" in query:
        turns = query["analyzeTurns"]
        if not isinstance(turns, list) or not all(is_int(t) for t in turns):
            raise QueryError("analyzeTurns", "Must specify an array of integers indicating turns to analyze")
        for turn in turns:
            if not 0 <= turn <= len(moves):
                raise QueryError("analyzeTurns", f"Invalid turn number: {turn}")
    else:
        turns = [len(moves)]
    priorities: dict[int, int] = {}
    if "priorities" in query:
        values = query["priorities"]
        if not isinstance(values, list) or not all(is_int(p) for p in values):
            raise QueryError("priorities", "Must specify an array of integers indicating priorities")
        if "analyzeTurns" not in query:
            raise QueryError("priorities", "Can only specify when also specifying analyzeTurns")
        if len(values) != len(turns):
            raise QueryError("priorities", "Must be of matching length to analyzeTurns")
        priorities = dict(zip(turns, values))

    if "rules" not in query:
        raise QueryError("rules", 'Must specify rules string, such as "chinese" or "tromp-taylor", '
                         "or a JSON object with detailed rules parameters.")
    try:
        kata, rules_komi = parse_kata_rules(query["rules"])
    except TypeError:
        raise QueryError("rules", 'Must specify rules string, such as "chinese" or "tromp-taylor", '
                         "or a JSON object with detailed rules parameters.") from None
    except ValueError:
        raise QueryError("rules", f"Could not parse rules: {json.dumps(query['rules'])}") from None
    if isinstance(kata, KataRules):
        rules, notes = tengen_rules(kata)
        whb = kata.white_handicap_bonus
        if notes:
            shown = query["rules"] if isinstance(query["rules"], str) else json.dumps(query["rules"])
            warn("rules", f"Rules {shown} not supported by tengen, using {rules.to_string()} instead: "
                 + "; ".join(notes))
    else:
        rules, whb = kata, "0"

    komi = rules_komi if rules_komi is not None else default_komi(kata)
    komi_error = f"Must be a integer or half-integer from {-MAX_KOMI} to {MAX_KOMI}"
    if "komi" in query:
        komi = _float(query, "komi", -MAX_KOMI, MAX_KOMI, komi_error)  # type: ignore[assignment]
        if not (komi * 2).is_integer():
            raise QueryError("komi", komi_error)
    if "whiteHandicapBonus" in query:
        value = query["whiteHandicapBonus"]
        if not isinstance(value, str):
            raise QueryError("whiteHandicapBonus", "Must be a string")
        if value.lower() not in _WHB:
            raise QueryError("whiteHandicapBonus", f"Unknown white handicap bonus rule: {value}")
        whb = _WHB[value.lower()]

    settings = Settings(visits=default_visits, perspective=perspective)
    _settings_overrides(query, settings, warn)
    max_visits = _int(query, "maxVisits", 1, 1 << 50, "Must be an integer from 1 to 2^50")
    if max_visits is not None:
        settings.visits = max_visits
    if settings.visits > MAX_VISITS:
        warn("maxVisits", f"{settings.visits} visits capped at {MAX_VISITS}")
        settings.visits = MAX_VISITS
    pv_len = _int(query, "analysisPVLen", 1, 1000, "Must be an integer from 1 to 1000")
    if pv_len is not None:
        settings.pv_len = pv_len
    for name, low, high, message in (("rootFpuReductionMax", 0.0, 2.0, "Must be a number from 0.0 to 2.0"),
                                     ("rootPolicyTemperature", 0.01, 100.0, "Must be a number from 0.01 to 100.0")):
        if _float(query, name, low, high, message) is not None:
            warn(name, "not supported by tengen, ignored")
    settings.include_moves_ownership = _bool(query, "includeMovesOwnership")
    settings.include_ownership = _bool(query, "includeOwnership")
    settings.include_policy = _bool(query, "includePolicy")
    settings.include_pv_visits = _bool(query, "includePVVisits")
    for name in ("includeOwnershipStdev", "includeMovesOwnershipStdev"):
        if _bool(query, name):
            warn(name, "ownership standard deviations are not supported by tengen, ignored")
    every_error = "Must be number of seconds from 0.001 to 1000000.0"
    settings.report_every = _float(query, "reportDuringSearchEvery", 0.001, 1e6, every_error)
    settings.first_report_after = _float(query, "firstReportDuringSearchAfter", 0.001, 1e6, every_error)
    if settings.first_report_after is not None and settings.report_every is None:
        settings.report_every = settings.first_report_after
    priority = 0
    if "priority" in query:
        if "priorities" in query:
            raise QueryError("priority", "Cannot specify both priority and priorities")
        priority = _int(query, "priority", -(2**62), 2**62, "Must be a number between -2^62 and 2^62")  # type: ignore[assignment]
    masks = _root_masks(query, x_size, y_size, warn)

    # The game: setup stones, then the moves; a move by the player not to move is played as is.
    black = [m for c, m in setup if c == BLACK]
    white = [m for c, m in setup if c == WHITE]
    handicap = handicap_stones(black, white)
    if whb == "N":
        komi += handicap
    elif whb == "N-1":
        komi += max(0, handicap - 1)
    if abs(komi) > area:
        raise QueryError("komi", f"komi {komi:g} is outside what a {x_size}x{y_size} board allows (+-{area})")
    try:
        start = Board(x_size, y_size, rules, komi)
        if setup:
            start.place_stones(black=black, white=white)
    except ValueError as error:
        raise QueryError("initialStones", str(error)) from None
    if initial_player is None:
        initial_player = moves[0][0] if moves else (WHITE if handicap else BLACK)
    start.to_move = initial_player
    boards = [start]
    for number, (color, move) in enumerate(moves):
        board = boards[-1].copy()
        if board.to_move != color:
            board.to_move = color
        try:
            board.play(move)
        except IllegalMoveError as error:
            raise QueryError("moves", f"Illegal move {number}: {format_vertex(move, x_size, y_size)} "
                             f"({error.reason})") from None
        boards.append(board)

    tasks = []
    for turn in sorted(set(turns)):
        board = boards[turn]
        mask = masks.get(board.to_move)
        # Copies: each worker thread reads and changes only its own boards.
        tasks.append(Task(id=qid, turn=turn, priority=priorities.get(turn, priority), seq=seq(),
                          board=board.copy(), previous=[b.copy() for b in boards[max(0, turn - 2):turn]],
                          settings=settings,
                          allowed=mask.copy() if mask is not None else None))
    return ParsedQuery(tasks, warnings)


# ---------------------------------------------------------------------------------- answers
