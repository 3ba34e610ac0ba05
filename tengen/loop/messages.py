"""What the loop's services tell each other, and on which topic (the transport is tengen.infra.kafka).

Topics:
- `tengen.games`: one finished game per record (tengen.proto game_pb2.GameRecord), key = game id
  (idempotent: a resend keeps the key, so consumers dedupe by it); the trainer's group
  TRAINER_GROUP reads it, and self-play keeps each game until that group has committed it.
- `tengen.games.dlq`: records a consumer rejected, same key and value, the reason in a header.
- `tengen.models`: compacted control topic, key = Triton model name, value = ModelAnnouncement of
  the version that serves now and the training samples it has seen (which pick the boards of the
  curriculum, GameConfig.boards_at); a worker that starts later reads the latest value per key:
    {"model": "tengen", "version": 12, "samples": 480000, "announced_at": 1.7e9}
- `tengen.progress`: compacted, key = a service instance, value = its latest figures
  (tengen.loop.progress: samples trained, games/s, when the run began, ...).
- `tengen.candidates`: CandidateAnnouncement of each candidate export, from the trainer to gating.
  A candidate is a TorchScript export (tengen.nn.export, with its JSON sidecar) written atomically
  at tengen.loop.layout's `candidates/<name>.pt` before it is announced:
    {"name": "...", "path": "/abs/.../name.pt", "samples": 123456, "arch": "b6c96", "created": 1.7e9}
  `samples` = training samples the trained net had seen when the candidate was averaged.

Players in ratings: version N of model M is `M-vN` (version_player), a candidate that was not
promoted `M-<candidate>` (candidate_player).
"""
from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from kafka.consumer.fetcher import ConsumerRecord

from tengen.infra.kafka import (
    Backoff,
    KafkaAdapterError,
    ReliableProducer,
    TopicSpec,
    ensure_topics,
    follow_topic,
    read_topic,
    wait_for_topics,
)

log = logging.getLogger(__name__)

GAMES_TOPIC = "tengen.games"
DLQ_TOPIC = "tengen.games.dlq"
MODELS_TOPIC = "tengen.models"
CANDIDATES_TOPIC = "tengen.candidates"
PROGRESS_TOPIC = "tengen.progress"  # tengen.loop.progress
# The trainer's consumer group on GAMES_TOPIC: self-play keeps each game until this group has
# committed it (tengen.infra.outbox).
TRAINER_GROUP = "tengen-trainer"


def loop_topics(game_partitions: int = 4) -> list[TopicSpec]:
    """The loop's topics. Games are spread over partitions so several trainers could share them."""
    return [
        TopicSpec(GAMES_TOPIC, game_partitions),
        TopicSpec(DLQ_TOPIC, 1),
        TopicSpec(MODELS_TOPIC, 1, compacted=True),
        TopicSpec(CANDIDATES_TOPIC, 1),
        TopicSpec(PROGRESS_TOPIC, 1, compacted=True),
    ]


def ensure_loop_topics(bootstrap: str, game_partitions: int = 4, timeout_s: float = 30.0) -> list[str]:
    """Create the loop's topics that do not exist yet (tengen.infra.kafka.ensure_topics)."""
    return ensure_topics(bootstrap, loop_topics(game_partitions), timeout_s)


def wait_for_loop_topics(bootstrap: str, stop: threading.Event, who: str, timeout_s: float = 10.0) -> bool:
    """A service's start: wait for the loop's topics (tengen.infra.kafka.wait_for_topics)."""
    return wait_for_topics(bootstrap, [spec.name for spec in loop_topics()], stop, who, timeout_s)


# -- players --------------------------------------------------------------------------------------
def version_player(model: str, version: int) -> str:
    """The ratings name of version N of a served model (gating, `tengen eval`, strength)."""
    return f"{model}-v{version}"


def player_version(name: str) -> int | None:
    """N of a version's ratings name `<model>-vN`, or None for any other name."""
    match = re.fullmatch(r".+-v(\d{1,12})", name)
    return int(match.group(1)) if match else None


def anchor_name(level: int) -> str:
    """The ratings name of GNU Go at `level` (an anchor player)."""
    return f"gnugo-l{level}"


def anchor_level(name: str) -> int | None:
    """The GNU Go level of an anchor's ratings name `gnugo-l<level>`, or None for any other name."""
    match = re.fullmatch(r"gnugo-l(\d{1,2})", name)
    return int(match.group(1)) if match else None


def candidate_player(model: str, candidate: str) -> str:
    """The ratings name of a candidate that was not promoted."""
    return f"{model}-{candidate}"


# -- candidates -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class CandidateAnnouncement:
    name: str
    path: str
    samples: int
    arch: str
    created: float

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "CandidateAnnouncement":
        """Parse an announcement; ValueError naming what is wrong."""
        try:
            raw = json.loads(data)
            announcement = cls(
                name=str(raw["name"]), path=str(raw["path"]), samples=int(raw["samples"]),
                arch=str(raw["arch"]), created=float(raw["created"]),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"not a candidate announcement: {err!r}") from err
        if announcement.samples < 0 or not announcement.name:
            raise ValueError(f"bad candidate announcement {raw!r}")
        return announcement


