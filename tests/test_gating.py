"""Gating: the decision rule, match games, and the service against the real Triton, broker and
ratings service.

The "clearly stronger net" is `Heuristic` below: a TorchScript module with the export signature
whose policy and value are written by hand from the input planes (capture and rescue stones in
atari, never fill an own eye, play in contact; area counted from pass-alive areas, stones and
their 3x3 influence). Against a randomly initialised b1c16, which is exactly what version 1 of a
run is, it wins most games (13 of 16 in-process at the tiny preset's 8 visits; the rest are lost
as Black, 7.5 komi being large on 7x7). It is honest in the sense that matters here: gating only
sees two evaluators through Triton and has to find out which one plays better by playing; a
trained net would test the same path, only slower and less predictably on a shared CPU.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import torch
from torch import nn

from tengen.config import Config, load_config
from tengen.gate.decision import Score, decide, sprt_bounds, sprt_llr
from tengen.gate.net_match import MatchRunner, NetMatchSettings, resigning_color
from tengen.gate.service import GatingService
from tengen.go.board import BLACK, WHITE
from tengen.infra.broker import LocalBroker, free_port
from tengen.infra.files import append_line, read_lines
from tengen.infra.kafka import ReliableProducer, TopicSpec, ensure_topics
from tengen.infra.triton.client import load_model, ready_versions
from tengen.infra.triton.repository import ModelRepository, render_config
from tengen.loop.ledger import DECISION_FIELDS, DecisionLog, MatchFile, MatchGameResult
from tengen.loop.messages import (
    CANDIDATES_TOPIC,
    CandidateAnnouncement,
    announce_model,
    candidate_player,
    ensure_loop_topics,
    latest_model_version,
    version_player,
)
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.export import export_model, sidecar_path
from tengen.nn.model import InferenceNet, build_model
from tengen.ratings.store import RatingsStore

ROOT = Path(__file__).resolve().parents[1]
TINY = load_config("tiny")


# -- the decision rule ------------------------------------------------------------------------------

def test_exact_early_stopping_gives_the_full_match_verdict() -> None:
    assert decide(Score(99, 0), 200, 100, sprt=False) is None
    verdict = decide(Score(100, 3), 200, 100, sprt=False)
    assert verdict.promote and verdict.reason == ("the first 103 games in order score 100-3: 100 wins reach the 100 "
                                                  "of 200 needed, passes")
    assert decide(Score(3, 4, 1), 8, 4, sprt=False).reason == (
        "the first 8 games in order score 3-4-1: 3.5 wins, and 0 games left cannot reach the 4 of 8 needed, fails")
    assert decide(Score(0, 101), 200, 100, sprt=False).promote is False
    assert decide(Score(0, 100), 200, 100, sprt=False) is None  # 100 of 100 left still passes
    assert decide(Score(4, 3), 8, 4, sprt=False).promote
    assert decide(Score(3, 4, 1), 8, 4, sprt=False).promote is False  # 3.5 points
    assert decide(Score(3, 3, 2), 8, 4, sprt=False).promote  # draws count half
    with pytest.raises(ValueError):
        decide(Score(), 8, 9, sprt=False)
    with pytest.raises(ValueError):
        decide(Score(9, 0), 8, 4, sprt=False)


def test_sprt_stops_at_fifteen_games_ahead_or_behind() -> None:
    lower, upper = sprt_bounds()
    assert upper == pytest.approx(np.log(19)) and lower == pytest.approx(-np.log(19))
    assert sprt_llr(Score(3, 3, 5)) == pytest.approx(0.0)
    assert decide(Score(14, 0), 200, 100, sprt=True) is None
    ahead = decide(Score(15, 0), 200, 100, sprt=True)
    assert ahead.promote and "SPRT" in ahead.reason
    assert decide(Score(40, 25), 200, 100, sprt=True).promote
    assert decide(Score(25, 39), 200, 100, sprt=True) is None
    assert decide(Score(25, 40), 200, 100, sprt=True).promote is False


def _simulate(p: float, matches: int, games: int, wins_to_pass: int, sprt: bool, seed: int) -> tuple[float, float]:
    """(promotion rate, mean games played) over simulated matches with win probability p."""
    rng = np.random.default_rng(seed)
    promoted = played = 0
    for _ in range(matches):
        score = Score()
        for win in rng.random(games) < p:
            score = score.add("win" if win else "loss")
            verdict = decide(score, games, wins_to_pass, sprt)
            if verdict is not None:
                promoted += verdict.promote
                played += score.games
                break
    return promoted / matches, played / matches


def test_equal_nets_pass_about_half_the_time_and_clear_ones_stop_early() -> None:
    """Simulated outcomes with a fixed seed. At p = 0.5 the paper's rule (>= 100 of 200) passes
    with probability P(Bin(200, .5) >= 100) = 0.528; the SPRT keeps that, and the tiny preset's
    4 of 8 gives P(Bin(8, .5) >= 4) = 0.637."""
    rate, played = _simulate(0.5, 2000, 200, 100, sprt=True, seed=1)
    assert abs(rate - 0.528) < 0.04 and played > 120  # close matches mostly run long
    rate, _ = _simulate(0.5, 2000, 8, 4, sprt=True, seed=2)
    assert abs(rate - 0.637) < 0.04
    rate, played = _simulate(0.7, 500, 200, 100, sprt=True, seed=3)
    assert rate == 1.0 and played < 60  # a clear candidate needs far fewer than 200 games
    rate, played = _simulate(0.3, 500, 200, 100, sprt=True, seed=4)
    assert rate == 0.0 and played < 60
    rate, _ = _simulate(0.45, 1000, 200, 100, sprt=True, seed=5)
    assert rate < 0.1  # the SPRT's alpha (plus the fixed rule's own error at 200 games)


# -- durable state ----------------------------------------------------------------------------------

def test_ledger_survives_torn_lines_and_resumes_matches(tmp_path: Path) -> None:
    log = DecisionLog(tmp_path)
    with pytest.raises(ValueError, match="lacks"):
        log.record({"candidate": "c1"})
    entry = {k: None for k in DECISION_FIELDS} | {"candidate": "c1", "promoted": False}
    log.record(entry)
    with open(log.path, "ab") as f:
        f.write(b'{"candidate": "c2", "pro')  # a crash in the middle of a line
    assert log.find("c2") is None and log.find("c1")["promoted"] is False
    log.record(entry | {"candidate": "c2", "promoted": True})
    assert log.find("c2")["promoted"] is True and log.last()["candidate"] == "c2"
    assert [e["candidate"] for e in read_lines(log.path)] == ["c1", "c2"]

    match = MatchFile(tmp_path, "cand-1")
    assert match.header is None and match.results == {}
    match.start({"candidate": "cand-1", "opponent_version": 3, "games": 8})
    for index in (0, 2, 1, 5):
        match.add(_result(index, "B"))
    append_line(match.path, {"game": {"index": 7}})  # unreadable game line: skipped
    again = MatchFile(tmp_path, "cand-1")
    assert again.header["opponent_version"] == 3 and sorted(again.results) == [0, 1, 2, 5]
    assert [r.index for r in again.in_order()] == [0, 1, 2]
    assert MatchFile.unreported(tmp_path) == ["cand-1"]
    again.mark_reported()
    assert MatchFile(tmp_path, "cand-1").reported and MatchFile.unreported(tmp_path) == []
    with pytest.raises(ValueError):
        MatchFile(tmp_path, "../escape")


def _result(index: int, winner: str) -> MatchGameResult:
    return MatchGameResult(index=index, black_side=index % 2, winner=winner, score=3.5 if winner == "B" else -3.5,
                           end="two passes", moves=40, board_size=7, rules="ko=positional,suicide=no,scoring=katago",
                           komi=7.5)


# -- match games -----------------------------------------------------------------------------------

def test_a_candidate_with_a_newer_one_queued_is_superseded_unplayed(tmp_path: Path) -> None:
    """A gate slower than the trainer skips to the newest candidate: an older one that no match has
    started is decided unplayed; one already decided or under way is left to the normal path."""
    def ann(samples: int) -> bytes:
        return CandidateAnnouncement(name=f"candidate-{samples:012d}", path=str(tmp_path / f"{samples}.pt"),
                                     samples=samples, arch="b1c16", created=time.time()).to_bytes()

    env = {"TENGEN_DATA_DIR": str(tmp_path / "data")}
    service = GatingService(load_config("tiny", env=env))
    assert service._supersede(ann(1000), ann(3000))
    decision = service.decisions.find("candidate-000000001000")
    assert decision["promoted"] is False and decision["games"] == 0 and decision["opponent_version"] is None
    assert "superseded by candidate-000000003000" in decision["reason"]
    assert not service._supersede(ann(1000), ann(3000))  # decided already: not recorded twice
    assert sum(1 for _ in read_lines(service.decisions.path)) == 1
    MatchFile(service.data_dir, "candidate-000000002000").start({"candidate": "candidate-000000002000"})
    assert not service._supersede(ann(2000), ann(3000))  # a match under way is played out
    assert not service._supersede(b"junk", ann(3000))  # bad records are _handle's to log and skip
    keep_all = GatingService(load_config("tiny", env={**env, "TENGEN_GATING__SKIP_SUPERSEDED": "false"}))
    assert not keep_all._supersede(ann(4000), ann(5000))
    assert service.decisions.find("candidate-000000004000") is None


def test_a_candidate_whose_announcement_was_lost_is_gated_from_its_file(tmp_path: Path) -> None:
    """A broker that loses its log loses the announcements queued on it; the candidate files stay.
    Gating picks up the newest file that no announcement or decision covers, once it is older than
    the grace the trainer needs between writing and announcing."""
    from tengen.gate import service as gating

    env = {"TENGEN_DATA_DIR": str(tmp_path / "data")}
    service = GatingService(load_config("tiny", env=env))
    assert service._orphaned_candidate() is None  # no candidates dir yet
    old = time.time() - gating.ORPHAN_GRACE_S - 5
    for samples in (1000, 2000):
        path = _random_export(service.data_dir.candidate(f"candidate-{samples:012d}"), seed=samples,
                              samples=samples)
        os.utime(path, (old, old))
    orphan = service._orphaned_candidate()
    assert orphan is not None and orphan.name == "candidate-000000002000" and orphan.samples == 2000
    assert orphan.path == str(service.data_dir.candidate(orphan.name)) and orphan.arch == service.config.trainer.arch
    assert CandidateAnnouncement.from_bytes(orphan.to_bytes()) == orphan

    fresh = _random_export(service.data_dir.candidate("candidate-000000003000"), seed=3, samples=3000)
    assert service._orphaned_candidate() is None  # the newest is still within its announcement's grace
    os.utime(fresh, (old, old))
    sidecar_path(fresh).write_text("{torn")
    assert service._orphaned_candidate() is None  # not whole: left to its own announcement
    fresh.unlink()
    sidecar_path(fresh).unlink()

    service._seen("candidate-000000002000")  # its announcement arrived after all
    assert service._orphaned_candidate() is None
    restarted = GatingService(load_config("tiny", env=env))
    assert restarted._orphaned_candidate() is not None
    restarted.decisions.record({"candidate": "candidate-000000002000", "candidate_path": "", "opponent_version": 1,
                                "wins": 0, "losses": 0, "draws": 0, "games": 0, "promoted": False,
                                "promoted_version": None, "reason": "test", "time": 0.0})
    assert GatingService(load_config("tiny", env=env))._orphaned_candidate() is None  # decided: never again


def test_resignation_needs_five_agreeing_turns() -> None:
    assert resigning_color([0.5, 0.04, 0.03, 0.02, 0.01], 5, 0.05) is None
    assert resigning_color([0.04, 0.03, 0.02, 0.01, 0.049], 5, 0.05) == BLACK
    assert resigning_color([0.99, 0.97, 0.96, 0.999, 0.951, 0.99], 5, 0.05) == WHITE
    assert resigning_color([0.01] * 4, 5, 0.05) is None


def test_match_between_one_net_and_itself_is_even() -> None:
    """The same b1c16 on both sides (two evaluators, two caches): each side plays Black in half
    the games, colour pairs share board size and rules, and neither side dominates."""
    torch.manual_seed(3)
    net = build_model("b1c16").eval()
    settings = NetMatchSettings.from_config(TINY)
    assert (settings.komi, settings.temperature_start, settings.visits) == (7.5, 0.5, TINY.gating.visits)
    runner = MatchRunner([TorchEvaluator(net), TorchEvaluator(net)], settings, TINY.search,
                         games_in_parallel=8, seed=11)
    results = sorted(runner.play(list(range(12))), key=lambda r: r.index)
    assert [r.index for r in results] == list(range(12))
    assert sum(r.black_side == 0 for r in results) == 6
    for a, b in zip(results[::2], results[1::2]):
        assert (a.board_size, a.rules, a.komi) == (b.board_size, b.rules, b.komi) and a.black_side != b.black_side
    wins = sum(r.winner_side() == 0 for r in results)
    assert 3 <= wins <= 9, f"side 0 won {wins} of 12 with the same net on both sides"
    assert runner.stats.batches > 0 and runner.stats.games == 12


def test_heuristic_beats_a_random_net_in_process() -> None:
    # 16 games (seeds 1-3 gave 11, 12 and 13 wins with the tiny preset's search); a coin would
    # reach 11 one time in ten.
    runner = MatchRunner([TorchEvaluator(torch.jit.script(Heuristic())), TorchEvaluator(_random_net(1))],
                         NetMatchSettings.from_config(TINY), TINY.search, games_in_parallel=16, seed=3)
    wins = sum(r.winner_side() == 0 for r in runner.play(list(range(16))))
    assert wins >= 11


# -- a hand-written "stronger net" -----------------------------------------------------------------

def _near(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.conv2d(x.unsqueeze(1), kernel, padding=1).squeeze(1)


class Heuristic(nn.Module):
    """The export signature with hand-written Go knowledge (see the module docstring). With
    sign -1 its value and score are turned around: a net that steers its search towards the
    opponent's lead, clearly weaker than a random net once the search stops passing games away."""

    def __init__(self, sign: float = 1.0) -> None:
        super().__init__()
        self.sign = sign

    def forward(self, spatial: torch.Tensor, globals: torch.Tensor):  # noqa: A002
        b, _, h, w = spatial.shape
        on, own, opp, atari = spatial[:, 0], spatial[:, 1], spatial[:, 2], spatial[:, 3]
        empty = on - own - opp
        square = torch.ones(1, 1, 3, 3)
        cross = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]).reshape(1, 1, 3, 3)
        owner = own - opp + empty * torch.tanh(_near(own - opp, square))
        owner = torch.where(spatial[:, 16] > 0, torch.ones_like(owner),
                            torch.where(spatial[:, 17] > 0, -torch.ones_like(owner), owner))
        capture = (_near(opp * atari, cross) > 0).float()
        rescue = (_near(own * atari, cross) > 0).float()
        eye = (_near(own, cross) >= _near(on, cross)).float()
        contact = (_near(own + opp, square) > 0).float()
        logits = 4.0 * capture + 2.0 * rescue - 6.0 * eye + contact
        policy = torch.cat([(empty * logits - 30.0 * (1.0 - empty)).reshape(b, h * w),
                            torch.full((b, 1), -3.0)], dim=1)
        lead = self.sign * (owner.sum(dim=(1, 2)) - globals[:, 5] * 15.0)  # komi plane: komi / 15 for the mover
        value = torch.stack([lead * 0.5, -lead * 0.5, torch.full_like(lead, -10.0)], dim=1)
        score = torch.stack([lead, torch.full_like(lead, 3.0)], dim=1)
        return policy, value, score, owner


