"""The ratings page's plots: Elo against training samples and against hours, GNU Go reference lines."""
from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path

from tengen.ratings.book import FitSummary, History, Leaderboard, RatingRow, RatingsBook
from tengen.ratings.page import elo_plot, hours_axis, nice_ticks, render_page, samples_axis
from tengen.ratings.records import GameReport, PlayerInfo
from tengen.ratings.store import RatingsStore

SVG = "{http://www.w3.org/2000/svg}"
START = datetime(2026, 1, 1, tzinfo=UTC)
NAN = float("nan")


def row(
    name: str, elo: float, low: float, high: float, samples: int | None = None, hours: float = 0.0, kind: str = "model"
) -> RatingRow:
    return RatingRow(name, kind, 1, True, elo, 10.0, low, high, 4, 2, 2, 0, samples, START + timedelta(hours=hours))


def unrated(name: str, kind: str = "model", samples: int | None = None) -> RatingRow:
    return RatingRow(name, kind, 0, False, NAN, NAN, NAN, NAN, 0, 0, 0, 0, samples, START)


def svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg.*?</svg>", html, re.S)]


def anchor_lines(svg: ET.Element) -> dict[str, float]:
    """Label -> y pixel of each dashed reference line."""
    lines = {}
    for group in svg.iter(f"{SVG}g"):
        if group.get("class") == "anchor":
            line = group.find(f"{SVG}line")
            assert line is not None and line.get("stroke-dasharray") and line.get("y1") == line.get("y2")
            lines[group.findtext(f"{SVG}text")] = float(line.get("y1", "nan"))
    return lines


def version_points(svg: ET.Element) -> dict[str, tuple[float, float]]:
    """Version name -> (cx, cy) of its dot."""
    points = {}
    for group in svg.iter(f"{SVG}g"):
        if group.get("class") == "version":
            circle = group.find(f"{SVG}circle")
            assert circle is not None
            points[group.findtext(f"{SVG}title", "").split(":")[0]] = (
                float(circle.get("cx", "nan")),
                float(circle.get("cy", "nan")),
            )
    return points


def assert_finite(svg: str) -> None:
    assert "nan" not in svg.lower()
    for number in re.findall(r'(?:x|y|x1|x2|y1|y2|cx|cy|points)="([^"]*)"', svg):
        assert all(math.isfinite(float(v)) for v in re.split(r"[ ,]+", number.strip())), number


# Three versions 2 h apart; GNU Go level 1 at 0 and level 2 at 200 with v2 (100) between them.
# Ratings span [-260, 300], padded by 5% (28) to [-288, 328]: 308 px of plot height for 616 Elo,
# 0.5 px per Elo from y = 20 at 328. Hours 0..4 padded by 4% to [-0.16, 4.16] over 664 px from x = 72.
MODELS = [
    row("v1", -200.0, -260.0, -140.0, samples=0, hours=0.0),
    row("v2", 100.0, 40.0, 160.0, samples=1000, hours=2.0),
    row("v3", 250.0, 200.0, 300.0, samples=2000, hours=4.0),
]
ANCHORS = [
    row("gnugo-l1", 0.0, -50.0, 50.0, kind="anchor"),
    row("gnugo-l2", 200.0, 150.0, 250.0, kind="anchor"),
    unrated("gnugo-l9", kind="anchor"),  # no games yet: no line
]
SUMMARY = FitSummary("gnugo-l1", 0.0, 2.0, 0.95, 12)


def test_both_plots_with_gnugo_reference_lines() -> None:
    page = render_page(Leaderboard(MODELS + ANCHORS, SUMMARY), History(MODELS, SUMMARY))
    assert_finite(page)  # the unrated anchor's NaN rating reaches neither a plot nor the table
    by_samples, by_hours = svgs(page)
    assert by_samples.get("aria-label") == "Elo against training samples"
    assert by_hours.get("aria-label") == "Elo against hours since the first model version"
    for svg in (by_samples, by_hours):
        lines = anchor_lines(svg)
        assert lines == {"GNU Go level 1": 184.0, "GNU Go level 2": 84.0}  # 20 + (328 - Elo) / 2
        points = version_points(svg)
        assert list(points) == ["v1", "v2", "v3"]
        # Stronger is higher (smaller y): level 2 above v2 above level 1 above v1.
        assert lines["GNU Go level 2"] < points["v2"][1] == 134.0 < lines["GNU Go level 1"] < points["v1"][1]
    # v2 is the middle of both x ranges: 1000 of [-80, 2080] samples, 2 h of [-0.16, 4.16].
    assert version_points(by_samples)["v2"][0] == 404.0
    assert {name: x for name, (x, _) in version_points(by_hours).items()} == {"v1": 96.6, "v2": 404.0, "v3": 711.4}


