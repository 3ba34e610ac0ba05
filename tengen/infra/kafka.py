"""Kafka transport (kafka-python only): topics, a reliable producer, group consumers, dead letters.
What the loop sends on which topic is tengen.loop.messages'.

`ReliableProducer` keeps every record in a bounded local buffer until the broker acknowledges it
(acks=all) and resends what failed, recreating the client when the broker went away (an idempotent
producer whose broker restarted empty cannot recover its producer id). `GroupConsumer` joins a
consumer group with manual commits: offsets are committed only when the caller says the records
are durable.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol, Sequence

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kerr
from kafka.admin import KafkaAdminClient
from kafka.consumer.fetcher import ConsumerRecord
from kafka.producer.future import RecordMetadata
from kafka.structs import OffsetAndMetadata

from tengen.infra.broker import kafka_api_versions_ok

log = logging.getLogger(__name__)

# A group join against the local broker takes ~3 s with these; kafka-python's 45 s default session
# timeout made the first join take over 20 s. Both must stay above the broker's minimum.
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 1000
JOIN_WAIT_S = 10.0  # a poll during a group join waits this long for it to end (Tansu takes ~3 s)

Headers = Sequence[tuple[str, bytes]]


class KafkaAdapterError(RuntimeError):
    """A Kafka operation could not complete (broker unreachable past the deadline, bad input)."""


class BufferFullError(KafkaAdapterError):
    """The producer's local buffer stayed full for longer than the caller allowed."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    compacted: bool = False
    replication_factor: int = -1  # -1: the broker's default (1 locally, 3 on a production cluster)


class Backoff:
    """Exponential backoff with a cap; `reset()` after a success."""

    def __init__(self, initial_s: float = 0.2, max_s: float = 10.0) -> None:
        if initial_s <= 0 or max_s < initial_s:
            raise ValueError(f"bad backoff bounds: initial {initial_s}, max {max_s}")
        self.initial_s = initial_s
        self.max_s = max_s
        self._next = initial_s

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.max_s)
        return delay

    def reset(self) -> None:
        self._next = self.initial_s


def broker_reachable(bootstrap: str, timeout_s: float = 1.0) -> bool:
    """True when any of the comma-separated bootstrap servers answers a Kafka request."""
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        if host and port.isdigit() and kafka_api_versions_ok(host.strip("[]"), int(port), timeout_s):
            return True
    return False


def _key_bytes(key: str | bytes) -> bytes:
    if isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    raise TypeError(f"record key must be str or bytes, got {type(key).__name__}")


def ensure_topics(bootstrap: str, specs: Iterable[TopicSpec], timeout_s: float = 30.0) -> list[str]:
    """Create the topics that do not exist yet; return the names created. Retries until timeout_s
    while the broker is unreachable."""
    wanted = list(specs)
    deadline = time.monotonic() + timeout_s
    backoff = Backoff(0.2, 2.0)
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tengen-admin",
                                     request_timeout_ms=10000, bootstrap_timeout_ms=5000)
            try:
                existing = set(admin.list_topics())
                missing = [s for s in wanted if s.name not in existing]
                if missing:
                    request = {
                        s.name: {
                            "num_partitions": s.partitions,
                            "replication_factor": s.replication_factor,
                            "configs": {"cleanup.policy": "compact"} if s.compacted else {},
                        }
                        for s in missing
                    }
                    admin.create_topics(request, raise_errors=False, wait_for_metadata=True)
                    now = set(admin.list_topics())
                    still = [s.name for s in missing if s.name not in now]
                    if still:
                        raise KafkaAdapterError(f"broker did not create topics {still}")
                    log.info("kafka: created topics %s on %s", [s.name for s in missing], bootstrap)
                return [s.name for s in missing]
            finally:
                admin.close()
        except (kerr.KafkaError, KafkaAdapterError, OSError) as exc:
            if time.monotonic() >= deadline:
                raise KafkaAdapterError(
                    f"could not ensure topics on {bootstrap} within {timeout_s:.0f} s: {exc!r}"
                ) from exc
            delay = backoff.next()
            log.warning(
                "kafka: broker %s not reachable for topic setup (%r); retrying in %.1f s", bootstrap, exc, delay
            )
            time.sleep(delay)


