"""The run's progress, published by the services that know it and read the same way in every way
of running (`tengen run`, docker compose, Kubernetes: no shared disk).

Each service publishes what it knows on the compacted topic `tengen.progress` (PROGRESS_TOPIC),
keyed by the reporter, every few seconds (the trainer's and the workers' log intervals):
- the trainer (`trainer`): when the run began (the first of the run records it keeps,
  tengen.loop.record), the machine and commit it runs on, samples trained and their rate, the
  window's rows, the games it has ingested, the last loss;
- each selfplay worker (`selfplay/<worker id>`): its games and positions per second, the version it
  plays and the boards it plays it on.
ProgressFollower follows the topic and sums the reports into LoopProgress: what the ratings page
shows, and `tengen status --page` through it. A report is JSON:
    {"reporter": "trainer", "updated": 1.7e9, "figures": {"samples": 480000, ...}}
A figure of the wrong type reads as unknown, never as a number it is not.

`run.json` (run_state, RunProgress) is `tengen run`'s own: the endpoints and pids of its children
and the figures of its status line, with the duration it was given, which only it knows.
"""
from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from kafka.consumer.fetcher import ConsumerRecord

from tengen.infra.kafka import Backoff, BufferFullError, KafkaAdapterError, RecordSender, follow_topic
from tengen.loop.layout import DataDir
from tengen.loop.messages import PROGRESS_TOPIC

log = logging.getLogger(__name__)
# A worker's report older than this is a worker that stopped: its rates leave the sums.
FRESH_S = 90.0
TRAINER = "trainer"


def selfplay_reporter(worker_id: str) -> str:
    return f"selfplay/{worker_id}"


