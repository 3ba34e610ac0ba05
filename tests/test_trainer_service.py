"""The trainer service against a real Kafka-protocol broker: garbage goes to the DLQ with its
reason, duplicates are dropped, a kill mid-stream loses nothing, and a candidate is announced."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
from kafka import KafkaConsumer, KafkaProducer

from tengen.data.candidates import CandidateAnnouncement
from tengen.data.rows import window_rows
from tengen.data.synthetic import random_game
from tengen.data.window import Window
from tengen.infra.broker import LocalBroker
from tengen.infra.kafka import CANDIDATES_TOPIC, DLQ_TOPIC, GAMES_TOPIC, ensure_topics, header
from tengen.nn.export import load_export
from tengen.proto import game_pb2

ROOT = Path(__file__).resolve().parent.parent
POS_LEN = 7  # the tiny preset's board


def _games() -> tuple[list[game_pb2.GameRecord], dict[str, tuple[bytes, str]]]:
    """Valid 7x7 games, and garbage: key -> (value, expected words of the DLQ reason)."""
    rng = np.random.default_rng(2024)
    valid = [random_game(rng, 7, full_search_prob=0.5, game_id=f"game-{i:03d}") for i in range(24)]
    surprise = np.random.default_rng(7)  # half the games with policy surprise: rows repeated or left out
    for game in valid[::2]:
        for move in game.moves:
            if move.full_search:
                move.policy_surprise = float(surprise.exponential(0.3))
    illegal = random_game(rng, 7, game_id="bad-illegal")
    illegal.moves[6].move = illegal.moves[1].move if illegal.moves[1].move != 49 else illegal.moves[2].move
    too_big = random_game(rng, 9, game_id="bad-9x9")  # valid, but not for a 7x7 trainer
    negative = random_game(rng, 7, game_id="bad-weight")
    negative.moves[0].weight = -1.0
    huge = random_game(rng, 7, game_id="bad-huge-weight")  # 3e38 once turned every weight into NaN
    for move in huge.moves:
        move.weight = 3e38
    endless = random_game(rng, 7, game_id="bad-endless")
    endless.moves.extend([game_pb2.Move(move=49, color=game_pb2.BLACK, weight=1.0)] * 250)
    # A known id with other content (the valid game-005 comes earlier in the stream).
    conflicting = random_game(rng, 7, full_search_prob=0.5, game_id="game-005")
    garbage = {
        "bad-bytes": (b"\x0a\xff\xff\xff\xff garbage", "malformed"),
        "bad-illegal": (illegal.SerializeToString(), "illegal"),
        "bad-9x9": (too_big.SerializeToString(), "pos_len"),
        "bad-weight": (negative.SerializeToString(), "weight"),
        "bad-huge-weight": (huge.SerializeToString(), "weight must be within"),
        "bad-endless": (endless.SerializeToString(), "at most 245"),
        "game-005": (conflicting.SerializeToString(), "conflicting duplicate"),
    }
    return valid, garbage


def _manifest(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / "trainer" / "window" / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def _games_in_window(data_dir: Path) -> int:
    ids = data_dir / "trainer" / "window" / "game_ids.jsonl"
    manifest = _manifest(data_dir)
    if not manifest or not ids.exists():
        return 0
    return ids.read_bytes()[: manifest["ids_bytes"]].count(b"\n")


def _wait(condition: Callable[[], bool], timeout_s: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"trainer exited with {proc.returncode} while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _read_all(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> list:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=1000)
    records: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(consumer)
    finally:
        consumer.close()
    return records


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker of this test's own: it asserts exact contents of the project's fixed topics, which
    the session's shared `kafka_broker` lets other tests write to."""
    own = LocalBroker(log_path=tmp_path / "broker.log").start()
    try:
        yield own
    finally:
        own.stop()


