"""The ratings pages in a real browser: Debian's chromium (`make chromium`, the `chromium` fixture)
driven by Playwright (test extras) through its executable path, against the ratings service
in-process over a SQLite store and a games dir as the services write it (tests/games_support.py).

What a person sees is checked: the Elo plots and the leaderboard; from a version's row, its games;
a self-play board stepped with the arrow keys and a gating board reached by a move link, each with
the stones of the SGF's position at that move; the SGF download."""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from games_support import CANDIDATE, SELFPLAY_IDS, make_games_dir
from playwright import sync_api

from tengen.go.board import BLACK, WHITE
from tengen.go.sgf import iter_boards, move_to_gtp, read_game
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
    expect(page.locator("h1")).to_have_text("tengen ratings")
    for label in ("Elo against training samples", "Elo against hours since the first model version"):
        plot = page.locator(f'svg[aria-label="{label}"]')
        expect(plot).to_be_visible()
        box = plot.bounding_box()
        assert box is not None and box["width"] > 500 and box["height"] > 300
        expect(plot.locator("g.version")).to_have_count(3)  # the three model versions, with intervals
        expect(plot.locator("g.anchor text")).to_have_text("GNU Go level 1")  # the anchor's reference line
        points = plot.locator("g.version circle")
        for i in range(3):
            point = points.nth(i).bounding_box()
            assert point is not None and box["x"] <= point["x"] <= box["x"] + box["width"]
    rows = page.locator("table tr")
    expect(rows).to_have_count(1 + len(PLAYERS))
    cells = [c.strip() for c in rows.nth(0).locator("th").all_inner_texts()]
    assert cells[:4] == ["#", "player", "kind", "Elo"] and cells[-1] == "watch"
    names = {rows.nth(i).locator("td").nth(1).inner_text() for i in range(1, len(PLAYERS) + 1)}
    assert names == {p.name for p in PLAYERS}
    v3 = page.locator("tr", has_text="tengen-v3")
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
