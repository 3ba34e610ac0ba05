"""The ratings pages in a real browser: Debian's chromium (`make chromium`, the `chromium` fixture)
driven by Playwright (test extras) through its executable path, against the ratings service
in-process over a SQLite store and a games dir as the services write it (tests/games_support.py).

What a person sees is checked: the learning curve, whose points (read back through the plots' own
tick labels) are the win rates and Wilson intervals computed here from the games fed in
(tests/curve_support.py), the match table, gating's decisions and the run's progress; labels that
do not overlap; the page bringing in new games and figures by itself, without a reload; the Elo plot
and the leaderboard; from a version's row, its games; a self-play board stepped with the arrow keys
and a gating board reached by a move link, each with the stones of the SGF's position at that move;
the strength service's games by version and level; the SGF downloads."""
from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from curve_support import OTHER_GAMES, SAMPLES, T0, axis_map, expected_curve, strength_games, unclock, unsi
from curve_support import PLAYERS as CURVE_PLAYERS
from games_support import CANDIDATE, SELFPLAY_IDS, make_games_dir, strength_name
from playwright import sync_api

from tengen.go.board import BLACK, WHITE
from tengen.go.sgf import iter_boards, move_to_gtp, read_game
from tengen.infra.files import append_line
from tengen.loop.progress import LoopProgress
from tengen.ratings.api import RatingsApi
from tengen.ratings.book import RatingsBook
from tengen.ratings.records import GameReport, PlayerInfo
from tengen.ratings.server import RatingsServer
from tengen.ratings.store import RatingsStore

PLAYERS = [PlayerInfo("tengen-v1", "model", 1000), PlayerInfo("tengen-v2", "model", 2000),
           PlayerInfo("tengen-v3", "model", 4000), PlayerInfo("gnugo-l1", "anchor")]
RESULTS = [("tengen-v2", "tengen-v1", "B"), ("tengen-v1", "tengen-v2", "W"), ("tengen-v2", "tengen-v1", "W"),
           ("tengen-v3", "tengen-v2", "B"), ("tengen-v2", "tengen-v3", "W"), ("tengen-v3", "gnugo-l1", "B"),
           ("gnugo-l1", "tengen-v1", "B"), ("gnugo-l1", "tengen-v2", "W"), ("tengen-v3", "tengen-v2", "W")]


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = make_games_dir(tmp_path_factory.mktemp("games"))
    store = RatingsStore(f"sqlite:///{root / 'ratings.sqlite'}")
    store.report([GameReport(f"g{i}", black, white, result, source="test") for i, (black, white, result)
                  in enumerate(RESULTS)], PLAYERS)
    server = RatingsServer(RatingsApi(RatingsBook(store), "token"), "127.0.0.1", 0, 0, games_dir=root)
    server.start()
    yield f"http://127.0.0.1:{server.http_port}"
    server.stop(grace=1.0)
    store.close()


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator["sync_api.Browser"]:
    with sync_api.sync_playwright() as playwright:
        # Chromium's sandbox cannot start as root (CI, containers).
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = playwright.chromium.launch(executable_path=chromium, args=args)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: "sync_api.Browser") -> Iterator["sync_api.Page"]:
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def shown_stones(page: "sync_api.Page") -> tuple[set[str], set[str]]:
    """The vertices of the black and the white stones drawn on the board."""
    def vertices(colour: str) -> set[str]:
        return set(page.locator(f"svg.board circle.stone.{colour}").evaluate_all(
            "nodes => nodes.map(n => n.getAttribute('data-vertex'))"))
    return vertices("black"), vertices("white")


def expected_stones(sgf: bytes, move: int) -> tuple[set[str], set[str]]:
    game = read_game(sgf)
    stones = list(iter_boards(game))[move].stones()
    return tuple({move_to_gtp(y * game.x_size + x, game.x_size, game.y_size)
                  for y, x in zip(*(stones == colour).nonzero())} for colour in (BLACK, WHITE))


