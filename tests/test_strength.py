"""The strength service with real engines: versions of a tiny net (written to a real model
repository) against GNU Go, games into the data dir's ratings store, results into
strength/results.jsonl; the interval between measurements; the service without GNU Go."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from tengen.config import Config, StrengthConfig, load_config
from tengen.infra.triton.repository import ModelRepository
from tengen.loop.layout import DataDir
from tengen.nn.export import export_model
from tengen.nn.model import build_model
from tengen.ratings.config import sqlite_url
from tengen.ratings.curve import strength_matches
from tengen.ratings.games import GameLibrary
from tengen.ratings.store import RatingsStore
from tengen.run.bootstrap import ensure_model
from tengen.strength.measure import latest_results, read_results
from tengen.strength.service import StrengthService


def strength_config(data_dir: Path, gnugo: str, interval_s: float) -> Config:
    config = load_config("tiny")
    config.run.data_dir = str(data_dir)
    config.ratings.url = ""  # the data dir's SQLite store
    config.strength = StrengthConfig(gnugo_levels=[0], games=2, visits=2, board_size=7, komi=9.0,
                                     interval_s=interval_s, threads=1, gnugo=gnugo)
    return config


def add_version(data_dir: Path, config: Config, samples: int, tmp_path: Path) -> int:
    export = tmp_path / f"net-{samples}.pt"
    torch.manual_seed(samples)
    export_model(build_model(config.trainer.arch), export, samples_seen=samples)
    return ModelRepository(DataDir(data_dir).models).write_version(config.run.model_name, export)


def wait_for(condition, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def start(service: StrengthService) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    return stop, thread


def test_measures_each_new_version_into_ratings_and_results(gnugo: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = strength_config(data_dir, gnugo, interval_s=0.1)
    ensure_model(ModelRepository(DataDir(data_dir).models), config)  # version 1, random, 0 samples
    stop, thread = start(StrengthService(config, http_port=0, poll_s=0.2))
    try:
        wait_for(lambda: len(read_results(data_dir)) == 1)
        assert add_version(data_dir, config, 500, tmp_path) == 2
        wait_for(lambda: len(read_results(data_dir)) == 2)
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()

    results = read_results(data_dir)
    assert [(r.version, r.player, r.training_samples, r.opponent, r.games) for r in results] == [
        (1, "tengen-v1", 0, "gnugo-l0", 2), (2, "tengen-v2", 500, "gnugo-l0", 2)]
    for r in results:
        assert r.wins + r.losses + r.draws == 2
        assert r.score_rate == pytest.approx((r.wins + 0.5 * r.draws) / 2)
        assert 0 <= r.rate_low <= r.score_rate <= r.rate_high <= 1
        assert (r.visits, r.board_size, r.komi) == (2, 7, 9.0)
    assert [r.version for r in latest_results(data_dir)] == [2]
    assert len(list(DataDir(data_dir).strength_sgf_version(1).glob("*.sgf"))) == 2

    store = RatingsStore(sqlite_url(data_dir))
    try:
        games = list(store.games())
        players = {p.name: p for p in store.players()}
        curve = strength_matches(store)
    finally:
        store.close()
    # The ratings page's curve, from the store alone, is what results.jsonl says (its one source
    # in compose and Kubernetes, where ratings has no strength volume).
    assert [(m.version, m.player, m.training_samples, m.opponent, m.games, m.wins, m.losses, m.draws)
            for m in curve] == [(r.version, r.player, r.training_samples, r.opponent, r.games, r.wins, r.losses,
                                 r.draws) for r in results]
    for m, r in zip(curve, results):
        assert (m.rate, *m.interval) == pytest.approx((r.score_rate, r.rate_low, r.rate_high))
    # The /games pages find the games the strength service wrote, by version and level.
    library = GameLibrary(data_dir)
    assert [(e.version, e.level, e.number) for v in (1, 2) for e in library.strength_games(v)] == [
        (1, 0, 1), (1, 0, 2), (2, 0, 1), (2, 0, 2)]
    assert len(games) == 4 and {g.source for g in games} == {"strength"}
    assert {(g.black, g.white) for g in games} == {("tengen-v1", "gnugo-l0"), ("gnugo-l0", "tengen-v1"),
                                                   ("tengen-v2", "gnugo-l0"), ("gnugo-l0", "tengen-v2")}
    assert players["gnugo-l0"].kind == "anchor"
    assert (players["tengen-v2"].kind, players["tengen-v2"].training_samples) == ("model", 500)

    # A restart reads what was measured and plays nothing again.
    stop, thread = start(StrengthService(config, http_port=0, poll_s=0.05))
    time.sleep(1.0)
    stop.set()
    thread.join(30)
    assert len(read_results(data_dir)) == 2


def test_waits_the_interval_between_measurements(gnugo: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = strength_config(data_dir, gnugo, interval_s=3600)
    repository = ModelRepository(DataDir(data_dir).models)
    ensure_model(repository, config)
    service = StrengthService(config, http_port=0, poll_s=0.05)
    stop, thread = start(service)
    try:
        wait_for(lambda: len(read_results(data_dir)) == 1)
        add_version(data_dir, config, 100, tmp_path)
        add_version(data_dir, config, 200, tmp_path)
        time.sleep(1.5)  # many polls: the hour since v1's measurement began has not passed
        assert [r.version for r in read_results(data_dir)] == [1]
        assert "next measurement of a newer version in 3600 s" in service.state
    finally:
        stop.set()
        thread.join(60)


def test_without_gnugo_it_says_so_and_idles(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    data_dir = tmp_path / "data"
    config = strength_config(data_dir, str(tmp_path / "no-such-gnugo"), interval_s=0.1)
    ensure_model(ModelRepository(DataDir(data_dir).models), config)
    service = StrengthService(config, http_port=0, poll_s=0.05)
    caplog.set_level("INFO", logger="services.strength")
    stop, thread = start(service)
    time.sleep(0.5)
    assert thread.is_alive()  # healthy and idle, not crashed
    assert service.state.startswith("off, the loop goes on without it: GNU Go is not installed")
    stop.set()
    thread.join(10)
    assert not thread.is_alive()
    assert not DataDir(data_dir).strength_results.exists()
    assert sum("GNU Go is not installed" in r.getMessage() for r in caplog.records) == 1
