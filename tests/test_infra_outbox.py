"""The outbox against the real (in-memory) broker: records the consumer group committed are
released, and those it had not are sent again when a broker restart lost them, and only those."""
from __future__ import annotations

import time

import pytest

from tengen.infra.broker import LocalBroker
from tengen.infra.kafka import GroupConsumer, ReliableProducer, TopicSpec, ensure_topics
from tengen.infra.outbox import Outbox, spooled_keys

TOPIC = "outbox-games"
GROUP = "outbox-trainer"


def _consume(bootstrap: str, count: int, timeout_s: float = 60.0) -> list[str]:
    """Consume `count` records in GROUP and commit them, as the trainer does; their keys."""
    consumer = GroupConsumer(bootstrap, TOPIC, GROUP)
    keys: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(keys) < count:
            assert time.monotonic() < deadline, f"consumed {len(keys)} of {count}"
            records = consumer.poll(0.5, max_records=count - len(keys))
            if records:
                assert consumer.commit(records)
                keys.extend(r.key.decode() for r in records)
    finally:
        consumer.close()
    return keys


@pytest.mark.slow
def test_outbox_resends_what_a_broker_restart_lost(tmp_path) -> None:
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    resent: list[str] = []
    producer: ReliableProducer | None = None
    try:
        ensure_topics(broker.bootstrap, [TopicSpec(TOPIC, partitions=1)])
        outbox: Outbox | None = None

        def delivered(_topic: str, key: bytes, meta) -> None:
            outbox.delivered(key.decode(), meta.partition, meta.offset)

        producer = ReliableProducer(broker.bootstrap, on_delivered=delivered)

        def resend(key: str, value: bytes) -> None:
            resent.append(key)
            producer.send(TOPIC, key, value)

        spool = tmp_path / "spool"
        outbox = Outbox(broker.bootstrap, TOPIC, GROUP, resend, max_bytes=10_000, spool_dir=spool)
        for i in range(10):
            assert outbox.add(f"g{i}", b"x" * 100)
            producer.send(TOPIC, f"g{i}", b"x" * 100)
        assert producer.flush(30)
        assert _consume(broker.bootstrap, 6) == [f"g{i}" for i in range(6)]
        outbox.check()
        assert len(outbox) == 4 and outbox.kept_bytes == 400 and not resent  # g6..g9 not committed
        assert sorted(p.name for p in spool.iterdir()) == ["g6", "g7", "g8", "g9"]  # the committed ones are gone

        # The broker dies and comes back empty; the next check sees its log end went back.
        broker.kill()
        broker.start()
        ensure_topics(broker.bootstrap, [TopicSpec(TOPIC, partitions=1)])
        deadline = time.monotonic() + 60
        while not resent and time.monotonic() < deadline:
            outbox.check()
            time.sleep(0.5)
        assert sorted(resent) == ["g6", "g7", "g8", "g9"] and outbox.resent == 4
        assert producer.flush(30)
        # The group starts over on the new log: the four records, and then the outbox is empty.
        assert sorted(_consume(broker.bootstrap, 4)) == ["g6", "g7", "g8", "g9"]
        assert outbox.wait_empty(30) and not list(spool.iterdir())
        # A full outbox refuses (blocks) until something is committed.
        assert outbox.add("big", b"y" * 10_000)
        assert not outbox.add("more", b"z", timeout_s=0.5)
    finally:
        if producer is not None:
            producer.close(timeout_s=5)
        broker.stop()


def test_a_new_process_restores_what_the_last_one_kept(tmp_path) -> None:
    """The spool outlives its process: what was kept (added, not committed) comes back, once, and a
    write cut short (a temporary file) is dropped, never sent."""
    spool = tmp_path / "spool"
    first = Outbox("127.0.0.1:1", TOPIC, GROUP, lambda k, v: None, spool_dir=spool)
    assert first.restore() == []
    for key in ("0-abc-1", "0-abc-2", "a/b c"):  # any key makes a file name
        assert first.add(key, key.encode() * 3)
    (spool / ".0-abc-3.tmp").write_bytes(b"torn")
    # What another process (the fault drill) reads of it: the keys, not the torn write.
    assert spooled_keys(spool) == {"0-abc-1", "0-abc-2", "a/b c"} and spooled_keys(tmp_path / "none") == set()
    del first  # the process dies: nothing of it is closed or flushed

    second = Outbox("127.0.0.1:1", TOPIC, GROUP, lambda k, v: None, spool_dir=spool)
    restored = second.restore()
    assert sorted(restored) == sorted((k, k.encode() * 3) for k in ("0-abc-1", "0-abc-2", "a/b c"))
    assert len(second) == 3 and second.kept_bytes == sum(len(v) for _, v in restored) and second.resent == 3
    assert second.restore() == []  # kept already: not handed out twice
    assert not any(p.name.startswith(".") for p in spool.iterdir())
    in_memory = Outbox("127.0.0.1:1", TOPIC, GROUP, lambda k, v: None)
    assert in_memory.add("x", b"y") and in_memory.restore() == []
