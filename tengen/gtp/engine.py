"""The GTP engine behind `tengen gtp`: game state, every command, analysis streaming.

The engine reads command lines and writes responses (GTP version 2, see tengen.gtp.protocol); a
failing command answers ``? message`` and changes nothing, and no input (malformed lines, unknown
commands, illegal moves, bad sizes, internal errors) ends the loop: only `quit` or the end of the
input does. Moves are chosen by an Analyzer (tengen.gtp.analysis) and scored by the rules engine.

Game state is the setup stones plus the move list; `boards` holds the position after each move
(for undo and the net's move-history features). Changing komi or rules replays the moves under
the new settings, refused if a move becomes illegal.

lz-analyze / kata-analyze answer ``=`` at once, then stream ``info ...`` lines from a background
thread every interval until the next input line (a command, or an empty line), which ends the
response with the usual empty line before the next command is handled.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from tengen.go.board import BLACK, EMPTY, WHITE, Board
from tengen.go.passalive import final_score, pass_alive_map, result_string
from tengen.go.rules import KATAGO, IllegalMoveError, Rules
from tengen.go.sgf import GTP_COLUMNS, rules_from_ru
from tengen.gtp.analysis import Analysis, Analyzer, choose_move, format_kata, format_lz
from tengen.gtp.protocol import (
    GtpError,
    color_name,
    format_response,
    format_vertex,
    parse_color,
    parse_command,
    parse_float,
    parse_int,
    parse_vertex,
)
from tengen.gtp.timecontrol import TimeManager

log = logging.getLogger(__name__)

MIN_SIZE, MAX_SIZE = 7, 19
DEAD_OWNERSHIP = 0.5  # a chain whose mean ownership favours the opponent by this much is dead
RESIGN_STREAK = 3  # consecutive genmoves under the resign threshold before resigning
DEFAULT_MAX_MOVES = 10  # candidates shown by analysis commands


@dataclass
class AnalyzeOptions:
    color: int
    interval: float  # seconds; 0: a single report when the analysis is done
    max_moves: int
    ownership: bool


def handicap_points(n: int, x_size: int, y_size: int) -> list[int]:
    """GTP's fixed handicap placement (star points), as move indices; GtpError when n does not
    fit the board (2..9 on odd sizes from 9x9 up, 2..4 otherwise)."""
    square_odd = x_size == y_size and x_size % 2 == 1 and x_size >= 9
    most = 9 if square_odd else 4
    if not 2 <= n <= most:
        raise GtpError(f"invalid number of handicap stones {n}: 2..{most} on this board")
    lo_x, lo_y = (2 if x_size < 13 else 3), (2 if y_size < 13 else 3)
    hi_x, hi_y = x_size - 1 - lo_x, y_size - 1 - lo_y
    mid_x, mid_y = x_size // 2, y_size // 2

    def at(x: int, y: int) -> int:  # x from the left, y from the BOTTOM as GTP counts rows
        return (y_size - 1 - y) * x_size + x

    corners = [at(hi_x, hi_y), at(lo_x, lo_y), at(hi_x, lo_y), at(lo_x, hi_y)]
    sides = [at(lo_x, mid_y), at(hi_x, mid_y), at(mid_x, hi_y), at(mid_x, lo_y)]
    center = at(mid_x, mid_y)
    if n <= 4:
        return corners[:n]
    if n == 5:
        return corners + [center]
    if n == 6:
        return corners + sides[:2]
    if n == 7:
        return corners + sides[:2] + [center]
    if n == 8:
        return corners + sides
    return corners + sides + [center]


def parse_analyze_args(args: list[str], to_move: int) -> AnalyzeOptions:
    """``[color] [interval] [key value ...]`` as lz-analyze / kata-analyze take them; interval in
    centiseconds. Keys: interval, minmoves, maxmoves, ownership (true/false); the boolean keys
    KataGo accepts for extra fields (ownershipStdev, pvVisits, movesOwnership, rootInfo) are
    accepted and ignored."""
    color, interval, max_moves, min_moves, ownership = to_move, 0.0, None, 0, False
    i = 0
    if i < len(args) and args[i].lower() in ("b", "w", "black", "white"):
        color = parse_color(args[i])
        i += 1
    if i < len(args) and args[i].lstrip("-").isdigit():
        interval = parse_int(args[i], "interval") / 100.0
        i += 1
    while i < len(args):
        key = args[i]
        if i + 1 >= len(args):
            raise GtpError(f"analyze option {key!r} lacks a value")
        value = args[i + 1]
        i += 2
        if key == "interval":
            interval = parse_int(value, "interval") / 100.0
        elif key == "maxmoves":
            max_moves = parse_int(value, "maxmoves")
        elif key == "minmoves":
            min_moves = parse_int(value, "minmoves")
        elif key in ("ownership", "ownershipStdev", "pvVisits", "movesOwnership", "rootInfo"):
            if value.lower() not in ("true", "false"):
                raise GtpError(f"{key} must be true or false, got {value!r}")
            if key == "ownership":
                ownership = value.lower() == "true"
        else:
            raise GtpError(f"unknown analyze option {key!r}")
    if interval < 0:
        raise GtpError("interval must not be negative")
    shown = max_moves if max_moves is not None else max(DEFAULT_MAX_MOVES, min_moves)
    if shown < 1:
        raise GtpError("maxmoves must be at least 1")
    return AnalyzeOptions(color, interval, shown, ownership)


def rules_to_json(rules: Rules) -> str:
    """kata-get-rules' JSON, with tengen's own rules string under "tengen"."""
    return json.dumps(
        {
            "ko": rules.ko.upper(),
            "scoring": "AREA",
            "suicide": rules.suicide,
            "tax": "NONE",
            "hasButton": False,
            "whiteHandicapBonus": "0",
            "tengen": rules.to_string(),
        },
        separators=(",", ":"),
    )


def _rule_field(rules: Rules, key: str, value: object) -> Rules:
    """`rules` with one KataGo rules field set (kata-set-rule, or one key of a JSON rules
    object); fields tengen cannot play (territory scoring, taxes, the button) are refused."""
    text = str(value).lower() if not isinstance(value, bool) else ("true" if value else "false")
    if key == "ko":
        if text == "spight":
            text = "simple"
        if text not in ("simple", "positional", "situational"):
            raise GtpError(f"unknown ko rule {value!r}")
        return Rules(ko=text, suicide=rules.suicide, scoring=rules.scoring)
    if key in ("suicide", "multiStoneSuicideLegal"):
        if text not in ("true", "false", "1", "0"):
            raise GtpError(f"suicide must be true or false, got {value!r}")
        return Rules(ko=rules.ko, suicide=text in ("true", "1"), scoring=rules.scoring)
    if key == "scoring":
        if text == "area":
            return rules  # tengen's scorings are both area scoring
        if text == "katago":
            return Rules(ko=rules.ko, suicide=rules.suicide, scoring="katago")
        if text == "tromp-taylor":
            return Rules(ko=rules.ko, suicide=rules.suicide, scoring="area")
        raise GtpError(f"scoring {value!r} is not supported: tengen plays area scoring only")
    if key == "tax":
        if text != "none":
            raise GtpError(f"tax {value!r} is not supported")
        return rules
    if key == "hasButton":
        if text not in ("false", "0"):
            raise GtpError("button go is not supported")
        return rules
    if key in ("whiteHandicapBonus", "friendlyPassOk"):
        return rules  # handicap compensation is the controller's komi; passes are always fine
    raise GtpError(f"unknown rules field {key!r}")


def parse_rules_argument(text: str, current: Rules) -> Rules:
    """kata-set-rules' argument: a JSON object of KataGo rule fields, or a rules name (tengen's
    names and explicit form, common names, KataGo's koXscoreY... form)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as error:
            raise GtpError(f"rules JSON does not parse: {error}") from None
        if not isinstance(fields, dict):
            raise GtpError("rules JSON must be an object")
        rules = current
        for key, value in fields.items():
            rules = _rule_field(rules, key, value)
        return rules
    try:
        return rules_from_ru(text)
    except ValueError as error:
        raise GtpError(f"unknown rules {text!r}: {error}") from None


