"""Published records kept until their consumer has them: no acknowledged record is lost when the
broker loses its log.

The one-box broker (Tansu) keeps its logs in memory: a broker restart empties every topic and
forgets every committed offset, so a game that the broker acknowledged but the trainer had not
yet made durable would be gone (737 games once, with the trainer paused 30 s). The producer
therefore keeps each acknowledged record, with the partition and offset the broker gave it, until
the consumer group (the trainer) has committed past that offset; the trainer commits only once the
rows are on disk. A broker restart shows as a partition whose log end or committed offset went
backwards; every record still kept for that partition is then sent again. The trainer's dedupe
(same id, same bytes) makes a resend harmless.

With a spool directory the kept records are also files there (one per record, written before the
record is sent, removed once committed), so a producer process that dies with the broker (a
SIGKILLed `tengen run`: the next run stops both) loses nothing either: the next process `restore`s
the spool and sends every record in it again.

On a cluster with a durable Kafka nothing is ever resent, and the cost is the memory of the
records the trainer has not committed yet (`max_bytes` bounds it: `add` blocks when full, so a
trainer that is down for long pauses self-play instead of growing the worker's memory).
"""
from __future__ import annotations

import logging
import os
import threading
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kafka import KafkaConsumer, TopicPartition

log = logging.getLogger(__name__)


@dataclass
class _Kept:
    value: bytes
    partition: int | None = None  # where the broker acknowledged it (None: not yet)
    offset: int | None = None


def _spooled_key(name: str) -> str | None:
    """The record key a spool file's name holds; None for a write cut short (a dot-named temp file)."""
    return None if name.startswith(".") else urllib.parse.unquote(name)


def spooled_keys(spool_dir: str | os.PathLike[str]) -> set[str]:
    """The keys of the records a spool holds now (a write cut short excluded), read from outside
    its process: what the producer published and the consumer group has not committed."""
    try:
        return {key for p in Path(spool_dir).iterdir() if (key := _spooled_key(p.name)) is not None}
    except FileNotFoundError:
        return set()


