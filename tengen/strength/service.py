"""The strength service: the loop measures itself against GNU Go while it runs.

Loop: every POLL_S seconds it looks at the model repository (`<data_dir>/models`, read only); when the
newest version of `run.model_name` has not been measured and the last measurement started at least
`strength.interval_s` ago, it measures that version (tengen.strength.measure.measure_version: GNU Go at
each of `strength.gnugo_levels`, `strength.games` games each at `strength.visits` visits, every game
to ratings, one line per level in `<data_dir>/strength/results.jsonl`). Versions promoted in
between are skipped: the curve needs points spread over the run, not every version, and the CPU
belongs to self-play. Version 1 (the random net) is measured first, so the curve starts at zero.

Without a gnugo binary (or with no levels configured) the service logs one line saying so, stays
healthy and idles: the loop goes on without the measurement.

A restart resumes from the results file: a version with a result line is not measured again.
SIGTERM/SIGINT: the game in progress finishes, no new game starts, exit 0.
"""
from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge

from tengen.config import Config
from tengen.gtp.engine_match import GameOutcome
from tengen.gtp.gnugo import INSTALL_HINT, find_gnugo
from tengen.infra.health import HealthServer
from tengen.infra.triton.repository import ModelRepository
from tengen.loop.layout import DataDir
from tengen.ratings.report import Reporter, ratings_reporter
from tengen.strength.measure import measure_version, read_results

log = logging.getLogger("services.strength")

POLL_S = 10.0


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.games = Counter("tengen_strength_games", "Games played against GNU Go", ["opponent"], registry=r)
        self.score = Gauge("tengen_strength_score_rate", "Score rate (draws half) of the last measured version",
                           ["opponent"], registry=r)
        self.version = Gauge("tengen_strength_version", "Last version measured against GNU Go", registry=r)
        self.playing = Gauge("tengen_strength_playing", "1 while a measurement is being played", registry=r)


class StrengthService:
    """`run(stop)` measures versions against GNU Go until `stop` is set."""

    def __init__(self, config: Config, *, http_port: int | None = None, poll_s: float = POLL_S) -> None:
        self.config = config
        self.settings = config.strength
        self.model = config.run.model_name
        self.data_dir = Path(config.run.data_dir)
        self.http_port = http_port
        self.poll_s = poll_s
        self.metrics = Metrics()
        self.state = "starting"

    def _set_state(self, state: str) -> None:
        if state != self.state:
            log.info("strength: %s", state)
        self.state = state

    def run(self, stop: threading.Event) -> int:
        http = HealthServer(self.http_port, self.metrics.registry, lambda: (True, self.state), name="strength") \
            if self.http_port is not None else None
        if http is not None:
            self.http_port = http.port
        reporter: Reporter | None = None
        try:
            gnugo = find_gnugo(self.settings.gnugo or None)
            if not self.settings.gnugo_levels:
                self._set_state("off: strength.gnugo_levels is empty")
            elif gnugo is None:
                self._set_state(f"off, the loop goes on without it: {INSTALL_HINT}")
            else:
                reporter = ratings_reporter(self.config.ratings, self.data_dir)
                self._loop(gnugo, reporter, stop)
            stop.wait()
            return 0
        finally:
            if reporter is not None:
                reporter.close()
            if http is not None:
                http.close()
            log.info("strength: stopped")

    def _loop(self, gnugo: str, reporter: Reporter, stop: threading.Event) -> None:
        repository = ModelRepository(DataDir(self.data_dir).models)
        measured = {r.version for r in read_results(self.data_dir)}
        levels = ", ".join(str(level) for level in self.settings.gnugo_levels)
        self._set_state(f"waiting for a version to measure against GNU Go level(s) {levels} "
                        f"({len(measured)} measured before)")
        next_due = 0.0
        while not stop.is_set():
            version = repository.latest_version(self.model)
            if version is not None and version not in measured and time.monotonic() >= next_due:
                next_due = time.monotonic() + self.settings.interval_s
                self._measure(repository, version, gnugo, reporter, stop)
                measured.add(version)
                if not stop.is_set():
                    self._set_state(f"measured {self.model} v{version}; next measurement of a newer version "
                                    f"in {self.settings.interval_s:.0f} s at the earliest")
            stop.wait(self.poll_s)

    def _measure(self, repository: ModelRepository, version: int, gnugo: str, reporter: Reporter,
                 stop: threading.Event) -> None:
        s = self.settings
        self._set_state(f"measuring {self.model} v{version}: {s.games} games at {s.visits} visits against "
                        f"GNU Go level(s) {', '.join(map(str, s.gnugo_levels))}, {s.board_size}x{s.board_size}, "
                        f"komi {s.komi:g}")

        def on_game(o: GameOutcome) -> None:
            log.info("strength: game %d %s (B) vs %s (W): %s by %s after %d moves", o.number, o.black, o.white,
                     o.result, o.reason, o.moves)

        self.metrics.playing.set(1)
        try:
            results = measure_version(self.data_dir, self.model, version, repository.export_path(self.model, version),
                                      gnugo, s, reporter, stop=stop, on_game=on_game)
        finally:
            self.metrics.playing.set(0)
        for result in results:
            self.metrics.games.labels(result.opponent).inc(result.games)
            self.metrics.score.labels(result.opponent).set(result.score_rate)
            log.info("strength: %s (%s training samples)", result.format(),
                     "?" if result.training_samples is None else f"{result.training_samples:,}")
        self.metrics.version.set(version)
