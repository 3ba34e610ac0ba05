"""The ratings page without a browser: the learning curve's numbers from the ratings store, its
plots read back through their axes, h:mm time ticks, legible reference labels, Elo on GNU Go's
scale, gating's decisions, the run's progress as the services publish it and the JSON the page
refreshes from.
(In Chromium: tests/test_ratings_browser.py.)"""
from __future__ import annotations

import json
import math
import re
import time
import urllib.request
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from curve_support import OTHER_GAMES, PLAYERS, T0, axis_map, expected_curve, strength_games, unclock, unsi

from tengen.config import load_config
from tengen.infra.files import append_line
from tengen.loop.progress import LoopProgress, RunProgress, read_run_progress
from tengen.ratings.api import RatingsApi
from tengen.ratings.book import FitSummary, History, Leaderboard, RatingRow, RatingsBook
from tengen.ratings.curve import PageData, page_data, read_decisions, strength_matches
from tengen.ratings.page import render_page
from tengen.ratings.plots import LEFT, PLOT_W, clock, elo_plot, nice_ticks, spread, time_ticks
from tengen.ratings.records import GameReport, PlayerInfo
from tengen.ratings.server import RatingsServer
from tengen.ratings.store import RatingsStore
from tengen.run.local import LocalRun, RunOptions

SVG = "{http://www.w3.org/2000/svg}"
START = datetime(2026, 1, 1, tzinfo=UTC)
NAN = float("nan")


def row(
    name: str, elo: float, low: float, high: float, samples: int | None = None, hours: float = 0.0, kind: str = "model"
) -> RatingRow:
    return RatingRow(name, kind, 1, True, elo, 10.0, low, high, 4, 2, 2, 0, samples, START + timedelta(hours=hours))


def unrated(name: str, kind: str = "model", samples: int | None = None) -> RatingRow:
    return RatingRow(name, kind, 0, False, NAN, NAN, NAN, NAN, 0, 0, 0, 0, samples, START)


def svgs(html: str) -> dict[str, ET.Element]:
    """The page's plots by their aria-label."""
    found = [ET.fromstring(m) for m in re.findall(r"<svg.*?</svg>", html, re.S)]
    return {svg.get("aria-label", ""): svg for svg in found}


def ticks(svg: ET.Element, kind: str) -> list[tuple[str, float]]:
    """(label, pixel) of each x or y tick."""
    attr = "x" if kind == "x-tick" else "y"
    out = []
    for text in svg.iter(f"{SVG}text"):
        if text.get("class") == kind:
            out.append((text.text or "", float(text.get(attr, "nan")) - (4.0 if kind == "y-tick" else 0.0)))
    return out


def plotted(svg: ET.Element) -> dict[tuple[int, int], tuple[float, float, float, float]]:
    """(version, level) -> (cx, cy, y of the interval's ends) of each curve point."""
    points = {}
    for group in svg.iter(f"{SVG}g"):
        if group.get("class") == "point":
            circle = group.find(f"{SVG}circle")
            bar = next(line for line in group.iter(f"{SVG}line") if line.get("class") == "interval")
            assert circle is not None
            points[(int(group.get("data-version", "0")), int(group.get("data-level", "0")))] = (
                float(circle.get("cx", "nan")), float(circle.get("cy", "nan")),
                float(bar.get("y1", "nan")), float(bar.get("y2", "nan")))
    return points


def assert_finite(svg: str) -> None:
    assert "nan" not in svg.lower()
    for number in re.findall(r'(?:x|y|x1|x2|y1|y2|cx|cy|points)="([^"]*)"', svg):
        assert all(math.isfinite(float(v)) for v in re.split(r"[ ,]+", number.strip())), number


@pytest.fixture
def store(tmp_path: Path) -> RatingsStore:
    store = RatingsStore(f"sqlite:///{tmp_path / 'ratings.sqlite'}")
    yield store
    store.close()


