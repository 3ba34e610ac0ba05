"""The HTML page of the ratings service: leaderboard table and two Elo plots.

The plots are inline SVG drawn here (no JavaScript, no plotting library): each model version's
rating with its confidence interval as a vertical bar, once against the training samples it had
seen and once against wall-clock hours, with each rated anchor (GNU Go levels) as a dashed
horizontal line so the loop's strength reads on a fixed scale.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

from tengen.loop.messages import player_version
from tengen.ratings.book import History, Leaderboard, RatingRow

WIDTH, HEIGHT = 760, 380
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 20, 52
LABEL_GAP = 13  # px between two reference-line labels (11 px text)
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    # At least a few float steps per tick: near 2**63 (a large training-sample count) lo + 1 is
    # lo itself, and a step below the float spacing would give ticks that never reach hi.
    min_span = 4 * count * math.ulp(max(abs(lo), abs(hi)))
    if hi - lo < min_span:
        hi = lo + min_span
    raw = (hi - lo) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    last = math.floor((hi + 1e-9 * step - first) / step)  # at most count + 1 ticks
    return [round(first + i * step, 10) for i in range(last + 1)]


def si(value: float) -> str:
    """1500 -> 1.5k, 2000000 -> 2M."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def rated(row: RatingRow) -> bool:
    """Whether a row can be drawn: unrated rows carry NaN ratings, which would put NaN in the SVG."""
    return row.rated and all(math.isfinite(v) for v in (row.elo, row.elo_low, row.elo_high))


@dataclass(frozen=True)
class Axis:
    """The x position of each plotted version and how the x axis is labelled."""

    label: str
    values: list[float]  # one per point, in the points' order
    tick_label: Callable[[float], str]
    at_values: bool = False  # ticks at the values themselves (version order), not at round numbers


def samples_axis(points: Sequence[RatingRow]) -> Axis:
    """Training samples, or version order when some version has no training-sample count."""
    counts = [p.training_samples for p in points if p.training_samples is not None]
    if len(counts) == len(points):
        return Axis("training samples", [float(c) for c in counts], si)
    return Axis("model version (training order)", [float(i) for i in range(1, len(points) + 1)],
                lambda x: f"{x:.0f}", at_values=True)


def hours_axis(points: Sequence[RatingRow]) -> Axis:
    """Wall-clock hours since the earliest version was first recorded by ratings."""
    start = min(p.created_at for p in points)
    hours = [(p.created_at - start).total_seconds() / 3600.0 for p in points]
    return Axis("hours since the first model version", hours, lambda x: f"{x:g}")


@dataclass(frozen=True)
class Scale:
    """Data (x, Elo) to SVG pixels, padded so end points and intervals stay off the frame."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float

    @classmethod
    def covering(cls, xs: Sequence[float], ys: Sequence[float]) -> Scale:
        x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)
        # One x: pad around it, by more than the float spacing there (no zero-width axis).
        x_pad = 0.04 * (x_hi - x_lo) if x_hi > x_lo else max(1.0, 0.04 * abs(x_lo))
        y_pad = max(10.0, 0.05 * (y_hi - y_lo))
        return cls(x_lo - x_pad, x_hi + x_pad, y_lo - y_pad, y_hi + y_pad)

    def px(self, x: float) -> float:
        return LEFT + (x - self.x_lo) / (self.x_hi - self.x_lo) * PLOT_W

    def py(self, y: float) -> float:
        return TOP + (self.y_hi - y) / (self.y_hi - self.y_lo) * PLOT_H


def anchor_label(name: str) -> str:
    """gnugo-l1 -> GNU Go level 1; other anchors keep their name."""
    match = re.fullmatch(r"gnugo-l(\d+)", name)
    return f"GNU Go level {match.group(1)}" if match else name


def version_number(row: RatingRow) -> int | None:
    """N of a model version's ratings name `<model>-vN` (tengen.loop.messages.version_player)."""
    return player_version(row.name) if row.kind == "model" else None


def games_url(row: RatingRow) -> str | None:
    """The page of a model version's games (tengen.ratings.games_page), or None."""
    version = version_number(row)
    return None if version is None else f"/games/v{version}"


def reference_anchors(board: Leaderboard) -> list[RatingRow]:
    """The rated anchors (GNU Go levels and any other fixed reference), drawn as lines."""
    return [r for r in board.ratings if r.kind == "anchor" and rated(r)]