class Outbox:
    """Records of one topic, kept from `add` until `group` has committed past them."""

    def __init__(self, bootstrap: str, topic: str, group: str, resend: Callable[[str, bytes], object], *,
                 max_bytes: int = 256 << 20, spool_dir: str | os.PathLike[str] | None = None) -> None:
        """`resend(key, value)` sends a record again (ReliableProducer.send with the topic bound);
        `spool_dir` (one per producer process, never shared) keeps the records across its restarts."""
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
        self.spool = Path(spool_dir) if spool_dir is not None else None
        if self.spool is not None:
            self.spool.mkdir(parents=True, exist_ok=True)
        self.bootstrap, self.topic, self.group = bootstrap, topic, group
        self.max_bytes = max_bytes
        self.kept_bytes = 0
        self._resend = resend
        self._kept: dict[str, _Kept] = {}
        self._cond = threading.Condition()
        self._high: dict[int, tuple[int, int]] = {}  # partition -> highest (log end, committed) seen
        self._consumer: KafkaConsumer | None = None
        self._failing = False
        self.resent = 0

    def __len__(self) -> int:
        with self._cond:
            return len(self._kept)

    def add(self, key: str, value: bytes, timeout_s: float | None = None) -> bool:
        """Keep a record being sent; blocks while `max_bytes` are kept (False on timeout)."""
        with self._cond:
            if not self._cond.wait_for(lambda: not self._kept or self.kept_bytes + len(value) <= self.max_bytes,
                                       timeout=timeout_s):
                return False
            old = self._kept.get(key)
            self.kept_bytes += len(value) - (len(old.value) if old is not None else 0)
            self._kept[key] = _Kept(value)
            self._spool_write(key, value)
            return True

    def restore(self) -> list[tuple[str, bytes]]:
        """The records an earlier process left in the spool, kept again: the caller sends them again
        (they may be on the broker still, or the consumer may have them: its dedupe drops those)."""
        if self.spool is None:
            return []
        restored: list[tuple[str, bytes]] = []
        with self._cond:
            for path in sorted(self.spool.iterdir()):
                key = _spooled_key(path.name)
                if key is None:
                    path.unlink(missing_ok=True)  # a write cut short: its record was never sent
                    continue
                value = path.read_bytes()
                if key not in self._kept:
                    self._kept[key] = _Kept(value)
                    self.kept_bytes += len(value)
                    restored.append((key, value))
        if restored:
            log.warning("outbox: %d records of %s that an earlier process published and %s had not committed; "
                        "sending them again", len(restored), self.topic, self.group)
            self.resent += len(restored)
        return restored

    def _spool_path(self, key: str) -> Path:
        assert self.spool is not None
        return self.spool / urllib.parse.quote(key, safe="")

    def _spool_write(self, key: str, value: bytes) -> None:
        """Written whole under a temporary name, then renamed: a process killed mid-write leaves no
        torn record (no fsync: this guards against the process dying, not the machine)."""
        if self.spool is None:
            return
        path = self._spool_path(key)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(value)
        os.replace(tmp, path)

    def _release(self, key: str) -> None:
        self.kept_bytes -= len(self._kept.pop(key).value)
        if self.spool is not None:
            self._spool_path(key).unlink(missing_ok=True)

    def delivered(self, key: str, partition: int, offset: int) -> None:
        """The broker acknowledged `key` at (partition, offset) (the producer's callback)."""
        with self._cond:
            kept = self._kept.get(key)
            if kept is not None:
                kept.partition, kept.offset = partition, offset

    def check(self) -> None:
        """Release what the group has committed; resend what a reset partition lost. Errors (the
        broker away) are logged and leave everything kept for the next check."""
        try:
            committed, ends = self._positions()
        except Exception as exc:  # broker down or restarting: try again at the next check
            if not self._failing:
                log.warning("outbox: cannot read the positions of %s on %s (%r); keeping every record until it "
                            "can", self.group, self.topic, exc)
            self._failing = True
            self._close_clients()
            return
        if self._failing:
            log.info("outbox: reading the positions of %s again", self.group)
            self._failing = False
        lost: list[tuple[str, bytes]] = []
        with self._cond:
            for partition, end in ends.items():
                done = committed.get(partition, 0)
                high_end, high_done = self._high.get(partition, (0, 0))
                if end < high_end or done < high_done:
                    # The log restarted: nothing kept for this partition is on the broker any more.
                    for key, kept in self._kept.items():
                        if kept.partition == partition:
                            kept.partition = kept.offset = None
                            lost.append((key, kept.value))
                    self._high[partition] = (end, done)
                    continue
                self._high[partition] = (end, done)
                for key in [k for k, kept in self._kept.items()
                            if kept.partition == partition and kept.offset is not None and kept.offset < done]:
                    self._release(key)
            self._cond.notify_all()
        if lost:
            log.warning("outbox: the broker lost %d acknowledged records of %s that %s had not committed "
                        "(a broker restart); sending them again", len(lost), self.topic, self.group)
            for key, value in lost:
                self._resend(key, value)
            self.resent += len(lost)

    def _positions(self) -> tuple[dict[int, int], dict[int, int]]:
        if self._consumer is None:
            # The group's id only to read its committed offsets: this consumer never subscribes,
            # so it never joins the group or takes a partition from the trainer.
            self._consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=self.group,
                                           client_id="tengen-outbox", enable_auto_commit=False,
                                           request_timeout_ms=6000)
        partitions = [TopicPartition(self.topic, p) for p in self._consumer.partitions_for_topic(self.topic) or ()]
        ends = self._consumer.end_offsets(partitions)
        committed = {}
        for tp in partitions:
            offset = self._consumer.committed(tp)
            if offset is not None and offset >= 0:
                committed[tp.partition] = offset
        return committed, {tp.partition: end for tp, end in ends.items()}

    def _close_clients(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close(autocommit=False)
            except Exception as exc:
                log.debug("outbox: error closing its consumer: %r", exc)
            self._consumer = None

    def run_checks(self, stop: threading.Event, every_s: float = 2.0) -> None:
        """check() every `every_s` until `stop` (a thread's target)."""
        while not stop.wait(every_s):
            self.check()
        self._close_clients()

    def wait_empty(self, timeout_s: float) -> bool:
        """Wait until the group has committed everything kept (tests, shutdown reports)."""
        deadline = time.monotonic() + timeout_s
        while len(self) and time.monotonic() < deadline:
            self.check()
            time.sleep(0.2)
        return not len(self)