def test_the_curve_is_the_strength_games_in_the_store(store: RatingsStore, tmp_path: Path) -> None:
    """Each version's record against each GNU Go level, counted from either colour with draws half,
    from the strength service's games only, and plotted where those numbers say."""
    games = strength_games() + OTHER_GAMES
    store.report(games, PLAYERS)
    want = expected_curve(games)
    matches = strength_matches(store)
    assert {(m.version, m.level): (m.games, m.wins, m.losses, m.draws, m.training_samples) for m in matches} == {
        key: (e.games, e.wins, e.losses, e.draws, e.samples) for key, e in want.items()}
    v2 = next(m for m in matches if (m.version, m.level) == (2, 1))
    assert (v2.wins, v2.draws, v2.losses) == (3, 1, 2) and v2.rate == pytest.approx(3.5 / 6)
    assert v2.interval == pytest.approx((want[(2, 1)].low, want[(2, 1)].high))
    seven_of_ten = expected_curve(strength_games({(1, 1): ("wwwwwwwlll", 0)}), PLAYERS)[(1, 1)]
    assert (seven_of_ten.low, seven_of_ten.high) == pytest.approx((0.3968, 0.8922), abs=1e-4)  # textbook value

    page = render_page(page_data(RatingsBook(store), tmp_path))
    plots = svgs(page)
    for label, x_of, parse in (("training samples", lambda e: e.samples, unsi),
                               ("time since the first rated game (h:mm)", lambda e: e.hours, unclock)):
        svg = plots[f"win rate against GNU Go over {label}"]
        assert_finite(ET.tostring(svg, encoding="unicode"))
        x_px, y_px = axis_map(ticks(svg, "x-tick"), parse), axis_map(ticks(svg, "y-tick"), float)
        points = plotted(svg)
        assert set(points) == set(want)
        for key, e in want.items():
            cx, cy, y_low, y_high = points[key]
            assert cy == pytest.approx(y_px(e.rate), abs=0.11)
            assert sorted((y_low, y_high)) == pytest.approx(sorted((y_px(e.low), y_px(e.high))), abs=0.11)
            assert abs(cx - x_px(x_of(e))) <= 3.0  # the levels of one version sit 5 px apart
        legend = [t.text for g in svg.iter(f"{SVG}g") if g.get("class") == "legend" for t in g.iter(f"{SVG}text")]
        assert legend == ["GNU Go level 1", "GNU Go level 5"]
    assert all(re.fullmatch(r"\d+:\d\d", label) for label, _ in
               ticks(plots["win rate against GNU Go over time since the first rated game (h:mm)"], "x-tick"))
    # The match table: one row per version and level, newest version first.
    rows = re.findall(r'<tr class="match" data-version="(\d+)" data-level="(\d+)">(.*?)</tr>', page)
    assert [(int(v), int(level)) for v, level, _ in rows] == sorted(want, key=lambda k: (-k[0], k[1]))
    for v, level, cells in rows:
        e = want[(int(v), int(level))]
        texts = re.findall(r"<td[^>]*>(.*?)</td>", cells)
        assert texts[:9] == [f"tengen-v{v}", level, str(e.games), f"{e.wins}-{e.losses}-{e.draws}", f"{e.rate:.2f}",
                             f"{e.low:.2f} &ndash; {e.high:.2f}", f"{e.samples:,}",
                             f"{T0 + timedelta(hours=e.hours):%Y-%m-%d %H:%M:%S}", clock(e.hours)]


def test_time_ticks_read_hours_and_minutes() -> None:
    assert [clock(h) for h in (0.0, 0.25, 1.5, 26.0 + 5 / 60)] == ["0:00", "0:15", "1:30", "26:05"]
    assert [clock(t) for t in time_ticks(0.0, 2.0)] == ["0:00", "0:20", "0:40", "1:00", "1:20", "1:40", "2:00"]
    assert [clock(t) for t in time_ticks(-0.004, 0.1)] == ["0:00", "0:02", "0:04", "0:06"]
    for lo, hi in ((0.0, 0.01), (0.1, 7.9), (3.0, 300.0)):
        got = time_ticks(lo, hi)
        assert 1 <= len(got) <= 7 and all(lo - 1e-9 <= t <= hi + 1e-9 for t in got)
        assert all(abs(t * 60 - round(t * 60)) < 1e-9 for t in got)  # whole minutes