@pytest.mark.slow
def test_trainer_ingests_exactly_once_across_a_kill(broker: LocalBroker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap
    ensure_topics(bootstrap)
    valid, garbage = _games()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    stream: list[tuple[str, bytes]] = [(g.id, g.SerializeToString()) for g in valid]
    for i, (key, (value, _)) in enumerate(garbage.items()):
        stream.insert(3 + 5 * i, (key, value))
    stream += [(g.id, g.SerializeToString()) for g in valid[::6]]  # duplicates
    for key, value in stream:
        producer.send(GAMES_TOPIC, key=key.encode(), value=value)
    producer.flush()
    producer.close()

    env = {
        **os.environ,
        "TENGEN_DATA_DIR": str(tmp_path),
        "TENGEN_KAFKA_BOOTSTRAP": bootstrap,
        # Train on this little data, and export a candidate on the way (tiny preset's cadence).
        "TENGEN_TRAINER__MIN_ROWS_TO_TRAIN": "100",
        "TENGEN_TRAINER__SNAPSHOT_EVERY": "128",
        "TENGEN_TRAINER__CANDIDATE_EVERY": "256",
        "TENGEN_TRAINER__WINDOW_C": "100000",  # keep every row in the window, to compare them all
    }
    cmd = [sys.executable, "-m", "services.trainer", "--preset", "tiny", "--http-port", "0", "--log-every", "1"]
    first = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _games_in_window(tmp_path) >= 3, 120, "the first games", first)
    finally:
        first.kill()  # SIGKILL in the middle of the stream: no checkpoint, no commit of the batch
        first.wait()
    killed_at = _games_in_window(tmp_path)
    assert killed_at < len(valid), "the kill came after everything was ingested; nothing was tested"

    log_path = tmp_path / "second.log"
    with open(log_path, "wb") as log_file:
        second = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            _wait(lambda: _games_in_window(tmp_path) >= len(valid), 120, "every valid game", second)
            candidates = _read_all(bootstrap, CANDIDATES_TOPIC, 1, timeout_s=120)
            port = re.search(r"/metrics on port (\d+)", log_path.read_text()).group(1)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as response:
                assert response.status == 200
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                metrics = response.read().decode()
            assert re.search(r"^tengen_trainer_rejected_total \d", metrics, re.MULTILINE)
        finally:
            second.send_signal(signal.SIGTERM)
            assert second.wait(timeout=60) == 0
    assert "trainer: stopped at" in log_path.read_text()

    # Exactly the valid unique rows, whatever the order the partitions were read in.
    window = Window(tmp_path / "trainer" / "window", POS_LEN, c=100_000, read_only=True)
    assert window.games == len(valid) and all(g.id in window for g in valid)
    assert not any(key in window for key in garbage if key not in {g.id for g in valid})
    expected = np.concatenate([window._pack(window_rows(g, POS_LEN)) for g in valid])
    assert window.n_total == len(expected)
    assert len(window) == window.n_total
    stored = window.read(np.arange(window.n_total))
    assert sorted(r.tobytes() for r in stored) == sorted(r.tobytes() for r in expected)

    # Every garbage record is on the DLQ with its reason (a redelivered one may appear twice).
    dead = _read_all(bootstrap, DLQ_TOPIC, len(garbage))
    reasons = {r.key.decode(): header(r, "reason") for r in dead}
    assert set(reasons) == set(garbage)
    for key, (value, words) in garbage.items():
        assert words in reasons[key], (key, reasons[key])
    assert {r.value for r in dead} == {value for value, _ in garbage.values()}

    # Training ran, was checkpointed on SIGTERM, and a loadable candidate was announced.
    assert (tmp_path / "trainer" / "checkpoint.pt").exists()
    announcement = CandidateAnnouncement.from_bytes(candidates[0].value)
    module, metadata = load_export(announcement.path)
    assert metadata["samples_seen"] == announcement.samples >= 256
    assert list((tmp_path / "tensorboard" / "trainer").iterdir())
