"""Games to watch on the ratings service: gating's match files keep each game's moves, and the
/games pages show self-play's SGFs, gating's games and the strength service's games against GNU Go
as boards, as SGF downloads, and refuse every path that is not a game of the games dir (400/404,
never a file outside it)."""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from games_support import (
    CANDIDATE,
    MATCH_GAMES,
    OLD_CANDIDATE,
    SELFPLAY_IDS,
    STRENGTH_GAMES,
    make_games_dir,
    strength_name,
)

from services.ratings.__main__ import build_parser, games_dir
from tengen.config import load_config
from tengen.go import passalive
from tengen.go.board import BLACK, WHITE
from tengen.go.rules import parse_rules
from tengen.go.sgf import SgfGame, iter_boards, read_game, replay
from tengen.infra.files import append_line
from tengen.loop.ledger import MatchFile, MatchGameResult
from tengen.ratings.api import RatingsApi
from tengen.ratings.book import FitSummary, History, Leaderboard, RatingRow, RatingsBook
from tengen.ratings.config import fill_from_config
from tengen.ratings.curve import PageData
from tengen.ratings.games import GameLibrary
from tengen.ratings.page import render_page
from tengen.ratings.server import RatingsServer
from tengen.ratings.store import RatingsStore


@pytest.fixture(scope="module")
def games_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_games_dir(tmp_path_factory.mktemp("games"))


class Http:
    def __init__(self, port: int) -> None:
        self.port = port

    def get(self, path: str) -> tuple[int, dict[str, str], bytes]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), error.read()