def test_reference_labels_stay_apart_and_off_the_points() -> None:
    """GNU Go levels 0 and 1 a few Elo apart, the newest version beside them (issue 38: their
    labels overlapped each other and the point): labels in the right margin, a line apart."""
    anchors = [row("gnugo-l0", 0.0, -30.0, 30.0, kind="anchor"), row("gnugo-l1", 6.0, -20.0, 40.0, kind="anchor")]
    svg = ET.fromstring(elo_plot([row("tengen-v1", -400.0, -500, -300, samples=0),
                                  row("tengen-v4", 3.0, -40.0, 50.0, samples=9000)], anchors))
    labels = {g.findtext(f"{SVG}text"): float(g.find(f"{SVG}text").get("y", "nan"))
              for g in svg.iter(f"{SVG}g") if g.get("class") == "anchor"}
    assert set(labels) == {"GNU Go level 0", "GNU Go level 1"}
    assert abs(labels["GNU Go level 0"] - labels["GNU Go level 1"]) >= 14
    assert labels["GNU Go level 1"] < labels["GNU Go level 0"]  # the stronger one above
    for g in svg.iter(f"{SVG}g"):
        if g.get("class") == "anchor":
            assert float(g.find(f"{SVG}text").get("x", "0")) > LEFT + PLOT_W  # outside the plotted area
    for wanted in ([10.0] * 5, [300.0, 301.0, 302.0], [5.0, 100.0, 101.0]):
        placed = spread(wanted, 14.0, 8.0, 320.0)
        assert all(b - a >= 14.0 - 1e-9 for a, b in zip(placed, placed[1:]))
        assert all(8.0 <= y <= 320.0 for y in placed)


def test_elo_is_on_gnu_gos_scale(store: RatingsStore, tmp_path: Path) -> None:
    """Without a configured anchor the page holds the weakest GNU Go level played at 0, and says so."""
    store.report(strength_games() + OTHER_GAMES, PLAYERS)
    data = page_data(RatingsBook(store), tmp_path)
    assert data.leaderboard.summary.anchor == "gnugo-l1"
    assert next(r.elo for r in data.leaderboard.ratings if r.name == "gnugo-l1") == 0.0
    page = render_page(data)
    assert "Elo on GNU Go's scale: gnugo-l1 = 0 (GNU Go level 1)" in page
    # A configured anchor that has played stays the anchor.
    assert page_data(RatingsBook(store, anchor="gnugo-l5"), tmp_path).leaderboard.summary.anchor == "gnugo-l5"
    # No GNU Go level rated yet: the mean, and the heading says that.
    empty = RatingsStore(f"sqlite:///{tmp_path / 'other.sqlite'}")
    empty.report(OTHER_GAMES[:2], PLAYERS)
    other = page_data(RatingsBook(empty), None)
    empty.close()
    assert other.leaderboard.summary.anchor == ""
    assert "Elo with the mean held at 0 (no GNU Go level rated yet)" in render_page(other)
    assert "No games against GNU Go yet" in render_page(other)


def test_gating_decisions_newest_first(store: RatingsStore, tmp_path: Path) -> None:
    store.report(strength_games(), PLAYERS)
    decisions = tmp_path / "gating" / "decisions.jsonl"
    for i, (candidate, promoted) in enumerate((("candidate-000000040000", 2), ("candidate-000000060000", None))):
        append_line(decisions, {"candidate": candidate, "opponent_version": 1 + (i > 0), "wins": 6 - 3 * i,
                                "losses": 2 + 3 * i, "draws": i, "games": 8 + i, "promoted": promoted is not None,
                                "promoted_version": promoted, "reason": f"reason {i} <b>",
                                "time": (T0 + timedelta(minutes=30 + 10 * i)).timestamp()})
    with open(decisions, "a") as f:
        f.write('{"candidate": "torn')  # a crash mid-write
    assert [d.candidate for d in read_decisions(tmp_path)] == ["candidate-000000040000", "candidate-000000060000"]
    page = render_page(page_data(RatingsBook(store), tmp_path))
    rows = re.findall(r'<tr class="decision">(.*?)</tr>', page)
    assert len(rows) == 2
    newest = re.findall(r"<td[^>]*>(.*?)</td>", rows[0])
    assert newest == ["2026-12-01 09:40:00", "0:40", "candidate-000000060000", "v2", "3-5-1 of 9", "rejected",
                      "reason 1 &lt;b&gt;"]
    assert re.findall(r"<td[^>]*>(.*?)</td>", rows[1])[4:6] == ["6-2 of 8", "promoted as v2"]


def progress(**changes: object) -> dict:
    return {"updated": time.time(), "elapsed_s": 6300.0, "duration_s": 7200.0, "samples": 1_234_567,
            "games_played": 23_456, "games_per_s": 3.21, **changes}