def missing_topics(bootstrap: str, names: Iterable[str], timeout_s: float = 10.0) -> list[str]:
    """Which of `names` the broker does not have (KafkaAdapterError when it cannot be asked)."""
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="tengen-admin",
            request_timeout_ms=int(timeout_s * 1000),
            bootstrap_timeout_ms=int(timeout_s * 1000),
        )
    except (kerr.KafkaError, OSError) as exc:
        raise KafkaAdapterError(f"broker {bootstrap} not reachable ({exc!r})") from exc
    try:
        existing = set(admin.list_topics())
    except (kerr.KafkaError, OSError) as exc:
        raise KafkaAdapterError(f"cannot list the topics of {bootstrap} ({exc!r})") from exc
    finally:
        admin.close()
    return [name for name in names if name not in existing]


def wait_for_topics(
    bootstrap: str, names: Sequence[str], stop: threading.Event, who: str, timeout_s: float = 10.0
) -> bool:
    """A service's start: wait until the broker answers and has the topics `names`, retrying
    with backoff (1 s doubling to 30 s, logged), until `stop` is set. True once they exist.

    Services never create topics: the deployment does, once, with its own settings (`tengen run`
    with ensure_topics, compose's kafka-init, the Kubernetes topics Job). A service that created
    `tengen.games` with the default partitions before the Job ran would leave it so for good
    (creating an existing topic adds no partitions)."""
    backoff = Backoff(1.0, 30.0)
    while not stop.is_set():
        try:
            missing = missing_topics(bootstrap, names, timeout_s)
            if not missing:
                return True
            reason = (
                f"topics {', '.join(missing)} do not exist yet (the deployment creates them: `tengen run`, "
                "compose's kafka-init, the Kubernetes topics Job)"
            )
        except KafkaAdapterError as exc:
            reason = str(exc)
        delay = backoff.next()
        log.warning("%s: %s; checking again in %.0f s", who, reason, delay)
        stop.wait(delay)
    return False


# Errors that resending the same record can never fix: report and drop instead of looping forever.
_PERMANENT_RECORD_ERRORS = (
    kerr.MessageSizeTooLargeError,
    kerr.RecordListTooLargeError,
    kerr.InvalidTopicError,
    kerr.TopicAuthorizationFailedError,
    kerr.InvalidRecordError,
)


@dataclass
class _Pending:
    seq: int
    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    generation: int = -1  # generation of the client it is in flight on; -1 while waiting to be sent
    attempts: int = 0


DeliveredCallback = Callable[[str, bytes, RecordMetadata], None]
FailedCallback = Callable[[str, bytes, Exception], None]


