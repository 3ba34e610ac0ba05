"""The live status of a local run: figures read from what the services already expose, and their
rendering as a screen (terminal) or one line (log files, pipes).

Sources, none of them a new API:
- the window's manifest and game id log (`<data_dir>/trainer/window/`): rows ever appended, rows in
  the window (§4.7 formula with the preset's constants), games ingested; read incrementally.
- the trainer's Prometheus /metrics: samples trained; selfplay workers' /metrics: games and positions
  they played (rates from the change between two reads).
- `<data_dir>/candidates/*.pt`: candidates exported (the newest name carries its sample count).
- the last line of `<data_dir>/gating/decisions.jsonl`: the last gating decision.
- the model repository and Triton's repository index: the newest version, and the newest one Triton
  reports ready (a promotion writes the version first and loads it after, ~30 s on a CPU box).
- the served version's export sidecar: the samples it was trained on, so the lag behind the
  trainer (samples trained minus the served version's) shows how fresh self-play's net is.
- `<data_dir>/strength/results.jsonl` (tengen.strength.measure): the newest version's results against
  GNU Go.
- the ratings service over gRPC: the top of the leaderboard.
Anything that cannot be read right now shows as "-" (a service still starting is no error).
"""
from __future__ import annotations

import json
import math
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tengen.config import Config
from tengen.infra.triton.repository import version_export_path
from tengen.loop.layout import DataDir, candidate_samples
from tengen.nn.export import export_samples

if TYPE_CHECKING:
    from tengen.ratings.client import RatingsClient
from tengen.run.supervisor import ChildState
from tengen.strength.measure import StrengthResult, latest_results
from tengen.train.window import IDS, MANIFEST, window_size

METRICS_TIMEOUT_S = 1.0


@dataclass
class LeaderRow:
    name: str
    elo: float
    games: int


@dataclass
class Status:
    elapsed_s: float = 0.0
    duration_s: float | None = None
    services: list[ChildState] = field(default_factory=list)
    games_played: int | None = None  # by this run's selfplay workers (their metrics)
    games_per_s: float | None = None
    positions_per_s: float | None = None
    evaluations_per_s: float | None = None  # positions the selfplay workers sent to the net
    mean_batch: float | None = None  # positions per batch they sent, over the same interval
    games_ingested: int | None = None  # ever appended to the window
    rows_total: int | None = None
    window_rows: int | None = None
    samples: int | None = None
    candidates: int = 0
    latest_candidate: str | None = None
    version: int | None = None  # newest in the repository
    serving: int | None = None  # newest that Triton reports ready (None: not known)
    served_samples: int | None = None  # training samples of the version self-play plays
    strength: list[StrengthResult] = field(default_factory=list)  # newest measured version vs GNU Go
    gating: dict[str, Any] | None = None
    leaders: list[LeaderRow] | None = None  # None: ratings not reachable
    elo_anchor: str = ""  # the player the leaderboard holds at 0 ("": the mean)
    events: list[str] = field(default_factory=list)


def scrape(url: str) -> dict[str, float]:
    """Prometheus samples at `url` summed over labels ({sample name: value}); {} when unreachable."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(url, timeout=METRICS_TIMEOUT_S) as resp:
            text = resp.read().decode("utf-8", errors="replace")
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                values[sample.name] = values.get(sample.name, 0.0) + float(sample.value)
    except ValueError:
        return {}
    return values


def last_json_line(path: Path, max_bytes: int = 65536) -> dict[str, Any] | None:
    """The last complete JSON object line of a file (None when absent, empty or unreadable)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            f.seek(max(0, size - max_bytes))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            value = json.loads(line)
        except ValueError:
            continue  # a torn last line of a writer that is mid-write
        if isinstance(value, dict):
            return value
    return None