def loop_progress(elapsed_s: float = 6300.0, age_s: float = 0.0, **changes: object) -> LoopProgress:
    """The services' figures as tengen.loop.progress sums them, the run begun `elapsed_s` ago."""
    now = time.time()
    figures = dict(updated=now - age_s, run_began=now - elapsed_s, samples=1_234_567, samples_per_s=412.0,
                   games=23_456, window_rows=250_000, loss=3.217, games_per_s=3.21, positions_per_s=180.4, workers=2,
                   version=12, boards="7x7", machine="AMD EPYC, 2 cores", commit="abc")
    figures.update(changes)
    return LoopProgress(**figures)  # type: ignore[arg-type]


def test_progress_as_the_services_publish_it(store: RatingsStore, tmp_path: Path) -> None:
    """The page shows the services' figures (tengen.progress) in every deployment, the duration
    only where `tengen run` wrote run.json, says when they are stale, and without any report says
    so."""
    store.report(strength_games(), PLAYERS)
    page = render_page(page_data(RatingsBook(store), tmp_path, progress=loop_progress()))
    assert re.search(r'<span id="elapsed">1:45:0\d</span>', page)  # no duration: compose, Kubernetes
    assert '<span id="samples">1,234,567</span>' in page and '<span id="samples-per-s">412</span>' in page
    assert '<span id="games">23,456</span>' in page and '<span id="games-per-s">3.21</span>' in page
    assert '<span id="positions-per-s">180.4</span>' in page and "by 2 workers" in page
    assert '<span id="playing">v12 on 7x7</span>' in page and "last loss 3.217" in page
    assert "on AMD EPYC, 2 cores" in page and 'class="stale"' not in page
    # `tengen run` adds the duration it was given.
    config = load_config("tiny")
    run = LocalRun(RunOptions("tiny", config, tmp_path, workers=1, duration_s=7200.0))
    run.progress = RunProgress(time.time(), 6300.0, 7200.0, 1_234_567, 23_456, 3.21)
    run._write_state()
    assert read_run_progress(tmp_path) == run.progress
    page = render_page(page_data(RatingsBook(store), tmp_path, progress=loop_progress()))
    assert re.search(r'<span id="elapsed">1:45:0\d</span> &middot; this <code>tengen run</code> '
                     r'<span id="this-run">1:45:0\d of 2:00:00</span>', page)
    page = render_page(page_data(RatingsBook(store), tmp_path, progress=loop_progress(age_s=600)))
    assert "These figures are 0:10:00 old" in page
    # Figures not reported yet show as "-", never as a number.
    page = render_page(page_data(RatingsBook(store), tmp_path, progress=loop_progress(samples=None, version=None)))
    assert '<span id="samples">-</span>' in page and '<span id="playing">-</span>' in page
    for broken in ({"progress": progress(samples="many")}, {"progress": progress(elapsed_s=None)}, [1]):
        (tmp_path / "run.json").write_text(json.dumps(broken))
        assert read_run_progress(tmp_path) is None
    page = render_page(page_data(RatingsBook(store), tmp_path))
    assert "No service has published the run's progress" in page and 'id="elapsed"' not in page
    assert "newest rated version v3 (90k samples)" in page


def test_api_curve_is_what_the_page_refreshes_from(store: RatingsStore, tmp_path: Path) -> None:
    games = strength_games() + OTHER_GAMES
    store.report(games, PLAYERS)
    server = RatingsServer(RatingsApi(RatingsBook(store), "token", loop_progress), "127.0.0.1", 0, 0,
                           games_dir=tmp_path, page_refresh_s=2.5)
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/api/curve", timeout=10) as response:
            assert response.headers["Cache-Control"] == "no-store"
            data = json.loads(response.read())
        with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/", timeout=10) as response:
            page = response.read().decode()
    finally:
        server.stop(grace=1.0)
    want = expected_curve(games)
    got = {(m["version"], m["level"]): m for m in data["matches"]}
    assert set(got) == set(want)
    for key, e in want.items():
        m = got[key]
        assert (m["games"], m["wins"], m["draws"], m["training_samples"]) == (e.games, e.wins, e.draws, e.samples)
        assert (m["rate"], m["rate_low"], m["rate_high"], m["hours"]) == pytest.approx((e.rate, e.low, e.high, e.hours))
    assert data["elo_anchor"] == "gnugo-l1" and data["origin"] == T0.isoformat()
    assert data["progress"]["samples"] == 1_234_567 and data["progress"]["elapsed_s"] == pytest.approx(6300, abs=30)
    assert set(data["html"]) == {"progress", "curve", "matches", "gating", "elo"}
    for section, html in data["html"].items():
        assert f'<section id="{section}">' in page  # the script puts each where the page has it
    assert "window.setInterval" in page and '"/api/curve"' in page and "}, 2500);" in page


