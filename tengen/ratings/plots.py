"""The ratings page's plots, inline SVG drawn here (no plotting library, nothing run in the browser).

- The learning curve: each model version's win rate against each GNU Go level (draws half) with
  its 95% Wilson interval as a vertical bar, one coloured series per level, against training
  samples or against time (h:mm).
- Elo: each version's rating with its interval against training samples, each rated anchor (GNU
  Go's levels) as a dashed horizontal line.

Labels stay legible: the series' legend and the reference lines' labels are in the right margin,
outside the plotted area (no point can sit under them), at least a line of text apart.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape

from tengen.loop.messages import anchor_level, player_version
from tengen.ratings.book import RatingRow

WIDTH, HEIGHT = 780, 380
LEFT, RIGHT, TOP, BOTTOM = 64, 132, 20, 52  # the right margin holds the legend or the line labels
LABEL_GAP = 14  # px between two labels in the margin (11 px text)
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22", "#393b79")  # the GNU Go levels shown, weakest first (at most 11: levels 0..10)
TIME_STEPS_MIN = (1, 2, 5, 10, 15, 20, 30, 60, 120, 180, 240, 360, 480, 720, 1440)


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


def time_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Ticks (in hours) at whole minutes or hours, at most count + 1: 0:15, 0:30, never 0.25."""
    span = max(hi - lo, 1e-9) * 60
    step = next((s for s in TIME_STEPS_MIN if span / s <= count), 1440 * math.ceil(span / count / 1440))
    first = math.ceil(lo * 60 / step)
    return [k * step / 60 for k in range(first, math.floor(hi * 60 / step + 1e-9) + 1)]


def clock(hours: float) -> str:
    """1.5 -> 1:30 (hours and minutes)."""
    minutes = round(hours * 60)
    return f"{'-' if minutes < 0 else ''}{abs(minutes) // 60}:{abs(minutes) % 60:02d}"


def si(value: float) -> str:
    """1500 -> 1.5k, 2000000 -> 2M."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def spread(ys: Sequence[float], gap: float, low: float, high: float) -> list[float]:
    """Label positions for wanted positions `ys` (ascending): each at least `gap` below the one
    before, within [low, high] when they fit there."""
    placed: list[float] = []
    for y in ys:
        placed.append(max(y, placed[-1] + gap if placed else low))
    if placed:  # pushed past the bottom: move the run back up
        placed[-1] = min(placed[-1], high)
        for i in range(len(placed) - 2, -1, -1):
            placed[i] = min(placed[i], placed[i + 1] - gap)
    return placed


@dataclass(frozen=True)
class Axis:
    """How an x axis is labelled and where its ticks go."""

    label: str
    tick_label: Callable[[float], str] = si
    ticks: Callable[[float, float], list[float]] = nice_ticks


SAMPLES = Axis("training samples")
TIME = Axis("time since the first rated game (h:mm)", clock, time_ticks)


@dataclass(frozen=True)
class Scale:
    """Data (x, y) to SVG pixels."""

    x_lo: float
    x_hi: float
    y_lo: float
    y_hi: float

    @staticmethod
    def pad(lo: float, hi: float, share: float, least: float) -> tuple[float, float]:
        """[lo, hi] widened so end points stay off the frame; one value gets a range around it,
        wider than the float spacing there (no zero-width axis)."""
        pad = share * (hi - lo) if hi > lo else max(least, share * abs(lo))
        return lo - pad, hi + pad

    def px(self, x: float) -> float:
        return LEFT + (x - self.x_lo) / (self.x_hi - self.x_lo) * PLOT_W

    def py(self, y: float) -> float:
        return TOP + (self.y_hi - y) / (self.y_hi - self.y_lo) * PLOT_H


def frame(scale: Scale, axis: Axis, y_ticks: Sequence[float], y_label: str, aria: str,
          y_tick_label: Callable[[float], str] = lambda y: f"{y:g}") -> list[str]:
    """The SVG's opening, the plotted area, the grid and both axes' ticks and labels."""
    px, py = scale.px, scale.py
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(aria)}">',
        f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" fill="#fafafa" stroke="#999"/>',
    ]
    for y in y_ticks:
        parts.append(
            f'<line class="y-tick" x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
            'stroke="#e3e3e3"/>'
            f'<text class="y-tick" x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end" font-size="11">'
            f"{y_tick_label(y)}</text>")
    for tick in axis.ticks(scale.x_lo, scale.x_hi):
        parts.append(
            f'<line x1="{px(tick):.1f}" x2="{px(tick):.1f}" y1="{TOP + PLOT_H}" y2="{TOP + PLOT_H + 4}" stroke="#666"/>'
            f'<text class="x-tick" x="{px(tick):.1f}" y="{TOP + PLOT_H + 17}" text-anchor="middle" font-size="11">'
            f"{axis.tick_label(tick)}</text>")
    parts.append(
        f'<text x="{LEFT + PLOT_W / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle" font-size="12">'
        f'{escape(axis.label)}</text>'
        f'<text transform="translate(14 {TOP + PLOT_H / 2:.1f}) rotate(-90)" text-anchor="middle" '
        f'font-size="12">{escape(y_label)}</text>')
    return parts


def interval_bar(cx: float, y_low: float, y_high: float, colour: str) -> str:
    return (f'<line class="interval" x1="{cx:.1f}" x2="{cx:.1f}" y1="{y_low:.1f}" y2="{y_high:.1f}" stroke="{colour}"/>'
            f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y_low:.1f}" y2="{y_low:.1f}" stroke="{colour}"/>'
            f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{y_high:.1f}" y2="{y_high:.1f}" stroke="{colour}"/>')


# -- the learning curve ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RatePoint:
    """One version against one GNU Go level, at `x` on the plot's axis."""

    x: float
    level: int
    version: int
    rate: float
    low: float
    high: float
    tip: str  # the tooltip
    url: str | None = None  # its games


