"""The selfplay service end to end against a real Kafka-protocol broker and a real Triton: games
replay through the trainer's checks, a hot swap mid-run fails no request and moves the games to
the new version, a Triton crash makes the worker wait and carry on, a frozen broker makes it
buffer and deliver later under the same ids, SIGTERM exits 0."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Iterator

import numpy as np
import pytest
import torch
from kafka import KafkaConsumer
from prometheus_client import generate_latest

from services.selfplay.__main__ import main
from tengen.config import load_config
from tengen.data.record_sgf import record_to_sgf, write_record_sgf
from tengen.data.synthetic import random_game
from tengen.gate.promotion import load_new_version
from tengen.go.sgf import read_game, replay
from tengen.infra.broker import LocalBroker, free_port
from tengen.infra.kafka import ReliableProducer
from tengen.infra.triton.client import TritonEvaluator
from tengen.infra.triton.errors import TritonError
from tengen.infra.triton.repository import ModelRepository, render_config
from tengen.infra.triton.server import LocalTriton
from tengen.loop.messages import GAMES_TOPIC, announce_model, ensure_loop_topics
from tengen.loop.rows import decode, row_count, rows_from_record, validate
from tengen.nn.export import export_model
from tengen.nn.model import build_model
from tengen.proto import game_pb2
from tengen.selfplay.runner import RunnerStats
from tengen.selfplay.worker import SelfplayService, check_worker_id, default_worker_id

ROOT = Path(__file__).resolve().parent.parent


# -- small parts -----------------------------------------------------------------------------------

def test_worker_ids() -> None:
    for good in ("0", "selfplay-7", "pod.abc_1"):
        assert check_worker_id(good) == good
    for bad in ("", "-x", "a/b", "a b", "x" * 65):
        with pytest.raises(ValueError, match="worker id"):
            check_worker_id(bad)
    assert check_worker_id(default_worker_id())


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--games", "0"])
    assert exc.value.code == 2 and "--games" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--worker-id", "../escape"])
    assert main(["--preset", "no-such-preset"]) == 2
    assert "unknown preset" in capsys.readouterr().err


def test_taken_http_port_is_a_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        service = SelfplayService(load_config("tiny"), worker_id="w", http_port=port)
        assert service.run(threading.Event()) == 2
    assert f"cannot serve /healthz and /metrics on port {port}" in caplog.text


def test_record_sgf_round_trip(tmp_path: Path) -> None:
    record = random_game(np.random.default_rng(5), 9, initial_black=(10, 20), full_search_prob=0.5,
                         game_id="w-abc-0-3")
    path = write_record_sgf(record, tmp_path / "v0")
    assert path == tmp_path / "v0" / "w-abc-0-3.sgf"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary left over
    game = read_game(path.read_bytes())
    assert game == record_to_sgf(record)
    assert game.black_stones == [10, 20] and game.handicap == 2 and game.result == record.result
    assert [m for _, m in game.moves] == [m.move for m in record.moves]
    assert replay(game).game_over  # legal all the way to its two passes
    full = [c for c, m in zip(game.comments, record.moves) if m.full_search]
    assert full and all("full=" in c and "winrate=" in c for c in full)
    with pytest.raises(ValueError, match="cannot name a file"):
        write_record_sgf(game_pb2.GameRecord(id="../x"), tmp_path)


def test_evaluator_retries_end_when_stopping() -> None:
    """A worker waiting for a dead Triton still stops at once (the evaluator's stop event)."""
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    with pytest.raises(TritonError, match="while stopping"):
        TritonEvaluator(f"127.0.0.1:{free_port('127.0.0.1')}", "m", retry_deadline_s=600, stop=stop)
    timer.join()


class FakeClock:
    """A monotonic clock the test moves by hand: a stall without waiting a minute for it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _healthz(port: int) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_healthz_reports_a_stall_after_stall_s_without_new_positions() -> None:
    """A worker whose broker never answers plays nothing: /healthz says so once stall_s has passed."""
    config = load_config("tiny")
    config.kafka.bootstrap = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    clock = FakeClock()
    service = SelfplayService(config, worker_id="w", http_port=0, stall_s=30.0, clock=clock)
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while service.http_port == 0:
            assert time.monotonic() < deadline and thread.is_alive(), "no HTTP port"
            time.sleep(0.05)
        status, line = _healthz(service.http_port)
        assert status == 200 and "waiting for the broker" in line, line
        clock.now += 29.0
        assert _healthz(service.http_port)[0] == 200
        clock.now += 1.0
        status, line = _healthz(service.http_port)
        assert status == 503 and line.startswith("stalled: no new position for 30 s"), line
    finally:
        stop.set()
        thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_stall_is_no_new_positions_not_no_evaluations() -> None:
    """Issue 16 defines a stall as no new positions: a net that evaluates while no move is played
    (games that cannot finish a search) is stalled; moves of games still in progress are progress,
    and a runner that ends and one that starts from zero moves are neither progress nor a stall."""
    clock = FakeClock()
    service = SelfplayService(load_config("tiny"), worker_id="w", stall_s=60.0, clock=clock)
    runner = SimpleNamespace(stats=RunnerStats())
    service._runner = runner  # what _play sets while a runner plays
    assert service._health()[0]
    for _ in range(3):  # evaluations go on, no move is played
        clock.now += 30.0
        runner.stats.leaves += 100
    ok, line = service._health()
    assert not ok and line.startswith("stalled: no new position for 90 s"), line
    runner.stats.moves += 1  # one move of a game still in progress
    assert service._health()[0]
    clock.now += 59.0
    assert service._health()[0]
    # The runner ends (its games dropped) and a new one starts at zero moves: the count of moves
    # played does not go back, so neither the restart nor the new runner's first move is a stall.
    service._runner_ended(runner)
    service._runner = SimpleNamespace(stats=RunnerStats())
    clock.now += 1.0
    ok, line = service._health()
    assert not ok and "no new position for 60 s" in line, line
    service._runner.stats.moves += 1
    assert service._health()[0] and service.progress()[0] == 2


def test_progress_metrics_count_games_in_progress_and_never_go_back() -> None:
    """/metrics' tengen_selfplay_moves_total, _evaluations_total and _batches_total (what `tengen
    bench loop` times) count as moves are played and batches answered, before their game ends, and
    keep the counts of a runner that ended."""
    service = SelfplayService(load_config("tiny"), worker_id="w")

    def scraped() -> tuple[float, ...]:
        text = generate_latest(service.metrics.registry).decode()
        return tuple(float(re.search(rf"^tengen_selfplay_{name}_total (\S+)$", text, re.M).group(1))
                     for name in ("moves", "evaluations", "batches"))

    assert scraped() == (0.0, 0.0, 0.0)
    runner = SimpleNamespace(stats=RunnerStats())
    service._runner = runner
    runner.stats.moves += 7  # games still in progress: no game finished, positions_total stays 0
    runner.stats.leaves += 96
    runner.stats.batches += 3
    assert scraped() == (7.0, 96.0, 3.0) and service.metrics.positions._value.get() == 0
    service._runner_ended(runner)
    assert scraped() == (7.0, 96.0, 3.0)
    service._runner = SimpleNamespace(stats=RunnerStats(moves=3, leaves=40, batches=1))
    assert scraped() == (10.0, 136.0, 4.0)


# -- end to end ------------------------------------------------------------------------------------

class GameReader:
    """Everything published on tengen.games of this test's broker, by game id."""

    def __init__(self, bootstrap: str) -> None:
        self.values: dict[str, list[bytes]] = {}
        self._consumer = KafkaConsumer(GAMES_TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                       enable_auto_commit=False)

    def poll(self) -> None:
        for batch in self._consumer.poll(timeout_ms=200).values():
            for rec in batch:
                self.values.setdefault(rec.key.decode(), []).append(rec.value)

    def games(self, worker_id: str) -> list[game_pb2.GameRecord]:
        return [decode(values[0]) for key, values in self.values.items() if key.startswith(f"{worker_id}-")]

    def close(self) -> None:
        self._consumer.close()


class Worker:
    """`python -m services.selfplay` as a deployment runs it, logging to a file."""

    def __init__(self, worker_id: str, env: dict[str, str], log_path: Path, *extra: str) -> None:
        self.worker_id = worker_id
        self.log_path = log_path
        self._log_file = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.selfplay", "--preset", "tiny", "--worker-id", worker_id,
             "--http-port", "0", "--log-every", "2", *extra],
            cwd=ROOT, env=env, stdout=self._log_file, stderr=subprocess.STDOUT)
        self.base = ""

    def log(self) -> str:
        return self.log_path.read_text()

    def metric(self, name: str) -> float:
        return _metric(_get(f"{self.base}/metrics"), name)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log_file.close()


def _export(path: Path, seed: int) -> Path:
    torch.manual_seed(seed)
    export_model(build_model("b1c16"), path, samples_seen=seed)
    return path


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def _metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        match = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker of this test's own (the test freezes it), with the topics a deployment creates."""
    own = LocalBroker(log_path=tmp_path / "broker.log").start()
    ensure_loop_topics(own.bootstrap)
    try:
        yield own
    finally:
        own.stop()


@pytest.mark.slow
def test_selfplay_worker_end_to_end(broker: LocalBroker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap
    model = f"sp-{uuid.uuid4().hex[:8]}"
    repo = ModelRepository(tmp_path / "repository")
    repo.create_model(model, render_config(model, max_batch_size=64, warmup_board=7))
    repo.write_version(model, _export(tmp_path / "v1.pt", 1))
    # A Triton of this test's own: it gets killed mid-run.
    server = LocalTriton(repo.root, tmp_path / "triton", load_models=[model]).start()
    data_dir = tmp_path / "data"
    env = {
        **os.environ,
        "TENGEN_DATA_DIR": str(data_dir),
        "TENGEN_KAFKA_BOOTSTRAP": bootstrap,
        "TENGEN_TRITON_URL": server.grpc_url,
        "TENGEN_RUN__MODEL_NAME": model,
        # Short games with few visits: the test is about the service, not the play.
        "TENGEN_SEARCH__FULL_VISITS": "8",
        "TENGEN_SEARCH__FAST_VISITS": "2",
        "TENGEN_GAME__MAX_MOVES_FACTOR": "1.2",
        "PYTHONUNBUFFERED": "1",
    }
    main_worker = Worker("main", env, tmp_path / "main.log")
    reader = GameReader(bootstrap)
    producer = ReliableProducer(bootstrap, client_id="test-selfplay-announcer")

    def wait(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            reader.poll()
            assert main_worker.proc.poll() is None, \
                f"the worker exited ({main_worker.proc.returncode}) waiting for {what}:\n{main_worker.log()[-3000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{main_worker.log()[-3000:]}"
            time.sleep(0.2)

    def games(version: int | None = None, since: float = 0.0) -> list[game_pb2.GameRecord]:
        return [g for g in reader.games("main") if (version is None or g.model_version == version)
                and g.created.ToSeconds() > since]

    port_line = re.compile(r"selfplay: /healthz and /metrics on port (\d+)")

    def http_base(worker: Worker) -> str:
        wait(lambda: port_line.search(worker.log()) is not None, 60, f"the HTTP port of {worker.worker_id}")
        return f"http://127.0.0.1:{port_line.search(worker.log()).group(1)}"

    second = Worker("second", env, tmp_path / "second.log", "--games", "3")
    try:
        main_worker.base = http_base(main_worker)
        # Nothing announced yet: the worker says so and waits.
        wait(lambda: "announced" in _get(f"{main_worker.base}/healthz"), 60, "the wait for an announcement")
        assert not reader.values
        announce_model(producer, model, 1, samples=0)
        wait(lambda: len(games(1)) >= 3, 240, "games of version 1")
        # A second worker beside it stops by itself after its 3 games.
        assert second.proc.wait(timeout=120) == 0, second.log()[-3000:]

        # Hot swap: version 2 is loaded beside 1, then announced.
        assert load_new_version(repo, server.grpc_url, model, _export(tmp_path / "v2.pt", 2)) == 2
        announce_model(producer, model, 2, samples=0)
        wait(lambda: main_worker.metric("tengen_selfplay_model_version") == 2, 60, "the switch")
        switched = time.time()
        wait(lambda: len(games(2, since=switched + 5)) >= 2, 240, "games of version 2")
        triton_failures = _metric(_get(server.metrics_url), "nv_inference_request_failure", model=model)
        triton_ok = _metric(_get(server.metrics_url), "nv_inference_request_success", model=model)
        assert triton_failures == 0 and triton_ok > 0, "Triton failed a request in the swap"
        assert main_worker.metric("tengen_selfplay_evaluator_failures_total") == 0
        # The worker's count of evaluations and batches against Triton's (which served both workers).
        evaluations = main_worker.metric("tengen_selfplay_evaluations_total")
        batches = main_worker.metric("tengen_selfplay_batches_total")
        triton_count = _metric(_get(server.metrics_url), "nv_inference_count", model=model)
        assert 0 < batches <= triton_ok and batches <= evaluations <= triton_count
        assert "inference failed" not in main_worker.log()

        # Triton crashes; the worker waits (no exit, nothing published from the dead server) ...
        server.kill()
        crashed = time.time()
        wait(lambda: "unavailable" in main_worker.log(), 30, "the worker to notice the crash")
        time.sleep(2)
        # ... and carries on when it is back (both versions loaded again: latest 2).
        server.start()
        wait(lambda: len(games(2, since=crashed + 3)) >= 2, 240, "games after the restart")
        assert _get(f"{main_worker.base}/healthz").startswith("ok")

        # The broker freezes past the producer's request timeout: the worker keeps playing and
        # buffers; once the broker is back every game arrives, resent under its own id.
        played = main_worker.metric("tengen_selfplay_games_total")
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            frozen = time.monotonic()
            wait(lambda: main_worker.metric("tengen_selfplay_games_total") >= played + 3
                 and time.monotonic() - frozen > 12, 120, "games played while the broker is frozen")
            assert main_worker.metric("tengen_selfplay_unacknowledged") > 0
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        wait(lambda: main_worker.metric("tengen_selfplay_published_total")
             >= main_worker.metric("tengen_selfplay_games_total"), 120, "the buffered games to be acknowledged")

        # SIGTERM while Triton is down again: the worker gives up waiting and exits 0.
        notices = main_worker.log().count("unavailable")
        server.kill()
        wait(lambda: main_worker.log().count("unavailable") > notices, 30, "the second crash to be noticed")
        main_worker.proc.send_signal(signal.SIGTERM)
        assert main_worker.proc.wait(timeout=60) == 0, main_worker.log()[-3000:]
        stopped = time.monotonic()
        while time.monotonic() - stopped < 3:  # whatever was flushed at shutdown
            reader.poll()
    finally:
        main_worker.close()
        second.close()
        producer.close(timeout_s=5)
        reader.close()
        server.stop()

    log_text = main_worker.log()
    assert "stopped after" in log_text
    records = reader.games("main")
    # One game, one id: as many ids as games played (all arrived, none under a second id), and a
    # resend keeps the id and the bytes.
    assert len(records) == int(re.findall(r"stopped after (\d+) games", log_text)[-1])
    assert len(reader.games("second")) == 3
    every = records + reader.games("second")
    for key, values in reader.values.items():
        assert all(v == values[0] for v in values), f"{key} published with different contents"
    for record in every:
        validate(record)
        rows = rows_from_record(record, pos_len=7)
        assert len(rows) == row_count(record)
        assert record.model_name == model and record.model_version in (1, 2)
        assert re.fullmatch(r"(main|second)-[0-9a-f]{8}-\d+-\d+", record.id)
    # The version tags: both versions played, and games finished well after the switch are v2.
    assert games(1) and games(2)
    assert all(r.model_version == 2 for r in records if r.created.ToSeconds() > switched + 5)
    # Every game was sampled as SGF (the tiny preset's rate is 1) and the files replay.
    sgf_files = {p.stem: p for p in (data_dir / "sgf").glob("v*/*.sgf")}
    assert set(sgf_files) == {r.id for r in every}
    for record in every[:5]:
        path = sgf_files[record.id]
        assert path.parent.name == f"v{record.model_version}"
        game = read_game(path.read_bytes())
        assert [m for _, m in game.moves] == [m.move for m in record.moves]
        replay(game)