def test_plot_edge_cases() -> None:
    anchors = [row("gnugo-l1", 0.0, -50.0, 50.0, kind="anchor"), row("gnugo-l2", 200.0, 150.0, 250.0, kind="anchor"),
               unrated("gnugo-l9", kind="anchor")]
    assert "No rated model versions" in elo_plot([])
    assert "No rated model versions" in elo_plot([unrated("v1")], anchors)
    single = elo_plot([row("v1", 0.0, -20.0, 20.0, samples=1000)])  # one point: no zero-width axis
    assert single.count('<g class="version">') == 1
    assert_finite(single)
    same_x = elo_plot([row("v1", 0.0, -20.0, 20.0, samples=5), row("v2", 0.0, -20.0, 20.0, samples=5)], anchors)
    assert same_x.count('<g class="version">') == 2 and same_x.count('<g class="anchor">') == 2
    assert_finite(same_x)
    with_unrated = elo_plot([row("v1", 0.0, -20.0, 20.0, samples=1), unrated("v2", samples=2)])
    assert with_unrated.count('<g class="version">') == 1
    assert_finite(with_unrated)
    # Without training-sample counts the x axis is the version order.
    ordered = elo_plot([row("v1", 0.0, -20.0, 20.0), row("v2", 50.0, 30.0, 70.0, samples=2000)])
    assert "model version (training order)" in ordered
    assert_finite(ordered)
    assert nice_ticks(-37.0, 412.0) == [0.0, 100.0, 200.0, 300.0, 400.0]
    # An unrated anchor's NaN rating reaches neither the plot nor the table.
    summary = FitSummary("gnugo-l1", 0.0, 2.0, 0.95, 12)
    page = render_page(PageData(Leaderboard([row("v1", 0, -1, 1, samples=3)] + anchors, summary),
                                History([row("v1", 0, -1, 1, samples=3)], summary), [], [], None, None, None, False))
    assert_finite(page)


def test_one_version_against_one_level(store: RatingsStore, tmp_path: Path) -> None:
    """The first measurement alone (v1's games at one level, one time): both plots draw it."""
    games = [GameReport("strength-v1-l1-x-001", "tengen-v1", "gnugo-l1", "W", "strength", T0)]
    store.report(games, [PlayerInfo("tengen-v1", "model", 0), PlayerInfo("gnugo-l1", "anchor")])
    page = render_page(page_data(RatingsBook(store), tmp_path))
    for svg in svgs(page).values():
        assert_finite(ET.tostring(svg, encoding="unicode"))
    assert page.count('<g class="point"') == 2


def test_huge_training_sample_counts() -> None:
    """Counts up to the store's bound (2**63 - 1), where floats are 2048 apart: one version made
    the page fail (log10 of a zero tick step), a count past 2**53 hung it (ticks that never
    reached the axis' end)."""
    cases = [
        [row("v1", 0.0, -20.0, 20.0, samples=2**63 - 1)],
        [row("v1", 0.0, -20.0, 20.0, samples=2**53 + 1)],
        [row("v1", 0.0, -20.0, 20.0, samples=2**63 - 2), row("v2", 50.0, 30.0, 70.0, samples=2**63 - 1)],
        [row("v1", 0.0, -20.0, 20.0, samples=0), row("v2", 50.0, 30.0, 70.0, samples=2**63 - 1)],
    ]
    for points in cases:
        svg = elo_plot(points)
        assert svg.count('<g class="version">') == len(points)
        assert_finite(svg)
    for lo, hi in [(2.0**63, 2.0**63), (2.0**63 - 4096, 2.0**63), (2.0**53, 2.0**53 + 2)]:
        got = nice_ticks(lo, hi)
        assert 1 <= len(got) <= 7 and got == sorted(set(got))
