"""Games from Kafka into the window: decode, validate by replay, dedupe, append, then commit.

For each polled batch of records, in order:
1. bytes -> GameRecord -> rows (tengen.loop.rows.window_rows: policy surprise weighting repeats
   some, drops others, seeded by the game id); a RecordError (malformed bytes, bad field,
   illegal move on replay, ...) sends the record to `tengen.games.dlq` with the reason;
2. a game id the window has already seen is dropped (Kafka delivers at least once) when its record
   is the same bytes as the first time; a different record under a known id is dead-lettered as a
   conflicting duplicate (a replay is byte-identical, so that is a bug or an attack);
3. the rows are appended to the window, which returns only once they are on disk;
4. once every record of the batch is durable (rows appended, dead letters acknowledged by the
   broker), the consumer offsets are committed.
A crash anywhere before step 4 redelivers the batch; step 2 makes the replay harmless.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Sequence

from kafka.consumer.fetcher import ConsumerRecord

from tengen.infra.kafka import RecordSender, send_dead_letter
from tengen.loop.messages import DLQ_TOPIC
from tengen.loop.rows import RecordError, decode, window_rows
from tengen.train.window import Window

log = logging.getLogger("services.trainer")


@dataclass
class IngestStats:
    appended: int = 0  # games appended
    rows: int = 0  # rows appended
    duplicates: int = 0
    rejected: int = 0

    def add(self, other: "IngestStats") -> None:
        self.appended += other.appended
        self.rows += other.rows
        self.duplicates += other.duplicates
        self.rejected += other.rejected


def record_digest(value: bytes) -> str:
    """What the window keeps of a record's bytes to tell a redelivery from another game."""
    return hashlib.blake2b(value, digest_size=16).hexdigest()


def ingest(records: Sequence[ConsumerRecord], window: Window, dead_letters: RecordSender) -> IngestStats:
    """Steps 1-3 for `records`. The caller flushes the dead letters before committing."""
    stats = IngestStats()
    for record in records:
        try:
            value = record.value or b""
            game = decode(value)
            digest = record_digest(value)
            seen = window.digest_of(game.id)
            if seen is not None:
                if seen and seen != digest:
                    raise RecordError(f"conflicting duplicate: game id {game.id!r} was ingested before with "
                                      "other content")
                stats.duplicates += 1
                continue
            rows = window_rows(game, window.pos_len)
        except RecordError as err:
            log.warning("rejecting record at %s[%d]@%d (key %r): %s",
                        record.topic, record.partition, record.offset, record.key, err.reason)
            send_dead_letter(dead_letters, record, err.reason, DLQ_TOPIC)
            stats.rejected += 1
            continue
        except ValueError as err:  # a valid record that does not fit this window (board > pos_len)
            reason = f"does not fit the trainer: {err}"
            log.warning("rejecting game %s: %s", game.id, reason)
            send_dead_letter(dead_letters, record, reason, DLQ_TOPIC)
            stats.rejected += 1
            continue
        if window.append(game.id, rows, digest):
            stats.appended += 1
            stats.rows += len(rows)
        else:
            stats.duplicates += 1
    return stats