# -- the reports ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProgressReport:
    reporter: str
    updated: float  # Unix time
    figures: dict[str, Any]

    def to_bytes(self) -> bytes:
        return json.dumps({"reporter": self.reporter, "updated": self.updated, "figures": self.figures}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ProgressReport:
        """The report in `data`; ValueError when it is not one."""
        obj = json.loads(data)
        if not isinstance(obj, dict) or not isinstance(obj.get("reporter"), str) or not obj["reporter"]:
            raise ValueError("no reporter")
        updated = obj.get("updated")
        if isinstance(updated, bool) or not isinstance(updated, (int, float)) or not math.isfinite(updated):
            raise ValueError("no time")
        if not isinstance(obj.get("figures"), dict):
            raise ValueError("no figures")
        return cls(obj["reporter"], float(updated), obj["figures"])


def publish(producer: RecordSender, reporter: str, figures: Mapping[str, Any]) -> None:
    """Buffer this reporter's figures now, never waiting: the producer delivers them; a report that
    finds the buffer full (a broker outage) or the producer closed is left out. On the compacted
    topic the newest report of a reporter is the one that counts."""
    report = ProgressReport(reporter, time.time(), dict(figures))
    try:
        producer.send(PROGRESS_TOPIC, reporter, report.to_bytes(), block_timeout_s=0.0)
    except (BufferFullError, KafkaAdapterError):  # full, or closed as its service stops
        pass


# -- their sum ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoopProgress:
    """The run's figures, summed from the services' reports (None: not reported yet)."""

    updated: float  # the trainer's last report (the newest report's without one)
    run_began: float | None  # Unix time of the run's first trainer start
    samples: int | None
    samples_per_s: float | None
    games: int | None  # ingested by the trainer: the run's games, across every restart
    window_rows: int | None
    loss: float | None
    games_per_s: float | None  # summed over the workers that reported within FRESH_S
    positions_per_s: float | None
    workers: int
    version: int | None  # the newest version a worker plays
    boards: str | None  # what it plays it on, e.g. "7x7"
    machine: str | None  # the trainer's machine line
    commit: str | None

    def elapsed_s(self, now: float) -> float | None:
        return None if self.run_began is None else max(0.0, now - self.run_began)

    def to_json(self, now: float) -> dict[str, Any]:
        return {**asdict(self), "elapsed_s": self.elapsed_s(now)}


def _figure(figures: Mapping[str, Any], key: str, kind: type) -> Any:
    value = figures.get(key)
    if kind is str:
        return value if isinstance(value, str) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    if kind is int and value != int(value):
        return None
    return kind(value)


def summarize(reports: Mapping[str, ProgressReport], now: float) -> LoopProgress | None:
    """The run's figures from the latest report of each reporter; None when there is none."""
    if not reports:
        return None
    trainer = reports[TRAINER].figures if TRAINER in reports else {}
    workers = [r.figures for name, r in reports.items()
               if name.startswith("selfplay/") and now - r.updated <= FRESH_S]

    def total(key: str) -> float | None:
        values = [v for f in workers if (v := _figure(f, key, float)) is not None]
        return sum(values) if values else None

    newest = max(workers, key=lambda f: _figure(f, "version", int) or 0, default={})
    return LoopProgress(
        # The trainer's report dates the figures: workers that outlive a dead trainer do not hide it.
        updated=reports[TRAINER].updated if TRAINER in reports else max(r.updated for r in reports.values()),
        run_began=_figure(trainer, "run_began", float), samples=_figure(trainer, "samples", int),
        samples_per_s=_figure(trainer, "samples_per_s", float), games=_figure(trainer, "games", int),
        window_rows=_figure(trainer, "window_rows", int), loss=_figure(trainer, "loss", float),
        games_per_s=total("games_per_s"), positions_per_s=total("positions_per_s"), workers=len(workers),
        version=_figure(newest, "version", int) or None, boards=_figure(newest, "boards", str),  # 0: none yet
        machine=_figure(trainer, "machine", str), commit=_figure(trainer, "commit", str),
    )


class ProgressFollower:
    """Follows `tengen.progress` in a background thread with one consumer, from the topic's start;
    `current()` is the run's figures as of the records read (None before the first). For the
    ratings page, which must not wait on a broker: across an outage it keeps the last figures."""

    def __init__(self, bootstrap: str, backoff: Backoff | None = None) -> None:
        self.bootstrap = bootstrap
        self._backoff = backoff or Backoff(1.0, 30.0)
        self._reports: dict[str, ProgressReport] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tengen-progress-follower", daemon=True)
        self._thread.start()

    def current(self) -> LoopProgress | None:
        with self._lock:
            reports = dict(self._reports)
        return summarize(reports, time.time())

    def _apply(self, rec: ConsumerRecord) -> None:
        try:
            report = ProgressReport.from_bytes(rec.value)
        except (ValueError, TypeError):
            return  # not a report: no figure from it
        with self._lock:
            self._reports[report.reporter] = report

    def _run(self) -> None:
        follow_topic(self.bootstrap, PROGRESS_TOPIC, "tengen-progress-follower", self._apply, self._stop, self._backoff)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15.0)


# -- tengen run's own file ------------------------------------------------------------------------
def run_state(data_dir: Path) -> dict:
    """`run.json` of a live run: its endpoints and child pids ({} while there is none)."""
    try:
        state = json.loads(DataDir(data_dir).run_state.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


@dataclass(frozen=True)
class RunProgress:
    """A run's figures at one status line (None: not known yet, e.g. no worker answered)."""

    updated: float  # Unix time of these figures
    elapsed_s: float
    duration_s: float | None  # None: the run goes on until stopped
    samples: int | None  # trained so far
    games_played: int | None  # by this run's self-play workers
    games_per_s: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> RunProgress | None:
        """The progress in `data`, or None when it is missing or malformed (a foreign writer)."""
        if not isinstance(data, dict):
            return None

        def number(key: str, kind: type = float, required: bool = False) -> Any:
            value = data.get(key)
            if value is None and not required:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(key)
            return kind(value)

        try:
            return cls(number("updated", required=True), number("elapsed_s", required=True), number("duration_s"),
                       number("samples", int), number("games_played", int), number("games_per_s"))
        except ValueError:
            return None


def read_run_progress(data_dir: Path) -> RunProgress | None:
    """The progress a live `tengen run` last wrote into the data dir's run.json, or None."""
    return RunProgress.from_json(run_state(data_dir).get("progress"))
