"""Go games in SGF (FF[4]) through sgfmill: read, replay with the rules engine, write.

Parsing and value syntax are sgfmill's (`sgf_grammar` for the tree, `sgf_properties.Presenter`
for property values); this module only maps SGF properties to tengen's types. sgfmill's
`Sgf_game` knows square boards only, so the lower-level parts are used directly: they handle a
rectangular ``SZ[w:h]`` when given the larger side as the point-decoding size.

Coordinates: sgfmill's points are ``(row, col)`` with row 0 at the BOTTOM; tengen's move index is
``y * x_size + x`` with y = 0 at the TOP (the SGF letters themselves are "column, row from the
top"). The pass is ``x_size * y_size``. Only the main line (first variation) is read. Setup stones
(AB/AW/AE) are accepted before the first move, not after.

RU: tengen's names and explicit form (`parse_rules`), common SGF names ("Chinese", "Japanese",
"AGA", "NZ", ...) and KataGo's ``koPOSITIONALscoreAREA...sui1`` form. Rules tengen cannot play
exactly (territory scoring, AGA's pass stones, Ing's ko rules) map to the nearest area-scoring rule
set with a logged warning. A missing RU means ``katago``; a missing KM means 0 (SGF's default).
"""
from __future__ import annotations

import importlib.metadata
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from sgfmill import sgf_grammar, sgf_properties

from tengen.go.board import BLACK, WHITE, Board
from tengen.go.rules import KATAGO, IllegalMoveError, Rules, parse_rules

log = logging.getLogger(__name__)

MIN_SIZE, MAX_SIZE = 7, 19
GTP_COLUMNS = "ABCDEFGHJKLMNOPQRST"  # GTP skips I
_COLOR_LETTER = {BLACK: "B", WHITE: "W"}
_LETTER_COLOR = {"B": BLACK, "W": WHITE}


class SgfError(ValueError):
    """An SGF file tengen cannot use; the message names the property or the move number."""


class SgfMoveError(SgfError):
    """A move the rules forbid (`reason`: occupied, suicide, ko, superko), found on replay."""

    def __init__(self, number: int, color: int, vertex: str, reason: str) -> None:
        self.number = number
        self.color = color
        self.vertex = vertex
        self.reason = reason
        super().__init__(f"move {number} ({_COLOR_LETTER[color]} {vertex}): illegal ({reason})")


@dataclass
class SgfGame:
    """One game's main line. Moves are ``(color, move index)``, the pass ``x_size * y_size``.

    `comments`, when not empty, has one entry per move (None where a move has no comment);
    `comment` is the root node's. `handicap` is HA (0 when absent); the handicap stones
    themselves are in `black_stones` (AB), as most programs write them.
    """

    x_size: int = 19
    y_size: int = 19
    komi: float = 7.5
    rules: Rules = KATAGO
    handicap: int = 0
    black_stones: list[int] = field(default_factory=list)
    white_stones: list[int] = field(default_factory=list)
    moves: list[tuple[int, int]] = field(default_factory=list)
    comments: list[str | None] = field(default_factory=list)
    player_black: str | None = None
    player_white: str | None = None
    result: str | None = None
    comment: str | None = None
    first_player: int | None = None  # PL; None: the first move's colour, else by handicap

    @property
    def pass_move(self) -> int:
        return self.x_size * self.y_size

    def starting_player(self) -> int:
        """Who moves first: PL, else the first move's colour, else White after handicap stones."""
        if self.first_player is not None:
            return self.first_player
        if self.moves:
            return self.moves[0][0]
        return WHITE if self.handicap >= 2 and self.black_stones else BLACK


def move_to_gtp(move: int, x_size: int, y_size: int) -> str:
    """GTP vertex ("D4", "pass") of a move index; GTP rows count from the bottom."""
    if move == x_size * y_size:
        return "pass"
    y, x = divmod(move, x_size)
    return f"{GTP_COLUMNS[x]}{y_size - y}"


