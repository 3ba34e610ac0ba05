"""The selfplay service: plays games against the model Triton serves and publishes them to Kafka.

Start-up waits, with backoff and a log line per state, for the broker (the project's topics are
created if missing), for `tengen.models` to announce a version of `run.model_name`
(tengen.loop.messages.ModelWatcher reads the compacted topic from its start, so a worker that starts
later learns the current version), and for Triton to report that version READY. Then
tengen.selfplay.runner.SelfplayRunner plays `selfplay.games_in_parallel` games at a time against a
TritonEvaluator pinned to that version.

Hot swap: a new announcement re-pins the evaluator (`set_version`); requests already sent finish
on the old version, which Triton keeps loaded (`latest {num_versions: 2}`), so no request fails.
Each game is tagged by the runner with the newest version that evaluated any of its positions; the
NN cache is cleared at the next finished game so old evaluations are not reused.

The curriculum: the boards a game is played on are the ones the announced version's training
samples call for (GameConfig.boards_at). When an announcement moves them on (7x7 to 9x9 in the cpu
preset), the runner stops at its next finished game, its games in progress are dropped, and a new
runner plays the new boards.

Triton down: the evaluator retries with backoff for EVAL_RETRY_S and the games wait. A longer
outage, or a version Triton does not serve, ends the runner with a TritonError: its games in
progress are dropped (never published half-done; the runner backs up nothing it did not get), the
service waits for Triton again and starts new games under a new segment of game ids.

No acknowledged game is lost when the broker loses its log (the one-box broker keeps it in
memory): each game stays in the worker's outbox (tengen.infra.outbox) until the trainer's consumer
group has committed it, and is sent again when a broker restart lost it; the trainer drops the
byte-identical copy of a game it already has. A full outbox (the trainer down for long) pauses the
games.

Publishing: every finished game is checked with tengen.loop.rows.validate (the trainer's own
check; a failure is logged and counted, never published), sampled games are written as SGF under
`<data_dir>/sgf/v<version>/`, and the record goes to `tengen.games` through ReliableProducer
(acks=all, key = game id, buffered and resent while the broker is down; a resend keeps its id).
Game ids are `<worker id>-<run nonce>-<segment>-<index>`: unique per worker, process and runner
start, so two workers, or one worker restarted, never reuse an id.

Stale announcements: when Triton does not serve the announced version but serves another (an
announcement lost with a broker restart), the worker plays Triton's newest READY version and says
so; Triton's repository is what gating promoted.

Health: /healthz reports not ok when no new position was played for STALL_S (issue 16's definition
of a stalled loop: moves of games still in progress count, so a long game is not a stall), whatever
the reason (a broker, Triton or announcement problem the worker cannot get out of by itself, or an
outbox that stays full).

SIGTERM/SIGINT set the stop event: the runner stops after the batch in flight, its games in
progress are dropped, the producer is flushed (up to FLUSH_S) and closed. HTTP on `http_port`:
`/healthz` (200 with the current state) and Prometheus `/metrics`.
"""
from __future__ import annotations

import logging
import re
import secrets
import socket
import threading
import time
from typing import Any, Callable, Iterator

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from tengen.config import Boards, Config
from tengen.data.record_sgf import write_record_sgf
from tengen.infra.health import HealthServer
from tengen.infra.kafka import Backoff, BufferFullError, ReliableProducer
from tengen.infra.outbox import Outbox
from tengen.infra.triton.client import TritonEvaluator, model_states
from tengen.infra.triton.errors import TritonError
from tengen.loop import progress
from tengen.loop.layout import DataDir
from tengen.loop.messages import GAMES_TOPIC, TRAINER_GROUP, ModelAnnouncement, ModelWatcher, wait_for_loop_topics
from tengen.loop.rows import RecordError, row_count, validate
from tengen.proto import game_pb2
from tengen.selfplay.runner import SelfplayRunner

log = logging.getLogger("services.selfplay")

