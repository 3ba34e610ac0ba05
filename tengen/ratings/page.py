"""The ratings service's HTML page: the learning curve against GNU Go, and what goes with it.

Sections, each a `<section id=...>` built from tengen.ratings.curve's PageData:
- `progress`: the run's elapsed time of its duration, samples trained and self-play's games/s as
  `tengen run` last wrote them (run.json), else what the ratings store alone knows;
- `curve`: the win rate against each GNU Go level with its Wilson interval, over training samples
  and over time since the first rated game (h:mm), and `matches`, the table behind its points;
- `gating`: gating's decisions, newest first;
- `elo`: Bayesian Elo on GNU Go's scale (the anchor named) and the leaderboard.
The page keeps itself current without a reload: a few lines of script fetch /api/curve (page_json:
the figures, and these sections rendered by this same code) every `refresh_s` seconds and put the
sections in place.
"""
from __future__ import annotations

import time
from dataclasses import asdict
from datetime import UTC, datetime
from html import escape
from typing import Any

from tengen.loop.messages import player_version
from tengen.ratings.book import RatingRow
from tengen.ratings.curve import PageData, StrengthMatch
from tengen.ratings.plots import (
    SAMPLES,
    TIME,
    RatePoint,
    anchor_label,
    clock,
    elo_plot,
    games_url,
    rated,
    si,
    winrate_plot,
)