def search_comment(
    visits: int | None = None,
    winrate: float | None = None,
    score: float | None = None,
    **extra: float | int | str,
) -> str:
    """A per-move comment carrying search data, ``visits=800 winrate=0.5321 score=+1.25``.

    `winrate` and `score` are from Black's point of view by convention of the caller; any extra
    ``key=value`` pairs follow in the order given.
    """
    parts = []
    if visits is not None:
        parts.append(f"visits={int(visits)}")
    if winrate is not None:
        parts.append(f"winrate={winrate:.4f}")
    if score is not None:
        parts.append(f"score={score:+.2f}")
    for key, value in extra.items():
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)


# --- rules from RU ---------------------------------------------------------------------------

# Common RU spellings, lower-cased with spaces and underscores as dashes. Value: (rules, why the
# mapping is approximate, or "" when exact).
_RU_ALIASES: dict[str, tuple[Rules, str]] = {}
for _names, _rules, _why in [
    (("chinese", "cn", "zh", "china"), parse_rules("chinese"), ""),
    (("tromp-taylor", "tromptaylor", "tt"), parse_rules("tromp-taylor"), ""),
    (
        ("aga", "bga", "french"),
        Rules(ko="situational", suicide=False, scoring="katago"),
        "pass stones are not modelled; area scoring gives the same result",
    ),
    (
        ("nz", "new-zealand"),
        Rules(ko="situational", suicide=True, scoring="katago"),
        "dead stones are judged by pass-alive area scoring",
    ),
    (
        ("japanese", "jp", "japan", "korean", "kr", "korea"),
        Rules(ko="simple", suicide=False, scoring="katago"),
        "territory scoring is not supported; scored by area (results can differ by a point "
        "or by seki rules)",
    ),
    (
        ("ing", "goe"),
        Rules(ko="positional", suicide=True, scoring="katago"),
        "Ing's ko rules are approximated by positional superko",
    ),
]:
    for _name in _names:
        _RU_ALIASES[_name] = (_rules, _why)

# KataGo writes its rules as e.g. "koPOSITIONALscoreAREAtaxNONEsui1button0".
_KATAGO_RU = re.compile(
    r"ko(?P<ko>SIMPLE|POSITIONAL|SITUATIONAL|SPIGHT)score(?P<score>AREA|TERRITORY)"
    r"(?:tax(?P<tax>NONE|SEKI|ALL))?sui(?P<sui>[01])(?P<rest>.*)"
)


def rules_from_ru(text: str) -> Rules:
    """Rules for an SGF RU value; ValueError for one tengen does not know."""
    try:
        return parse_rules(text)
    except ValueError:
        pass
    key = re.sub(r"[\s_]+", "-", text.strip().lower())
    if key in _RU_ALIASES:
        rules, why = _RU_ALIASES[key]
        if why:
            log.warning("RU %r played as %s: %s", text, rules.to_string(), why)
        return rules
    match = _KATAGO_RU.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            "unknown rules; expected tromp-taylor, chinese, katago, "
            "ko=simple|positional|situational,suicide=yes|no[,scoring=area|katago], "
            "a common name (Chinese, Japanese, AGA, NZ, ...) or KataGo's koXscoreY...suiN form"
        )
    ko = {"SPIGHT": "simple"}.get(match["ko"], match["ko"].lower())
    rules = Rules(ko=ko, suicide=match["sui"] == "1", scoring="katago")
    approximations = []
    if match["ko"] == "SPIGHT":
        approximations.append("Spight ko played as simple ko")
    if match["score"] == "TERRITORY":
        approximations.append("territory scoring played as area scoring")
    if match["tax"] not in (None, "NONE"):
        approximations.append(f"tax {match['tax']} ignored")
    if match["rest"] not in ("", "button0"):
        approximations.append(f"{match['rest']!r} ignored")
    if approximations:
        log.warning("RU %r played as %s: %s", text, rules.to_string(), "; ".join(approximations))
    return rules