EVAL_RETRY_S = 120.0  # a Triton outage shorter than this pauses the games; a longer one drops them
MAX_BUFFERED_GAMES = 2000  # games held for the broker before self-play pauses
FLUSH_S = 15.0  # at shutdown, wait this long for the broker to acknowledge what is buffered
WAIT_LOG_EVERY_S = 30.0  # repeat a "still waiting" line this often
STALL_S = 60.0  # no new position played for this long: /healthz says not ok
_WORKER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_worker_id(text: str) -> str:
    """A worker id as it goes into game ids and file names, or ValueError saying what is allowed."""
    if not _WORKER_ID_RE.match(text):
        raise ValueError(f"bad worker id {text!r}: 1-64 letters, digits, '_', '.', '-', "
                         f"starting with a letter or digit")
    return text


def default_worker_id() -> str:
    """The host name, made fit for an id (a pod's name on Kubernetes: unique per replica)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:64].lstrip("-._")
    return cleaned or "worker"


class ProgressCollector(Collector):
    """Counters read from the runner when scraped, those of games in progress included:
    `tengen_selfplay_moves_total` (moves played), `tengen_selfplay_evaluations_total` (positions the
    net evaluated, the inference path's load) and `tengen_selfplay_batches_total` (the batches they
    went in). The counters of finished games (`tengen_selfplay_positions_total`) grow in steps of
    whole games: too coarse to time self-play over seconds (`tengen bench loop`) or at 19x19."""

    def __init__(self, progress: Callable[[], tuple[int, int, int]]) -> None:
        self.progress = progress

    def collect(self) -> Iterator[CounterMetricFamily]:
        return self._families(*self.progress())

    def describe(self) -> Iterator[CounterMetricFamily]:
        """The names, without reading the service (the registry asks when the collector joins)."""
        return self._families(0, 0, 0)

    @staticmethod
    def _families(moves: int, evaluations: int, batches: int) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily("tengen_selfplay_moves", "Moves played, those of games in progress included",
                                  value=moves)
        yield CounterMetricFamily("tengen_selfplay_evaluations", "Positions sent to the net (search leaves)",
                                  value=evaluations)
        yield CounterMetricFamily("tengen_selfplay_batches", "Batches sent to the net", value=batches)


class Metrics:
    def __init__(self, progress: Callable[[], tuple[int, int, int]] = lambda: (0, 0, 0)) -> None:
        """`progress`: the service's (moves, evaluations, batches), read when scraped."""
        self.registry = CollectorRegistry()
        r = self.registry
        r.register(ProgressCollector(progress))
        self.games = Counter("tengen_selfplay_games", "Games played and handed to the producer", registry=r)
        self.positions = Counter("tengen_selfplay_positions", "Moves played in finished games", registry=r)
        self.rows = Counter("tengen_selfplay_rows", "Training rows in finished games (full searches, side branches)",
                            registry=r)
        self.published = Counter("tengen_selfplay_published", "Games acknowledged by the broker", registry=r)
        self.invalid = Counter("tengen_selfplay_invalid", "Games that failed validation (not published)",
                               registry=r)
        self.dropped = Counter("tengen_selfplay_dropped", "Finished games not buffered because of shutdown",
                               registry=r)
        self.eval_failures = Counter("tengen_selfplay_evaluator_failures",
                                     "Runs ended by an inference error (games in progress dropped)", registry=r)
        self.sgf = Counter("tengen_selfplay_sgf", "Games written as SGF", registry=r)
        self.outbox = Gauge("tengen_selfplay_outbox_games", "Published games the trainer has not committed yet",
                            registry=r)
        self.resent = Gauge("tengen_selfplay_resent_games", "Acknowledged games sent again after a broker lost them",
                            registry=r)
        self.evaluations_per_s = Gauge("tengen_selfplay_evaluations_per_second",
                                       "Positions sent to the net per second over the last interval", registry=r)
        self.mean_batch = Gauge("tengen_selfplay_mean_batch", "Positions per batch over the last interval",
                                registry=r)
        self.model_version = Gauge("tengen_selfplay_model_version", "Model version requested from Triton",
                                   registry=r)
        self.board_size = Gauge("tengen_selfplay_board_size",
                                "Largest board of the games started now (the curriculum's boards)", registry=r)
        self.games_per_s = Gauge("tengen_selfplay_games_per_second", "Games/s over the last interval",
                                 registry=r)
        self.positions_per_s = Gauge("tengen_selfplay_positions_per_second", "Positions/s over the last interval",
                                     registry=r)
        self.pending = Gauge("tengen_selfplay_unacknowledged", "Games buffered, not yet acknowledged",
                             registry=r)
        self.playing = Gauge("tengen_selfplay_playing", "1 while games are being played, 0 while waiting",
                             registry=r)