# -- model versions on the compacted topic --------------------------------------------------------
@dataclass(frozen=True)
class ModelAnnouncement:
    model: str
    version: int
    announced_at: float = field(default=0.0, compare=False)
    # Training samples the version has seen; None in an announcement of a tengen from before the
    # curriculum (it plays the final boards).
    samples: int | None = field(default=None, compare=False)

    def to_bytes(self) -> bytes:
        return json.dumps({"model": self.model, "version": self.version, "samples": self.samples,
                           "announced_at": self.announced_at}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "ModelAnnouncement":
        try:
            obj = json.loads(data)
            samples = obj.get("samples")
            if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int) or samples < 0):
                raise ValueError(f"samples must be an integer >= 0, got {samples!r}")
            return cls(str(obj["model"]), int(obj["version"]), float(obj.get("announced_at", 0.0)), samples)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise KafkaAdapterError(f"malformed model announcement {data[:200]!r}: {exc}") from exc


def announce_model(producer: ReliableProducer, model: str, version: int, *, samples: int | None,
                   timeout_s: float = 30.0) -> ModelAnnouncement:
    """Announce that `version` of `model`, trained on `samples` in all (tengen.nn.export.net_samples;
    None where its sidecar does not say), serves now; returns once the broker acknowledged it."""
    if not model or version < 1 or (samples is not None and samples < 0):
        raise ValueError(f"bad model announcement: model={model!r} version={version} samples={samples}")
    ann = ModelAnnouncement(model, version, time.time(), samples)
    producer.send(MODELS_TOPIC, model, ann.to_bytes())
    if not producer.flush(timeout_s):
        raise KafkaAdapterError(f"announcement of {model} v{version} not acknowledged within {timeout_s:.0f} s")
    log.info("kafka: announced %s version %d on %s", model, version, MODELS_TOPIC)
    return ann


def _read_announcement(rec: ConsumerRecord) -> ModelAnnouncement | None:
    """The record's announcement, or None (logged) when it is not one."""
    try:
        return ModelAnnouncement.from_bytes(rec.value)
    except KafkaAdapterError as exc:
        log.error("kafka: skipping %s", exc)
        return None


def latest_models(bootstrap: str, timeout_s: float = 30.0) -> dict[str, ModelAnnouncement]:
    """The latest announcement per model name on `tengen.models` (empty when none yet)."""
    latest: dict[str, ModelAnnouncement] = {}

    def handle(rec: ConsumerRecord) -> None:
        if rec.value is None:  # a tombstone removes the model
            latest.pop(rec.key.decode(), None)
            return
        ann = _read_announcement(rec)
        if ann is not None:
            latest[ann.model] = ann

    read_topic(bootstrap, MODELS_TOPIC, handle, "tengen-models-reader", timeout_s)
    return latest


def latest_model_version(bootstrap: str, model: str, timeout_s: float = 30.0) -> int | None:
    """The version of `model` last announced on `tengen.models`, or None when never announced."""
    ann = latest_models(bootstrap, timeout_s).get(model)
    return ann.version if ann is not None else None


class ModelWatcher:
    """Follows `tengen.models` in a background thread: `current(model)` is the latest announced
    version; `on_change(announcement)` runs on every new announcement. Reads the topic from the
    start, so a worker that starts later learns the current version first."""

    def __init__(self, bootstrap: str, on_change: Callable[[ModelAnnouncement], None] | None = None,
                 backoff: Backoff | None = None) -> None:
        self.bootstrap = bootstrap
        self.on_change = on_change
        self._backoff = backoff or Backoff(0.5, 10.0)
        self._latest: dict[str, ModelAnnouncement] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reread = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tengen-model-watcher", daemon=True)
        self._thread.start()

    def reread(self) -> None:
        """Read the topic again from its start (a caller that has reason to think announcements
        were missed: the log was reset and refilled past the old position before it was noticed)."""
        self._reread.set()

    def current(self, model: str) -> int | None:
        ann = self.announcement(model)
        return ann.version if ann is not None else None

    def announcement(self, model: str) -> ModelAnnouncement | None:
        """The latest announcement of `model`, or None."""
        with self._lock:
            return self._latest.get(model)

    def _apply(self, rec: ConsumerRecord) -> None:
        if rec.value is None or rec.key is None:
            return
        ann = _read_announcement(rec)
        if ann is None:
            return
        with self._lock:
            old = self._latest.get(ann.model)
            if old is not None and ann.version < old.version:
                return  # read again after a rewind: versions only grow, an older one is history
            self._latest[ann.model] = ann
        if (old is None or old.version != ann.version) and self.on_change is not None:
            self.on_change(ann)

    def _run(self) -> None:
        follow_topic(self.bootstrap, MODELS_TOPIC, "tengen-model-watcher", self._apply, self._stop, self._backoff,
                     self._reread)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10.0)