def test_leaderboard_shows_the_plots_and_the_table(page: "sync_api.Page", base_url: str, tmp_path: Path) -> None:
    page.goto(base_url + "/")
    expect = sync_api.expect
    expect(page.locator("h1")).to_have_text("tengen: strength against GNU Go")
    expect(page.locator("#elo-heading")).to_have_text("Elo on GNU Go's scale: gnugo-l1 = 0 (GNU Go level 1)")
    plot = page.locator('svg[aria-label="Elo against training samples"]')
    expect(plot).to_be_visible()
    box = plot.bounding_box()
    assert box is not None and box["width"] > 500 and box["height"] > 300
    expect(plot.locator("g.version")).to_have_count(3)  # the three model versions, with intervals
    expect(plot.locator("g.anchor text")).to_have_text("GNU Go level 1")  # the anchor's reference line
    points = plot.locator("g.version circle")
    for i in range(3):
        point = points.nth(i).bounding_box()
        assert point is not None and box["x"] <= point["x"] <= box["x"] + box["width"]
    rows = page.locator("table#leaderboard tr")
    expect(rows).to_have_count(1 + len(PLAYERS))
    cells = [c.strip() for c in rows.nth(0).locator("th").all_inner_texts()]
    assert cells[:4] == ["#", "player", "kind", "Elo"] and cells[-1] == "watch"
    names = {rows.nth(i).locator("td").nth(1).inner_text() for i in range(1, len(PLAYERS) + 1)}
    assert names == {p.name for p in PLAYERS}
    v3 = page.locator("table#leaderboard tr", has_text="tengen-v3")
    assert (
        v3.locator("td").nth(2).inner_text() == "model" and v3.locator("td").nth(3).inner_text().lstrip("-").isdigit()
    )
    expect(page.locator("a.games")).to_have_count(3)  # every version, not the anchor
    page.screenshot(path=str(tmp_path / "ratings.png"), full_page=True)


def test_a_selfplay_game_moves_on_with_the_arrow_keys(page: "sync_api.Page", base_url: str) -> None:
    expect = sync_api.expect
    page.goto(base_url + "/")
    page.locator("tr", has_text="tengen-v2").locator("a.games").click()
    expect(page.locator("h1")).to_have_text("Games of version 2")
    game_id = SELFPLAY_IDS[0]
    page.get_by_role("link", name=game_id, exact=True).click()
    expect(page.locator("#position")).to_have_text("start of the game")
    page.wait_for_load_state("load")
    sgf = page.request.get(base_url + page.locator("a#download").get_attribute("href")).body()
    assert shown_stones(page) == expected_stones(sgf, 0)  # the two handicap stones
    for move in (1, 2, 3):
        page.keyboard.press("ArrowRight")
        expect(page.locator("#position")).to_contain_text(f"move {move}:")
        page.wait_for_load_state("load")  # its key handler is in place before the next key
    assert page.url.endswith("?move=3")
    black, white = shown_stones(page)
    assert (black, white) == expected_stones(sgf, 3) and len(black) == 3 and len(white) == 2
    expect(page.locator("svg.board circle.last-move")).to_have_count(1)
    page.get_by_role("link", name="‹ previous").click()
    expect(page.locator("#position")).to_contain_text("move 2:")
    assert shown_stones(page) == expected_stones(sgf, 2)
    # The download link hands over the SGF file.
    with page.expect_download() as download:
        page.locator("a#download").click()
    assert download.value.suggested_filename == f"{game_id}.sgf"
    assert Path(download.value.path()).read_bytes() == sgf


def test_a_gating_game_by_its_move_links(page: "sync_api.Page", base_url: str) -> None:
    expect = sync_api.expect
    page.goto(base_url + "/games/v2")
    page.locator(f'a[href="/games/gating/{CANDIDATE}/1"]').click()
    expect(page.locator("h1")).to_have_text(f"gating game 1 of {CANDIDATE}")
    page.locator("nav.moves").get_by_role("link", name="3", exact=True).click()
    expect(page.locator("#position")).to_contain_text("move 3:")
    expect(page.locator("nav.moves a.current")).to_have_text("3")
    sgf = page.request.get(base_url + page.locator("a#download").get_attribute("href")).body()
    black, white = shown_stones(page)
    assert (black, white) == expected_stones(sgf, 3) and len(black) + len(white) <= 3
    page.locator("a#last").click()
    moves = len(read_game(sgf).moves)
    expect(page.locator("#position")).to_contain_text(f"move {moves}:")
    assert shown_stones(page) == expected_stones(sgf, moves)
    expect(page.locator("a#next")).to_have_count(0)  # nothing after the last move


# -- the learning curve ------------------------------------------------------------------------------
REFRESH_S = 1.0  # the curve site's page refresh, short so the test sees it