REFRESH_S = 15.0  # how often an open page fetches its sections again
STALE_S = 120.0  # run.json's figures older than this: the run has stopped (plain status lines: every 30 s)
MAX_DECISIONS = 100  # gating decisions listed, newest first

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; }
td, th { padding: 3px 10px; border-bottom: 1px solid #ddd; text-align: right; white-space: nowrap; }
td.name, th.name { text-align: left; }
td.why { white-space: normal; max-width: 32em; }
.note { color: #666; font-size: 90%; max-width: 60em; }
#progress p { margin: 0.3em 0; }
"""
# Every refresh_s seconds: fetch the sections and swap them in; a failed fetch keeps the page as it is.
SCRIPT = """<script>
(function () {
  var url = "/api/curve" + window.location.search;
  window.setInterval(function () {
    fetch(url, {cache: "no-store"}).then(function (r) { return r.ok ? r.json() : null; }).then(function (data) {
      if (!data) { return; }
      Object.keys(data.html).forEach(function (id) {
        var section = document.getElementById(id);
        if (section) { section.innerHTML = data.html[id]; }
      });
    }).catch(function () {});
  }, REFRESH_MS);
})();
</script>"""


def hours_after(origin: datetime | None, when: datetime) -> float:
    return 0.0 if origin is None else (when - origin).total_seconds() / 3600.0


def duration(seconds: float) -> str:
    """5415 -> 1:30:15."""
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def utc(when: datetime) -> str:
    return f"{when.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def match_tip(m: StrengthMatch) -> str:
    low, high = m.interval
    return (f"{m.player} vs GNU Go level {m.level}: {m.wins}-{m.losses}-{m.draws} of {m.games} games, "
            f"win rate {m.rate:.2f} [{low:.2f}, {high:.2f}]")


def rate_points(data: PageData, by_samples: bool) -> list[RatePoint]:
    """The curve's points: against training samples (versions without a count left out) or time."""
    points = []
    for m in data.matches:
        x = m.training_samples if by_samples else hours_after(data.origin, m.last)
        if x is None:
            continue
        low, high = m.interval
        url = f"/games/v{m.version}#strength" if data.games_dir else None
        points.append(RatePoint(float(x), m.level, m.version, m.rate, low, high, match_tip(m), url))
    return points


# -- sections -----------------------------------------------------------------------------------------
def progress_html(data: PageData, now: float) -> str:
    p = data.progress
    elapsed = None if p is None else p.elapsed_s(now)
    if p is None:
        run = ("<p>No service has published the run's progress on <code>tengen.progress</code> yet (or this "
               "ratings service cannot reach the broker): elapsed time, samples trained and self-play's games/s "
               "appear here once the trainer and the self-play workers report. What the ratings store knows is "
               "below.</p>")
    else:
        age = max(0.0, now - p.updated)
        this_run = ""
        if data.run is not None and data.run.duration_s:  # `tengen run --duration`: how far this one is
            total, done = data.run.duration_s, data.run.elapsed_s + max(0.0, now - data.run.updated)
            this_run = (f' &middot; this <code>tengen run</code> <span id="this-run">{duration(done)} of '
                        f'{duration(total)}</span> <progress max="{total:.0f}" value="{min(done, total):.0f}">'
                        "</progress>")

        def figure(value: float | None, form: str) -> str:
            return "-" if value is None else format(value, form)

        stale = (f' <strong class="stale">These figures are {duration(age)} old: the run has stopped or its '
                 "services are not reporting.</strong>" if age > STALE_S else "")
        playing = "-" if p.version is None else f"v{p.version}" + (f" on {p.boards}" if p.boards else "")
        began = "-" if p.run_began is None else utc(datetime.fromtimestamp(p.run_began, UTC))
        run = (f'<p>Run up <span id="elapsed">{"-" if elapsed is None else duration(elapsed)}</span>{this_run} '
               f'&middot; <span id="samples">{figure(p.samples, ",")}</span> samples trained at '
               f'<span id="samples-per-s">{figure(p.samples_per_s, ".0f")}</span>/s &middot; '
               f'<span id="games">{figure(p.games, ",")}</span> self-play games at '
               f'<span id="games-per-s">{figure(p.games_per_s, ".2f")}</span> games/s and '
               f'<span id="positions-per-s">{figure(p.positions_per_s, ".1f")}</span> positions/s by '
               f'{p.workers} worker{"" if p.workers == 1 else "s"} &middot; self-play plays '
               f'<span id="playing">{playing}</span> &middot; last loss {figure(p.loss, ".3f")}</p>\n'
               f'<p class="note">As of {duration(age)} ago, as the trainer and the self-play workers published '
               f'them (<code>tengen.progress</code>); the run began {began}'
               f' UTC on {escape(p.machine or "-")}.{stale}</p>')
    newest = max(((v, r) for r in data.history.points if (v := player_version(r.name)) is not None),
                 default=None, key=lambda vr: vr[0])
    version = "none yet" if newest is None else (
        f"v{newest[0]}" + (f" ({si(newest[1].training_samples)} samples)" if newest[1].training_samples is not None
                           else ""))
    measured = max(data.matches, key=lambda m: m.last, default=None)
    last = "none yet" if measured is None else (
        f"v{measured.version}, {utc(measured.last)} UTC ({clock(hours_after(data.origin, measured.last))})")
    return (f"{run}\n<p>Ratings: {data.leaderboard.summary.total_games:,} rated games &middot; newest rated version "
            f"{version} &middot; last game against GNU Go: {last} &middot; read at "
            f"{datetime.fromtimestamp(now, UTC):%H:%M:%S} UTC</p>")


def curve_html(data: PageData) -> str:
    if not data.matches:
        return ('<p class="empty">No games against GNU Go yet. The strength service measures version 1 first, '
                "then the newest version every <code>strength.interval_s</code>; without a <code>gnugo</code> "
                "binary it idles (<code>make gnugo</code>).</p>")
    by_samples = rate_points(data, by_samples=True)
    left_out = len(data.matches) - len(by_samples)
    missing = (f'<p class="note">{left_out} of the points have no training-sample count and are only on the '
               "time plot.</p>" if left_out else "")
    games = sum(m.games for m in data.matches)
    return (f'<p class="note">{games} game{"" if games == 1 else "s"} of the strength service (source '
            "<code>strength</code>) in the ratings store: each point is one version against one GNU Go level, "
            "its win rate with draws half and the 95% Wilson interval as a bar. Hour 0 is the first rated "
            "game.</p>\n"
            f"{winrate_plot(by_samples, SAMPLES)}\n{missing}{winrate_plot(rate_points(data, False), TIME)}")


def matches_html(data: PageData) -> str:
    if not data.matches:
        return ""
    rows = []
    for m in sorted(data.matches, key=lambda m: (-m.version, m.level)):
        low, high = m.interval
        samples = "" if m.training_samples is None else f"{m.training_samples:,}"
        link = f'<td><a href="/games/v{m.version}#strength">games</a></td>' if data.games_dir else ""
        rows.append(f'<tr class="match" data-version="{m.version}" data-level="{m.level}">'
                    f'<td class="name">{escape(m.player)}</td><td>{m.level}</td><td>{m.games}</td>'
                    f"<td>{m.wins}-{m.losses}-{m.draws}</td><td>{m.rate:.2f}</td><td>{low:.2f} &ndash; {high:.2f}</td>"
                    f"<td>{samples}</td><td>{utc(m.last)}</td><td>{clock(hours_after(data.origin, m.last))}</td>"
                    f"{link}</tr>")
    watch = "<th>watch</th>" if data.games_dir else ""
    return ('<table id="match-table">\n<tr><th class="name">version</th><th>GNU Go level</th><th>games</th>'
            "<th>won-lost-drawn</th><th>win rate</th><th>95% Wilson interval</th><th>training samples</th>"
            f"<th>last game (UTC)</th><th>h:mm</th>{watch}</tr>\n" + "\n".join(rows) + "\n</table>")


def gating_html(data: PageData) -> str:
    if not data.games_dir:
        return '<p class="empty">No games dir: gating\'s decision log (gating/decisions.jsonl) is not here.</p>'
    if not data.decisions:
        return '<p class="empty">No gating decision yet (gating/decisions.jsonl).</p>'
    rows = []
    shown = data.decisions[::-1][:MAX_DECISIONS]
    for d in shown:
        when = datetime.fromtimestamp(d.time, UTC)
        against = "" if d.opponent_version is None else f"v{d.opponent_version}"
        score = f"{d.wins}-{d.losses}" + (f"-{d.draws}" if d.draws else "") + f" of {d.games}" if d.games else ""
        verdict = f"promoted as v{d.promoted_version}" if d.promoted_version is not None else "rejected"
        rows.append(f'<tr class="decision"><td>{utc(when)}</td><td>{clock(hours_after(data.origin, when))}</td>'
                    f'<td class="name">{escape(d.candidate)}</td><td>{against}</td><td>{score}</td>'
                    f'<td class="name">{verdict}</td><td class="name why">{escape(d.reason)}</td></tr>')
    more = (f'<p class="note">The newest {MAX_DECISIONS} of {len(data.decisions)} decisions.</p>'
            if len(data.decisions) > MAX_DECISIONS else "")
    return ('<table id="gating-table">\n<tr><th>time (UTC)</th><th>h:mm</th><th class="name">candidate</th>'
            '<th>against</th><th>candidate won-lost</th><th class="name">decision</th><th class="name">why</th></tr>\n'
            + "\n".join(rows) + f"\n</table>\n{more}")


def table_row(r: RatingRow, links: bool) -> str:
    # An unrated row's ratings are NaN: blank cells rather than "nan".
    elo = f"<td>{r.elo:.0f}</td><td>{r.elo_low:.0f} &ndash; {r.elo_high:.0f}</td>" if rated(r) else "<td></td><td></td>"
    samples = "" if r.training_samples is None else si(r.training_samples)
    url = games_url(r) if links else None
    watch = f'<td><a class="games" href="{url}">games</a></td>' if url else ("<td></td>" if links else "")
    return (
        f'<tr><td>{r.rank}</td><td class="name">{escape(r.name)}</td><td class="name">{escape(r.kind)}</td>{elo}'
        f"<td>{r.games}</td><td>{r.wins}</td><td>{r.losses}</td><td>{r.draws}</td><td>{samples}</td>{watch}</tr>"
    )


def elo_heading(data: PageData) -> str:
    s = data.leaderboard.summary
    if s.anchor:
        held = anchor_label(s.anchor)
        return f"Elo on GNU Go's scale: {escape(s.anchor)} = {s.anchor_elo:g}" + (
            f" ({escape(held)})" if held != s.anchor else "")
    return f"Elo with the mean held at {s.anchor_elo:g} (no GNU Go level rated yet)"


def elo_html(data: PageData) -> str:
    s, links = data.leaderboard.summary, data.games_dir
    level = f"{s.confidence * 100:g}%"
    anchors = [r for r in data.leaderboard.ratings if r.kind == "anchor" and rated(r)]
    rows = "\n".join(table_row(r, links) for r in data.leaderboard.ratings)
    return f"""<h2 id="elo-heading">{elo_heading(data)}</h2>
<p class="note">Bayesian Elo over {s.total_games} games (gating's and the strength service's); prior
{s.prior_draws:g} virtual draws; intervals at {level}. A chain of gating wins inflates Elo: the win rates
against GNU Go above are the measurement.</p>
{elo_plot(data.history.points, anchors, links)}
<h3>Leaderboard</h3>
<table id="leaderboard">
<tr><th>#</th><th class="name">player</th><th class="name">kind</th><th>Elo</th><th>{level} interval</th><th>games</th>
<th>wins</th><th>losses</th><th>draws</th><th>training samples</th>{"<th>watch</th>" if links else ""}</tr>
{rows}
</table>"""


def sections(data: PageData, now: float) -> dict[str, str]:
    """The page's live parts by element id: what /api/curve hands the page's script."""
    return {"progress": progress_html(data, now), "curve": curve_html(data), "matches": matches_html(data),
            "gating": gating_html(data), "elo": elo_html(data)}


def render_page(data: PageData, refresh_s: float = REFRESH_S, now: float | None = None) -> str:
    parts = sections(data, time.time() if now is None else now)
    games = ' Games: <a href="/games">/games</a> (the strength service\'s among them).' if data.games_dir else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tengen ratings</title>
<style>{STYLE}</style></head>
<body>
<h1>tengen: strength against GNU Go</h1>
<section id="progress">{parts["progress"]}</section>
<h2>Win rate against GNU Go</h2>
<section id="curve">{parts["curve"]}</section>
<section id="matches">{parts["matches"]}</section>
<h2>Gating decisions</h2>
<section id="gating">{parts["gating"]}</section>
<section id="elo">{parts["elo"]}</section>
<p class="note">This page fetches its figures again every {refresh_s:g} s. JSON: <a href="/api/curve">/api/curve</a>,
<a href="/api/leaderboard">/api/leaderboard</a>, <a href="/api/history">/api/history</a>, /api/player/NAME.
Metrics: <a href="/metrics">/metrics</a>.{games}</p>
{SCRIPT.replace("REFRESH_MS", str(round(refresh_s * 1000)))}
</body></html>
"""


def match_json(m: StrengthMatch, origin: datetime | None) -> dict[str, Any]:
    low, high = m.interval
    return {"player": m.player, "version": m.version, "opponent": m.opponent, "level": m.level, "games": m.games,
            "wins": m.wins, "losses": m.losses, "draws": m.draws, "rate": m.rate, "rate_low": low, "rate_high": high,
            "training_samples": m.training_samples, "first": m.first.isoformat(), "last": m.last.isoformat(),
            "hours": hours_after(origin, m.last)}


def page_json(data: PageData, now: float | None = None) -> dict[str, Any]:
    """GET /api/curve: the curve's matches, gating's decisions, the run's progress, the Elo anchor,
    and `html`, the page's sections as the page renders them."""
    now = time.time() if now is None else now
    return {
        "read_at": datetime.fromtimestamp(now, UTC).isoformat(timespec="seconds"),
        "origin": None if data.origin is None else data.origin.isoformat(),
        "elo_anchor": data.leaderboard.summary.anchor or None,
        "matches": [match_json(m, data.origin) for m in data.matches],
        "decisions": [asdict(d) for d in data.decisions],
        "progress": None if data.progress is None else data.progress.to_json(now),
        "this_run": None if data.run is None else data.run.to_json(),
        "html": sections(data, now),
    }