# --- reading ---------------------------------------------------------------------------------


def _show(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _parse_size(raw: bytes) -> tuple[int, int]:
    try:
        sides = [int(part) for part in raw.split(b":")]
    except ValueError:
        raise SgfError(f"bad SZ value '{_show(raw)}': expected N or W:H") from None
    if len(sides) == 1:
        sides *= 2
    if len(sides) != 2:
        raise SgfError(f"bad SZ value '{_show(raw)}': expected N or W:H")
    if not all(MIN_SIZE <= side <= MAX_SIZE for side in sides):
        raise SgfError(f"bad SZ value '{_show(raw)}': board sides must be {MIN_SIZE}..{MAX_SIZE}")
    return sides[0], sides[1]


class _Reader:
    """Interprets one coarse SGF tree's properties with sgfmill's presenter."""

    def __init__(self, x_size: int, y_size: int, encoding: str) -> None:
        self.x_size, self.y_size = x_size, y_size
        # Points are decoded against the larger side; see the module docstring.
        self.decode_size = max(x_size, y_size)
        try:
            self.presenter = sgf_properties.Presenter(self.decode_size, encoding)
        except ValueError:
            raise SgfError(f"bad CA value '{encoding}': unknown character set") from None

    def get(self, props: dict[str, list[bytes]], ident: str, where: str = ""):
        raw = props[ident]
        try:
            return self.presenter.interpret(ident, raw)
        except ValueError:
            shown = "][".join(_show(v) for v in raw)
            raise SgfError(f"{where}bad {ident} value '{shown}'") from None

    def move_index(self, point: tuple[int, int] | None, ident: str, where: str) -> int:
        if point is None:
            return self.x_size * self.y_size
        row, col = point
        x, y = col, self.decode_size - 1 - row  # sgfmill's row 0 is the bottom line
        if x >= self.x_size or y >= self.y_size:
            raise SgfError(f"{where}bad {ident} point: off the {self.x_size}x{self.y_size} board")
        return y * self.x_size + x


def read_game(data: bytes | str, rules: Rules | None = None) -> SgfGame:
    """Parse one SGF game (the first in the data, its main line).

    `rules` overrides RU (which is then not interpreted). Raises SgfError naming the property
    (``bad SZ value 'abc'``) or the move number for anything malformed; legality of the moves is
    checked by `replay` / `iter_boards`.
    """
    if isinstance(data, str):
        data, encoding_override = data.encode("utf-8"), "UTF-8"
    else:
        encoding_override = None
    try:
        tree = sgf_grammar.parse_sgf_game(bytes(data))
    except ValueError as exc:
        raise SgfError(f"not a readable SGF game: {exc}") from None
    root = tree.sequence[0]
    if "GM" in root and root["GM"][0].strip() != b"1":
        raise SgfError(f"bad GM value '{_show(root['GM'][0])}': not a game of Go")
    x_size, y_size = _parse_size(root["SZ"][0]) if "SZ" in root else (19, 19)
    if encoding_override is not None:
        encoding = encoding_override
    else:
        encoding = _show(root["CA"][0]).strip() if "CA" in root else "ISO-8859-1"
    reader = _Reader(x_size, y_size, encoding)

    game = SgfGame(x_size=x_size, y_size=y_size, komi=0.0)
    if "KM" in root:
        game.komi = float(reader.get(root, "KM"))
        # The engine's limits: scores are whole or half points, and a komi beyond the board's
        # area cannot be meant.
        if not (game.komi * 2).is_integer() or abs(game.komi) > x_size * y_size:
            raise SgfError(
                f"bad KM value '{_show(root['KM'][0])}': komi must be a multiple of 0.5 "
                f"within +-{x_size * y_size}"
            )
    if "HA" in root:
        game.handicap = int(reader.get(root, "HA"))
        if not 0 <= game.handicap <= x_size * y_size:
            raise SgfError(f"bad HA value '{game.handicap}': out of range")
    if rules is not None:
        game.rules = rules
    elif "RU" in root:
        ru = reader.get(root, "RU")
        try:
            game.rules = rules_from_ru(ru)
        except ValueError as exc:
            raise SgfError(f"bad RU value '{ru}': {exc}") from None
    if "PL" in root:
        game.first_player = _LETTER_COLOR[reader.get(root, "PL").upper()]
    for ident, attr in (("PB", "player_black"), ("PW", "player_white"), ("RE", "result")):
        if ident in root:
            setattr(game, attr, reader.get(root, ident))
    if "C" in root:
        game.comment = reader.get(root, "C")

    black: set[int] = set()
    white: set[int] = set()
    for node_number, props in enumerate(_main_line(tree)):
        number = len(game.moves) + 1
        if any(ident in props for ident in ("AB", "AW", "AE")):
            if game.moves:
                raise SgfError(
                    f"node {node_number}: setup stones (AB/AW/AE) after move {len(game.moves)} "
                    "are not supported"
                )
            _read_setup(reader, props, black, white, f"node {node_number}: " if node_number else "")
        if "B" in props and "W" in props:
            raise SgfError(f"move {number}: node has both B and W")
        for letter, color in _LETTER_COLOR.items():
            if letter in props:
                where = f"move {number}: "
                point = reader.get(props, letter, where)
                game.moves.append((color, reader.move_index(point, letter, where)))
                comment = reader.get(props, "C", where) if "C" in props else None
                game.comments.append(comment)
    if not any(c is not None for c in game.comments):
        game.comments = []
    game.black_stones, game.white_stones = sorted(black), sorted(white)
    return game


def _main_line(tree: sgf_grammar.Coarse_game_tree) -> Iterator[dict[str, list[bytes]]]:
    while True:
        yield from tree.sequence
        if not tree.children:
            return
        tree = tree.children[0]


def _read_setup(
    reader: _Reader, props: dict, black: set[int], white: set[int], where: str
) -> None:
    added = {}
    for ident in ("AB", "AW", "AE"):
        if ident in props:
            points = reader.get(props, ident, where)
            added[ident] = {reader.move_index(p, ident, where) for p in points}
    both = added.get("AB", set()) & added.get("AW", set())
    if both:
        vertex = move_to_gtp(min(both), reader.x_size, reader.y_size)
        raise SgfError(f"{where}bad AB/AW values: both place a stone on {vertex}")
    for point in added.get("AE", ()):
        black.discard(point)
        white.discard(point)
    for point in added.get("AB", ()):
        white.discard(point)
        black.add(point)
    for point in added.get("AW", ()):
        black.discard(point)
        white.add(point)


# --- replay ----------------------------------------------------------------------------------


def initial_board(game: SgfGame) -> Board:
    """The position before the first move: size, rules, komi, setup stones, player to move."""
    try:
        board = Board(game.x_size, game.y_size, rules=game.rules, komi=game.komi)
    except ValueError as exc:
        raise SgfError(f"bad KM value '{game.komi:g}': {exc}") from None
    if game.black_stones or game.white_stones:
        try:
            board.place_stones(black=game.black_stones, white=game.white_stones)
        except ValueError as exc:
            raise SgfError(f"bad AB/AW values: {exc}") from None
    board.to_move = game.starting_player()
    return board


def _play(board: Board, game: SgfGame, number: int, color: int, move: int) -> None:
    # SGF allows the same colour twice in a row (e.g. handicap entered as moves): follow the file.
    board.to_move = color
    try:
        board.play(move)
    except IllegalMoveError as exc:
        vertex = move_to_gtp(move, game.x_size, game.y_size)
        raise SgfMoveError(number, color, vertex, exc.reason) from None


def iter_boards(game: SgfGame) -> Iterator[Board]:
    """The initial position, then the position after each move (independent copies).

    Raises SgfMoveError at the first illegal move, after yielding the positions before it.
    """
    board = initial_board(game)
    yield board.copy()
    for number, (color, move) in enumerate(game.moves, start=1):
        _play(board, game, number, color, move)
        yield board.copy()


def replay(game: SgfGame) -> Board:
    """The final position; SgfMoveError names the first illegal move and why."""
    board = initial_board(game)
    for number, (color, move) in enumerate(game.moves, start=1):
        _play(board, game, number, color, move)
    return board


# --- writing ---------------------------------------------------------------------------------


def write_game(game: SgfGame) -> bytes:
    """SGF bytes (UTF-8) for the game: SZ, KM, RU (tengen's explicit rules string), HA, AB/AW,
    PB/PW, RE, the moves, and a C comment on each move that has one."""
    if not (MIN_SIZE <= game.x_size <= MAX_SIZE and MIN_SIZE <= game.y_size <= MAX_SIZE):
        raise ValueError(f"board {game.x_size}x{game.y_size} outside {MIN_SIZE}..{MAX_SIZE}")
    if game.comments and len(game.comments) != len(game.moves):
        raise ValueError(
            f"{len(game.comments)} comments for {len(game.moves)} moves; give one per move or none"
        )
    if not math.isfinite(game.komi):
        raise ValueError(f"komi must be finite, got {game.komi}")
    size = max(game.x_size, game.y_size)
    presenter = sgf_properties.Presenter(size, "UTF-8")

    def point(move: int, what: str) -> tuple[int, int] | None:
        if not 0 <= move <= game.pass_move:
            raise ValueError(f"{what}: move index {move} off the {game.x_size}x{game.y_size} board")
        if move == game.pass_move:
            return None
        y, x = divmod(move, game.x_size)
        return size - 1 - y, x  # sgfmill's (row, col), row 0 at the bottom

    root: dict[str, list[bytes]] = {
        "FF": [b"4"],
        "GM": [b"1"],
        "CA": [b"UTF-8"],
        "AP": presenter.serialise("AP", ("tengen", importlib.metadata.version("tengen"))),
        "SZ": [
            f"{game.x_size}".encode()
            if game.x_size == game.y_size
            else f"{game.x_size}:{game.y_size}".encode()
        ],
        "KM": presenter.serialise("KM", game.komi),
        "RU": presenter.serialise("RU", game.rules.to_string()),
    }
    if game.handicap:
        root["HA"] = presenter.serialise("HA", game.handicap)
    for ident, stones in (("AB", game.black_stones), ("AW", game.white_stones)):
        if stones:
            if game.pass_move in stones:
                raise ValueError(f"{ident}: a setup stone cannot be a pass")
            root[ident] = presenter.serialise(ident, [point(m, ident) for m in stones])
    if game.first_player is not None:
        root["PL"] = presenter.serialise("PL", _COLOR_LETTER[game.first_player].lower())
    for ident, value in (
        ("PB", game.player_black),
        ("PW", game.player_white),
        ("RE", game.result),
        ("C", game.comment),
    ):
        if value is not None:
            root[ident] = presenter.serialise(ident, value)

    tree = sgf_grammar.Coarse_game_tree()
    tree.sequence.append(root)
    for number, (color, move) in enumerate(game.moves, start=1):
        if color not in _COLOR_LETTER:
            raise ValueError(f"move {number}: colour must be BLACK or WHITE, got {color}")
        letter = _COLOR_LETTER[color]
        node = {letter: presenter.serialise(letter, point(move, f"move {number}"))}
        comment = game.comments[number - 1] if game.comments else None
        if comment:
            node["C"] = presenter.serialise("C", comment)
        tree.sequence.append(node)
    return sgf_grammar.serialise_game_tree(tree)