class ReliableProducer:
    """acks=all producer with a bounded local buffer and resends while the broker is down.

    `send()` returns once the record is buffered (blocking while the buffer is full); a background
    thread hands records to kafka-python and keeps each one until the broker acknowledges it. A
    failed record is resent under the same key, so a resend can at worst duplicate a record (the
    consumers dedupe by key), never lose it or give it another id. `flush()` waits until nothing is
    pending; `close()` flushes first.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        max_buffered: int = 10_000,
        client_id: str = "tengen-producer",
        on_delivered: DeliveredCallback | None = None,
        on_failed: FailedCallback | None = None,
        request_timeout_s: float = 10.0,
        delivery_timeout_s: float = 30.0,
        max_request_bytes: int = 8 * 1024 * 1024,
        backoff: Backoff | None = None,
    ) -> None:
        if max_buffered < 1:
            raise ValueError(f"max_buffered must be >= 1, got {max_buffered}")
        self.bootstrap = bootstrap
        self.max_buffered = max_buffered
        self.client_id = client_id
        self.on_delivered = on_delivered
        self.on_failed = on_failed
        self._config: dict[str, Any] = dict(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            acks="all",
            retries=2**31 - 1,
            request_timeout_ms=int(request_timeout_s * 1000),
            delivery_timeout_ms=int(delivery_timeout_s * 1000),
            max_block_ms=5000,
            bootstrap_timeout_ms=5000,
            max_request_size=max_request_bytes,
            linger_ms=5,
            reconnect_backoff_max_ms=2000,
        )
        self._backoff = backoff or Backoff(0.2, 10.0)
        self._cond = threading.Condition()
        self._pending: dict[int, _Pending] = {}
        self._waiting: dict[int, _Pending] = {}  # subset of pending not currently in flight
        self._next_seq = 0
        self._generation = 0
        self._needs_reset = False
        self._last_error: Exception | None = None
        self._closed = False
        self._client: KafkaProducer | None = None
        self.delivered = 0
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name=f"{client_id}-sender", daemon=True)
        self._thread.start()

    # -- public API -------------------------------------------------------------------------
    def send(
        self, topic: str, key: str | bytes, value: bytes, headers: Headers = (), block_timeout_s: float | None = None
    ) -> None:
        """Buffer one record for delivery; blocks while the buffer is full (None = wait forever)."""
        if not topic:
            raise ValueError("topic must be a non-empty string")
        if not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"record value must be bytes, got {type(value).__name__}")
        rec_headers = [(str(k), bytes(v)) for k, v in headers]
        key_b = _key_bytes(key)
        deadline = None if block_timeout_s is None else time.monotonic() + block_timeout_s
        with self._cond:
            if self._closed:
                raise KafkaAdapterError("producer is closed")
            while len(self._pending) >= self.max_buffered:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise BufferFullError(
                        f"producer buffer full ({self.max_buffered} records unacknowledged; "
                        f"is the broker at {self.bootstrap} up?)"
                    )
                self._cond.wait(remaining if remaining is not None else 1.0)
                if self._closed:
                    raise KafkaAdapterError("producer is closed")
            rec = _Pending(self._next_seq, topic, key_b, bytes(value), rec_headers)
            self._next_seq += 1
            self._pending[rec.seq] = rec
            self._waiting[rec.seq] = rec
            self._cond.notify_all()

    @property
    def pending(self) -> int:
        """Records buffered or in flight, not yet acknowledged."""
        with self._cond:
            return len(self._pending)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every buffered record is acknowledged (or dropped as undeliverable)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while self._pending:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining if remaining is not None else 1.0)
            return True

    def close(self, timeout_s: float = 30.0) -> None:
        """Flush (up to timeout_s), stop the sender, close the client. Logs what stayed unsent."""
        flushed = self.flush(timeout_s)
        with self._cond:
            self._closed = True
            left = len(self._pending)
            self._cond.notify_all()
        self._thread.join(timeout=10.0)
        if not flushed:
            log.error("kafka: producer closed with %d records never acknowledged by %s", left, self.bootstrap)

    def __enter__(self) -> "ReliableProducer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sender thread ----------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not self._waiting and not self._needs_reset:
                    self._cond.wait(0.5)
                if self._closed:
                    break
                reset = self._needs_reset
                self._needs_reset = False
            if reset:
                self._drop_client()
                delay = self._backoff.next()
                log.warning(
                    "kafka: %d records not acknowledged by %s (last error %r); reconnecting in %.1f s",
                    self.pending,
                    self.bootstrap,
                    self._last_error,
                    delay,
                )
                self._sleep(delay)
                continue
            if self._client is None and not self._connect():
                continue
            self._dispatch()
        self._drop_client(timeout_s=5.0)

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            if not self._closed:
                self._cond.wait(seconds)

    def _connect(self) -> bool:
        try:
            self._client = KafkaProducer(**self._config)
        except Exception as exc:  # kafka-python raises several types when bootstrap fails
            delay = self._backoff.next()
            log.warning(
                "kafka: broker %s unreachable (%r); %d records buffered; retrying in %.1f s",
                self.bootstrap,
                exc,
                self.pending,
                delay,
            )
            self._sleep(delay)
            return False
        with self._cond:
            self._generation += 1
        log.info("kafka: producer connected to %s (%d records buffered)", self.bootstrap, self.pending)
        return True

    def _dispatch(self) -> None:
        client = self._client
        assert client is not None
        with self._cond:
            batch = [self._waiting.pop(seq) for seq in sorted(self._waiting)]
            generation = self._generation
            for rec in batch:
                rec.generation = generation
                rec.attempts += 1
        for i, rec in enumerate(batch):
            try:
                fut = client.send(rec.topic, key=rec.key, value=rec.value, headers=rec.headers)
            except Exception as exc:  # metadata timeout while the broker is down, or a closed client
                with self._cond:
                    self._last_error = exc
                    for r in batch[i:]:
                        self._requeue(r, generation)
                    self._needs_reset = True
                return
            fut.add_callback(self._on_success, rec, generation)
            fut.add_errback(self._on_error, rec, generation)

    def _drop_client(self, timeout_s: float = 0.0) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        with self._cond:
            self._generation += 1  # callbacks of the old client no longer own their records
            for rec in self._pending.values():
                if rec.seq not in self._waiting:
                    self._requeue(rec, rec.generation)
        try:
            client.close(timeout=timeout_s)
        except Exception as exc:  # closing a broken client must not kill the sender thread
            log.debug("kafka: error closing producer client: %r", exc)

    def _requeue(self, rec: _Pending, generation: int) -> None:
        # Caller holds the lock. Only the client generation that sent the record may requeue it.
        if rec.seq in self._pending and rec.generation == generation and rec.seq not in self._waiting:
            rec.generation = -1
            self._waiting[rec.seq] = rec
            self._cond.notify_all()

    def _on_success(self, rec: _Pending, generation: int, metadata: RecordMetadata) -> None:
        with self._cond:
            if self._pending.pop(rec.seq, None) is None:
                return
            self._waiting.pop(rec.seq, None)
            self.delivered += 1
            self._backoff.reset()
            self._cond.notify_all()
        if self.on_delivered is not None:
            self.on_delivered(rec.topic, rec.key, metadata)

    def _on_error(self, rec: _Pending, generation: int, exc: Exception) -> None:
        if isinstance(exc, _PERMANENT_RECORD_ERRORS):
            log.error("kafka: dropping record key=%r for %s: %r (resending cannot succeed)", rec.key, rec.topic, exc)
            with self._cond:
                if self._pending.pop(rec.seq, None) is None:
                    return
                self._waiting.pop(rec.seq, None)
                self.dropped += 1
                self._cond.notify_all()
            if self.on_failed is not None:
                self.on_failed(rec.topic, rec.key, exc)
            return
        with self._cond:
            if rec.seq not in self._pending:
                return
            log.debug(
                "kafka: record key=%r for %s not acknowledged (%r, attempt %d); resending",
                rec.key,
                rec.topic,
                exc,
                rec.attempts,
            )
            self._last_error = exc
            self._requeue(rec, generation)
            # Recreate the client: after a broker restart the old one may be stuck in a fatal state.
            self._needs_reset = True
            self._cond.notify_all()


@dataclass
class _PartitionCommit:
    offset: int
    leader_epoch: int = -1


class GroupConsumer:
    """A consumer-group member with manual commits.

    `poll()` returns records; the caller makes them durable, then calls `commit(records)`, which
    commits offset+1 for the last record of each partition. Nothing is committed automatically, so a
    crash before `commit` redelivers the records (consumers dedupe by key).
    """

    def __init__(
        self,
        bootstrap: str,
        topics: str | Sequence[str],
        group_id: str,
        *,
        client_id: str = "tengen-consumer",
        max_poll_records: int = 500,
        auto_offset_reset: str = "earliest",
        max_poll_interval_s: float = 300.0,
        backoff: Backoff | None = None,
    ) -> None:
        if not group_id:
            raise ValueError("group_id must be a non-empty string")
        self.bootstrap = bootstrap
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics:
            raise ValueError("at least one topic is required")
        self.group_id = group_id
        self._config: dict[str, Any] = dict(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            max_poll_records=max_poll_records,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
            max_poll_interval_ms=int(max_poll_interval_s * 1000),
            request_timeout_ms=SESSION_TIMEOUT_MS + 5000,
            bootstrap_timeout_ms=5000,
            reconnect_backoff_max_ms=2000,
        )
        self._backoff = backoff or Backoff(0.2, 10.0)
        self._consumer: KafkaConsumer | None = None
        self._last_reset_check = time.monotonic()
        self._was_connected = True
        self._last_probe = 0.0

    def _ensure(self) -> KafkaConsumer | None:
        if self._consumer is not None:
            return self._consumer
        try:
            consumer = KafkaConsumer(**self._config)
            consumer.subscribe(self.topics)
        except Exception as exc:
            delay = self._backoff.next()
            log.warning(
                "kafka: consumer group %s cannot reach %s (%r); retrying in %.1f s",
                self.group_id,
                self.bootstrap,
                exc,
                delay,
            )
            time.sleep(delay)
            return None
        self._consumer = consumer
        log.info("kafka: consumer joined group %s on %s for %s", self.group_id, self.bootstrap, self.topics)
        return consumer

    def poll(self, timeout_s: float = 1.0, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records fetched within timeout_s (possibly none; up to JOIN_WAIT_S while a group join is in
        flight). Errors are logged and retried with backoff."""
        consumer = self._ensure()
        if consumer is None:
            return []
        if _join_in_flight(consumer):
            # kafka-python drops a JoinGroup/SyncGroup round that ended between two polls and sends
            # another: each round takes Tansu ~3 s, so a caller busy for longer than that between
            # polls (a trainer with 6-second steps) rejoined forever and read nothing for 30 min.
            timeout_s = max(timeout_s, JOIN_WAIT_S)
        try:
            batches = consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except kerr.KafkaError as exc:
            delay = self._backoff.next()
            log.warning("kafka: poll for group %s failed (%r); reconnecting in %.1f s", self.group_id, exc, delay)
            self._reset()
            time.sleep(delay)
            return []
        self._report_connectivity(bool(batches))
        if not batches and self._log_reset(consumer):
            self._reset()  # the next poll's fresh consumer joins and reads from the committed offsets
            return []
        records: list[ConsumerRecord] = []
        for tp in sorted(batches, key=lambda t: (t.topic, t.partition)):
            records.extend(batches[tp])
        if records:
            self._backoff.reset()
        return records

    def _log_reset(self, consumer: KafkaConsumer) -> bool:
        """Every LOG_RESET_CHECK_S of polls without records: whether the broker restarted with an
        empty log. Its log then ends before this member's position and, unless a join resets the
        position, the member fetches nothing until the new log passes it, then skips what came
        before (a trainer once waited 70 s and lost 9 acknowledged games so)."""
        now = time.monotonic()
        if now - self._last_reset_check < LOG_RESET_CHECK_S or _join_in_flight(consumer):
            return False  # a join that completes reads from the committed offsets anyway
        self._last_reset_check = now
        try:
            return log_was_reset(consumer)
        except kerr.KafkaError as exc:  # the broker away: the next check asks again
            log.debug("kafka: log-reset check for group %s failed: %r", self.group_id, exc)
            return False

    @property
    def assigned(self) -> bool:
        """The group has given this member its partitions and no new join is in flight. kafka-python
        keeps the old assignment while it rejoins (after a broker restart, say), and polls that never
        wait never finish that join: a trainer polling so read nothing for a whole minute."""
        consumer = self._consumer
        return consumer is not None and bool(consumer.assignment()) and not _join_in_flight(consumer)

    def _report_connectivity(self, got_records: bool) -> None:
        # kafka-python reconnects by itself and only logs per socket; one clear line per change.
        now = time.monotonic()
        if not got_records and now - self._last_probe < 5.0:
            return
        self._last_probe = now
        connected = got_records or broker_reachable(self.bootstrap)
        if connected != self._was_connected:
            if connected:
                log.info("kafka: consumer group %s reconnected to %s", self.group_id, self.bootstrap)
            else:
                log.warning(
                    "kafka: consumer group %s cannot reach the broker at %s; kafka-python keeps retrying",
                    self.group_id,
                    self.bootstrap,
                )
            self._was_connected = connected

    def commit(self, records: Iterable[ConsumerRecord]) -> bool:
        """Commit the position after each partition's last given record. Call only once the records
        are durable. Returns False when the commit failed (e.g. a rebalance moved the partition:
        the records will be redelivered to whoever owns it now)."""
        offsets: dict[TopicPartition, _PartitionCommit] = {}
        for rec in records:
            tp = TopicPartition(rec.topic, rec.partition)
            epoch = getattr(rec, "leader_epoch", -1)
            if tp not in offsets or rec.offset + 1 > offsets[tp].offset:
                offsets[tp] = _PartitionCommit(rec.offset + 1, epoch if epoch is not None else -1)
        if not offsets:
            return True
        consumer = self._consumer
        if consumer is None:
            log.warning("kafka: commit for group %s skipped: not connected; records will be redelivered", self.group_id)
            return False
        try:
            consumer.commit({tp: OffsetAndMetadata(c.offset, "", c.leader_epoch) for tp, c in offsets.items()})
        except kerr.KafkaError as exc:
            log.warning("kafka: commit for group %s failed (%r); records will be redelivered", self.group_id, exc)
            # A rebalance, or a group that forgot this member (a restarted broker, an expired session):
            # kafka-python kept the old assignment and, polled without waiting, never joined again
            # (a trainer ingested nothing for 110 s so). A fresh consumer joins on the next poll.
            self._reset()
            return False
        return True

    def committed(self, topic: str, partition: int) -> int | None:
        """The group's committed offset for one partition (None when nothing is committed)."""
        consumer = self._ensure()
        if consumer is None:
            return None
        return consumer.committed(TopicPartition(topic, partition))

    def _reset(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            _let_join_finish(consumer)
            try:
                consumer.close(autocommit=False)
            except Exception as exc:
                log.debug("kafka: error closing consumer: %r", exc)

    def close(self) -> None:
        """Leave the group without committing anything further."""
        self._reset()

    def __enter__(self) -> "GroupConsumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RecordSender(Protocol):
    """What a dead-letter queue needs of a producer (ReliableProducer is one)."""

    def send(self, topic: str, key: str | bytes, value: bytes, headers: Headers = (),
             block_timeout_s: float | None = None) -> None: ...


def send_dead_letter(producer: RecordSender, record: ConsumerRecord, reason: str, topic: str) -> None:
    """Put a rejected record on the dead-letter `topic`: same key and value, the reason and origin
    in headers."""
    if not reason:
        raise ValueError("a dead letter needs a reason")
    headers = [
        ("reason", reason.encode("utf-8", errors="replace")),
        ("source.topic", record.topic.encode()),
        ("source.partition", str(record.partition).encode()),
        ("source.offset", str(record.offset).encode()),
    ]
    key = record.key if record.key is not None else f"{record.topic}-{record.partition}-{record.offset}".encode()
    producer.send(topic, key, record.value if record.value is not None else b"", headers)


def header(record: ConsumerRecord, name: str) -> str | None:
    """A header's value as text (the last one when repeated), or None."""
    found = None
    for key, value in record.headers or ():
        if key == name:
            found = value.decode("utf-8", errors="replace") if value is not None else ""
    return found


def read_to_end(consumer: KafkaConsumer, topic: str, deadline: float, handle: Callable[[ConsumerRecord], None]) -> None:
    """Read every partition of `topic` from its start to its end as of now, handing each record
    to `handle` (KafkaAdapterError past `deadline`, a time.monotonic() value)."""
    partitions = None
    while partitions is None:
        partitions = consumer.partitions_for_topic(topic)
        if partitions is None:
            if time.monotonic() >= deadline:
                raise KafkaAdapterError(f"topic {topic} not found on the broker")
            time.sleep(0.2)
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    end = consumer.end_offsets(tps)
    while any(consumer.position(tp) < end[tp] for tp in tps):
        if time.monotonic() >= deadline:
            raise KafkaAdapterError(f"timed out reading {topic} to its end")
        for recs in consumer.poll(timeout_ms=500).values():
            for rec in recs:
                handle(rec)


def read_topic(bootstrap: str, topic: str, handle: Callable[[ConsumerRecord], None], client_id: str,
               timeout_s: float = 30.0) -> None:
    """Read `topic` from its start to its end as of now with a consumer of its own (no group),
    handing each record to `handle`; KafkaAdapterError when the broker or the topic cannot be read
    within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    try:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                 bootstrap_timeout_ms=int(timeout_s * 1000))
    except Exception as exc:
        raise KafkaAdapterError(f"cannot reach broker {bootstrap} to read {topic}: {exc!r}") from exc
    try:
        read_to_end(consumer, topic, deadline, handle)
    finally:
        consumer.close(autocommit=False)


LOG_RESET_CHECK_S = 5.0  # how often a follower checks that its topic's log was not reset
JOIN_FINISH_S = 6.0  # the longest a closing member waits for its own join to end (Tansu's takes ~3 s)


def follow_topic(bootstrap: str, topic: str, client_id: str, handle: Callable[[ConsumerRecord], None],
                 stop: threading.Event, backoff: "Backoff", reread: threading.Event | None = None) -> None:
    """Until `stop`: read `topic` from its start, then each new record as it comes, handing each to
    `handle`, with one consumer and no group; across broker restarts and errors it retries with
    `backoff`, and reads from the start again when the log was reset or `reread` is set (cleared)."""
    while not stop.is_set():
        consumer = None
        try:
            # earliest: after a broker restart (empty log) the position resets to the start, so a
            # record written right after the restart is not skipped.
            consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                                     auto_offset_reset="earliest", bootstrap_timeout_ms=5000)
            read_to_end(consumer, topic, time.monotonic() + 30.0, handle)
            backoff.reset()
            checked = time.monotonic()
            while not stop.is_set():
                for recs in consumer.poll(timeout_ms=500).values():
                    for rec in recs:
                        handle(rec)
                if reread is not None and reread.is_set():
                    reread.clear()
                    break  # a fresh consumer reads the topic from its start
                if time.monotonic() - checked >= LOG_RESET_CHECK_S:
                    if log_was_reset(consumer):
                        break
                    checked = time.monotonic()
        except Exception as exc:  # keep following, whatever kafka-python raises
            delay = backoff.next()
            log.warning("kafka: %s lost %s on %s (%r); retrying in %.1f s", client_id, topic, bootstrap, exc, delay)
            stop.wait(delay)
        finally:
            if consumer is not None:
                try:
                    consumer.close(autocommit=False)
                except Exception as exc:
                    log.debug("kafka: error closing %s: %r", client_id, exc)


def _join_in_flight(consumer: KafkaConsumer) -> bool:
    """Whether the member's JoinGroup/SyncGroup round is in flight. kafka-python (pinned in
    pyproject) has no public way to ask: its coordinator's `rejoining` flag spans the round."""
    return bool(getattr(getattr(consumer, "_coordinator", None), "rejoining", False))


