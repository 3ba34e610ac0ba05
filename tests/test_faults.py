"""Faults in a running loop (`tengen run --preset tiny`, the real broker, Triton, ratings, trainer,
gating, strength and selfplay): the broker SIGKILLed while the trainer is paused (every game it had
acknowledged still reaches the window, once), then the trainer, Triton and ratings SIGKILLed in turn;
after each, self-play moves again and the window grows, on its own. The bounds are liveness
timeouts, not speed claims."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest
from kafka import KafkaConsumer, TopicPartition

from tengen.data.window import Window, WindowError
from tengen.infra.kafka import GAMES_TOPIC
from tengen.infra.process import stop_marked
from tengen.run.status import scrape

TENGEN = str(Path(sys.executable).with_name("tengen"))
RECOVERY_S = 240  # generous: a service restart with backoff, Triton reloading its models


def _state(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / "run.json").read_text())
    except (OSError, ValueError):
        return {}


def _wait(condition: Callable[[], bool], timeout_s: float, what: str, proc: subprocess.Popen, out: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"tengen run exited ({proc.returncode}) waiting for {what}:\n{_tail(out)}"
        assert time.monotonic() < deadline, f"timed out after {timeout_s} s waiting for {what}:\n{_tail(out)}"
        time.sleep(1)


def _tail(path: Path) -> str:
    text = path.read_text(errors="replace")[-4000:]
    logs = path.parent / "run" / "logs"
    for log in sorted(logs.glob("*.log")) if logs.is_dir() else []:
        text += f"\n--- {log.name}\n" + log.read_text(errors="replace")[-1500:]
    return text


def _window_ids(data_dir: Path) -> dict[str, str]:
    try:
        return Window(data_dir / "trainer" / "window", 7, c=500, read_only=True).game_ids()
    except (WindowError, OSError, ValueError):  # not there yet, or replaced while being read
        return {}


def _acknowledged(bootstrap: str) -> set[str]:
    """Every game id in the broker's log of tengen.games: all of them were acknowledged (acks=all)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        partitions = [TopicPartition(GAMES_TOPIC, p) for p in consumer.partitions_for_topic(GAMES_TOPIC)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end = consumer.end_offsets(partitions)
        ids: set[str] = set()
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end[tp] for tp in partitions) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                ids.update(r.key.decode() for r in records)
        return ids
    finally:
        consumer.close()


def _positions(data_dir: Path) -> float:
    urls = _state(data_dir).get("endpoints", {}).get("selfplay_http", [])
    return sum(scrape(f"{u}/metrics").get("tengen_selfplay_positions_total", 0.0) for u in urls)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_loop_survives_kills_without_losing_a_game(tmp_path: Path, gnugo: str) -> None:
    data_dir = tmp_path / "run"
    out = tmp_path / "run.out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENGEN_")}
    env.update(TENGEN_STRENGTH__GAMES="2", TENGEN_STRENGTH__GNUGO_LEVELS="0")
    with open(out, "wb") as sink:
        proc = subprocess.Popen([TENGEN, "run", "--preset", "tiny", "--data-dir", str(data_dir), "--plain",
                                 "--status-every", "5"], stdout=sink, stderr=subprocess.STDOUT, env=env)
    try:
        _wait(lambda: len(_window_ids(data_dir)) >= 5, RECOVERY_S, "the first games in the window", proc, out)

        def moving(what: str) -> None:
            """Self-play plays and the window grows again."""
            positions, games = _positions(data_dir), len(_window_ids(data_dir))
            _wait(lambda: _positions(data_dir) > positions and len(_window_ids(data_dir)) > games + 3,
                  RECOVERY_S, f"the loop to move again after {what}", proc, out)

        # 1. The trainer paused, the broker SIGKILLed: its in-memory log goes with it, and with it
        # every game the trainer had not committed; self-play sends those again.
        pids = _state(data_dir)["children"]
        os.kill(pids["trainer"], signal.SIGSTOP)
        try:
            time.sleep(20)  # games pile up on the broker, acknowledged, not yet in the window
            acknowledged = _acknowledged(_state(data_dir)["endpoints"]["kafka"])
            missing = acknowledged - set(_window_ids(data_dir))
            assert len(missing) >= 5, "the pause left nothing for the broker to lose; nothing was tested"
            os.kill(pids["broker"], signal.SIGKILL)
            _wait(lambda: _state(data_dir)["children"].get("broker") not in (None, pids["broker"]), RECOVERY_S,
                  "the broker to be restarted", proc, out)
        finally:
            os.kill(pids["trainer"], signal.SIGCONT)
        _wait(lambda: acknowledged <= set(_window_ids(data_dir)), RECOVERY_S,
              f"the {len(missing)} acknowledged games the broker lost", proc, out)
        moving("the broker restart")

        # 2.-4. The trainer, Triton and ratings SIGKILLed in turn.
        for name in ("trainer", "triton", "ratings"):
            pid = _state(data_dir)["children"][name]
            os.kill(pid, signal.SIGKILL)
            _wait(lambda: _state(data_dir)["children"].get(name) not in (None, pid), RECOVERY_S,
                  f"{name} to be restarted", proc, out)
            moving(f"a SIGKILL of {name}")

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=240) == 0, _tail(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_marked(str(data_dir.resolve()))  # a failed test must not leave a loop running
    # Every game in the window once (the id log has one line per game), and the resends counted.
    ids_log = (data_dir / "trainer" / "window" / "game_ids.jsonl").read_text().splitlines()
    assert len(ids_log) == len({json.loads(line)[0] for line in ids_log})
    text = (data_dir / "logs" / "selfplay-0.log").read_text(errors="replace")
    assert "sending them again" in text
