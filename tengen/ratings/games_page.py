"""HTML of the games pages: a version's games, and one game as a board with move navigation.

The board is server-side SVG (one `<circle class="stone black|white">` per stone, the last move
marked); moving through the game follows plain links (`?move=K`), and four lines of JavaScript
bind the arrow keys to them. Nothing else runs in the browser.
"""
from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from html import escape
from http import HTTPStatus
from urllib.parse import quote, unquote

import numpy as np

from tengen.go.board import BLACK, WHITE, Board
from tengen.go.sgf import GTP_COLUMNS, SgfError, SgfGame, iter_boards, move_to_gtp
from tengen.ratings.games import (
    GameLibrary,
    GameNotFound,
    GameUnreadable,
    GatingMatch,
    SelfplayEntry,
    StrengthEntry,
    VersionGames,
    check_candidate,
    check_game_id,
    check_index,
    check_version,
    sgf_result,
)
from tengen.ratings.records import InvalidRequest

log = logging.getLogger(__name__)

BOARD_PX = 540  # the grid's side (the longer one) in pixels, coordinates outside it
STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; }
td, th { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: left; }
.note { color: #666; font-size: 90%; }
nav.moves a { display: inline-block; min-width: 2.2em; text-align: center; margin: 1px; text-decoration: none;
              border: 1px solid #ccc; border-radius: 3px; font-size: 85%; }
nav.moves a.current { background: #3a6ea5; color: #fff; border-color: #3a6ea5; }
nav.step a, nav.step span { margin-right: 0.8em; font-size: 110%; }
.games a, .games span { margin-right: 0.6em; }
"""
# Prev/next by the arrow keys, first/last by Home/End: the links below the board do the work.
KEYS_JS = """<script>
document.addEventListener("keydown", function (e) {
  var a = document.getElementById({ArrowLeft: "prev", ArrowRight: "next", Home: "first", End: "last"}[e.key]);
  if (a && a.href) { window.location.href = a.href; }
});
</script>"""


def page(title: str, body: str, script: str = "") -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>
<style>{STYLE}</style></head>
<body>
<p class="note"><a href="/">ratings</a> &middot; <a href="/games">games</a></p>
{body}
{script}
</body></html>
"""


def error_page(status: int, phrase: str, message: str) -> str:
    return page(f"{status} {phrase}", f"<h1>{status} {escape(phrase)}</h1>\n<p class=\"error\">{escape(message)}</p>")


def segment(text: str) -> str:
    """One URL path segment, percent-encoded (a game id may hold any character but '/')."""
    return quote(text, safe="")


def selfplay_url(version: int, game_id: str) -> str:
    return f"/games/selfplay/v{version}/{segment(game_id)}"


def gating_url(candidate: str, index: int) -> str:
    return f"/games/gating/{segment(candidate)}/{index}"


def strength_url(version: int, name: str) -> str:
    return f"/games/strength/v{version}/{segment(name)}"


# What a new user takes for a bug (issue 38): games of a few moves that end by two passes.
PASS_NOTE = """<p class="note" id="pass-note">Why some games are so short: a random net (version 1) and the
first versions after it give the pass move real probability, and two passes in a row end a game, which
is then scored as it stands (area scoring with komi). Their games often end after 10-30 moves by two
passes; with self-play's integer komi many of them are drawn ("0"). That is the net passing, not a cut-off
game; the games grow longer as the net learns that passing early loses.</p>"""


# -- the board --------------------------------------------------------------------------------------
def star_points(x_size: int, y_size: int) -> list[tuple[int, int]]:
    """Hoshi (x, y): the 3-3 or 4-4 points, the centre of an odd board, and the sides of a large one."""
    def line_points(size: int) -> list[int]:
        if size < 9:
            return [size // 2] if size % 2 else []
        edge = 3 if size >= 13 else 2
        middle = [size // 2] if size % 2 and size >= 15 else []
        return [edge, *middle, size - 1 - edge]

    xs, ys = line_points(x_size), line_points(y_size)
    points = [(x, y) for x in xs for y in ys]
    if x_size % 2 and y_size % 2 and 9 <= min(x_size, y_size) < 15:
        points.append((x_size // 2, y_size // 2))
    return sorted(set(points))


def board_svg(stones: np.ndarray, last_move: int | None = None, label: str = "") -> str:
    """SVG of a position: `stones` is Board.stones() (rows from the top, EMPTY 0, BLACK 1, WHITE 2);
    `last_move` (a move index) is marked."""
    y_size, x_size = stones.shape
    cell = BOARD_PX // max(x_size, y_size)
    margin = int(cell * 1.2)  # room for the coordinates, clear of the edge stones
    width, height = 2 * margin + (x_size - 1) * cell, 2 * margin + (y_size - 1) * cell

    def cx(x: int) -> int:
        return margin + x * cell

    def cy(y: int) -> int:
        return margin + y * cell

    radius = cell * 0.47
    font = max(9, cell // 3)
    parts = [
        f'<svg class="board" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}">',
        f'<rect width="{width}" height="{height}" fill="#dcb35c"/>',
    ]
    for x in range(x_size):
        parts.append(f'<line x1="{cx(x)}" y1="{cy(0)}" x2="{cx(x)}" y2="{cy(y_size - 1)}" stroke="#333"/>')
        for y_text in (margin - cell * 0.62, height - margin + cell * 0.62 + font * 0.7):
            parts.append(f'<text x="{cx(x)}" y="{y_text:.0f}" text-anchor="middle" font-size="{font}" '
                         f'class="coord">{GTP_COLUMNS[x]}</text>')
    for y in range(y_size):
        parts.append(f'<line x1="{cx(0)}" y1="{cy(y)}" x2="{cx(x_size - 1)}" y2="{cy(y)}" stroke="#333"/>')
        for x_text, anchor in ((margin - cell * 0.58, "end"), (width - margin + cell * 0.58, "start")):
            parts.append(f'<text x="{x_text:.0f}" y="{cy(y) + font * 0.35:.0f}" text-anchor="{anchor}" '
                         f'font-size="{font}" class="coord">{y_size - y}</text>')
    for x, y in star_points(x_size, y_size):
        parts.append(f'<circle class="hoshi" cx="{cx(x)}" cy="{cy(y)}" r="{max(2.0, cell * 0.08):.1f}" fill="#333"/>')
    for (y, x), colour in np.ndenumerate(stones):
        if colour in (BLACK, WHITE):
            name, fill, stroke = ("black", "#111", "#000") if colour == BLACK else ("white", "#f4f4f4", "#555")
            vertex = move_to_gtp(y * x_size + x, x_size, y_size)
            parts.append(f'<circle class="stone {name}" data-vertex="{vertex}" cx="{cx(x)}" cy="{cy(y)}" '
                         f'r="{radius:.1f}" fill="{fill}" stroke="{stroke}"/>')
    if last_move is not None and 0 <= last_move < x_size * y_size:
        y, x = divmod(last_move, x_size)
        mark = "#f4f4f4" if stones[y, x] == BLACK else "#111"
        parts.append(f'<circle class="last-move" cx="{cx(x)}" cy="{cy(y)}" r="{radius * 0.4:.1f}" '
                     f'fill="none" stroke="{mark}" stroke-width="2"/>')
    parts.append("</svg>")
    return "\n".join(parts)


def position_at(game: SgfGame, move: int) -> Board:
    """The position after `move` (0 .. len(game.moves)) moves, replayed with the rules engine
    (SgfMoveError names an illegal move)."""
    if not 0 <= move <= len(game.moves):
        raise ValueError(f"move {move} outside 0..{len(game.moves)}")
    for number, board in enumerate(iter_boards(game)):
        if number == move:
            return board
    raise AssertionError("unreachable")


def captures(game: SgfGame, move: int, stones: np.ndarray) -> tuple[int, int]:
    """Stones captured by Black and by White in the first `move` moves."""
    placed = {BLACK: len(game.black_stones), WHITE: len(game.white_stones)}
    for colour, point in game.moves[:move]:
        if point != game.pass_move:
            placed[colour] += 1
    on_board = {BLACK: int((stones == BLACK).sum()), WHITE: int((stones == WHITE).sum())}
    return placed[WHITE] - on_board[WHITE], placed[BLACK] - on_board[BLACK]


def viewer_page(title: str, game: SgfGame, move: int, board: Board, url: str, sgf_url: str,
                back: tuple[str, str], facts: Sequence[str] = ()) -> str:
    """One game at `move` (0 = before the first move), with links to every other move."""
    total = len(game.moves)
    stones = board.stones()
    last = game.moves[move - 1] if move > 0 else None
    if last is not None:
        colour = "Black" if last[0] == BLACK else "White"
        played = f"move {move}: {colour} {move_to_gtp(last[1], game.x_size, game.y_size)}"
    else:
        played = "start of the game"
    black_caps, white_caps = captures(game, move, stones)
    comment = (game.comments[move - 1] if move > 0 and game.comments else None) or ""

    def step(element_id: str, text: str, target: int, enabled: bool) -> str:
        if not enabled:
            return f'<span class="disabled" id="{element_id}-off">{text}</span>'
        return f'<a id="{element_id}" rel="{element_id}" href="{url}?move={target}">{text}</a>'

    links = " ".join(
        f'<a class="current" aria-current="step" href="{url}?move={k}">{k}</a>' if k == move
        else f'<a href="{url}?move={k}">{k}</a>' for k in range(total + 1))
    info = [
        f"Black: {escape(game.player_black or '?')} &middot; White: {escape(game.player_white or '?')}",
        f"{game.x_size}x{game.y_size}, komi {game.komi:g}, rules {escape(game.rules.to_string())}, "
        f"result {escape(game.result or '?')}, {total} moves",
        *[escape(f) for f in facts],
    ]
    body = f"""<h1>{escape(title)}</h1>
<p>{'<br>'.join(info)}</p>
<p class="note"><a href="{back[0]}">{escape(back[1])}</a> &middot;
<a id="download" href="{sgf_url}" download>download SGF</a></p>
<h2 id="position">{escape(played)}</h2>
{board_svg(stones, last[1] if last else None, f"board after move {move}")}
<p id="counts">Black: {int((stones == BLACK).sum())} stones on the board, {black_caps} captured by Black &middot;
White: {int((stones == WHITE).sum())} stones on the board, {white_caps} captured by White</p>
<p class="note" id="comment">{escape(comment)}</p>
<nav class="step">{step("first", "&laquo; first", 0, move > 0)} {step("prev", "&lsaquo; previous", move - 1, move > 0)}
{step("next", "next &rsaquo;", move + 1, move < total)} {step("last", "last &raquo;", total, move < total)}
<span class="note">(arrow keys)</span></nav>
<nav class="moves" aria-label="moves">{links}</nav>"""
    return page(title, body, KEYS_JS)


# -- lists -----------------------------------------------------------------------------------------
def selfplay_rows(entries: Sequence[tuple[SelfplayEntry, SgfGame | None]]) -> str:
    rows = []
    for entry, game in entries:
        if game is None:
            what = "<td colspan=\"3\">unreadable</td>"
        else:
            what = (f"<td>{game.x_size}x{game.y_size}</td><td>{len(game.moves)}</td>"
                    f"<td>{escape(game.result or '')}</td>")
        rows.append(f'<tr><td><a href="{selfplay_url(entry.version, entry.game_id)}">{escape(entry.game_id)}</a></td>'
                    f'{what}<td>{entry.modified:%Y-%m-%d %H:%M:%S}</td>'
                    f'<td><a href="{selfplay_url(entry.version, entry.game_id)}.sgf" download>SGF</a></td></tr>')
    return "\n".join(rows)


def match_section(match: GatingMatch, version: int) -> str:
    wins, losses, draws = match.score()
    if match.promoted_version is not None:
        outcome = f"promoted to v{match.promoted_version}"
    elif match.decided:
        outcome = "rejected"
    else:
        outcome = "in progress"
    links = []
    for game in match.games:
        r = game.result
        text = f"{game.index}: {sgf_result(r)}, {r.moves} moves"
        if game.watchable:
            links.append(f'<a href="{gating_url(match.candidate, game.index)}" title="Black {escape(game.black)}, '
                         f'White {escape(game.white)}">{escape(text)}</a>')
        else:
            links.append(f'<span title="played before gating kept moves">{escape(text)}</span>')
    role = "became this version" if match.promoted_version == version else f"challenged v{match.opponent_version}"
    return (f"<h3>{escape(match.candidate)} ({role}): {outcome}, candidate {wins}-{losses}"
            f"{f'-{draws}' if draws else ''} against v{match.opponent_version}</h3>\n"
            f'<p class="games">{" ".join(links) or "no finished game yet"}</p>')


def count_games(n: int) -> str:
    return f"{n} game" if n == 1 else f"{n} games"


def strength_rows(entries: Sequence[tuple[StrengthEntry, SgfGame | None]]) -> str:
    rows = []
    for entry, game in entries:
        url = strength_url(entry.version, entry.name)
        if game is None:
            what = "<td colspan=\"3\">unreadable</td>"
        else:
            colour = "Black" if (game.player_black or "").endswith(f"-v{entry.version}") else "White"
            what = f"<td>{colour}</td><td>{len(game.moves)}</td><td>{escape(game.result or '')}</td>"
        rows.append(f'<tr><td><a href="{url}">{escape(entry.name)}</a></td>{what}'
                    f'<td>{entry.modified:%Y-%m-%d %H:%M:%S}</td><td><a href="{url}.sgf" download>SGF</a></td></tr>')
    return "\n".join(rows)


def strength_section(version: int, games: Sequence[tuple[StrengthEntry, SgfGame | None]]) -> str:
    if not games:
        return (f'<p class="empty">No games of v{version} against GNU Go (strength/sgf/v{version}/ in the games '
                "dir; the strength service measures some versions, not every one).</p>")
    parts = []
    for level in sorted({e.level for e, _ in games}):
        at_level = [(e, g) for e, g in games if e.level == level]
        parts.append(f'<h3 id="strength-l{level}">GNU Go level {level}: {count_games(len(at_level))}</h3>\n<table>\n'
                     f"<tr><th>game</th><th>v{version} played</th><th>moves</th><th>result</th>"
                     f"<th>written (UTC)</th><th></th></tr>\n{strength_rows(at_level)}\n</table>")
    return "\n".join(parts)


def version_page(version: int, selfplay_total: int, selfplay: Sequence[tuple[SelfplayEntry, SgfGame | None]],
                 matches: Sequence[GatingMatch],
                 strength: Sequence[tuple[StrengthEntry, SgfGame | None]] = ()) -> str:
    if selfplay:
        shown = (f"the newest {len(selfplay)} of {selfplay_total}" if selfplay_total > len(selfplay)
                 else f"all {selfplay_total}")
        selfplay_html = (
            f"<p class=\"note\">Sampled self-play games of v{version}: {shown}.</p>\n<table>\n"
            "<tr><th>game</th><th>board</th><th>moves</th><th>result</th><th>written (UTC)</th><th></th></tr>\n"
            f"{selfplay_rows(selfplay)}\n</table>"
        )
    else:
        selfplay_html = f"<p class=\"empty\">No self-play SGFs of v{version} (sgf/v{version}/ in the games dir).</p>"
    gating_html = (
        "\n".join(match_section(m, version) for m in matches)
        or f"<p class=\"empty\">No gating match of v{version} (gating/matches/ in the games dir).</p>"
    )
    body = f"""<h1>Games of version {version}</h1>
{PASS_NOTE}
<h2>Self-play</h2>
{selfplay_html}
<h2>Gating</h2>
{gating_html}
<h2 id="strength">Against GNU Go</h2>
<p class="note">The strength service's games of v{version} (strength/sgf/v{version}/), by GNU Go level.</p>
{strength_section(version, strength)}"""
    return page(f"tengen v{version} games", body)


def index_page(versions: dict[int, VersionGames], strength_levels: dict[int, dict[int, int]]) -> str:
    """`strength_levels`: version -> GNU Go level -> games against it."""
    rows = "\n".join(
        f'<tr><td><a href="/games/v{v}">v{v}</a></td><td>{c.selfplay}</td><td>{c.gating}</td><td>{c.strength}</td></tr>'
        for v, c in sorted(versions.items(), reverse=True)
    )
    table = (
        "<table>\n<tr><th>version</th><th>self-play SGFs</th><th>gating matches</th><th>games against GNU Go</th></tr>"
        f"\n{rows}\n</table>"
        if rows
        else '<p class="empty">No games yet.</p>'
    )
    strength = "\n".join(
        f'<tr><td><a href="/games/v{v}#strength">v{v}</a></td><td>{level}</td>'
        f'<td><a href="/games/v{v}#strength-l{level}">{count_games(count)}</a></td></tr>'
        for v, levels in sorted(strength_levels.items(), reverse=True) for level, count in sorted(levels.items())
    )
    strength_table = (
        f'<table id="strength-games">\n<tr><th>version</th><th>GNU Go level</th><th>games (SGF)</th></tr>\n'
        f"{strength}\n</table>" if strength
        else '<p class="empty">No games against GNU Go yet (strength/sgf/).</p>'
    )
    body = f"""<h1>Games</h1>
<p class="note">Self-play's sampled games (sgf/v&lt;N&gt;/), gating's matches (gating/matches/) and the strength
service's games against GNU Go (strength/sgf/v&lt;N&gt;/) of each version.</p>
{PASS_NOTE}
{table}
<h2>Against GNU Go</h2>
{strength_table}"""
    return page("tengen games", body)


# -- routes ----------------------------------------------------------------------------------------
SGF_TYPE = "application/x-go-sgf"
HTML_TYPE = "text/html; charset=utf-8"
DEFAULT_LIST = 30  # self-play games listed on a version's page
MAX_LIST = 500
Response = tuple[int, bytes, str, list[tuple[str, str]]]  # status, body, content type, headers


def _query_int(query: dict[str, list[str]], key: str, default: int, low: int, high: int) -> int:
    if key not in query:
        return default
    raw = query[key][-1]
    if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
        raise InvalidRequest(f"{key} must be a whole number from {low} to {high}, got {raw!r}")
    return int(raw)


def _download(name: str, data: bytes) -> Response:
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    disposition = f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='')}"
    return HTTPStatus.OK, data, SGF_TYPE, [("Content-Disposition", disposition)]


def _html(text: str, status: int = HTTPStatus.OK) -> Response:
    return status, text.encode(), HTML_TYPE, []


def _viewer(
    title: str, game: SgfGame, query: dict[str, list[str]], url: str, back: tuple[str, str], facts: Sequence[str] = ()
) -> Response:
    move = _query_int(query, "move", 0, 0, len(game.moves))
    try:
        board = position_at(game, move)
    except SgfError as error:  # an illegal move in the file
        raise GameUnreadable(f"{title}: {error}") from None
    return _html(viewer_page(title, game, move, board, url, f"{url}.sgf", back, facts))


def _selfplay_list(
    library: GameLibrary, version: int, limit: int
) -> tuple[int, list[tuple[SelfplayEntry, SgfGame | None]]]:
    total, entries = library.selfplay_games(version, limit)
    listed = []
    for entry in entries:
        try:
            game = library.selfplay_game(version, entry.game_id)
        except (GameNotFound, GameUnreadable):  # removed or broken since the listing
            game = None
        listed.append((entry, game))
    return total, listed


def _strength_list(library: GameLibrary, version: int) -> list[tuple[StrengthEntry, SgfGame | None]]:
    listed = []
    for entry in library.strength_games(version):
        try:
            game = library.strength_game(version, entry.name)
        except (GameNotFound, GameUnreadable):  # removed or broken since the listing
            game = None
        listed.append((entry, game))
    return listed


def serve_games(library: GameLibrary, path: str, query: dict[str, list[str]]) -> Response:
    """The answer to GET `path` (under /games, still percent-encoded): a page, an SGF, or an error
    (400 for a malformed request, 404 for a game that is not there, 500 for a file that cannot be
    read), as HTML for pages and as plain text for SGF downloads."""
    download = path.endswith(".sgf")
    try:
        return _route(library, path, query)
    except (InvalidRequest, GameNotFound, GameUnreadable) as error:
        status = (
            HTTPStatus.BAD_REQUEST
            if isinstance(error, InvalidRequest)
            else HTTPStatus.NOT_FOUND
            if isinstance(error, GameNotFound)
            else HTTPStatus.INTERNAL_SERVER_ERROR
        )
        if isinstance(error, GameUnreadable):
            log.warning("games: %s", error)
        if download:
            return status, f"{status.phrase}: {error}\n".encode(), "text/plain; charset=utf-8", []
        return _html(error_page(status, status.phrase, str(error)), status)


def _route(library: GameLibrary, path: str, query: dict[str, list[str]]) -> Response:
    try:
        parts = [unquote(p, errors="strict") for p in path.split("/")[2:]]
    except UnicodeDecodeError:
        raise InvalidRequest("the path's percent-encoding is not UTF-8") from None
    if parts in ([], [""]):
        versions = library.versions()
        levels = {v: dict(Counter(e.level for e in library.strength_games(v)))
                  for v, counts in versions.items() if counts.strength}
        return _html(index_page(versions, levels))
    if len(parts) == 1:
        version = check_version(parts[0])
        limit = _query_int(query, "n", DEFAULT_LIST, 1, MAX_LIST)
        total, selfplay = _selfplay_list(library, version, limit)
        return _html(version_page(version, total, selfplay, library.gating_matches(version),
                                  _strength_list(library, version)))
    if len(parts) == 3 and parts[0] == "strength":
        version, name = check_version(parts[1]), parts[2]
        if name.endswith(".sgf"):
            name = check_game_id(name[:-4])
            return _download(f"{name}.sgf", library.strength_sgf(version, name))
        game = library.strength_game(version, check_game_id(name))
        return _viewer(
            f"v{version} against GNU Go: {name}",
            game,
            query,
            strength_url(version, name),
            (f"/games/v{version}#strength", f"games of v{version}"),
            [game.comment or f"version {version} against GNU Go"],
        )
    if len(parts) == 3 and parts[0] == "selfplay":
        version, name = check_version(parts[1]), parts[2]
        if name.endswith(".sgf"):
            game_id = check_game_id(name[:-4])
            return _download(f"{game_id}.sgf", library.selfplay_sgf(version, game_id))
        game_id = check_game_id(name)
        game = library.selfplay_game(version, game_id)
        return _viewer(
            f"self-play game {game_id}",
            game,
            query,
            selfplay_url(version, game_id),
            (f"/games/v{version}", f"games of v{version}"),
            [f"played by v{version}"],
        )
    if len(parts) == 3 and parts[0] == "gating":
        candidate, name = check_candidate(parts[1]), parts[2]
        if name.endswith(".sgf"):
            index = check_index(name[:-4])
            return _download(f"gating-{candidate}-{index}.sgf", library.gating_sgf(candidate, index))
        index = check_index(name)
        match, _ = library.gating_game(candidate, index)
        game = library.gating_sgf_game(candidate, index)
        version = match.promoted_version if match.promoted_version is not None else match.opponent_version
        return _viewer(
            f"gating game {index} of {candidate}",
            game,
            query,
            gating_url(candidate, index),
            (f"/games/v{version}", f"games of v{version}"),
            [f"candidate {candidate} against v{match.opponent_version}", f"ended by {game_end(match, index)}"],
        )
    raise GameNotFound(f"no games page at {path}: see /games")


def game_end(match: GatingMatch, index: int) -> str:
    return next(g.result.end for g in match.games if g.index == index)