def winrate_plot(points: Sequence[RatePoint], axis: Axis) -> str:
    """Win rate (0 to 1) against `axis`, one series per GNU Go level with a legend in the margin;
    the levels' points of one version sit a few pixels apart so their bars do not cover each other."""
    if not points:
        return '<p class="empty">No games against GNU Go yet.</p>'
    levels = sorted({p.level for p in points})
    scale = Scale(*Scale.pad(min(p.x for p in points), max(p.x for p in points), 0.04, 1.0), -0.04, 1.04)
    px, py = scale.px, scale.py
    parts = frame(scale, axis, [0.0, 0.25, 0.5, 0.75, 1.0], "win rate against GNU Go",
                  f"win rate against GNU Go over {axis.label}")
    parts.append(f'<line x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{py(0.5):.1f}" y2="{py(0.5):.1f}" stroke="#999" '
                 'stroke-dasharray="3 3"/>')  # an even match

    def dodge(level: int) -> float:
        return (levels.index(level) - (len(levels) - 1) / 2) * 5.0

    def colour_of(level: int) -> str:
        return COLOURS[levels.index(level) % len(COLOURS)]

    for level in levels:
        series = sorted((p for p in points if p.level == level), key=lambda p: p.x)
        colour = colour_of(level)
        line = " ".join(f"{px(p.x) + dodge(level):.1f},{py(p.rate):.1f}" for p in series)
        parts.append(f'<polyline class="series" data-level="{level}" points="{line}" fill="none" '
                     f'stroke="{colour}" stroke-width="1.5"/>')
        for p in series:
            cx = px(p.x) + dodge(level)
            parts.append(
                (f'<a href="{p.url}">' if p.url else "")
                + f'<g class="point" data-level="{level}" data-version="{p.version}"><title>{escape(p.tip)}</title>'
                + interval_bar(cx, py(p.low), py(p.high), colour)
                + f'<circle cx="{cx:.1f}" cy="{py(p.rate):.1f}" r="3.5" fill="{colour}"/></g>'
                + ("</a>" if p.url else ""))
    x0 = LEFT + PLOT_W + 12
    for i, level in enumerate(levels):
        y = TOP + 10 + i * LABEL_GAP
        colour = colour_of(level)
        parts.append(f'<g class="legend" data-level="{level}"><line x1="{x0}" x2="{x0 + 16}" y1="{y}" y2="{y}" '
                     f'stroke="{colour}" stroke-width="2"/><circle cx="{x0 + 8}" cy="{y}" r="3" fill="{colour}"/>'
                     f'<text x="{x0 + 22}" y="{y + 4}" font-size="11">GNU Go level {level}</text></g>')
    parts.append("</svg>")
    return "\n".join(parts)