def elo_plot(
    points: Sequence[RatingRow],
    axis: Callable[[Sequence[RatingRow]], Axis] = samples_axis,
    anchors: Sequence[RatingRow] = (),
    links: bool = False,
) -> str:
    """SVG of each version's rating (with interval bars) against `axis`, and each anchor's rating
    as a dashed horizontal line; with `links`, each version's point links to its games."""
    points = [p for p in points if rated(p)]
    if not points:
        return '<p class="empty">No rated model versions yet.</p>'
    anchors = [a for a in anchors if rated(a)]
    x_axis = axis(points)
    # The anchors' ratings are in the y range so their lines show however far the versions are.
    scale = Scale.covering(
        x_axis.values,
        [p.elo_low for p in points] + [p.elo_high for p in points] + [a.elo for a in anchors],
    )
    px, py = scale.px, scale.py
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="Elo against {escape(x_axis.label)}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" fill="#fafafa" stroke="#999"/>',
    ]
    for y in nice_ticks(scale.y_lo, scale.y_hi):
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#e3e3e3"/>'
            f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end" font-size="11">{y:g}</text>'
        )
    for tick in sorted(set(x_axis.values)) if x_axis.at_values else nice_ticks(scale.x_lo, scale.x_hi):
        parts.append(
            f'<line x1="{px(tick):.1f}" x2="{px(tick):.1f}" y1="{TOP + PLOT_H}" y2="{TOP + PLOT_H + 4}" stroke="#666"/>'
            f'<text x="{px(tick):.1f}" y="{TOP + PLOT_H + 17}" text-anchor="middle" font-size="11">'
            f"{x_axis.tick_label(tick)}</text>"
        )
    parts.append(
        f'<text x="{LEFT + PLOT_W / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle" font-size="12">'
        f'{escape(x_axis.label)}</text>'
        f'<text transform="translate(16 {TOP + PLOT_H / 2:.1f}) rotate(-90)" text-anchor="middle" '
        f'font-size="12">Elo</text>'
    )
    label_y = -math.inf  # labels of lines closer than a line of text go below each other
    for a in sorted(anchors, key=lambda a: py(a.elo)):
        label = escape(anchor_label(a.name))
        tip = escape(f"{a.name}: {a.elo:.0f} [{a.elo_low:.0f}, {a.elo_high:.0f}], {a.games} games")
        label_y = max(py(a.elo) - 4, label_y + LABEL_GAP)
        parts.append(
            f'<g class="anchor"><title>{tip}</title>'
            f'<line x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{py(a.elo):.1f}" y2="{py(a.elo):.1f}" '
            f'stroke="#b5523b" stroke-dasharray="6 4"/>'
            f'<text x="{LEFT + PLOT_W - 4}" y="{label_y:.1f}" text-anchor="end" font-size="11" '
            f'fill="#b5523b">{label}</text></g>'
        )
    # Left to right: creation order need not follow training order.
    ordered = sorted(zip(x_axis.values, points), key=lambda xp: xp[0])
    line = " ".join(f"{px(v):.1f},{py(p.elo):.1f}" for v, p in ordered)
    parts.append(f'<polyline points="{line}" fill="none" stroke="#3a6ea5" stroke-width="1.5"/>')
    for v, p in ordered:
        cx = px(v)
        tip = escape(f"{p.name}: {p.elo:.0f} [{p.elo_low:.0f}, {p.elo_high:.0f}], {p.games} games")
        url = games_url(p) if links else None
        parts.append(
            (f'<a href="{url}">' if url else "") + f'<g class="version"><title>{tip}</title>'
            f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{py(p.elo_low):.1f}" y2="{py(p.elo_high):.1f}" stroke="#3a6ea5"/>'
            f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{py(p.elo_low):.1f}" y2="{py(p.elo_low):.1f}" '
            f'stroke="#3a6ea5"/>'
            f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{py(p.elo_high):.1f}" y2="{py(p.elo_high):.1f}" '
            f'stroke="#3a6ea5"/>'
            f'<circle cx="{cx:.1f}" cy="{py(p.elo):.1f}" r="3.5" fill="#1f4e79"/></g>' + ("</a>" if url else "")
        )
    parts.append("</svg>")
    return "\n".join(parts)


def table_row(r: RatingRow, links: bool = False) -> str:
    # An unrated row's ratings are NaN: blank cells rather than "nan".
    elo = f"<td>{r.elo:.0f}</td><td>{r.elo_low:.0f} &ndash; {r.elo_high:.0f}</td>" if rated(r) else "<td></td><td></td>"
    samples = "" if r.training_samples is None else si(r.training_samples)
    url = games_url(r) if links else None
    watch = f'<td><a class="games" href="{url}">games</a></td>' if url else ("<td></td>" if links else "")
    return (
        f"<tr><td>{r.rank}</td><td>{escape(r.name)}</td><td>{escape(r.kind)}</td>{elo}"
        f"<td>{r.games}</td><td>{r.wins}</td><td>{r.losses}</td><td>{r.draws}</td><td>{samples}</td>{watch}</tr>"
    )


def render_page(board: Leaderboard, history: History, games: bool = False) -> str:
    """The page; with `games`, each model version links to its games (its row and its points)."""
    s = board.summary
    anchor = f"{escape(s.anchor)} = {s.anchor_elo:g}" if s.anchor else f"mean = {s.anchor_elo:g}"
    rows = "\n".join(table_row(r, games) for r in board.ratings)
    level = f"{s.confidence * 100:g}%"
    anchors = reference_anchors(board)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tengen ratings</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; }}
td, th {{ padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; }}
td:nth-child(2), td:nth-child(3), th:nth-child(2), th:nth-child(3) {{ text-align: left; }}
.note {{ color: #666; font-size: 90%; }}
</style></head>
<body>
<h1>tengen ratings</h1>
<p class="note">Bayesian Elo over {s.total_games} games; prior {s.prior_draws:g} virtual draws;
anchor {anchor}; intervals at {level}.</p>
<h2>Elo over training</h2>
{elo_plot(history.points, samples_axis, anchors, games)}
<h2>Elo over wall-clock time</h2>
{elo_plot(history.points, hours_axis, anchors, games)}
<h2>Leaderboard</h2>
<table>
<tr><th>#</th><th>player</th><th>kind</th><th>Elo</th><th>{level} interval</th><th>games</th>
<th>wins</th><th>losses</th><th>draws</th><th>training samples</th>{"<th>watch</th>" if games else ""}</tr>
{rows}
</table>
<p class="note">JSON: <a href="/api/leaderboard">/api/leaderboard</a>, <a href="/api/history">/api/history</a>,
/api/player/NAME. Metrics: <a href="/metrics">/metrics</a>.{' Games: <a href="/games">/games</a>.' if games else ""}</p>
</body></html>
"""