def _random_net(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return build_model("b1c16").eval()


def _random_export(path: Path, seed: int, samples: int = 0) -> Path:
    export_model(_random_net(seed), path, samples_seen=samples, extra={"name": path.stem})
    return path


def _heuristic_export(path: Path, samples: int, sign: float = 1.0) -> Path:
    """The Heuristic as an export: its TorchScript file with a real export's sidecar."""
    reference = _random_export(path.with_name(f"ref-{path.name}"), 0)
    torch.jit.save(torch.jit.script(Heuristic(sign)), str(path))
    meta = json.loads(sidecar_path(reference).read_text())
    sidecar_path(path).write_text(json.dumps(meta | {"samples_seen": samples, "name": path.stem}))
    return path


# -- the service against real servers --------------------------------------------------------------

def _wait(what: str, check: Callable[[], Any], timeout_s: float = 240.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


class Setup:
    """A data dir whose model repository is the test Triton's, a model of our own with version 1
    (a random b1c16) announced, and a candidates topic of our own."""

    def __init__(self, tmp_path: Path, triton_server, bootstrap: str, **env: str) -> None:
        self.model = f"gate-{uuid.uuid4().hex[:8]}"
        self.data_dir = tmp_path / "data"
        self.data_dir.mkdir()
        (self.data_dir / "models").symlink_to(triton_server.repository_path)
        self.repo: ModelRepository = triton_server.repository
        self.url = triton_server.grpc_url
        self.bootstrap = bootstrap
        self.topic = f"test.candidates.{uuid.uuid4().hex[:8]}"
        ensure_topics(bootstrap, [TopicSpec(self.topic)])
        self.env = {"TENGEN_DATA_DIR": str(self.data_dir), "TENGEN_KAFKA_BOOTSTRAP": bootstrap,
                    "TENGEN_TRITON_URL": self.url, "TENGEN_RUN__MODEL_NAME": self.model, **env}
        self.config: Config = load_config("tiny", env=self.env)
        self.repo.create_model(self.model, render_config(self.model, warmup_board=7))
        self.repo.write_version(self.model, _random_export(tmp_path / "v1.pt", seed=1))
        load_model(self.url, self.model)
        self.producer = ReliableProducer(bootstrap, client_id="test-gating")
        announce_model(self.producer, self.model, 1, samples=0)
        self.decisions = DecisionLog(self.data_dir)

    def offer(self, export: Path, samples: int, topic: str | None = None) -> str:
        name = f"candidate-{samples:012d}"
        ann = CandidateAnnouncement(name=name, path=str(export), samples=samples, arch="b1c16", created=time.time())
        self.producer.send(topic or self.topic, name, ann.to_bytes())
        assert self.producer.flush(30)
        return name

    def decided(self, name: str, timeout_s: float = 240.0) -> dict[str, Any]:
        return _wait(f"a decision about {name}", lambda: self.decisions.find(name), timeout_s)

    def snapshot(self) -> dict[str, bytes]:
        model_dir = self.repo.model_dir(self.model)
        return {str(p.relative_to(model_dir)): p.read_bytes() for p in sorted(model_dir.rglob("*")) if p.is_file()}


class Running:
    """The service in a thread of this process."""

    def __init__(self, service: GatingService) -> None:
        self.service = service
        self.stop = threading.Event()
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.code = self.service.run(self.stop)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive() and self.code == 0


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def _ratings_service(data_dir: Path, port: int, token: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "services.ratings", "--data-dir", str(data_dir / "ratings"),
                             "--host", "127.0.0.1", "--grpc-port", str(port), "--http-port", "0", "--token", token],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_stronger_candidate_is_promoted_and_weaker_rejected(triton_server, kafka_broker, tmp_path: Path) -> None:
    ratings_port, token = free_port("127.0.0.1"), "gating-test-token"
    setup = Setup(tmp_path, triton_server, kafka_broker.bootstrap, TENGEN_RATINGS_URL=f"127.0.0.1:{ratings_port}",
                  TENGEN_RATINGS_TOKEN=token)
    service = GatingService(setup.config, http_port=0, topic=setup.topic)
    running = Running(service)
    ratings = None
    try:
        # Ratings is down: the decision still happens, the reports wait.
        strong = setup.offer(_heuristic_export(tmp_path / "strong.pt", 5000), 5000)
        decision = setup.decided(strong)
        assert set(DECISION_FIELDS) <= set(decision)
        assert decision["promoted"] is True and decision["promoted_version"] == 2, decision
        assert decision["opponent_version"] == 1 and decision["wins"] >= 4 and decision["games"] >= 4
        assert setup.repo.versions(setup.model) == [1, 2]
        served = setup.repo.model_dir(setup.model) / "2" / "model.pt"
        assert served.read_bytes() == (tmp_path / "strong.pt").read_bytes()
        assert 2 in ready_versions(setup.url, setup.model)
        assert latest_model_version(setup.bootstrap, setup.model, timeout_s=20) == 2
        games_played = len(MatchFile(setup.data_dir, strong).results)
        assert games_played == decision["games"]
        body = _get(f"http://127.0.0.1:{service.http_port}/metrics")
        assert "tengen_gating_games_total" in body and "tengen_gating_unreported_matches 1.0" in body
        # v2 (5,000 samples) serves and no newer candidate has come: self-play's net is not behind
        assert "tengen_gating_served_samples 5000.0" in body and "tengen_gating_lag_samples 0.0" in body
        assert "waiting for candidates" in _get(f"http://127.0.0.1:{service.http_port}/healthz")

        # Ratings comes up: the games arrive under the version names.
        ratings = _ratings_service(setup.data_dir, ratings_port, token)
        store = RatingsStore(f"sqlite:///{setup.data_dir / 'ratings' / 'ratings.sqlite'}")
        _wait("the match in ratings", lambda: store.game_count() == games_played, 120)
        v1, v2 = version_player(setup.model, 1), version_player(setup.model, 2)
        players = {p.name: p for p in store.players()}
        assert players[v2].kind == "model" and players[v2].training_samples == 5000
        assert players[v1].kind == "model" and players[v1].training_samples == 0
        assert {(g.black, g.white) for g in store.games()} == {(v2, v1), (v1, v2)}

        # A weaker candidate is rejected and leaves the repository exactly as it was.
        before = setup.snapshot()
        weak = setup.offer(_heuristic_export(tmp_path / "weak.pt", 6000, sign=-1.0), 6000)
        decision = setup.decided(weak)
        assert decision["promoted"] is False and decision["promoted_version"] is None
        assert decision["opponent_version"] == 2 and decision["wins"] < setup.config.gating.wins_to_pass
        assert setup.snapshot() == before
        assert latest_model_version(setup.bootstrap, setup.model, timeout_s=20) == 2
        loser = candidate_player(setup.model, weak)
        _wait("the rejected match in ratings", lambda: loser in {p.name for p in store.players()}, 120)
        assert store.player(loser).kind == "engine"
        body = _get(f"http://127.0.0.1:{service.http_port}/metrics")
        assert "tengen_gating_served_samples 5000.0" in body and "tengen_gating_lag_samples 1000.0" in body

        # A broken export is rejected without being loaded; a redelivered candidate is not replayed.
        junk = tmp_path / "junk.pt"
        junk.write_bytes(b"not a model")
        bad = setup.offer(junk, 7000)
        assert "invalid export" in setup.decided(bad)["reason"]
        setup.offer(_heuristic_export(tmp_path / "again.pt", 5000), 5000)
        time.sleep(3)
        assert sum(e["candidate"] == strong for e in read_lines(setup.decisions.path)) == 1
        assert setup.repo.versions(setup.model) == [1, 2]
        store.close()
    finally:
        running.close()
        setup.producer.close()
        if ratings is not None:
            ratings.terminate()
            ratings.wait(30)


@pytest.mark.slow
@pytest.mark.parametrize("announced", [False, True], ids=["killed-before-announcing", "killed-after-announcing"])
def test_crash_after_the_promotion_write_finishes_it_without_a_second_version(
        triton_server, kafka_broker, tmp_path: Path, announced: bool) -> None:
    """The state a SIGKILL leaves between the version's write and the decision line: a match file
    that passes and the candidate already in the repository (and maybe already announced, so the
    "current version" is the candidate itself). The restarted service finishes that promotion
    (load, check, announce, record) against the match's real opponent and writes nothing new."""
    setup = Setup(tmp_path, triton_server, kafka_broker.bootstrap)
    export = _heuristic_export(tmp_path / "cand.pt", 9000)
    name = "candidate-000000009000"
    match = MatchFile(setup.data_dir, name)
    match.start({"candidate": name, "candidate_path": str(export), "opponent_version": 1,
                 "games": setup.config.gating.games, "started": time.time()})
    for index in range(4):  # the candidate (side 0) won games 0-3: 4 of 8 passes
        match.add(_result(index, "B" if index % 2 == 0 else "W"))
    assert setup.repo.write_version(setup.model, export) == 2  # written, not recorded
    if announced:
        announce_model(setup.producer, setup.model, 2, samples=0)
    running = Running(GatingService(setup.config, topic=setup.topic))
    try:
        setup.offer(export, 9000)
        decision = setup.decided(name, 120)
        assert decision["promoted"] is True and decision["promoted_version"] == 2 and decision["wins"] == 4
        assert decision["opponent_version"] == 1 and decision["games"] == 4  # not replayed
        assert setup.repo.versions(setup.model) == [1, 2]
        assert 2 in ready_versions(setup.url, setup.model)
        assert latest_model_version(setup.bootstrap, setup.model, timeout_s=20) == 2
    finally:
        running.close()
        setup.producer.close()


class Noisy(nn.Module):
    """A net whose policy has noise added on every call: Triton's answers never match the ones
    its export gave when it was checked, as with a served precision beyond the check's tolerance."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, spatial: torch.Tensor, globals: torch.Tensor):  # noqa: A002
        policy, value, score, ownership, uncertainty = self.net(spatial, globals)
        return policy + 8.0 * torch.rand_like(policy), value, score, ownership, uncertainty


@pytest.mark.slow
def test_a_candidate_that_triton_serves_otherwise_is_rejected_not_retried(
        triton_server, kafka_broker, tmp_path: Path) -> None:
    """Before, the failed served check was retried with backoff forever and gating stalled; now
    the candidate is rejected with the reason, its version is gone again, and the next candidate
    is gated."""
    setup = Setup(tmp_path, triton_server, kafka_broker.bootstrap)
    noisy = tmp_path / "noisy.pt"
    torch.jit.save(torch.jit.script(Noisy(InferenceNet(_random_net(5)))), str(noisy))
    sidecar_path(noisy).write_text(sidecar_path(_random_export(tmp_path / "ref.pt", 5)).read_text())
    running = Running(GatingService(setup.config, topic=setup.topic))
    try:
        name = setup.offer(noisy, 5000)
        decision = setup.decided(name, 180)
        assert decision["promoted"] is False and decision["games"] == 0
        assert "does not serve it as exported" in decision["reason"] and "policy" in decision["reason"]
        assert setup.repo.versions(f"{setup.model}-candidate") == []  # the failed load was taken back
        later = setup.offer(_heuristic_export(tmp_path / "later.pt", 6000), 6000)
        assert setup.decided(later, 240)["games"] > 0  # gating went on to the next candidate
        assert setup.repo.versions(setup.model)[0] == 1
    finally:
        running.close()
        setup.producer.close()


@pytest.mark.slow
def test_killed_mid_match_resumes_and_promotes_at_most_once(triton_server, tmp_path: Path) -> None:
    """SIGKILL the service process while its match is being played, start it again: the finished
    games are kept and not replayed, one decision is recorded, at most one version is added, and
    ratings gets each game once. (A broker of our own: the service reads tengen.candidates.)"""
    broker = LocalBroker(log_path=tmp_path / "broker.log").start()
    try:
        ensure_loop_topics(broker.bootstrap)
        setup = Setup(tmp_path, triton_server, broker.bootstrap, TENGEN_SELFPLAY__GAMES_IN_PARALLEL="2",
                      TENGEN_GATING__SPRT="false")
        name = setup.offer(_heuristic_export(tmp_path / "cand.pt", 4000), 4000, topic=CANDIDATES_TOPIC)
        env = {**os.environ, **setup.env, "TENGEN_SELFPLAY__GAMES_IN_PARALLEL": "2", "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "services.gating", "--preset", "tiny", "--http-port", "0"]
        match_path = MatchFile(setup.data_dir, name).path
        with open(tmp_path / "gating-1.log", "wb") as log_file:
            first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
            try:
                _wait("a finished game", lambda: len(MatchFile(setup.data_dir, name).results) >= 1, 240)
            finally:
                first.send_signal(signal.SIGKILL)
                first.wait()
        kept = match_path.read_bytes()
        played_before = len(MatchFile(setup.data_dir, name).results)
        with open(tmp_path / "gating-2.log", "wb") as log_file:
            second = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT)
            try:
                decision = setup.decided(name, 300)
                store = RatingsStore(f"sqlite:///{setup.data_dir / 'ratings.sqlite'}")
                _wait("the games in ratings", lambda: store.game_count() == decision["games"], 60)
                store.close()
            finally:
                second.send_signal(signal.SIGTERM)
                assert second.wait(60) == 0
        log_text = (tmp_path / "gating-2.log").read_text()
        assert "resuming" in log_text or played_before == decision["games"], log_text[-3000:]
        assert match_path.read_bytes().startswith(kept)  # the games before the kill were kept
        lines = [e for e in read_lines(match_path) if "game" in e]
        assert len(lines) == len({e["game"]["index"] for e in lines}) == decision["games"]
        assert sum(e["candidate"] == name for e in read_lines(setup.decisions.path)) == 1
        versions = setup.repo.versions(setup.model)
        assert versions == ([1, 2] if decision["promoted"] else [1])
        setup.producer.close()
    finally:
        broker.stop()
