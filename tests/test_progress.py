"""The run's progress as the services publish it (tengen.loop.progress): the reports, their sum,
and the compacted topic through a real broker. The trainer and the workers publishing it in a
running loop: tests/test_run_curriculum.py (tengen run) and the compose test."""
from __future__ import annotations

import time
import uuid

import pytest

from tengen.infra.kafka import ReliableProducer
from tengen.loop.progress import (
    FRESH_S,
    TRAINER,
    ProgressFollower,
    ProgressReport,
    publish,
    selfplay_reporter,
    summarize,
)

NOW = 1_800_000_000.0


def report(reporter: str, age_s: float = 0.0, **figures: object) -> ProgressReport:
    return ProgressReport(reporter, NOW - age_s, dict(figures))


def test_the_sum_of_the_reports() -> None:
    reports = {
        TRAINER: report(TRAINER, 5, run_began=NOW - 3600, samples=480_000, samples_per_s=412.5, games=9_000,
                        window_rows=120_000, loss=3.25, machine="AMD EPYC, 2 cores", commit="8f6013c"),
        "selfplay/a": report("selfplay/a", 10, games=4_000, games_per_s=1.5, positions_per_s=60.0, version=11,
                             boards="7x7"),
        "selfplay/b": report("selfplay/b", 20, games=5_000, games_per_s=2.0, positions_per_s=80.5, version=12,
                             boards="9x9"),
        # A worker that stopped long ago: its rates are no longer the run's.
        "selfplay/c": report("selfplay/c", FRESH_S + 1, games=100, games_per_s=9.0, positions_per_s=900.0, version=3),
    }
    p = summarize(reports, NOW)
    assert p is not None
    assert (p.updated, p.run_began, p.elapsed_s(NOW)) == (NOW - 5, NOW - 3600, 3600)
    assert (p.samples, p.samples_per_s, p.games, p.window_rows, p.loss) == (480_000, 412.5, 9_000, 120_000, 3.25)
    assert (p.games_per_s, p.positions_per_s, p.workers) == (3.5, 140.5, 2)
    assert (p.version, p.boards, p.machine, p.commit) == (12, "9x9", "AMD EPYC, 2 cores", "8f6013c")
    assert summarize({}, NOW) is None
    # A dead trainer's figures are as old as its last report, whatever the workers say; a worker
    # that has no version yet plays none.
    late = summarize({TRAINER: report(TRAINER, 500, samples=1), "selfplay/a": report("selfplay/a", 1, version=0)}, NOW)
    assert late is not None and late.updated == NOW - 500 and late.version is None


def test_a_figure_of_the_wrong_type_reads_as_unknown() -> None:
    reports = {TRAINER: report(TRAINER, samples="many", samples_per_s=float("nan"), games=1.5, loss=True,
                               run_began=None, machine=7),
               "selfplay/a": report("selfplay/a", version="12", games_per_s="fast")}
    p = summarize(reports, NOW)
    assert p is not None
    assert (p.samples, p.samples_per_s, p.games, p.loss, p.run_began, p.machine) == (None,) * 6
    assert (p.version, p.games_per_s, p.elapsed_s(NOW)) == (None, None, None)


@pytest.mark.parametrize("data", [b"not json", b"[1]", b'{"updated": 1, "figures": {}}',
                                  b'{"reporter": "", "updated": 1, "figures": {}}',
                                  b'{"reporter": "x", "updated": "now", "figures": {}}',
                                  b'{"reporter": "x", "updated": 1, "figures": [1]}'])
def test_a_malformed_report_is_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        ProgressReport.from_bytes(data)


def test_the_follower_reads_the_topic_from_its_start_and_follows_it(kafka_broker) -> None:
    """The latest report of each reporter, from the compacted topic's start and then as they come;
    junk records on the topic are skipped."""
    worker = selfplay_reporter(uuid.uuid4().hex[:8])
    with ReliableProducer(kafka_broker.bootstrap) as producer:
        publish(producer, worker, {"games": 1, "games_per_s": 0.5, "version": 1})
        producer.send("tengen.progress", "junk", b"\x00 not a report")
        publish(producer, TRAINER, {"samples": 100, "run_began": time.time() - 60})
        assert producer.flush(30)
        follower = ProgressFollower(kafka_broker.bootstrap)
        try:
            _wait_for(lambda: (p := follower.current()) is not None and p.samples == 100, 30)
            publish(producer, worker, {"games": 7, "games_per_s": 0.75, "version": 2, "boards": "7x7"})
            publish(producer, TRAINER, {"samples": 2000, "run_began": time.time() - 70})
            assert producer.flush(30)
            _wait_for(lambda: (p := follower.current()) is not None and p.samples == 2000, 30)
            current = follower.current()
            assert current is not None and current.elapsed_s(time.time()) == pytest.approx(70, abs=10)
            # Other tests' workers share this broker: this worker's report is among the sums.
            assert current.workers >= 1 and current.version is not None and current.version >= 2
        finally:
            follower.close()


def test_a_closed_producer_loses_a_report_not_the_service(kafka_broker) -> None:
    producer = ReliableProducer(kafka_broker.bootstrap)
    producer.close(timeout_s=5.0)
    publish(producer, selfplay_reporter("closed"), {"games": 1})  # a worker's last report as it stops


def _wait_for(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