@contextmanager
def curve_site(root: Path) -> Iterator[tuple[str, RatingsStore]]:
    """A ratings service over the strength games of tests/curve_support.py (with gating's and
    `tengen eval`'s games beside them), two gating decisions and a live run's run.json."""
    store = RatingsStore(f"sqlite:///{root / 'ratings.sqlite'}")
    store.report(strength_games() + OTHER_GAMES, CURVE_PLAYERS)
    for i, promoted in enumerate((2, 3)):
        append_line(root / "gating" / "decisions.jsonl", {
            "candidate": f"candidate-{SAMPLES[promoted]:012d}", "opponent_version": promoted - 1, "wins": 6,
            "losses": 2, "draws": 0, "games": 8, "promoted": True, "promoted_version": promoted, "reason": "won",
            "time": (T0 + timedelta(minutes=35 + 50 * i)).timestamp()})
    write_progress(root, elapsed_s=6300.0, samples=1_234_567, games_per_s=3.21)
    server = RatingsServer(RatingsApi(RatingsBook(store), "token", lambda: PUBLISHED.get(root)), "127.0.0.1", 0, 0,
                           games_dir=root, page_refresh_s=REFRESH_S)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.http_port}", store
    finally:
        server.stop(grace=1.0)
        store.close()


PUBLISHED: dict[Path, LoopProgress] = {}  # the figures the services published, by site


def write_progress(root: Path, elapsed_s: float, samples: int, games_per_s: float) -> None:
    """The services' figures on tengen.progress (tengen.loop.progress), and run.json with the
    duration as `tengen run` writes it (tengen.run.local: _write_state)."""
    now = time.time()
    PUBLISHED[root] = LoopProgress(now, now - elapsed_s, samples, 400.0, 23_456, 250_000, 3.2, games_per_s, 180.0, 1,
                                   12, "9x9", "AMD EPYC, 2 cores", None)
    progress = {"updated": now, "elapsed_s": elapsed_s, "duration_s": 7200.0, "games_played": 23_456}
    (root / "run.json").write_text(json.dumps({"pid": os.getpid(), "progress": progress}))


# What each curve point draws, read in the browser: its version, level, dot and interval bar.
POINTS_JS = """svg => [...svg.querySelectorAll("g.point")].map(g => ({
  version: +g.dataset.version, level: +g.dataset.level,
  cx: +g.querySelector("circle").getAttribute("cx"), cy: +g.querySelector("circle").getAttribute("cy"),
  y1: +g.querySelector("line.interval").getAttribute("y1"),
  y2: +g.querySelector("line.interval").getAttribute("y2")}))"""
TICKS_JS = """(svg, kind) => [...svg.querySelectorAll("text." + kind)].map(t =>
  [t.textContent, +t.getAttribute(kind === "x-tick" ? "x" : "y") - (kind === "y-tick" ? 4 : 0)])"""


def assert_curve(page: "sync_api.Page", games: list[GameReport], players: list[PlayerInfo] = CURVE_PLAYERS) -> None:
    """Both plots' points are where the expected win rates, intervals, samples and times put them."""
    want = expected_curve(games, players)
    for label, x_of, parse in (("training samples", lambda e: e.samples, unsi),
                               ("time since the first rated game (h:mm)", lambda e: e.hours, unclock)):
        plot = page.locator(f'svg[aria-label="win rate against GNU Go over {label}"]')
        sync_api.expect(plot).to_be_visible()
        x_px = axis_map(plot.evaluate(TICKS_JS, "x-tick"), parse)
        y_px = axis_map(plot.evaluate(TICKS_JS, "y-tick"), float)
        points = {(p["version"], p["level"]): p for p in plot.evaluate(POINTS_JS)}
        assert set(points) == set(want), label
        for key, e in want.items():
            p = points[key]
            assert p["cy"] == pytest.approx(y_px(e.rate), abs=0.11), (label, key)
            assert sorted((p["y1"], p["y2"])) == pytest.approx(sorted((y_px(e.low), y_px(e.high))), abs=0.11)
            assert abs(p["cx"] - x_px(x_of(e))) <= 3.0, (label, key)  # one version's levels sit 5 px apart


def boxes(locator: "sync_api.Locator") -> list[dict]:
    return [b for b in (locator.nth(i).bounding_box() for i in range(locator.count())) if b is not None]


def overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def test_the_curve_is_the_games_against_gnu_go(page: "sync_api.Page", tmp_path: Path) -> None:
    expect = sync_api.expect
    games = strength_games() + OTHER_GAMES
    with curve_site(tmp_path) as (url, _):
        page.goto(url + "/")
        assert_curve(page, games)
        want = expected_curve(games, CURVE_PLAYERS)
        rows = page.locator("#match-table tr.match")
        expect(rows).to_have_count(len(want))
        for key, e in want.items():
            cells = page.locator(f'#match-table tr[data-version="{key[0]}"][data-level="{key[1]}"] td')
            assert cells.all_inner_texts()[:6] == [f"tengen-v{key[0]}", str(key[1]), str(e.games),
                                                   f"{e.wins}-{e.losses}-{e.draws}", f"{e.rate:.2f}",
                                                   f"{e.low:.2f} – {e.high:.2f}"]
        # Time ticks read h:mm; no two tick labels, legend entries or reference labels overlap,
        # and no reference label covers a version's point.
        for plot in page.locator("svg").all():
            for kind in ("text.x-tick", "text.y-tick", "g.legend text", "g.anchor text"):
                placed = boxes(plot.locator(kind))
                assert not any(overlap(a, b) for i, a in enumerate(placed) for b in placed[i + 1:]), kind
        elo = page.locator('svg[aria-label="Elo against training samples"]')
        for label in boxes(elo.locator("g.anchor text")):
            assert not any(overlap(label, point) for point in boxes(elo.locator("g.version circle")))
        decisions = page.locator("#gating-table tr.decision")
        expect(decisions).to_have_count(2)
        expect(decisions.first).to_contain_text("promoted as v3")  # newest first
        expect(page.locator("#this-run")).to_have_text(re.compile(r"1:45:0\d of 2:00:00"))
        expect(page.locator("#samples")).to_have_text("1,234,567")
        expect(page.locator("#games-per-s")).to_have_text("3.21")
        page.screenshot(path=str(tmp_path / "curve.png"), full_page=True)


def test_the_page_refreshes_itself(page: "sync_api.Page", tmp_path: Path) -> None:
    """New games against GNU Go, a gating decision and the run's newer figures reach an open page
    within its refresh interval, without a reload."""
    expect = sync_api.expect
    with curve_site(tmp_path) as (url, store):
        page.goto(url + "/")
        expect(page.locator("#this-run")).to_have_text(re.compile(r"1:45:0\d of 2:00:00"))
        page.evaluate("window.notReloaded = true")
        newer = {(4, 1): ("wwwwww", 150), (4, 5): ("wwwdlw", 156)}
        players = CURVE_PLAYERS + [PlayerInfo("tengen-v4", "model", 160_000)]
        store.report(strength_games(newer), players)
        append_line(tmp_path / "gating" / "decisions.jsonl", {
            "candidate": "candidate-000000160000", "opponent_version": 3, "wins": 7, "losses": 1, "draws": 0,
            "games": 8, "promoted": True, "promoted_version": 4, "reason": "won",
            "time": (T0 + timedelta(minutes=140)).timestamp()})
        write_progress(tmp_path, elapsed_s=6400.0, samples=1_300_000, games_per_s=3.5)
        expect(page.locator('#match-table tr[data-version="4"]')).to_have_count(2, timeout=10_000 * REFRESH_S)
        expect(page.locator("#elapsed")).to_have_text(re.compile(r"1:46:4\d"))
        expect(page.locator("#samples")).to_have_text("1,300,000")
        expect(page.locator("#gating-table tr.decision")).to_have_count(3)
        assert page.evaluate("window.notReloaded") is True
        games = strength_games() + OTHER_GAMES + strength_games(newer)
        want = expected_curve(games, players)
        assert want[(4, 5)].draws == 1 and want[(4, 5)].rate == pytest.approx(4.5 / 6)
        assert_curve(page, games, players)


def test_the_strength_games_by_version_and_level(page: "sync_api.Page", base_url: str, tmp_path: Path) -> None:
    expect = sync_api.expect
    page.goto(base_url + "/games")
    expect(page.locator("#pass-note")).to_contain_text("two passes")
    page.locator("#strength-games").get_by_role("link", name="2 games").click()
    expect(page.locator("h1")).to_have_text("Games of version 2")
    expect(page.locator("#strength-l1")).to_have_text("GNU Go level 1: 2 games")
    name = strength_name(2, 1, 1)
    with page.expect_download() as download:
        page.locator(f'a[href="/games/strength/v2/{name}.sgf"]').click()
    assert download.value.suggested_filename == f"{name}.sgf"
    sgf = Path(download.value.path()).read_bytes()
    assert sgf == page.request.get(f"{base_url}/games/strength/v2/{name}.sgf").body()
    page.get_by_role("link", name=name, exact=True).click()
    page.locator("a#last").click()
    moves = len(read_game(sgf).moves)
    expect(page.locator("#position")).to_contain_text(f"move {moves}:")
    expect(page.locator("#position")).to_contain_text("pass")
    assert shown_stones(page) == expected_stones(sgf, moves)