def test_far_anchor_widens_the_range() -> None:
    """An anchor far above every version still gets its line inside the plot."""
    svg = ET.fromstring(elo_plot(MODELS[:1], hours_axis, [row("gnugo-l10", 1000.0, 900.0, 1100.0, kind="anchor")]))
    (y,) = anchor_lines(svg).values()
    assert 20.0 < y < version_points(svg)["v1"][1] < 20.0 + 308.0


def test_hours_axis_follows_creation_not_training_order() -> None:
    axis = hours_axis([row("v1", 0, -1, 1, hours=1.5), row("v2", 0, -1, 1, hours=0.5)])
    assert axis.values == [1.0, 0.0]
    # The line joins the versions left to right.
    svg = elo_plot([row("v1", 0, -1, 1, hours=1.5), row("v2", 10, 9, 11, hours=0.5)], hours_axis)
    xs = [float(p.split(",")[0]) for p in re.search(r'polyline points="([^"]*)"', svg).group(1).split()]
    assert xs == sorted(xs)


def test_plot_edge_cases() -> None:
    for axis in (samples_axis, hours_axis):
        assert "No rated model versions" in elo_plot([], axis)
        assert "No rated model versions" in elo_plot([unrated("v1")], axis, ANCHORS)
        single = elo_plot([row("v1", 0.0, -20.0, 20.0, samples=1000)], axis)  # one point: no zero-width axis
        assert single.count('<g class="version">') == 1
        assert_finite(single)
        # Same samples and same creation time: every version at one x.
        same_x = elo_plot(
            [row("v1", 0.0, -20.0, 20.0, samples=5), row("v2", 0.0, -20.0, 20.0, samples=5)], axis, ANCHORS
        )
        assert same_x.count('<g class="version">') == 2 and same_x.count('<g class="anchor">') == 2
        assert_finite(same_x)
        with_unrated = elo_plot([row("v1", 0.0, -20.0, 20.0, samples=1), unrated("v2", samples=2)], axis)
        assert with_unrated.count('<g class="version">') == 1
        assert_finite(with_unrated)
    # Without training-sample counts the x axis is the version order.
    ordered = elo_plot([row("v1", 0.0, -20.0, 20.0), row("v2", 50.0, 30.0, 70.0, samples=2000)])
    assert "model version (training order)" in ordered
    assert_finite(ordered)
    assert nice_ticks(-37.0, 412.0) == [0.0, 100.0, 200.0, 300.0, 400.0]


def test_page_from_a_ratings_book(tmp_path: Path) -> None:
    """Through a real store: anchors come from the leaderboard (history holds only model versions)."""
    store = RatingsStore(f"sqlite:///{tmp_path / 'ratings.sqlite'}")
    players = [
        PlayerInfo("m-v1", "model", 0),
        PlayerInfo("m-v2", "model", 5000),
        PlayerInfo("gnugo-l0", "anchor"),
        PlayerInfo("gnugo-l1", "anchor"),
    ]
    games = []
    for i in range(6):  # gnugo-l1 > m-v2 > gnugo-l0 > m-v1, each winning 5 of 6
        for strong, weak in (("gnugo-l1", "m-v2"), ("m-v2", "gnugo-l0"), ("gnugo-l0", "m-v1")):
            games.append(GameReport(f"{strong}-{weak}-{i}", strong, weak, "W" if i == 0 else "B"))
    store.report(games, players, max_batch=None)
    book = RatingsBook(store, anchor="gnugo-l1")
    board, history = book.leaderboard(), book.history()
    store.close()
    assert [p.name for p in history.points] == ["m-v1", "m-v2"]
    page = render_page(board, history)
    assert_finite(page)
    for svg in svgs(page):
        lines, points = anchor_lines(svg), version_points(svg)
        assert lines["GNU Go level 1"] < points["m-v2"][1] < lines["GNU Go level 0"] < points["m-v1"][1]


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
        svg = elo_plot(points, samples_axis)
        assert svg.count('<g class="version">') == len(points)
        assert_finite(svg)
    for lo, hi in [(2.0**63, 2.0**63), (2.0**63 - 4096, 2.0**63), (2.0**53, 2.0**53 + 2)]:
        ticks = nice_ticks(lo, hi)
        assert 1 <= len(ticks) <= 7 and ticks == sorted(set(ticks))