class StatusReader:
    """Reads the figures of one run; keeps its place in the append-only game id log between reads."""

    def __init__(self, data_dir: Path, config: Config, trainer_metrics: str | None = None,
                 selfplay_metrics: list[str] | None = None, ratings_url: str | None = None,
                 triton_url: str | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.layout = DataDir(self.data_dir)
        self.config = config
        self.trainer_metrics = trainer_metrics
        self.selfplay_metrics = selfplay_metrics or []
        self.ratings_url = ratings_url
        self.triton_url = triton_url
        self._ids_read = 0  # bytes of the id log already counted
        self._games = 0
        self._ratings_client: RatingsClient | None = None
        # (when, games, positions, evaluations, batches) as last read
        self._selfplay_seen: tuple[float, ...] | None = None

    def read(self) -> Status:
        status = Status()
        self._read_window(status)
        self._read_candidates(status)
        status.gating = last_json_line(self.layout.decisions)
        status.version = data_dir_repository_latest(self.data_dir, self.config.run.model_name)
        status.serving = self._read_serving()
        served = status.serving if status.serving is not None else status.version
        if served is not None:
            status.served_samples = export_samples(
                version_export_path(self.layout.models, self.config.run.model_name, served))
        status.strength = latest_results(self.data_dir)
        if self.trainer_metrics:
            samples = scrape(self.trainer_metrics).get("tengen_trainer_samples")
            if samples is not None:
                status.samples = max(int(samples), status.samples or 0)
        workers = [m for m in (scrape(url) for url in self.selfplay_metrics) if "tengen_selfplay_games_total" in m]
        if workers:
            games = sum(m["tengen_selfplay_games_total"] for m in workers)
            positions = sum(m.get("tengen_selfplay_positions_total", 0.0) for m in workers)
            evaluations = sum(m.get("tengen_selfplay_evaluations_total", 0.0) for m in workers)
            batches = sum(m.get("tengen_selfplay_batches_total", 0.0) for m in workers)
            status.games_played = int(games)
            now = time.monotonic()
            if self._selfplay_seen is not None:
                then, games_then, positions_then, evaluations_then, batches_then = self._selfplay_seen
                if now > then and games >= games_then:  # a restarted worker counts from 0 again
                    status.games_per_s = (games - games_then) / (now - then)
                    status.positions_per_s = max(0.0, positions - positions_then) / (now - then)
                    status.evaluations_per_s = max(0.0, evaluations - evaluations_then) / (now - then)
                    if batches > batches_then:
                        status.mean_batch = (evaluations - evaluations_then) / (batches - batches_then)
            self._selfplay_seen = (now, games, positions, evaluations, batches)
        status.leaders, status.elo_anchor = self._read_leaders()
        return status

    def _read_window(self, status: Status) -> None:
        directory = self.layout.window
        try:
            manifest = json.loads((directory / MANIFEST).read_text())
            n_total, ids_bytes = int(manifest["n_total"]), int(manifest["ids_bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        trainer = self.config.trainer
        status.rows_total = n_total
        status.window_rows = window_size(n_total, trainer.window_c, trainer.window_alpha, trainer.window_beta)
        if ids_bytes < self._ids_read:  # a new window (data dir wiped under a running view)
            self._ids_read, self._games = 0, 0
        if ids_bytes > self._ids_read:
            try:
                with open(directory / IDS, "rb") as f:
                    f.seek(self._ids_read)
                    chunk = f.read(ids_bytes - self._ids_read)
            except OSError:
                chunk = b""
            complete = chunk[: chunk.rfind(b"\n") + 1]
            self._games += complete.count(b"\n")
            self._ids_read += len(complete)
        status.games_ingested = self._games

    def _read_candidates(self, status: Status) -> None:
        names = self.layout.candidate_files()
        status.candidates = len(names)
        if names:
            status.latest_candidate = names[-1][: -len(".pt")]
            # The trainer's gauge restarts at 0 until its first step after a restart.
            status.samples = candidate_samples(names[-1])

    def _read_serving(self) -> int | None:
        if not self.triton_url:
            return None
        from tengen.infra.triton.client import model_states

        try:
            states = model_states(self.triton_url, timeout_s=METRICS_TIMEOUT_S * 2)
        except Exception:  # tritonclient raises its own type for every failure; not up yet
            return None
        ready = [v for v, state in states.get(self.config.run.model_name, {}).items() if state == "READY"]
        return max(ready) if ready else None

    def _read_leaders(self, n: int = 3) -> tuple[list[LeaderRow] | None, str]:
        """The top `n` of the leaderboard and the player it holds at 0."""
        if not self.ratings_url:
            return None, ""
        from tengen.ratings.client import RatingsClient

        try:
            if self._ratings_client is None:
                self._ratings_client = RatingsClient(self.ratings_url, timeout=2.0, retries=0)
            board = self._ratings_client.leaderboard(n)
        except Exception:  # not up yet, restarting: the view shows "-" until it answers
            return None, ""
        return [LeaderRow(r.name, r.elo, r.games) for r in board.ratings if r.rated], board.summary.anchor

    def close(self) -> None:
        if self._ratings_client is not None:
            self._ratings_client.close()
            self._ratings_client = None


def data_dir_repository_latest(data_dir: Path, model: str) -> int | None:
    """The latest complete version of `model` in the data dir's repository (read only)."""
    model_dir = DataDir(data_dir).models / model
    try:
        versions = [int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0]
    except OSError:
        return None
    return max(versions) if versions else None


# -- rendering ------------------------------------------------------------------------------------
def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def format_gating(decision: dict[str, Any] | None) -> str:
    if not decision:
        return "no decision yet"
    candidate = decision.get("candidate", "?")
    draws = decision.get("draws") or 0  # wins-losses-draws, as tengen.gate.decision.Score prints it
    score = (f"{decision.get('wins', '?')}-{decision.get('losses', '?')}" + (f"-{draws}" if draws else "")
             + f" of {decision.get('games', '?')}")
    if decision.get("promoted"):
        verdict = f"promoted as v{decision.get('promoted_version', '?')}"
    else:
        verdict = "rejected"
    reason = decision.get("reason")
    return f"{candidate} {score}: {verdict}" + (f" ({reason})" if reason else "")


def format_leaders(leaders: list[LeaderRow] | None) -> str:
    if leaders is None:
        return "-"
    if not leaders:
        return "no rated games yet"
    return "  ".join(f"{i}. {r.name} {r.elo:+.0f} ({r.games} games)" if not math.isnan(r.elo) else f"{i}. {r.name}"
                     for i, r in enumerate(leaders, 1))


def format_version(status: Status) -> str:
    if status.serving is not None and status.version is not None and status.serving < status.version:
        text = f"{status.serving} serving, {status.version} loading"
    else:
        text = _n(status.version)
    if status.served_samples is not None:
        text += f" ({si_count(status.served_samples)} samples"
        if status.samples is not None:
            text += f", {si_count(max(0, status.samples - status.served_samples))} behind the trainer"
        text += ")"
    return text


def si_count(value: int) -> str:
    """12345 -> 12.3k, 2500000 -> 2.50M: counts short enough for one status line."""
    if value >= 1_000_000:
        return f"{value / 1e6:.2f}M"
    if value >= 1_000:
        return f"{value / 1e3:.1f}k"
    return str(value)


def format_strength(results: list[StrengthResult]) -> str:
    if not results:
        return "not measured yet"
    first = results[0]
    samples = "" if first.training_samples is None else f" ({si_count(first.training_samples)} samples)"
    return f"v{first.version}{samples}, {first.visits} visits: " + ", ".join(
        f"{r.opponent} {r.wins}-{r.losses}-{r.draws} = {r.score_rate:.2f} [{r.rate_low:.2f}, {r.rate_high:.2f}]"
        for r in results)


def _services(states: list[ChildState]) -> str:
    parts = []
    for s in states:
        text = f"{s.name} {s.state}"
        if s.restarts:
            text += f" ({s.restarts} restart{'s' if s.restarts != 1 else ''})"
        parts.append(text)
    return ", ".join(parts)


def _elapsed(status: Status) -> str:
    text = _clock(status.elapsed_s)
    return text + (f" of {_clock(status.duration_s)}" if status.duration_s else "")


def format_rates(status: Status, batches: bool = True) -> str:
    """Self-play's rates, e.g. "1.13 games/s, 85.0 positions/s, 1,203 evals/s" ("" before two reads)."""
    if status.games_per_s is None:
        return ""
    text = f"{status.games_per_s:.2f} games/s, {status.positions_per_s or 0:.1f} positions/s"
    if status.evaluations_per_s is not None:
        text += f", {status.evaluations_per_s:,.0f} evals/s"
        if batches and status.mean_batch is not None:
            text += f" in batches of {status.mean_batch:.1f}"
    return text


def format_elo_scale(status: Status) -> str:
    """What the leaderboard's Elo is measured from."""
    return f"{status.elo_anchor} = 0" if status.elo_anchor else "mean = 0"


def render_screen(status: Status, title: str, footer: list[str] | None = None,
                  hint: str = "(Ctrl-C stops everything cleanly)") -> str:
    """The multi-line view redrawn in place on a terminal; `footer` lines go below the figures."""
    games = f"{_n(status.games_played)} played by selfplay this run"
    if rates := format_rates(status):
        games += f" ({rates})"
    games += f", {_n(status.games_ingested)} in the trainer's window"
    window = f"{_n(status.window_rows)} rows used of {_n(status.rows_total)} ever"
    candidates = f"{status.candidates}" + (f" (latest {status.latest_candidate})" if status.latest_candidate else "")
    lines = [
        f"{title}   up {_elapsed(status)}   {hint}".rstrip(),
        "",
        f"  services    {_services(status.services)}",
        f"  games       {games}",
        f"  window      {window}",
        f"  trained     {_n(status.samples)} samples",
        f"  candidates  {candidates}",
        f"  last gating {format_gating(status.gating)}",
        f"  model       version {format_version(status)}",
        f"  vs GNU Go   {format_strength(status.strength)}",
        f"  leaderboard {format_leaders(status.leaders)}"
        + (f"   (Elo from every rated game, {format_elo_scale(status)})" if status.leaders else ""),
    ]
    if footer:
        lines += [""] + [f"  {line}" for line in footer]
    if status.events:
        lines += ["", "  recent events:"] + [f"    {e}" for e in status.events[-5:]]
    return "\n".join(lines)


def render_line(status: Status) -> str:
    """One status line, for output that is not a terminal."""
    down = [s.name for s in status.services if s.state != "up"]
    gating = format_gating(status.gating)
    leaders = status.leaders
    top = ("-" if leaders is None else f"{leaders[0].name} {leaders[0].elo:+.0f} ({format_elo_scale(status)})"
           if leaders else "none rated yet")
    rates = format_rates(status, batches=False)
    return (f"[{_elapsed(status)}] games {_n(status.games_played)} played"
            + (f" ({rates})" if rates else "") + f", {_n(status.games_ingested)} ingested | "
            f"window {_n(status.window_rows)} of {_n(status.rows_total)} rows ever | samples {_n(status.samples)} | "
            f"candidates {status.candidates} | version {format_version(status)} | gating: {gating} | "
            f"GNU Go: {format_strength(status.strength)} | top Elo: {top}"
            + (f" | not up: {', '.join(down)}" if down else ""))