@pytest.fixture(scope="module")
def http(games_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    store = RatingsStore(f"sqlite:///{tmp_path_factory.mktemp('store') / 'ratings.sqlite'}")
    server = RatingsServer(RatingsApi(RatingsBook(store), "token"), "127.0.0.1", 0, 0, games_dir=games_root)
    server.start()
    yield Http(server.http_port)
    server.stop(grace=1.0)
    store.close()


def sgf_of_match_game(result: MatchGameResult) -> SgfGame:
    return SgfGame(x_size=result.board_size, y_size=result.board_size, komi=result.komi,
                   rules=parse_rules(result.rules),
                   moves=[((BLACK, WHITE)[i % 2], m) for i, m in enumerate(result.move_list)])


def test_match_files_keep_the_moves_of_each_game(games_root: Path) -> None:
    """The moves gating writes replay legally to the result it recorded."""
    match = MatchFile(games_root, CANDIDATE)
    assert sorted(match.results) == list(range(MATCH_GAMES))
    for result in match.results.values():
        assert len(result.move_list) == result.moves > 0
        board = replay(sgf_of_match_game(result))  # raises on an illegal move
        if result.score is not None:
            assert passalive.final_score(board) == result.score
    # Round trip, and the files from before the moves were kept still load (without moves).
    result = next(iter(match.results.values()))
    assert MatchGameResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    old = result.to_dict()
    del old["move_list"]
    assert MatchGameResult.from_dict(old).move_list == ()
    for bad in ([result.board_size ** 2 + 1], ["a1"], [True], "0 1 2", list(result.move_list) + [0]):
        with pytest.raises(ValueError):
            MatchGameResult.from_dict({**result.to_dict(), "move_list": bad})


def test_library_finds_each_versions_games(games_root: Path) -> None:
    library = GameLibrary(games_root)
    versions = library.versions()
    assert (versions[2], versions[3]) == ((3, 2, 2), (0, 1, 2))  # self-play SGFs, gating matches, vs GNU Go
    total, entries = library.selfplay_games(2, limit=2)
    assert total == 3 and len(entries) == 2 and {e.game_id for e in entries} <= set(SELFPLAY_IDS)
    assert library.selfplay_games(7) == (0, [])
    assert [m.candidate for m in library.gating_matches(2)] == [CANDIDATE, OLD_CANDIDATE]  # newest first
    (became,) = library.gating_matches(3)
    assert (became.candidate, became.opponent_version, became.promoted_version) == (CANDIDATE, 2, 3)
    assert became.score() == tuple(sum(g.result.winner_side() == s for g in became.games) for s in (0, 1, None))


def test_index_and_version_pages(http: Http) -> None:
    status, headers, body = http.get("/games")
    page = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert 'href="/games/v2"' in page and 'href="/games/v3"' in page
    status, _, body = http.get("/games/v2")
    page = body.decode()
    assert status == 200
    for game_id in SELFPLAY_IDS:
        assert f'href="/games/selfplay/v2/{game_id}"' in page and f'href="/games/selfplay/v2/{game_id}.sgf"' in page
    for index in range(MATCH_GAMES):
        assert f'href="/games/gating/{CANDIDATE}/{index}"' in page
    assert "promoted to v3" in page and "rejected" in page
    assert f"/games/gating/{OLD_CANDIDATE}/0" not in page  # no moves to show: listed without a link
    status, _, body = http.get("/games/v2?n=1")
    assert status == 200 and "the newest 1 of 3" in body.decode()
    status, _, body = http.get("/games/v9")
    assert status == 200 and "No self-play SGFs of v9" in body.decode() and "No gating match of v9" in body.decode()


def test_strength_games_by_version_and_level(http: Http, games_root: Path) -> None:
    """The strength service's games against GNU Go: on the index by version and level, each listed
    on its version's page with its SGF, which downloads as written and opens as a board."""
    library = GameLibrary(games_root)
    listed = {(e.version, e.level, e.name) for v in (2, 3) for e in library.strength_games(v)}
    assert listed == {(v, level, strength_name(v, level, n)) for (v, level), count in STRENGTH_GAMES.items()
                      for n in range(1, count + 1)}  # the stderr logs beside them are not games
    status, _, body = http.get("/games")
    index = body.decode()
    assert status == 200 and 'id="pass-note"' in index and "two passes" in index
    rows = re.findall(r'<td><a href="/games/v(\d+)#strength">v\d+</a></td><td>(\d+)</td>'
                      r'<td><a href="/games/v\d+#strength-l\d+">(\d+) games?</a></td>', index)
    assert sorted((int(v), int(level), int(n)) for v, level, n in rows) == sorted(
        (v, level, n) for (v, level), n in STRENGTH_GAMES.items())
    status, _, body = http.get("/games/v2")
    page = body.decode()
    assert status == 200 and 'id="strength-l1"' in page and "GNU Go level 1: 2 games" in page
    assert 'id="pass-note"' in page
    for number in (1, 2):
        name = strength_name(2, 1, number)
        assert f'href="/games/strength/v2/{name}"' in page and f'href="/games/strength/v2/{name}.sgf"' in page
    status, headers, data = http.get(f"/games/strength/v2/{strength_name(2, 1, 1)}.sgf")
    assert status == 200 and headers["Content-Type"] == "application/x-go-sgf"
    assert data == (games_root / "strength" / "sgf" / "v2" / f"{strength_name(2, 1, 1)}.sgf").read_bytes()
    game = read_game(data)
    assert (game.player_black, game.player_white) == ("tengen-v2", "gnugo-l1")
    status, _, body = http.get(f"/games/strength/v2/{strength_name(2, 1, 1)}?move={len(game.moves)}")
    stones = list(iter_boards(game))[len(game.moves)].stones()
    assert status == 200 and "by two passes" in body.decode()
    assert stones_in(body.decode()) == (int((stones == BLACK).sum()), int((stones == WHITE).sum()))
    status, _, body = http.get("/games/v9")
    assert "No games of v9 against GNU Go" in body.decode()


def stones_in(page: str) -> tuple[int, int]:
    return page.count('class="stone black"'), page.count('class="stone white"')


@pytest.mark.parametrize("move", [0, 1, 3, None])
def test_selfplay_board_at_a_move_matches_the_sgf(http: Http, games_root: Path, move: int | None) -> None:
    game_id = SELFPLAY_IDS[0]  # 9x9 with two handicap stones
    data = (games_root / "sgf" / "v2" / f"{game_id}.sgf").read_bytes()
    game = read_game(data)
    move = len(game.moves) if move is None else move
    status, _, body = http.get(f"/games/selfplay/v2/{game_id}?move={move}")
    page = body.decode()
    assert status == 200
    board = list(iter_boards(game))[move]
    stones = board.stones()
    assert stones_in(page) == (int((stones == BLACK).sum()), int((stones == WHITE).sum()))
    assert f'aria-label="board after move {move}"' in page
    assert ('id="prev"' in page) == (move > 0) and ('id="next"' in page) == (move < len(game.moves))
    if 0 < move:
        assert f'href="/games/selfplay/v2/{game_id}?move={move - 1}"' in page
        assert page.count('class="last-move"') == (game.moves[move - 1][1] != game.pass_move)
    # The download is the file itself.
    status, headers, body = http.get(f"/games/selfplay/v2/{game_id}.sgf")
    assert status == 200 and body == data and headers["Content-Type"] == "application/x-go-sgf"
    assert f'filename="{game_id}.sgf"' in headers["Content-Disposition"]


def test_gating_game_as_board_and_sgf(http: Http, games_root: Path) -> None:
    result = MatchFile(games_root, CANDIDATE).results[1]
    status, headers, body = http.get(f"/games/gating/{CANDIDATE}/1.sgf")
    assert status == 200 and headers["Content-Type"] == "application/x-go-sgf"
    game = read_game(body)
    assert [m for _, m in game.moves] == list(result.move_list)
    assert [c for c, _ in game.moves] == [(BLACK, WHITE)[i % 2] for i in range(result.moves)]
    assert (game.x_size, game.komi, game.rules.to_string()) == (result.board_size, result.komi,
                                                                parse_rules(result.rules).to_string())
    # Game 1: the current model (v2) had Black; the candidate became v3.
    assert (game.player_black, game.player_white) == ("v2", f"v3 ({CANDIDATE})")
    assert game.result.startswith(result.winner)
    for move in (0, 3, result.moves):
        status, _, page = http.get(f"/games/gating/{CANDIDATE}/1?move={move}")
        stones = list(iter_boards(game))[move].stones()
        assert status == 200
        assert stones_in(page.decode()) == (int((stones == BLACK).sum()), int((stones == WHITE).sum()))


@pytest.mark.parametrize("path, status, message", [
    ("/games/selfplay/v2/..%2F..%2F..%2Fetc%2Fpasswd", 400, "bad game id"),
    ("/games/selfplay/v2/%2e%2e", 400, "bad game id"),
    ("/games/selfplay/v2/.hidden", 400, "bad game id"),
    ("/games/selfplay/v2/a%00b", 400, "bad game id"),
    ("/games/selfplay/v2/%ff", 400, "not UTF-8"),
    ("/games/selfplay/..%2Fv2/x", 400, "bad version"),
    ("/games/selfplay/v2/no-such-game", 404, "no self-play game"),
    ("/games/selfplay/v2/no-such-game.sgf", 404, "no self-play game"),
    ("/games/selfplay/v9/worker-a-1-0-0", 404, "no self-play game"),
    ("/games/selfplay/v2/escape", 404, "no self-play game"),  # a symbolic link out of the games dir
    ("/games/vx", 400, "bad version"),
    ("/games/v2?n=0", 400, "n must be"),
    ("/games/v2?n=abc", 400, "n must be"),
    ("/games/selfplay/v2/worker-a-1-0-0?move=-1", 400, "move must be"),
    ("/games/selfplay/v2/worker-a-1-0-0?move=100000", 400, "move must be"),
    ("/games/gating/..%2Fdecisions/0", 400, "bad candidate name"),
    ("/games/gating/cand%20x/0", 400, "bad candidate name"),
    (f"/games/gating/{CANDIDATE}/x", 400, "bad game index"),
    (f"/games/gating/{CANDIDATE}/99", 404, "has no finished game 99"),
    ("/games/gating/candidate-404/0", 404, "no gating match"),
    (f"/games/gating/{OLD_CANDIDATE}/0", 404, "before gating kept the moves"),
    (f"/games/gating/{OLD_CANDIDATE}/0.sgf", 404, "before gating kept the moves"),
    ("/games/strength/v2/..%2F..%2Fratings.sqlite", 400, "bad game id"),
    ("/games/strength/v2/.hidden.sgf", 400, "bad game id"),
    ("/games/strength/v2/v2-l1-none-001", 404, "no game of version 2 against GNU Go"),
    (f"/games/strength/v9/{strength_name(2, 1, 1)}.sgf", 404, "no game of version 9 against GNU Go"),
    ("/games/selfplay/v2", 404, "no games page"),
    ("/games/other/a/b", 404, "no games page"),
])
def test_bad_requests_are_refused_with_a_clear_message(http: Http, games_root: Path, path: str, status: int,
                                                       message: str) -> None:
    escape = games_root / "sgf" / "v2" / "escape.sgf"
    if not escape.is_symlink():
        outside = games_root.parent / "outside.sgf"
        outside.write_text("(;GM[1]SZ[9])")
        escape.symlink_to(outside)
    got, headers, body = http.get(path)
    assert got == status, body
    assert message in body.decode(errors="replace")
    content_type = "text/plain" if path.split("?")[0].endswith(".sgf") else "text/html"
    assert headers["Content-Type"].startswith(content_type)


def test_a_broken_file_is_a_server_error_that_says_which(http: Http, games_root: Path) -> None:
    (games_root / "sgf" / "v5").mkdir(exist_ok=True)
    (games_root / "sgf" / "v5" / "broken.sgf").write_text("not an sgf")
    status, _, body = http.get("/games/selfplay/v5/broken")
    assert status == 500 and "sgf/v5/broken.sgf" in body.decode()
    status, _, body = http.get("/games/v5")  # the list still renders
    assert status == 200 and "unreadable" in body.decode()
    # A torn line in a match file (a crash mid-write) is skipped.
    append_line(games_root / "gating" / "matches" / "candidate-torn.jsonl",
                {"header": {"candidate": "candidate-torn", "opponent_version": 5, "started": 1.0}})
    with open(games_root / "gating" / "matches" / "candidate-torn.jsonl", "a") as f:
        f.write('{"game": {"index": 0, "bla')
    status, _, body = http.get("/games/v5")
    assert status == 200 and "candidate-torn" in body.decode()


def test_without_a_games_dir_there_are_no_games_pages(tmp_path: Path) -> None:
    store = RatingsStore(f"sqlite:///{tmp_path / 'ratings.sqlite'}")
    server = RatingsServer(RatingsApi(RatingsBook(store), "token"), "127.0.0.1", 0, 0)
    server.start()
    try:
        status, _, body = Http(server.http_port).get("/games")
        assert status == 404 and "no route" in body.decode()
        status, _, body = Http(server.http_port).get("/")
        assert status == 200 and "/games" not in body.decode()
    finally:
        server.stop(grace=1.0)
        store.close()


def test_games_dir_setting_is_validated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def parsed(*argv: str) -> argparse.Namespace:
        return build_parser().parse_args(["--data-dir", str(tmp_path / "data"), *argv])

    assert games_dir(parsed()) == tmp_path / "data"  # the default: the data dir, even before it exists
    assert games_dir(parsed("--games-dir", str(tmp_path))) == tmp_path
    with pytest.raises(ValueError, match="does not exist"):
        games_dir(parsed("--games-dir", str(tmp_path / "missing")))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        games_dir(parsed("--games-dir", str(tmp_path / "file")))
    monkeypatch.setenv("TENGEN_RATINGS__GAMES_DIR", str(tmp_path / "from-env"))
    args = build_parser().parse_args([])
    fill_from_config(args, load_config("tiny"))  # the service's start: flags left out take the configured values
    with pytest.raises(ValueError, match="does not exist"):
        games_dir(args)
    # The service refuses to start with it, saying why (exit 2).
    out = subprocess.run([sys.executable, "-m", "services.ratings", "--data-dir", str(tmp_path / "data"),
                          "--grpc-port", "0", "--http-port", "0"], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parent.parent, env={**os.environ})
    assert out.returncode == 2 and "from-env (--games-dir / $TENGEN_RATINGS__GAMES_DIR) does not exist" in out.stderr
    assert not os.path.exists(tmp_path / "data" / "ratings.token"), "nothing was started or written"


def row(name: str, kind: str) -> RatingRow:
    return RatingRow(name, kind, 1, True, 0.0, 10.0, -20.0, 20.0, 4, 2, 2, 0, 100 if kind == "model" else None,
                     datetime(2026, 1, 1, tzinfo=UTC))


def test_leaderboard_links_each_version_to_its_games() -> None:
    rows = [row("tengen-v2", "model"), row("tengen-v13", "model"), row("gnugo-l1", "anchor"),
            row("tengen-candidate-000000002048", "engine")]
    summary = FitSummary("", 0.0, 2.0, 0.95, 8)

    def page(games_dir: bool) -> str:
        return render_page(PageData(Leaderboard(rows, summary), History(rows[:2], summary), [], [], None, None, None,
                                    games_dir))

    links = re.findall(r'<a class="games" href="([^"]+)">', page(True))
    assert links == ["/games/v2", "/games/v13"]
    assert page(True).count('<a href="/games/v2"><g class="version">') == 1  # its point in the Elo plot
    assert "/games" not in page(False)