class GtpEngine:
    """GTP state and commands. `visits`: the genmove budget handed to the analyzer (1 for the
    raw policy); `analysis_visits`: the budget of lz-analyze / kata-analyze."""

    def __init__(
        self,
        analyzer: Analyzer,
        *,
        visits: int = 1,
        analysis_visits: int = 1 + DEFAULT_MAX_MOVES,
        size: int = 19,
        komi: float = 7.5,
        rules: Rules = KATAGO,
        name: str = "tengen",
        version: str = "",
        resign_threshold: float = 0.0,
        out: TextIO | None = None,
    ) -> None:
        if visits < 1 or analysis_visits < 1:
            raise ValueError("visits must be at least 1")
        self.analyzer = analyzer
        self.visits = visits
        self.analysis_visits = analysis_visits
        self.name = name
        self.version = version
        self.resign_threshold = resign_threshold
        self.out = out if out is not None else sys.stdout
        self.time = TimeManager()
        self.x_size = self.y_size = size
        self.komi = komi
        self.rules = rules
        self.setup_black: list[int] = []
        self.setup_white: list[int] = []
        self.moves: list[tuple[int, int]] = []
        self.boards: list[Board] = [self._start_board(size, size, rules, komi, [], [])]
        self._low_streak = {BLACK: 0, WHITE: 0}
        self._write_lock = threading.Lock()
        self._analysis: tuple[threading.Thread, threading.Event] | None = None
        self.commands: dict[str, Callable[[list[str]], str]] = {
            "protocol_version": lambda args: "2",
            "name": lambda args: self.name,
            "version": lambda args: self.version,
            "known_command": self.cmd_known_command,
            "list_commands": lambda args: "\n".join(sorted(self.all_commands())),
            "quit": lambda args: "",
            "boardsize": self.cmd_boardsize,
            "rectangular_boardsize": self.cmd_rectangular_boardsize,
            "clear_board": self.cmd_clear_board,
            "komi": self.cmd_komi,
            "get_komi": lambda args: f"{self.komi:g}",
            "play": self.cmd_play,
            "genmove": self.cmd_genmove,
            "undo": self.cmd_undo,
            "showboard": self.cmd_showboard,
            "final_score": self.cmd_final_score,
            "final_status_list": self.cmd_final_status_list,
            "fixed_handicap": self.cmd_fixed_handicap,
            "place_free_handicap": self.cmd_place_free_handicap,
            "set_free_handicap": self.cmd_set_free_handicap,
            "time_settings": self.cmd_time_settings,
            "time_left": self.cmd_time_left,
            "kata-get-rules": lambda args: rules_to_json(self.rules),
            "kata-set-rules": self.cmd_kata_set_rules,
            "kata-set-rule": self.cmd_kata_set_rule,
            "stop": lambda args: "",  # any command ends a running analysis; nothing else to stop
        }
        # Commands that write their own response (streaming).
        self.streaming: dict[str, Callable[[int | None, list[str]], None]] = {
            "lz-analyze": lambda cid, args: self.start_analysis(cid, args, kata=False),
            "kata-analyze": lambda cid, args: self.start_analysis(cid, args, kata=True),
            "lz-genmove_analyze": lambda cid, args: self.genmove_analyze(cid, args, kata=False),
            "kata-genmove_analyze": lambda cid, args: self.genmove_analyze(cid, args, kata=True),
        }

    # ------------------------------------------------------------------ loop and output

    def all_commands(self) -> list[str]:
        return list(self.commands) + list(self.streaming)

    def write(self, text: str) -> None:
        with self._write_lock:
            self.out.write(text)
            self.out.flush()

    def run(self, inp: TextIO) -> int:
        """Answer commands from `inp` until `quit` or the end of the input; returns 0."""
        for line in inp:
            if not self.execute(line):
                break
        self.stop_analysis()
        return 0

    def execute(self, line: str) -> bool:
        """Handle one input line; False after `quit`."""
        self.stop_analysis()
        command = parse_command(line)
        if command is None:
            return True  # an empty line (which also ends a running analysis)
        try:
            if command.name in self.streaming:
                self.streaming[command.name](command.id, command.args)
                return True
            handler = self.commands.get(command.name)
            if handler is None:
                raise GtpError("unknown command")
            text = handler(command.args)
        except GtpError as error:
            self.write(format_response(command.id, False, str(error)))
            return True
        except Exception as error:  # never die on a command: report it and go on
            log.exception("command %r failed", line.strip())
            self.write(format_response(command.id, False, f"internal error: {error}"))
            return True
        self.write(format_response(command.id, True, text))
        return command.name != "quit"

    # ------------------------------------------------------------------ state

    @property
    def board(self) -> Board:
        return self.boards[-1]

    @staticmethod
    def _start_board(
        x_size: int, y_size: int, rules: Rules, komi: float, black: list[int], white: list[int]
    ) -> Board:
        board = Board(x_size, y_size, rules, komi)
        if black or white:
            board.place_stones(black=black, white=white)
            board.to_move = WHITE if black and not white else BLACK
        return board

    def _rebuild(
        self,
        x_size: int,
        y_size: int,
        rules: Rules,
        komi: float,
        black: list[int],
        white: list[int],
        moves: list[tuple[int, int]],
    ) -> None:
        """Replace the game state, replaying `moves`; GtpError (state unchanged) when the
        settings are invalid or a move is illegal under them."""
        try:
            boards = [self._start_board(x_size, y_size, rules, komi, black, white)]
        except ValueError as error:
            raise GtpError(str(error)) from None
        for number, (color, move) in enumerate(moves, start=1):
            board = boards[-1].copy()
            board.to_move = color
            try:
                board.play(move)
            except IllegalMoveError as error:
                raise GtpError(
                    f"move {number} ({color_name(color)} {format_vertex(move, x_size, y_size)}) "
                    f"would be illegal ({error.reason})"
                ) from None
            boards.append(board)
        self.x_size, self.y_size, self.rules, self.komi = x_size, y_size, rules, komi
        self.setup_black, self.setup_white, self.moves, self.boards = black, white, moves, boards

    def _clear(self, x_size: int, y_size: int) -> None:
        self._rebuild(x_size, y_size, self.rules, self.komi, [], [], [])
        self._low_streak = {BLACK: 0, WHITE: 0}

    def _play(self, color: int, move: int) -> None:
        board = self.board.copy()
        board.to_move = color
        try:
            board.play(move)
        except IllegalMoveError as error:
            raise GtpError(f"illegal move ({error.reason})") from None
        self.boards.append(board)
        self.moves.append((color, move))

    def _position(self, color: int) -> Board:
        """The current position with `color` to move (a copy when that changes who moves)."""
        if self.board.to_move == color:
            return self.board
        board = self.board.copy()
        board.to_move = color
        return board

    def _vertex(self, move: int) -> str:
        return format_vertex(move, self.x_size, self.y_size)

    def _require_empty(self) -> None:
        if self.moves or self.setup_black or self.setup_white:
            raise GtpError("board not empty")

    # ------------------------------------------------------------------ commands

    def cmd_known_command(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("known_command takes one command name")
        return "true" if args[0] in self.commands or args[0] in self.streaming else "false"

    def _set_size(self, x_size: int, y_size: int) -> str:
        if not (MIN_SIZE <= x_size <= MAX_SIZE and MIN_SIZE <= y_size <= MAX_SIZE):
            raise GtpError("unacceptable size")
        self._clear(x_size, y_size)
        return ""

    def cmd_boardsize(self, args: list[str]) -> str:
        if len(args) == 1:
            size = parse_int(args[0], "board size")
            return self._set_size(size, size)
        if len(args) == 2:
            return self._set_size(parse_int(args[0], "board width"), parse_int(args[1], "board height"))
        raise GtpError("boardsize takes a size (or width and height)")

    def cmd_rectangular_boardsize(self, args: list[str]) -> str:
        if len(args) != 2:
            raise GtpError("rectangular_boardsize takes width and height")
        return self._set_size(parse_int(args[0], "board width"), parse_int(args[1], "board height"))

    def cmd_clear_board(self, args: list[str]) -> str:
        self._clear(self.x_size, self.y_size)
        return ""

    def cmd_komi(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("komi takes one number")
        komi = parse_float(args[0], "komi")
        self._rebuild(
            self.x_size, self.y_size, self.rules, komi, self.setup_black, self.setup_white, self.moves
        )
        return ""

    def cmd_play(self, args: list[str]) -> str:
        if len(args) != 2:
            raise GtpError("play takes a color and a vertex")
        color = parse_color(args[0])
        move = parse_vertex(args[1], self.x_size, self.y_size)
        self._play(color, move)
        return ""

    def _genmove(self, color: int, progress: Callable[[Analysis], None] | None = None,
                 interval: float = 0.0) -> str:
        board = self._position(color)
        budget = self.time.budget(color, int((board.stones() == EMPTY).sum()))
        deadline = time.monotonic() + budget if budget is not None else None
        analysis = self.analyzer.analyze(
            board, self.boards[:-1], self.visits, deadline=deadline, progress=progress,
            progress_interval=interval,
        )
        if self.resign_threshold > 0 and analysis.winrate < self.resign_threshold:
            self._low_streak[color] += 1
            if self._low_streak[color] >= RESIGN_STREAK:
                return "resign"
        else:
            self._low_streak[color] = 0
        move = choose_move(board, analysis)
        self._play(color, move)
        return self._vertex(move)

    def cmd_genmove(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("genmove takes a color")
        return self._genmove(parse_color(args[0]))

    def cmd_undo(self, args: list[str]) -> str:
        if not self.moves:
            raise GtpError("cannot undo")
        self.moves.pop()
        self.boards.pop()
        return ""

    def cmd_showboard(self, args: list[str]) -> str:
        board = self.board
        stones = board.stones()
        letters = "   " + " ".join(GTP_COLUMNS[: self.x_size])
        lines = [letters]
        for y in range(self.y_size):
            row = self.y_size - y
            cells = " ".join(".XO"[stones[y, x]] for x in range(self.x_size))
            lines.append(f"{row:2d} {cells} {row:d}")
        lines.append(letters)
        last = f", last {color_name(self.moves[-1][0])} {self._vertex(self.moves[-1][1])}" if self.moves else ""
        lines.append(
            f"{color_name(board.to_move)} to move, move {len(self.moves)}{last}, komi {self.komi:g}, "
            f"rules {self.rules.to_string()}"
        )
        return "\n".join(lines)

    def cmd_final_score(self, args: list[str]) -> str:
        return result_string(final_score(self.board))

    def chain_status(self) -> list[tuple[str, list[int]]]:
        """('alive' | 'dead', stones) per chain. Pass-alive chains are alive; chains inside the
        opponent's pass-alive territory are dead; others are dead when the analyzer's ownership
        averaged over the chain gives the point to the opponent by more than DEAD_OWNERSHIP."""
        board = self.board
        stones = board.stones()
        alive_map = pass_alive_map(board)
        # The net's ownership (both analyzers give the raw net's): one evaluation is enough.
        analysis = self.analyzer.analyze(board, self.boards[:-1], 1, max_moves=1, ownership=True)
        black_own = analysis.ownership if analysis.ownership is not None else np.zeros(stones.shape)
        if board.to_move == WHITE:
            black_own = -black_own
        seen = np.zeros(stones.shape, dtype=bool)
        result = []
        for y0 in range(self.y_size):
            for x0 in range(self.x_size):
                color = int(stones[y0, x0])
                if color == EMPTY or seen[y0, x0]:
                    continue
                chain, todo = [], [(y0, x0)]
                seen[y0, x0] = True
                while todo:
                    y, x = todo.pop()
                    chain.append((y, x))
                    for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
                        if 0 <= ny < self.y_size and 0 <= nx < self.x_size and not seen[ny, nx] \
                                and stones[ny, nx] == color:
                            seen[ny, nx] = True
                            todo.append((ny, nx))
                marks = [int(alive_map[p]) for p in chain]
                own = float(np.mean([black_own[p] for p in chain])) * (1 if color == BLACK else -1)
                if all(m == color for m in marks):
                    status = "alive"
                elif any(m == 3 - color for m in marks) or own < -DEAD_OWNERSHIP:
                    status = "dead"
                else:
                    status = "alive"
                result.append((status, [y * self.x_size + x for y, x in chain]))
        return result

    def cmd_final_status_list(self, args: list[str]) -> str:
        if len(args) != 1 or args[0] not in ("alive", "dead", "seki"):
            raise GtpError("final_status_list takes alive, dead or seki")
        if args[0] == "seki":
            return ""  # seki is not told apart: such stones are listed as alive
        chains = [stones for status, stones in self.chain_status() if status == args[0]]
        return "\n".join(" ".join(self._vertex(m) for m in sorted(chain)) for chain in chains)

    def _place_handicap(self, points: list[int]) -> str:
        self._rebuild(self.x_size, self.y_size, self.rules, self.komi, points, [], [])
        return " ".join(self._vertex(m) for m in points)

    def cmd_fixed_handicap(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("fixed_handicap takes a number of stones")
        self._require_empty()
        return self._place_handicap(handicap_points(parse_int(args[0], "handicap"), self.x_size, self.y_size))

    def cmd_place_free_handicap(self, args: list[str]) -> str:
        if len(args) != 1:
            raise GtpError("place_free_handicap takes a number of stones")
        self._require_empty()
        n = parse_int(args[0], "handicap")
        if not 2 <= n < self.x_size * self.y_size:
            raise GtpError(f"invalid number of handicap stones {n}")
        most = 9 if self.x_size == self.y_size and self.x_size % 2 == 1 and self.x_size >= 9 else 4
        points = handicap_points(min(n, most), self.x_size, self.y_size)
        points += spread_points(points, n - len(points), self.x_size, self.y_size)
        return self._place_handicap(points)

    def cmd_set_free_handicap(self, args: list[str]) -> str:
        self._require_empty()
        if len(args) < 2:
            raise GtpError("set_free_handicap needs at least two vertices")
        points = [parse_vertex(a, self.x_size, self.y_size) for a in args]
        if self.x_size * self.y_size in points:
            raise GtpError("a handicap stone cannot be a pass")
        if len(set(points)) != len(points):
            raise GtpError("a vertex is listed twice")
        if len(points) >= self.x_size * self.y_size:
            raise GtpError("too many handicap stones")
        self._place_handicap(points)
        return ""

    def cmd_time_settings(self, args: list[str]) -> str:
        if len(args) != 3:
            raise GtpError("time_settings takes main_time byo_yomi_time byo_yomi_stones")
        try:
            self.time.settings(
                parse_float(args[0], "main time"), parse_float(args[1], "byo-yomi time"),
                parse_int(args[2], "byo-yomi stones"),
            )
        except ValueError as error:
            raise GtpError(str(error)) from None
        return ""

    def cmd_time_left(self, args: list[str]) -> str:
        if len(args) != 3:
            raise GtpError("time_left takes color time stones")
        try:
            self.time.time_left(
                parse_color(args[0]), parse_float(args[1], "time"), parse_int(args[2], "stones")
            )
        except ValueError as error:
            raise GtpError(str(error)) from None
        return ""

    def _set_rules(self, rules: Rules) -> str:
        self._rebuild(self.x_size, self.y_size, rules, self.komi, self.setup_black, self.setup_white, self.moves)
        return ""

    def cmd_kata_set_rules(self, args: list[str]) -> str:
        if not args:
            raise GtpError("kata-set-rules takes a rules name or JSON object")
        return self._set_rules(parse_rules_argument(" ".join(args), self.rules))

    def cmd_kata_set_rule(self, args: list[str]) -> str:
        if len(args) != 2:
            raise GtpError("kata-set-rule takes a field and a value")
        return self._set_rules(_rule_field(self.rules, args[0], args[1]))

    # ------------------------------------------------------------------ analysis

    def _formatter(self, kata: bool, options: AnalyzeOptions, board: Board) -> Callable[[Analysis], None]:
        def emit(analysis: Analysis) -> None:
            analysis = dataclasses.replace(analysis, moves=analysis.moves[: options.max_moves])
            text = format_kata(analysis, board, options.ownership) if kata else format_lz(analysis, board)
            self.write(text + "\n")

        return emit

    def start_analysis(self, cid: int | None, args: list[str], kata: bool) -> None:
        options = parse_analyze_args(args, self.board.to_move)
        board = self._position(options.color)
        previous = self.boards[:-1]
        stop = threading.Event()
        emit = self._formatter(kata, options, board)

        def work() -> None:
            try:
                final = self.analyzer.analyze(
                    board, previous, self.analysis_visits, max_moves=options.max_moves,
                    ownership=options.ownership, stop=stop,
                    progress=emit if options.interval > 0 else None,
                    progress_interval=options.interval,
                )
                if options.interval <= 0:
                    emit(final)
                    return
                # Keep the GUI's display fresh until the next command ends the analysis.
                while not stop.wait(options.interval):
                    emit(final)
            except Exception:  # the thread must not die silently: log it, end the stream
                log.exception("analysis failed")

        self.write(("=" if cid is None else f"={cid}") + "\n")
        thread = threading.Thread(target=work, name="gtp-analysis", daemon=True)
        self._analysis = (thread, stop)
        thread.start()

    def stop_analysis(self) -> bool:
        """End a running analysis and its response (the empty line); True if one was running."""
        if self._analysis is None:
            return False
        thread, stop = self._analysis
        stop.set()
        thread.join()
        self._analysis = None
        self.write("\n")
        return True

    def genmove_analyze(self, cid: int | None, args: list[str], kata: bool) -> None:
        options = parse_analyze_args(args, self.board.to_move)
        emit = self._formatter(kata, options, self._position(options.color))
        # Options were checked above, so a bad request is still an ordinary "?" response.
        self.write(("=" if cid is None else f"={cid}") + "\n")
        try:
            move = self._genmove(options.color, emit if options.interval > 0 else None, options.interval)
        except Exception:  # the "=" is out: end the response without a move rather than die
            log.exception("genmove_analyze failed")
            self.write("\n")
            return
        self.write(f"play {move}\n\n")


def spread_points(taken: list[int], n: int, x_size: int, y_size: int) -> list[int]:
    """n more points, each as far as possible from the stones placed so far (farthest-point
    placement), for free handicaps beyond the star points."""
    chosen: list[int] = []
    stones = list(taken)
    for _ in range(max(0, n)):
        best, best_d = -1, -1
        for move in range(x_size * y_size):
            if move in stones:
                continue
            y, x = divmod(move, x_size)
            d = min((abs(y - s // x_size) + abs(x - s % x_size) for s in stones), default=x_size + y_size)
            if d > best_d:
                best, best_d = move, d
        chosen.append(best)
        stones.append(best)
    return chosen