# -- Elo ---------------------------------------------------------------------------------------------
def rated(row: RatingRow) -> bool:
    """Whether a row can be drawn: unrated rows carry NaN ratings, which would put NaN in the SVG."""
    return row.rated and all(math.isfinite(v) for v in (row.elo, row.elo_low, row.elo_high))


def anchor_label(name: str) -> str:
    """gnugo-l1 -> GNU Go level 1; other anchors keep their name."""
    level = anchor_level(name)
    return name if level is None else f"GNU Go level {level}"


def games_url(row: RatingRow) -> str | None:
    """The page of a model version's games (tengen.ratings.games_page), or None."""
    version = player_version(row.name) if row.kind == "model" else None
    return None if version is None else f"/games/v{version}"


@dataclass(frozen=True)
class EloAxis:
    """Where each version goes on the Elo plot's x axis."""

    axis: Axis
    values: list[float] = field(default_factory=list)  # one per point, in the points' order


def samples_axis(points: Sequence[RatingRow]) -> EloAxis:
    """Training samples, or version order when some version has no training-sample count."""
    counts = [p.training_samples for p in points if p.training_samples is not None]
    if len(counts) == len(points):
        return EloAxis(SAMPLES, [float(c) for c in counts])
    order = [float(i) for i in range(1, len(points) + 1)]
    return EloAxis(Axis("model version (training order)", lambda x: f"{x:.0f}", lambda lo, hi: order), order)


def elo_plot(points: Sequence[RatingRow], anchors: Sequence[RatingRow] = (), links: bool = False) -> str:
    """SVG of each version's rating (with interval bars) against its training samples, and each
    anchor's rating as a dashed line labelled in the margin; with `links`, each version's point
    links to its games."""
    points = [p for p in points if rated(p)]
    if not points:
        return '<p class="empty">No rated model versions yet.</p>'
    anchors = sorted((a for a in anchors if rated(a)), key=lambda a: -a.elo)
    x_axis = samples_axis(points)
    # The anchors' ratings are in the y range so their lines show however far the versions are.
    ys = [p.elo_low for p in points] + [p.elo_high for p in points] + [a.elo for a in anchors]
    y_lo, y_hi = min(ys), max(ys)
    y_pad = max(10.0, 0.05 * (y_hi - y_lo))
    scale = Scale(*Scale.pad(min(x_axis.values), max(x_axis.values), 0.04, 1.0), y_lo - y_pad, y_hi + y_pad)
    px, py = scale.px, scale.py
    parts = frame(scale, x_axis.axis, nice_ticks(scale.y_lo, scale.y_hi), "Elo", f"Elo against {x_axis.axis.label}")
    label_ys = spread([py(a.elo) + 4 for a in anchors], LABEL_GAP, TOP + 8, TOP + PLOT_H + 4)
    for a, label_y in zip(anchors, label_ys):
        tip = escape(f"{a.name}: {a.elo:.0f} [{a.elo_low:.0f}, {a.elo_high:.0f}], {a.games} games")
        parts.append(
            f'<g class="anchor"><title>{tip}</title>'
            f'<line x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{py(a.elo):.1f}" y2="{py(a.elo):.1f}" '
            f'stroke="#b5523b" stroke-dasharray="6 4"/>'
            f'<polyline points="{LEFT + PLOT_W},{py(a.elo):.1f} {LEFT + PLOT_W + 6},{label_y - 4:.1f}" '
            f'fill="none" stroke="#b5523b"/>'
            f'<text x="{LEFT + PLOT_W + 9}" y="{label_y:.1f}" font-size="11" fill="#b5523b">'
            f'{escape(anchor_label(a.name))}</text></g>')
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
            + interval_bar(cx, py(p.elo_low), py(p.elo_high), "#3a6ea5")
            + f'<circle cx="{cx:.1f}" cy="{py(p.elo):.1f}" r="3.5" fill="#1f4e79"/></g>' + ("</a>" if url else ""))
    parts.append("</svg>")
    return "\n".join(parts)
