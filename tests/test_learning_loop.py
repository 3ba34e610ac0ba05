"""What the loop learns at the tiny preset: a short run of the whole loop in one process (the real
self-play runner on a TorchEvaluator, the trainer's Learner on a window in a tmp dir, SWA
candidates, each candidate taking over self-play at once; no services, no gating:
tengen.run.in_process), then two statistical checks of the final net:

(a) it does not pass its games away: in self-play games of the final net, passes are under 10% of
    the moves, not counting each game's last ten moves (every game ends with passes);
(b) it beats the starting (random) net in at least 70% of 40 games, colours alternating, with
    gating's match settings (tengen.gate.net_match: komi 7.5, the preset's gating visits), draws
    counting half.

Both fail when self-play locks into passing: with 4-visit fast searches (tengen/configs/tiny.yaml says
why the preset has none now) White came to pass 80% of its moves, Black won ~90% of the games, and
the nets lost to the random net (15-26 of 40).

The run is deterministic (one seed, one torch thread count, the same build): the seed was chosen
once, before the first run, and is never to be tuned to make the test pass. Nothing here measures
time; the whole module took 2-2.6 minutes on a busy 2-core box.
"""
from __future__ import annotations

from typing import Iterator

import pytest
import torch

from tengen.config import Config, load_config
from tengen.gate.net_match import MatchRunner, NetMatchSettings
from tengen.nn.evaluator import TorchEvaluator
from tengen.run.in_process import LoopResult, learn_in_process, pass_counts
from tengen.selfplay.runner import SelfplayRunner
from tengen.stats import wilson_interval
from tengen.train.learner import Learner
from tengen.train.window import Window

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]  # the loop runs in the first test's setup

SEED = 1
LOOP_GAMES = 300  # self-play games of the loop: about 60 candidates at the tiny preset
CHECK_GAMES = 40  # self-play games of the final net for (a)
MATCH_GAMES = 40  # (b)
MAX_PASS_SHARE = 0.10
MIN_SCORE_RATE = 0.70
TORCH_THREADS = 1  # fixed, so the run is the same experiment on every machine with this build


@pytest.fixture(scope="module")
def config() -> Config:
    return load_config("tiny", env={})


@pytest.fixture(scope="module", autouse=True)
def torch_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(TORCH_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="module")
def loop(config: Config, tmp_path_factory: pytest.TempPathFactory) -> LoopResult:
    torch.manual_seed(SEED)  # the starting net's weights
    trainer = config.trainer
    window = Window(tmp_path_factory.mktemp("learning-loop") / "window", max(config.game.board_sizes),
                    c=trainer.window_c, alpha=trainer.window_alpha, beta=trainer.window_beta)
    learner = Learner(trainer, window, seed=SEED)
    try:
        result = learn_in_process(config, learner, LOOP_GAMES, seed=SEED)
    finally:
        learner.close()
    print(f"\nloop: {LOOP_GAMES} games, {window.n_total} rows, {result.samples} samples, "
          f"{len(result.candidates)} candidates")
    assert result.candidates, "the loop made no candidate: nothing was learned"
    return result


def test_the_learned_net_does_not_pass_its_games_away(config: Config, loop: LoopResult) -> None:
    runner = SelfplayRunner.from_config(config, TorchEvaluator(loop.final_net), seed=SEED + 1)
    records = list(runner.run(CHECK_GAMES))
    passes, moves = pass_counts(records, skip_last=10)
    print(f"\nfinal net's self-play: {passes} passes in {moves} moves ({passes / moves:.3f}), "
          f"last ten moves of each game not counted")
    assert moves >= 10 * CHECK_GAMES, "the final net's games are too short to say anything"
    assert passes / moves < MAX_PASS_SHARE


def test_the_learned_net_beats_the_random_net(config: Config, loop: LoopResult) -> None:
    settings = NetMatchSettings.from_config(config)
    runner = MatchRunner([TorchEvaluator(loop.final_net), TorchEvaluator(loop.start_net)], settings, config.search,
                         games_in_parallel=config.selfplay.games_in_parallel, seed=SEED)
    results = list(runner.play(range(MATCH_GAMES)))
    assert sorted(r.index for r in results) == list(range(MATCH_GAMES))
    assert {r.black_side for r in results} == {0, 1}  # colours alternate (game i: side i % 2 is Black)
    points = sum(0.5 if r.winner_side() is None else float(r.winner_side() == 0) for r in results)
    low, high = wilson_interval(points, MATCH_GAMES)
    print(f"\nfinal net vs starting net: {points}/{MATCH_GAMES} = {points / MATCH_GAMES:.3f} "
          f"(95% Wilson interval [{low:.3f}, {high:.3f}]) at komi {settings.komi}, {settings.visits} visits")
    assert points >= MIN_SCORE_RATE * MATCH_GAMES
