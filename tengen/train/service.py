"""The trainer service: one loop that ingests games from Kafka and trains on the window.

Each turn of the loop polls `tengen.games` (without waiting while there is training to do),
ingests what came (tengen.train.ingest: validate, dead-letter, dedupe, durable append, then
commit), and runs SGD steps for up to `train_slice_s`. Training keeps to about
`samples_per_row` samples per row ever appended, so it never runs far ahead of self-play.

Every `snapshot_every` samples the weights join the SWA average; every `candidate_every` samples
the average is exported to `<data_dir>/candidates/` and announced on `tengen.candidates`
(tengen.loop.messages). A checkpoint (model, optimizer, SWA, counters, sampling seed, window
position) is written after every snapshot, every `checkpoint_every_s` and on shutdown. What a
kill loses is at most the training since the last checkpoint, never data: rows are durable
before their offsets are committed, and the window dedupes the redelivered games.

Files under `<data_dir>/`: `trainer/window/` (tengen.train.window), `trainer/checkpoint.pt`,
`trainer/runs.jsonl` (a record of each start, tengen.loop.record), `candidates/`,
`tensorboard/trainer/` (every loss term, learning rate, window size, samples/s). Every
`log_every_s` the trainer's figures go to `tengen.progress` (tengen.loop.progress).
HTTP on `http_port`: `/healthz` (200 while the loop turns and trains on finite losses) and
`/metrics` (Prometheus).

A training step with a non-finite loss or gradient is skipped (tengen.train.learner); after
NONFINITE_STREAK_RED of them in a row /healthz turns red, since the window then holds rows that
poison most batches. Weights that went non-finite anyway are never saved: the trainer goes back to
its last checkpoint.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import torch
from prometheus_client import CollectorRegistry, Counter, Gauge

from tengen.config import Config
from tengen.infra.health import HealthServer
from tengen.infra.kafka import GroupConsumer, ReliableProducer
from tengen.infra.machine import describe
from tengen.loop import progress
from tengen.loop.layout import DataDir, candidate_name
from tengen.loop.messages import (
    CANDIDATES_TOPIC,
    GAMES_TOPIC,
    TRAINER_GROUP,
    CandidateAnnouncement,
    wait_for_loop_topics,
)
from tengen.loop.record import append_run_record, run_began, run_record
from tengen.nn.export import export_model, export_net_samples
from tengen.nn.loss import LOSS_TERMS
from tengen.train.ingest import IngestStats, ingest
from tengen.train.learner import Learner, NonFiniteError
from tengen.train.window import Window

log = logging.getLogger("services.trainer")

HEALTHY_WITHIN_S = 120.0  # the loop must have turned this recently for /healthz to say ok
NONFINITE_STREAK_RED = 20  # skipped steps in a row that turn /healthz red


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.games = Counter("tengen_trainer_games_total", "Games appended to the window", registry=r)
        self.rows = Counter("tengen_trainer_rows_total", "Rows appended to the window", registry=r)
        self.duplicates = Counter("tengen_trainer_duplicates_total", "Games dropped as duplicates", registry=r)
        self.rejected = Counter("tengen_trainer_rejected_total", "Records sent to the DLQ", registry=r)
        self.samples = Gauge("tengen_trainer_samples", "Training samples of the current net", registry=r)
        self.window = Gauge("tengen_trainer_window_rows", "Rows in the training window", registry=r)
        self.loss = Gauge("tengen_trainer_loss", "Total loss of the last step", registry=r)
        self.candidates = Counter("tengen_trainer_candidates_total", "Candidates exported", registry=r)
        self.skipped = Counter("tengen_trainer_skipped_steps_total",
                               "Training steps skipped for a non-finite loss or gradient", registry=r)


class TrainerService:
    def __init__(
        self,
        config: Config,
        *,
        device: str = "cpu",
        http_port: int | None = None,
        checkpoint_every_s: float = 60.0,
        log_every_s: float = 10.0,
        train_slice_s: float = 0.5,
        group_id: str = TRAINER_GROUP,
    ) -> None:
        self.config = config
        self.data_dir = DataDir(config.run.data_dir)
        self.window = Window(
            self.data_dir.window,
            pos_len=max(config.game.board_sizes),
            c=config.trainer.window_c,
            alpha=config.trainer.window_alpha,
            beta=config.trainer.window_beta,
        )
        self.learner = Learner(config.trainer, self.window, device=device)
        self.checkpoint_path = self.data_dir.checkpoint
        if self.checkpoint_path.exists() and (saved := Learner.checkpoint_arch(self.checkpoint_path))[0] != \
                config.trainer.arch:
            self._take_over(*saved)
        elif self.checkpoint_path.exists():
            self.learner.load(self.checkpoint_path)
            log.info("resumed from %s at %d samples", self.checkpoint_path, self.learner.counters.samples)
        elif self.data_dir.init_model.is_file():
            seen = self.learner.start_from(self.data_dir.init_model)
            log.info("warm start: weights from %s (trained on %d samples elsewhere); this run's samples start at 0",
                     self.data_dir.init_model, seen)
        # A warm-started run's net had trained elsewhere first: its candidates say so (init_from), so
        # that the curriculum counts the net's samples in all (tengen.nn.export.net_samples).
        self.prior_samples = (export_net_samples(self.data_dir.init_model) or 0) if self.data_dir.init_model.is_file() \
            else 0
        self.checkpoint_every_s = checkpoint_every_s
        self.log_every_s = log_every_s
        self.train_slice_s = train_slice_s
        self.group_id = group_id
        self.http_port = http_port
        self.metrics = Metrics()
        self.last_tick = time.monotonic()
        self.totals = IngestStats()
        self.nonfinite_streak = 0  # skipped steps in a row
        self.last_loss: float | None = None  # of the last step that counted
        self.run_facts: dict[str, Any] = {}  # when the run began, the machine, the commit (run())
        self._http: HealthServer | None = None

    # -- the loop ------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Serve until `stop` is set; then checkpoint and close everything."""
        from torch.utils.tensorboard import SummaryWriter

        bootstrap = self.config.kafka.bootstrap
        self._start_http()
        if not wait_for_loop_topics(bootstrap, stop, "trainer"):
            self._stop_http()
            return
        record = run_record(self.config)
        append_run_record(self.data_dir.root, record)
        # What the progress reports say of the run (tengen.loop.progress): when it began, and where.
        self.run_facts = {"run_began": run_began(self.data_dir.root), "machine": describe(record["machine"]),
                          "commit": record["commit"]}
        log.info("trainer: run record appended to %s (machine: %s)", self.data_dir.run_records,
                 self.run_facts["machine"])
        writer = SummaryWriter(str(self.data_dir.trainer_tensorboard))
        producer = ReliableProducer(bootstrap, client_id="tengen-trainer")
        consumer = GroupConsumer(bootstrap, GAMES_TOPIC, self.group_id, client_id="tengen-trainer")
        log.info("trainer: window %s holds %d of %d rows (%d games); net %s at %d samples",
                 self.window.directory, len(self.window), self.window.n_total, self.window.games,
                 self.config.trainer.arch, self.learner.counters.samples)
        saved_samples = self.learner.counters.samples
        last_save = last_log = time.monotonic()
        logged_samples = saved_samples
        try:
            while not stop.is_set():
                self.last_tick = time.monotonic()
                training = self.learner.can_train()
                # A poll without waiting cannot complete a group join (several round trips): a
                # restarted trainer with training to do once ingested nothing for 95 s, and one
                # whose commit failed after a broker restart (the group had forgotten it) for 110 s.
                records = consumer.poll(timeout_s=0.0 if training and consumer.assigned else 0.5)
                if records:
                    stats = ingest(records, self.window, producer)
                    self._count(stats)
                    # Dead letters must be on the broker before their offsets are committed.
                    while stats.rejected and not producer.flush(timeout_s=5.0):
                        log.warning("trainer: waiting for the broker to acknowledge dead letters")
                        if stop.is_set():
                            return
                    consumer.commit(records)
                if training:
                    self._train_slice(writer, producer, stop)
                now = time.monotonic()
                samples = self.learner.counters.samples
                if samples != saved_samples and now - last_save >= self.checkpoint_every_s:
                    self._checkpoint()
                    saved_samples, last_save = samples, now
                if now - last_log >= self.log_every_s:
                    rate = (samples - logged_samples) / (now - last_log)
                    self._progress(writer, producer, rate)
                    last_log, logged_samples = now, samples
        finally:
            if self.learner.counters.samples != saved_samples:
                self._checkpoint()
            self.learner.close()
            self.window.close()
            consumer.close()
            producer.close(timeout_s=10.0)
            writer.close()
            self._stop_http()
            log.info("trainer: stopped at %d samples, window %d rows", self.learner.counters.samples, len(self.window))

    def _count(self, stats: IngestStats) -> None:
        self.totals.add(stats)
        self.metrics.games.inc(stats.appended)
        self.metrics.rows.inc(stats.rows)
        self.metrics.duplicates.inc(stats.duplicates)
        self.metrics.rejected.inc(stats.rejected)
        self.metrics.window.set(len(self.window))

    def _train_slice(self, writer, producer: ReliableProducer, stop: threading.Event) -> None:
        deadline = time.monotonic() + self.train_slice_s
        learner = self.learner
        while not stop.is_set() and learner.can_train() and time.monotonic() < deadline:
            report = learner.step()
            if report["skipped"]:
                self.nonfinite_streak += 1
                self.metrics.skipped.inc()
                if self.nonfinite_streak in (1, NONFINITE_STREAK_RED) or self.nonfinite_streak % 1000 == 0:
                    log.error("trainer: skipped a step with a non-finite loss or gradient (%d in a row, %d in all)",
                              self.nonfinite_streak, learner.counters.skipped_steps)
                continue
            self.nonfinite_streak = 0
            samples = learner.counters.samples
            for name in LOSS_TERMS + ("total",):
                writer.add_scalar(f"loss/{name}", report[name], samples)
            writer.add_scalar("train/lr_per_sample", report["lr_per_sample"], samples)
            self.metrics.samples.set(samples)
            self.metrics.loss.set(report["total"])
            self.last_loss = float(report["total"])
            if learner.snapshot_due():
                try:
                    if learner.take_snapshot():
                        self._export_candidate(producer)
                except NonFiniteError as err:
                    self._back_to_checkpoint(err)
                    return
                self._checkpoint()

    def _take_over(self, old_arch: str, samples: int) -> None:
        """The preset now trains another architecture than the checkpoint's: a new net takes the run
        over. The old checkpoint is kept aside; the new net catches up on the window before its first
        candidate, which gating then plays against the served (old) net: the switch's measurement."""
        kept = self.data_dir.retired_checkpoint(old_arch)
        os.replace(self.checkpoint_path, kept)
        self.learner.take_over(samples)
        self.learner.save(self.checkpoint_path)  # a restart continues the new net, not the switch
        log.warning("trainer: the preset trains %s, the checkpoint held %s: a new %s net takes over at %d samples "
                    "(the old checkpoint kept as %s); it trains %d samples on the window before its first candidate",
                    self.config.trainer.arch, old_arch, self.config.trainer.arch, samples, kept,
                    self.learner.counters.catch_up)

    def _back_to_checkpoint(self, err: NonFiniteError) -> None:
        """The weights went non-finite: resume from the last checkpoint (always finite), or from a
        fresh net when there is none."""
        if self.checkpoint_path.exists():
            self.learner.load(self.checkpoint_path)
            log.error("trainer: %s; resumed from %s at %d samples", err, self.checkpoint_path,
                      self.learner.counters.samples)
        else:
            self.learner.close()
            self.learner = Learner(self.config.trainer, self.window, device=self.learner.device)
            if self.data_dir.init_model.is_file():
                self.learner.start_from(self.data_dir.init_model)
                log.error("trainer: %s; no checkpoint yet, starting from the init model again", err)
            else:
                log.error("trainer: %s; no checkpoint yet, starting from a fresh net", err)

    def _export_candidate(self, producer: ReliableProducer) -> None:
        samples = self.learner.counters.samples
        name = candidate_name(samples)
        path = self.data_dir.candidate(name)
        net = self.learner.candidate()
        extra: dict[str, Any] = {"name": name, "swa_snapshots": self.learner.swa.snapshots}
        if self.prior_samples:
            extra["init_from"] = {"samples_seen": self.prior_samples}
        # The boards the curriculum has it play once served, the size `tengen gtp` defaults to.
        extra["trained_board_sizes"] = list(self.config.game.boards_at(samples + self.prior_samples).sizes)
        export_model(net, path, samples, extra=extra)
        announcement = CandidateAnnouncement(name=name, path=str(path), samples=samples,
                                             arch=self.config.trainer.arch, created=time.time())
        producer.send(CANDIDATES_TOPIC, name, announcement.to_bytes())
        self.metrics.candidates.inc()
        log.info("trainer: exported candidate %s (%d samples, average of %d snapshots)",
                 name, samples, self.learner.swa.snapshots)

    def _checkpoint(self) -> None:
        try:
            self.learner.save(self.checkpoint_path)
        except NonFiniteError as err:
            self._back_to_checkpoint(err)

    def _progress(self, writer, producer: ReliableProducer, samples_per_s: float) -> None:
        window = self.window
        samples = self.learner.counters.samples
        progress.publish(producer, progress.TRAINER, {
            **self.run_facts, "samples": samples, "samples_per_s": samples_per_s, "window_rows": len(window),
            "games": window.games, "loss": self.last_loss})
        writer.add_scalar("window/rows", len(window), samples)
        writer.add_scalar("window/rows_total", window.n_total, samples)
        writer.add_scalar("train/samples_per_s", samples_per_s, samples)
        writer.flush()
        state = "training" if self.learner.can_train() else (
            f"waiting for rows ({window.n_total}/{self.config.trainer.min_rows_to_train})"
            if window.n_total < self.config.trainer.min_rows_to_train else "waiting for new games")
        log.info("trainer: %s | samples %d (%.0f/s) | window %d rows of %d ever, %d games | "
                 "rejected %d, duplicates %d | candidates %d",
                 state, samples, samples_per_s, len(window), window.n_total, window.games,
                 self.totals.rejected, self.totals.duplicates, self.learner.counters.candidates)

    # -- health and metrics --------------------------------------------------------------------

    def _start_http(self) -> None:
        if self.http_port is None:
            return
        self._http = HealthServer(self.http_port, self.metrics.registry, self._health, name="trainer")
        self.http_port = self._http.port

    def _health(self) -> tuple[bool, str]:
        if time.monotonic() - self.last_tick >= HEALTHY_WITHIN_S:
            return False, "stalled"
        if self.nonfinite_streak >= NONFINITE_STREAK_RED:
            return False, (f"the last {self.nonfinite_streak} training steps had a non-finite loss or gradient "
                           "(poisoned rows in the window?)")
        return True, "ok"

    def _stop_http(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None


def torch_threads(count: int) -> None:
    """Intra-op threads for CPU training (the preset's trainer.threads)."""
    torch.set_num_threads(max(1, count))
