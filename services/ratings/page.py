"""The HTML page of the ratings service: leaderboard table and an Elo-over-training plot.

The plot is an inline SVG drawn here (no JavaScript, no plotting library): each model version's
rating against the training samples it had seen, with its confidence interval as a vertical bar.
"""
from __future__ import annotations

import math
from html import escape

from tengen.ratings.book import History, Leaderboard, RatingRow

WIDTH, HEIGHT = 760, 380
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 20, 52


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    ticks = []
    value = first
    while value <= hi + 1e-9 * step:
        ticks.append(round(value, 10))
        value += step
    return ticks


def si(value: float) -> str:
    """1500 -> 1.5k, 2000000 -> 2M."""
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:g}{suffix}"
    return f"{value:g}"


def elo_plot(points: list[RatingRow]) -> str:
    """SVG of rating (with interval bars) against training samples, or against version order
    when some version has no training-sample count."""
    if not points:
        return '<p class="empty">No rated model versions yet.</p>'
    by_samples = all(p.training_samples is not None for p in points)
    xs = [float(p.training_samples) if by_samples else float(i) for i, p in enumerate(points, 1)]
    x_label = "training samples" if by_samples else "model version (training order)"
    x_lo, x_hi = min(xs), max(xs)
    x_pad = 0.04 * (x_hi - x_lo) if x_hi > x_lo else 1.0  # keep end points off the frame
    x_lo, x_hi = x_lo - x_pad, x_hi + x_pad
    y_lo = min(p.elo_low for p in points)
    y_hi = max(p.elo_high for p in points)
    pad = max(10.0, 0.05 * (y_hi - y_lo))
    y_lo, y_hi = y_lo - pad, y_hi + pad
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return TOP + (y_hi - y) / (y_hi - y_lo) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="Elo over training">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#999"/>',
    ]
    for y in nice_ticks(y_lo, y_hi):
        parts.append(
            f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{py(y):.1f}" y2="{py(y):.1f}" stroke="#e3e3e3"/>'
            f'<text x="{LEFT - 6}" y="{py(y) + 4:.1f}" text-anchor="end" font-size="11">{y:g}</text>'
        )
    x_ticks = nice_ticks(x_lo, x_hi) if by_samples else sorted(set(xs))
    for x in x_ticks:
        label = si(x) if by_samples else f"{int(x)}"
        parts.append(
            f'<line x1="{px(x):.1f}" x2="{px(x):.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 4}" stroke="#666"/>'
            f'<text x="{px(x):.1f}" y="{TOP + plot_h + 17}" text-anchor="middle" font-size="11">{label}</text>'
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle" font-size="12">{x_label}</text>'
        f'<text transform="translate(16 {TOP + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" '
        f'font-size="12">Elo</text>'
    )
    line = " ".join(f"{px(x):.1f},{py(p.elo):.1f}" for x, p in zip(xs, points))
    parts.append(f'<polyline points="{line}" fill="none" stroke="#3a6ea5" stroke-width="1.5"/>')
    for x, p in zip(xs, points):
        cx = px(x)
        tip = escape(f"{p.name}: {p.elo:.0f} [{p.elo_low:.0f}, {p.elo_high:.0f}], {p.games} games")
        parts.append(
            f'<g class="version"><title>{tip}</title>'
            f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{py(p.elo_low):.1f}" y2="{py(p.elo_high):.1f}" stroke="#3a6ea5"/>'
            f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{py(p.elo_low):.1f}" y2="{py(p.elo_low):.1f}" stroke="#3a6ea5"/>'
            f'<line x1="{cx - 4:.1f}" x2="{cx + 4:.1f}" y1="{py(p.elo_high):.1f}" y2="{py(p.elo_high):.1f}" stroke="#3a6ea5"/>'
            f'<circle cx="{cx:.1f}" cy="{py(p.elo):.1f}" r="3.5" fill="#1f4e79"/></g>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def render_page(board: Leaderboard, history: History) -> str:
    s = board.summary
    anchor = f"{escape(s.anchor)} = {s.anchor_elo:g}" if s.anchor else f"mean = {s.anchor_elo:g}"
    rows = "\n".join(
        f"<tr><td>{r.rank}</td><td>{escape(r.name)}</td><td>{escape(r.kind)}</td>"
        f"<td>{r.elo:.0f}</td><td>{r.elo_low:.0f} &ndash; {r.elo_high:.0f}</td>"
        f"<td>{r.games}</td><td>{r.wins}</td><td>{r.losses}</td><td>{r.draws}</td>"
        f"<td>{'' if r.training_samples is None else si(r.training_samples)}</td></tr>"
        for r in board.ratings
    )
    level = f"{s.confidence * 100:g}%"
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
{elo_plot(history.points)}
<h2>Leaderboard</h2>
<table>
<tr><th>#</th><th>player</th><th>kind</th><th>Elo</th><th>{level} interval</th><th>games</th>
<th>wins</th><th>losses</th><th>draws</th><th>training samples</th></tr>
{rows}
</table>
<p class="note">JSON: <a href="/api/leaderboard">/api/leaderboard</a>, <a href="/api/history">/api/history</a>,
/api/player/NAME. Metrics: <a href="/metrics">/metrics</a>.</p>
</body></html>
"""