class SelfplayService:
    """One selfplay worker; `run(stop)` plays until `stop` is set or `games` games are done."""

    def __init__(self, config: Config, *, worker_id: str, http_port: int | None = None,
                 games: int | None = None, log_every_s: float = 30.0, seed: int | None = None,
                 outbox_dir: str | None = None, stall_s: float = STALL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`stall_s` and `clock` decide when /healthz reports a stall (tests shorten or fake them)."""
        if games is not None and games < 1:
            raise ValueError(f"games must be >= 1, got {games}")
        self.config = config
        self.worker_id = check_worker_id(worker_id)
        self.run_id = f"{self.worker_id}-{secrets.token_hex(4)}"
        self.model = config.run.model_name
        self.data_dir = DataDir(config.run.data_dir)
        self.outbox_dir = outbox_dir
        self.games_wanted = games
        self.log_every_s = log_every_s
        self.seed = seed if seed is not None else secrets.randbits(31)
        self.metrics = Metrics(self.progress)
        self.http_port = http_port
        self.state = "starting"
        self.games_done = 0  # handed to the producer
        self.positions_done = 0
        # (moves, evaluations, batches) of the runners that have ended (each runner counts from 0)
        self._ended = (0, 0, 0)
        self.version = 0  # the model version requested from Triton (0 before the first)
        self.boards: Boards | None = None  # what the runner plays (the curriculum's boards)
        self._sample = np.random.default_rng(self.seed)
        self._lock = threading.Lock()
        self._evaluator: TritonEvaluator | None = None
        self._producer: ReliableProducer | None = None
        self._progress_producer: ReliableProducer | None = None
        self._outbox: Outbox | None = None
        self._runner: SelfplayRunner | None = None
        self.stall_s = stall_s
        self._clock = clock
        self._progress = (-1, clock())  # (most moves /healthz has seen played, when that grew)

    # -- the service ----------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        """Serve until `stop` is set (or the games are done). Returns 0; 1 when games stayed
        unacknowledged by the broker; 2 when the HTTP port cannot be had."""
        http = None
        if self.http_port is not None:
            try:
                http = HealthServer(self.http_port, self.metrics.registry, self._health, name="selfplay")
            except OSError as exc:
                log.error("selfplay: cannot serve /healthz and /metrics on port %d: %s (choose another "
                          "with --http-port, 0 = any free)", self.http_port, exc.strerror or exc)
                return 2
            self.http_port = http.port
        reporter = threading.Thread(target=self._report, args=(stop,), name="selfplay-report", daemon=True)
        reporter.start()
        log.info("selfplay: worker %s (game ids %s-...), model %s at Triton %s, broker %s",
                 self.worker_id, self.run_id, self.model, self.config.triton.url, self.config.kafka.bootstrap)
        try:
            if not self._wait_for_broker(stop):
                return 0
            bootstrap = self.config.kafka.bootstrap
            watcher = ModelWatcher(bootstrap, on_change=self._on_announcement)
            producer = ReliableProducer(bootstrap, client_id=f"tengen-selfplay-{self.worker_id}",
                                        max_buffered=MAX_BUFFERED_GAMES, on_delivered=self._delivered)
            self._producer = producer
            # The progress reports have a producer of their own: the games' buffer, its count of
            # unacknowledged games and the outbox stay the games'.
            self._progress_producer = ReliableProducer(
                bootstrap, client_id=f"tengen-selfplay-{self.worker_id}-progress", max_buffered=4)
            self._outbox = Outbox(bootstrap, GAMES_TOPIC, TRAINER_GROUP,
                                  lambda key, value: self._send(producer, key, value, stop), spool_dir=self.outbox_dir)
            outbox = self._outbox
            for key, value in outbox.restore():  # what an earlier process published and lost
                self._send(producer, key, value, stop)
            self.metrics.outbox.set_function(lambda: len(outbox))
            self.metrics.resent.set_function(lambda: outbox.resent)
            checks_stop = threading.Event()
            checks = threading.Thread(target=self._outbox.run_checks, args=(checks_stop,), name="selfplay-outbox",
                                      daemon=True)
            checks.start()
            try:
                self._play(stop, watcher, producer)
            finally:
                self.state = "stopping"
                self.metrics.playing.set(0)
                watcher.close()
                unsent = 0 if producer.flush(FLUSH_S) else producer.pending
                checks_stop.set()
                checks.join(timeout=10.0)
                producer.close(timeout_s=1.0)
                self._progress_producer.close(timeout_s=1.0)
                if len(self._outbox):
                    log.info("selfplay: %d published games not yet committed by the trainer at exit",
                             len(self._outbox))
            if unsent:
                log.error("selfplay: %d games were never acknowledged by the broker %s", unsent, bootstrap)
                return 1
            return 0
        finally:
            stop.set()  # ends the reporter when the games ran out
            if http is not None:
                http.close()
            log.info("selfplay: stopped after %d games, %d positions", self.games_done, self.positions_done)

    def _play(self, stop: threading.Event, watcher: ModelWatcher, producer: ReliableProducer) -> None:
        segment = 0
        backoff = Backoff(1.0, 30.0)
        while not stop.is_set() and not self._enough():
            if self._wait_for_announcement(stop, watcher) is None:
                return
            evaluator = self._wait_for_triton(stop, watcher)
            if evaluator is None:
                return
            remaining = None if self.games_wanted is None else self.games_wanted - self.games_done
            samples = self._served_samples(watcher)
            boards = self.config.game.boards_at(samples)
            runner = SelfplayRunner.from_config(self.config, evaluator, samples, seed=self.seed + segment,
                                                id_prefix=f"{self.run_id}-{segment}",
                                                model_version=evaluator.version or 0)
            self._set_boards(boards, samples)
            segment += 1
            with self._lock:
                self._runner = runner
            self.state = "playing"
            self.metrics.playing.set(1)
            cache_version = evaluator.version
            try:
                for record in runner.run(remaining, stop=stop):
                    if evaluator.version != cache_version:  # the runner is paused here: safe to clear
                        # Games played from here on use the new version's evaluations only; one
                        # answered wholly from the cache still carries the version that filled it.
                        runner.cache.clear()
                        cache_version = runner.model_version = evaluator.version or 0
                    self._finish_game(record, producer, stop)
                    if self.config.game.boards_at(self._served_samples(watcher)) != boards:
                        break  # the curriculum's next boards: a new runner plays them (games in progress dropped)
                backoff.reset()
            except TritonError as exc:  # also UnknownModelError: a version Triton does not serve
                if not stop.is_set():  # (when stopping, the evaluator gave up on purpose)
                    self.metrics.eval_failures.inc()
                    delay = backoff.next()
                    log.warning("selfplay: inference failed (%s); games in progress dropped, none published "
                                "half-done; waiting %.0f s for Triton", exc, delay)
                    stop.wait(delay)
            finally:
                self.metrics.playing.set(0)
                self._runner_ended(runner)
                with self._lock:
                    self._evaluator = None
                evaluator.close()

    def _enough(self) -> bool:
        return self.games_wanted is not None and self.games_done >= self.games_wanted

    # -- waiting for the dependencies -------------------------------------------------------------

    def _wait_for_broker(self, stop: threading.Event) -> bool:
        self.state = f"waiting for the broker at {self.config.kafka.bootstrap}"
        return wait_for_loop_topics(self.config.kafka.bootstrap, stop, "selfplay", timeout_s=10.0)

    def _wait_for_announcement(self, stop: threading.Event, watcher: ModelWatcher) -> int | None:
        version = watcher.current(self.model)
        if version is not None:
            return version
        self.state = f"waiting for {self.model} to be announced on tengen.models"
        log.info("selfplay: no version of %s announced on tengen.models yet; waiting (gating or "
                 "`tengen models promote` announce one)", self.model)
        last_log = time.monotonic()
        while not stop.wait(0.5):
            version = watcher.current(self.model)
            if version is not None:
                return version
            if time.monotonic() - last_log >= WAIT_LOG_EVERY_S:
                log.info("selfplay: still waiting for an announcement of %s on tengen.models", self.model)
                last_log = time.monotonic()
        return None

    def _wait_for_triton(self, stop: threading.Event, watcher: ModelWatcher) -> TritonEvaluator | None:
        """An evaluator pinned to the announced version once Triton reports it READY."""
        url = self.config.triton.url
        backoff = Backoff(0.5, 10.0)
        last_reason, last_log = "", 0.0
        while not stop.is_set():
            version = watcher.current(self.model)
            assert version is not None  # announcements are never taken back
            self.state = f"waiting for Triton at {url} to serve {self.model} v{version}"
            try:
                states = model_states(url, timeout_s=5.0).get(self.model, {})
                ready = [v for v, state in states.items() if state == "READY"]
                if states.get(version) != "READY" and ready:
                    log.warning("selfplay: Triton serves %s %s but not the announced v%d (an announcement "
                                "lost with a broker restart?); playing its newest, v%d", self.model,
                                ", ".join(f"v{v}" for v in sorted(ready)), version, max(ready))
                    watcher.reread()
                    version = max(ready)
                if states.get(version) == "READY":
                    evaluator = TritonEvaluator(url, self.model, version, retry_deadline_s=EVAL_RETRY_S, stop=stop)
                    with self._lock:
                        self._evaluator = evaluator
                        if watcher.current(self.model) in ready:  # an announcement just now
                            evaluator.set_version(watcher.current(self.model))
                    self._set_version(evaluator.version or 0)
                    log.info("selfplay: Triton at %s serves %s v%d; playing", url, self.model, evaluator.version)
                    return evaluator
                loaded = ", ".join(f"v{v} {s}" for v, s in sorted(states.items())) or "nothing"
                reason = f"it has {self.model} v{version} {states.get(version, 'not loaded')} (loaded: {loaded})"
            except TritonError as exc:
                reason = str(exc)
            except Exception as exc:  # tritonclient's own errors: server down, timeout
                reason = f"not reachable ({str(exc).strip()[:200]})"
            if reason != last_reason or time.monotonic() - last_log >= WAIT_LOG_EVERY_S:
                log.warning("selfplay: waiting for Triton at %s: %s", url, reason)
                last_reason, last_log = reason, time.monotonic()
            stop.wait(backoff.next())
        return None

    def _on_announcement(self, announcement: ModelAnnouncement) -> None:
        """ModelWatcher's thread: re-pin the evaluator (requests in flight finish on the old one)."""
        if announcement.model != self.model:
            return
        with self._lock:
            evaluator = self._evaluator
            if evaluator is not None and evaluator.version != announcement.version:
                log.info("selfplay: tengen.models announces %s v%d; requesting it from now on",
                         self.model, announcement.version)
                evaluator.set_version(announcement.version)
                self._set_version(announcement.version)

    def _set_version(self, version: int) -> None:
        self.version = version
        self.metrics.model_version.set(version)

    def _served_samples(self, watcher: ModelWatcher) -> int | None:
        """The training samples of the announced version (None: not said), which pick the boards."""
        announcement = watcher.announcement(self.model)
        return announcement.samples if announcement is not None else None

    def _set_boards(self, boards: Boards, samples: int | None) -> None:
        if boards != self.boards:
            log.info("selfplay: playing %s (komi around %g): the served net has trained %s samples",
                     boards.describe(), boards.komi_mean, "an unknown number of" if samples is None else f"{samples:,}")
            self.boards = boards
            self.metrics.board_size.set(max(boards.sizes))

    # -- finished games -------------------------------------------------------------------------

    def _finish_game(self, record: game_pb2.GameRecord, producer: ReliableProducer, stop: threading.Event) -> None:
        try:
            validate(record)
        except RecordError as exc:  # a bug upstream: keep it out of the training data, loudly
            self.metrics.invalid.inc()
            log.error("selfplay: game %s failed validation (%s); not published", record.id, exc.reason)
            return
        if self._sample.random() < self.config.selfplay.sgf_sample_rate:
            try:
                write_record_sgf(record, self.data_dir.selfplay_sgf_version(record.model_version))
                self.metrics.sgf.inc()
            except (OSError, ValueError) as exc:
                log.warning("selfplay: could not write the SGF of game %s: %s", record.id, exc)
        data = record.SerializeToString()
        outbox = self._outbox
        if outbox is not None:
            warned = False
            while not outbox.add(record.id, data, timeout_s=1.0):
                if stop.is_set():
                    self.metrics.dropped.inc()
                    log.warning("selfplay: game %s dropped at shutdown: the outbox is full", record.id)
                    return
                if not warned:
                    log.warning("selfplay: %d games wait for the trainer to commit them; self-play pauses "
                                "until it does", len(outbox))
                    warned = True
        if not self._send(producer, record.id, data, stop):
            self.metrics.dropped.inc()
            log.warning("selfplay: game %s dropped at shutdown: the producer's buffer is full", record.id)
            return
        self.games_done += 1
        self.positions_done += len(record.moves)
        self.metrics.games.inc()
        self.metrics.positions.inc(len(record.moves))
        self.metrics.rows.inc(row_count(record))
        self.metrics.pending.set(producer.pending)

    def _send(self, producer: ReliableProducer, key: str, data: bytes, stop: threading.Event) -> bool:
        """Hand a game to the producer, waiting while its buffer is full; False when stopping."""
        warned = False
        while True:
            try:
                producer.send(GAMES_TOPIC, key, data, block_timeout_s=1.0)
                return True
            except BufferFullError:
                if stop.is_set():
                    return False
                if not warned:
                    log.warning("selfplay: %d games wait for the broker; self-play pauses until it "
                                "acknowledges them", producer.pending)
                    warned = True

    def _delivered(self, topic: str, key: bytes, metadata: Any) -> None:
        self.metrics.published.inc()
        if self._outbox is not None:
            self._outbox.delivered(key.decode(), metadata.partition, metadata.offset)
        if self._producer is not None:
            self.metrics.pending.set(self._producer.pending)

    # -- progress and health --------------------------------------------------------------------

    def _report(self, stop: threading.Event) -> None:
        games, positions, last = self.games_done, self.positions_done, time.monotonic()
        _, evaluations, batches = self.progress()
        while not stop.wait(self.log_every_s):
            now = time.monotonic()
            elapsed = max(now - last, 1e-9)
            games_rate = (self.games_done - games) / elapsed
            positions_rate = (self.positions_done - positions) / elapsed
            _, evaluations_now, batches_now = self.progress()
            evaluations_rate = (evaluations_now - evaluations) / elapsed
            mean_batch = (evaluations_now - evaluations) / max(batches_now - batches, 1)
            self.metrics.games_per_s.set(games_rate)
            self.metrics.positions_per_s.set(positions_rate)
            self.metrics.evaluations_per_s.set(evaluations_rate)
            self.metrics.mean_batch.set(mean_batch)
            if self.state == "playing":
                pending = self._producer.pending if self._producer is not None else 0
                log.info("selfplay: %.3f games/s, %.1f positions/s, %.0f evals/s in batches of %.1f | %d games, "
                         "%d positions | %s v%d | unacknowledged %d", games_rate, positions_rate, evaluations_rate,
                         mean_batch, self.games_done, self.positions_done, self.model, self.version, pending)
            else:
                log.info("selfplay: %s (%d games so far)", self.state, self.games_done)
            games, positions, last = self.games_done, self.positions_done, now
            evaluations, batches = evaluations_now, batches_now
            reports = self._progress_producer
            if reports is not None:
                progress.publish(reports, progress.selfplay_reporter(self.worker_id), {
                    "games": self.games_done, "games_per_s": games_rate, "positions_per_s": positions_rate,
                    "version": self.version, "boards": self.boards.describe() if self.boards else None})

    def progress(self) -> tuple[int, int, int]:
        """(moves played, positions evaluated, batches) since the start, those of games still in
        progress (or dropped) included. Never lower than an earlier answer: /metrics' counters."""
        with self._lock:  # a runner's counts move from _runner to _ended in one step
            return self._ended if self._runner is None else self._with(self._runner)

    def _with(self, runner: SelfplayRunner) -> tuple[int, int, int]:
        """The ended runners' (moves, evaluations, batches) plus `runner`'s."""
        stats = runner.stats
        return (self._ended[0] + stats.moves, self._ended[1] + stats.leaves, self._ended[2] + stats.batches)

    def _runner_ended(self, runner: SelfplayRunner) -> None:
        with self._lock:
            self._runner = None
            self._ended = self._with(runner)

    def _health(self) -> tuple[bool, str]:
        moves, now = self.progress()[0], self._clock()
        if moves > self._progress[0]:
            self._progress = (moves, now)
        idle = now - self._progress[1]
        if idle >= self.stall_s:
            return False, f"stalled: no new position for {idle:.0f} s; {self.state}; {self.games_done} games"
        return True, f"ok: {self.state}; {self.games_done} games"