def _let_join_finish(consumer: KafkaConsumer) -> None:
    """Before a member leaves its group, let a join in flight end: a LeaveGroup that reaches Tansu
    while that member's JoinGroup waits there leaves the group rebalancing for good (every later
    member's SyncGroup failed for 90 s and more, and a trainer read nothing). Records polled here
    are dropped uncommitted: whoever joins next reads them again."""
    deadline = time.monotonic() + JOIN_FINISH_S
    while _join_in_flight(consumer) and time.monotonic() < deadline:
        try:
            consumer.poll(timeout_ms=200)
        except kerr.KafkaError:
            return


def log_was_reset(consumer: KafkaConsumer) -> bool:
    """Whether an assigned partition's log now ends before the consumer's position: the broker
    restarted with an empty log (the one-box broker keeps logs in memory), and a consumer past the
    end of a Tansu log gets neither records nor an out-of-range reset. The caller then reads the
    topic again with a fresh consumer (a seek on the old one was seen to fetch nothing)."""
    partitions = list(consumer.assignment())
    if not partitions:
        return False
    end = consumer.end_offsets(partitions)
    reset = [tp for tp in partitions if end.get(tp) is not None and consumer.position(tp) > end[tp]]
    if reset:
        log.warning(
            "kafka: %s restarted empty (log end before our position); reading it again from the start",
            ", ".join(f"{tp.topic}[{tp.partition}]" for tp in reset),
        )
    return bool(reset)
