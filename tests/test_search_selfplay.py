"""Self-play games (tengen.selfplay.game) and the batched runner (tengen.selfplay.runner)."""
from __future__ import annotations

import dataclasses
import math
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from tengen.config import SearchConfig, load_config
from tengen.go import passalive
from tengen.go.board import BLACK, WHITE, Board
from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL
from tengen.loop.rows import MAX_POLICY_SURPRISE, TrainingRows, decode, rows_from_record, validate, window_rows
from tengen.proto import game_pb2
from tengen.search.mcts import Tree
from tengen.search.nn_cache import NNCache
from tengen.search.single_search import new_tree
from tengen.selfplay.game import (
    SelfPlayGame,
    SelfplaySettings,
    lopsided_factor,
    max_handicap,
    move_temperature,
    policy_surprise,
    sample_by_visits,
)
from tengen.selfplay.runner import SelfplayRunner

TINY = load_config("tiny")


class Quick:
    """A cheap deterministic 'net': fixed pseudo-random move preferences per point, pass
    discouraged, a constant score lead for the mover (`lead`)."""

    def __init__(self, lead: float = 0.0, delay_s: float = 0.0) -> None:
        self.lead = lead
        self.delay_s = delay_s
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        with self._lock:
            self.calls += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.threads.add(threading.current_thread().name)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            n, _, h, w = spatial.shape
            pattern = np.sin(np.arange(h * w) * 1.7).astype(np.float32)
            policy = np.empty((n, h * w + 1), np.float32)
            policy[:, :h * w] = pattern - 2.0 * (spatial[:, 1] + spatial[:, 2]).reshape(n, -1)
            policy[:, h * w] = -3.0
            stones = (spatial[:, 1].sum(axis=(1, 2)) - spatial[:, 2].sum(axis=(1, 2))) / 10.0
            value = np.stack([stones, -stones, np.full(n, -4.0)], axis=1).astype(np.float32)
            score = np.stack([np.full(n, self.lead), np.full(n, 4.0)], axis=1).astype(np.float32)
            return {"policy": policy, "value": value, "score": score, "ownership": np.zeros((n, h, w), np.float32)}
        finally:
            with self._lock:
                self.in_flight -= 1


class RecordingTree(Tree):
    """A Tree that remembers how each search was started."""

    def __init__(self, *args, **kwargs) -> None:
        self.starts: list[dict] = []

    def start_search(self, visits, **kwargs) -> None:
        self.starts.append({"visits": visits, **kwargs})
        super().start_search(visits, **kwargs)


def settings(**changes) -> SelfplaySettings:
    return dataclasses.replace(SelfplaySettings.from_config(TINY), **changes)


def play_game(game: SelfPlayGame, evaluator, rows: int = 4) -> game_pb2.GameRecord:
    """Drive one game's generator alone, evaluating its leaves in small batches."""
    tree = game.tree
    side = max(game.settings.board_sizes)
    spatial = np.zeros((rows, NUM_SPATIAL, side, side), np.float32)
    global_inputs = np.zeros((rows, NUM_GLOBAL), np.float32)
    steps = game.play()
    try:
        next(steps)
        while True:
            while not tree.done:
                n = tree.select_leaves(rows, spatial, global_inputs)
                if n:
                    out = evaluator.evaluate(spatial[:n], global_inputs[:n])
                    tree.backup(out["policy"], out["value"], out["score"])
            steps.send(None)
    except StopIteration as stop:
        return stop.value


def accepted(record: game_pb2.GameRecord) -> TrainingRows:
    """What the trainer does with a record off the topic: decode its bytes, validate it, replay
    it into rows (one per full-search turn, with the turn's weight)."""
    decoded = decode(record.SerializeToString())
    validate(decoded)
    rows = rows_from_record(decoded)
    recorded = [m for m in record.moves if m.full_search] + [m for b in record.side_branches for m in b.searches]
    assert len(rows) == len(recorded)
    np.testing.assert_allclose(rows.weight, [m.weight for m in recorded], rtol=1e-6)
    return rows


def new_game(seed: int, config: SelfplaySettings, tree_class=Tree) -> SelfPlayGame:
    search = TINY.search
    tree = tree_class(NNCache(4096, 19 * 19), cpuct=search.cpuct, seed=seed)
    return SelfPlayGame(tree, config, seed)


def test_playout_cap_randomization_records_only_full_searches() -> None:
    full = fast = 0
    config = settings(permanent_branch_prob=0.0, handicap_prob=0.0, full_visits=6, fast_visits=2,
                      full_search_prob=0.25)  # the paper's p; the tiny preset plays only full searches
    for seed in range(16):
        game = new_game(seed, config, RecordingTree)
        record = play_game(game, Quick())
        rows = accepted(record)
        recorded = [m for m in record.moves if m.full_search]
        assert len(rows) == len(recorded) + sum(len(b.searches) for b in record.side_branches)
        assert len(recorded) == game.searches["full"]
        for move in record.moves:
            assert bool(move.policy_moves) == move.full_search
        # Noise (with root temperature) and forced playouts go together, on exactly the full
        # searches (side branches' included), which never reuse the tree; fast searches do, with
        # n visits and no noise.
        searches = [s for s in game.tree.starts if s["visits"] > 1]
        noisy = [s for s in searches if s.get("noise")]
        assert len(noisy) == game.searches["full"] + game.searches["side"]
        for start in searches:
            if start.get("noise"):
                assert start["forced_playouts"] and not start.get("reuse")
                assert config.fast_visits <= start["visits"] <= config.full_visits
            else:
                assert not start.get("forced_playouts") and start["visits"] == config.fast_visits
                assert start["reuse"] == (start.get("allowed") is None)
        full += game.searches["full"]
        fast += game.searches["fast"]
    share = full / (full + fast)
    # p = 0.25 over about 1,500 turns (standard deviation of the share about 0.011)
    assert full + fast > 1000
    assert 0.21 < share < 0.29


def test_games_vary_rules_komi_and_size() -> None:
    config = settings(board_sizes=[7, 8], board_size_weights=[1.0, 3.0], permanent_branch_prob=0.0,
                      full_visits=4, fast_visits=2, max_moves_factor=0.5)
    records = [play_game(new_game(seed, config), Quick()) for seed in range(24)]
    for record in records:
        accepted(record)
    assert {r.x_size for r in records} == {7, 8}
    assert sum(r.x_size == 8 for r in records) > sum(r.x_size == 7 for r in records)
    rules = {r.rules for r in records}
    assert any("situational" in r for r in rules) and any("positional" in r for r in rules)
    assert any("suicide=yes" in r for r in rules) and any("suicide=no" in r for r in rules)
    komis = [r.komi for r in records]
    assert all((2 * k).is_integer() for k in komis)
    assert 5.0 <= np.median(komis) <= 9.0


def test_handicap_games_compensate_komi_by_the_predicted_lead() -> None:
    komi = {}
    for compensate in (0.0, 1.0):
        config = settings(board_sizes=[11], board_size_weights=[1.0], handicap_prob=1.0,
                          handicap_compensation_prob=compensate, permanent_branch_prob=0.0,
                          full_visits=4, fast_visits=2, max_moves_factor=0.2)
        game = new_game(5, config)
        record = play_game(game, Quick(lead=2.0))
        accepted(record)
        assert record.handicap == 1  # 11x11 allows one free move
        assert [m.color for m in record.moves[:3]] == [BLACK, BLACK, WHITE]
        komi[compensate] = record.komi
    # Black to move is predicted 2 points ahead; three rounds of komi += lead.
    assert komi[1.0] - komi[0.0] == pytest.approx(6.0)


def test_permanent_branch_plays_the_favourite_of_a_few_random_moves() -> None:
    config = settings(permanent_branch_prob=1.0, permanent_branch_turn_mean=0.0001, handicap_prob=0.0,
                      opening_moves_mean=0.0001, full_visits=4, fast_visits=2, max_moves_factor=0.3)
    game = new_game(3, config)
    record = play_game(game, Quick(lead=1.0))
    accepted(record)
    # turn 0 is the branch: 3-10 candidate evaluations, then komi compensation evaluations
    assert game.searches["raw"] >= 3 + 1
    assert not record.moves[0].full_search and not record.moves[0].policy_moves


def test_opening_moves_come_from_the_raw_policy() -> None:
    config = settings(opening_moves_mean=3.0, permanent_branch_prob=0.0, handicap_prob=0.0,
                      full_visits=4, fast_visits=2, max_moves_factor=0.5)
    games = [new_game(seed, config) for seed in range(8)]
    for game in games:
        accepted(play_game(game, Quick()))
    raw = [g.searches["raw"] for g in games]
    assert sum(raw) > 8 and len(set(raw)) > 1  # r ~ Exp(3 B^2) varies from game to game


def test_game_ends_early_when_everything_is_pass_alive() -> None:
    config = settings(permanent_branch_prob=0.0, handicap_prob=0.0, full_visits=8, fast_visits=4)
    reasons = set()
    for seed in range(8):
        record = play_game(new_game(seed, config), Quick())
        accepted(record)  # PASS_ALIVE endings are re-checked by the replay
        reasons.add(record.end_reason)
    assert game_pb2.PASS_ALIVE in reasons


def test_pass_alive_territory_is_off_limits_after_four_opponent_passes() -> None:
    board = Board.from_diagram("""
        . X . X . . .
        X X X X . . .
        . . . . . . .
        . . . . . . .
        . . . . . . .
        . . . . . O O
        . . . . . O .
    """, to_move=WHITE)
    game = new_game(0, settings())
    game.board = board
    assert game._allowed_moves() is None
    game.pass_streak[BLACK] = 4
    allowed = game._allowed_moves()
    territory = passalive.pass_alive_map(board).ravel() != 0
    assert territory[0] and territory[2]  # Black's two eyes
    assert not allowed[0] and not allowed[2] and allowed[-1] and allowed[3 * 7 + 3]
    np.testing.assert_array_equal(allowed[:-1], ~territory)


def test_lopsided_games_reduce_visits_and_weight() -> None:
    assert lopsided_factor([0.01] * 4, 5, 0.05) is None  # too few turns
    assert lopsided_factor([0.5, 0.01, 0.02, 0.04, 0.03, 0.01], 5, 0.05) == pytest.approx(0.8)
    assert lopsided_factor([0.99, 0.995, 0.999, 0.98, 0.97], 5, 0.05) == pytest.approx(0.6)
    assert lopsided_factor([0.01, 0.02, 0.99, 0.01, 0.01], 5, 0.05) is None
    # A game where Black always looks lost gets lower-weight, smaller full searches.
    config = settings(permanent_branch_prob=0.0, handicap_prob=0.0, full_search_prob=1.0,
                      full_visits=20, fast_visits=4, max_moves_factor=0.4)
    game = new_game(2, config, RecordingTree)

    class Hopeless(Quick):
        def evaluate(self, spatial, global_inputs):
            out = super().evaluate(spatial, global_inputs)
            black_to_move = global_inputs[:, 5] < 0  # komi feature is -komi/15 for Black
            out["value"][:] = np.where(black_to_move[:, None], [[-9.0, 9.0, -9.0]], [[9.0, -9.0, -9.0]])
            return out

    record = play_game(game, Hopeless())
    accepted(record)
    weights = [m.weight for m in record.moves if m.full_search]
    assert weights[0] == 1.0 and min(weights) == pytest.approx(0.1, abs=0.02)
    assert min(s["visits"] for s in game.tree.starts) < 20


def test_policy_surprise_is_the_kl_of_the_target_from_the_root_prior() -> None:
    # Target 3:1 over priors 0.5 and 0.25 (a third child, pruned to 0, is not in the target):
    # 0.75 ln(0.75 / 0.5) + 0.25 ln(0.25 / 0.25).
    result = SimpleNamespace(pruned=np.array([3, 1, 0]), priors=np.array([0.5, 0.25, 0.25]))
    assert policy_surprise(result) == pytest.approx(0.75 * math.log(1.5))
    same = SimpleNamespace(pruned=np.array([2, 1]), priors=np.array([2 / 3, 1 / 3]))
    assert policy_surprise(same) == pytest.approx(0.0, abs=1e-12)
    never = SimpleNamespace(pruned=np.array([1]), priors=np.array([0.0]))  # floored: the bound
    assert policy_surprise(never) == MAX_POLICY_SURPRISE


def test_full_searches_record_their_policy_surprise() -> None:
    assert not SelfplaySettings.from_config(TINY).surprise_weighting  # off: it lost its A/B on cpu7

    def play(surprise: bool) -> game_pb2.GameRecord:
        config = settings(permanent_branch_prob=0.0, handicap_prob=0.0, full_visits=8, fast_visits=2,
                          full_search_prob=0.5, side_branch_prob=0.2, surprise_weighting=surprise)
        tree = Tree(NNCache(4096, 19 * 19), cpuct=TINY.search.cpuct, seed=5)
        record = play_game(SelfPlayGame(tree, config, 5, game_id="surprise"), Quick())
        record.ClearField("created")
        return record

    on, off = play(True), play(False)
    accepted(on)
    searches = [m for m in on.moves if m.full_search] + [m for b in on.side_branches for m in b.searches]
    assert on.side_branches and len(searches) > 5
    assert all(m.HasField("policy_surprise") == m.full_search for m in on.moves)
    surprise = [m.policy_surprise for m in searches if m.HasField("policy_surprise")]
    assert len(surprise) == len(searches) and 0 < max(surprise) <= MAX_POLICY_SURPRISE and min(surprise) >= 0
    for move in searches:  # the field is all the setting changes; off, the rows are today's
        move.ClearField("policy_surprise")
    assert on == off
    np.testing.assert_array_equal(window_rows(off).policy, rows_from_record(off).policy)


def test_temperature_and_sampling() -> None:
    assert move_temperature(0, 9, 0.8, 0.2) == pytest.approx(0.8)
    assert move_temperature(9, 9, 0.8, 0.2) == pytest.approx(0.5)
    assert move_temperature(900, 9, 0.8, 0.2) == pytest.approx(0.2)
    rng = np.random.default_rng(0)
    moves, visits = np.array([3, 7, 9]), np.array([60, 30, 0])
    draws = [sample_by_visits(moves, visits, 1.0, rng) for _ in range(3000)]
    assert 9 not in draws and abs(draws.count(3) / 3000 - 2 / 3) < 0.03
    sharp = [sample_by_visits(moves, visits, 0.2, rng) for _ in range(1000)]
    assert sharp.count(3) / 1000 > 0.95  # (2/3)^5 / ((2/3)^5 + (1/3)^5) = 0.97
    assert max_handicap(9) == 0 and max_handicap(13) == 1 and max_handicap(17) == 2 and max_handicap(19) == 3


def test_runner_plays_valid_games_with_two_batches_in_flight() -> None:
    evaluator = Quick(delay_s=0.002)
    runner = SelfplayRunner(evaluator, settings(full_visits=8, fast_visits=4), TINY.search,
                            games_in_parallel=8, seed=1, id_prefix="t")
    records = list(runner.run(10))
    assert len(records) == 10 and len({r.id for r in records}) == 10
    for record in records:
        accepted(record)
    assert evaluator.max_in_flight == 2  # one batch per half
    assert threading.current_thread().name not in evaluator.threads
    stats = runner.stats.as_dict()
    assert stats["games"] == 10 and stats["moves"] == sum(len(r.moves) for r in records)
    assert stats["mean_batch"] > 1


def test_runner_batches_the_configured_leaves_per_game() -> None:
    """selfplay.leaves_per_game k: each step of a half gathers up to k leaves per game (virtual
    loss), so a half of 4 games sends up to 8 rows instead of 4, and the games stay valid."""
    sizes: list[int] = []

    class Sizes(Quick):
        def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
            sizes.append(len(spatial))
            return super().evaluate(spatial, global_inputs)

    for k, most in ((1, 4), (2, 8)):
        sizes.clear()
        config = dataclasses.replace(TINY, selfplay=dataclasses.replace(TINY.selfplay, games_in_parallel=8,
                                                                        leaves_per_game=k))
        runner = SelfplayRunner.from_config(config, Sizes(), seed=1, id_prefix="k")
        assert runner.leaves_per_game == k
        for record in runner.run(6):
            accepted(record)
        assert max(sizes) == most, (k, max(sizes))


def test_runner_starts_no_more_games_than_asked_for() -> None:
    """Fewer games than slots: every game started is one asked for, and exactly that many come out
    (a selfplay worker run with --games N publishes N games, not a half's worth)."""
    for wanted in (1, 3, 5):
        runner = SelfplayRunner(Quick(), settings(full_visits=4, fast_visits=2), TINY.search,
                                games_in_parallel=8, seed=wanted, id_prefix="n")
        records = list(runner.run(wanted))
        assert len(records) == wanted and runner.stats.games == wanted
        assert sorted(r.id for r in records) == sorted(f"n-{i}" for i in range(wanted))


def test_runner_is_deterministic_for_a_seed() -> None:
    def moves(seed: int) -> list[list[int]]:
        runner = SelfplayRunner(Quick(), settings(full_visits=8, fast_visits=4), TINY.search,
                                games_in_parallel=4, seed=seed, id_prefix="d")
        return sorted([m.move for m in r.moves] for r in runner.run(4))

    assert moves(3) == moves(3)
    assert moves(3) != moves(4)


def test_runner_tags_games_with_the_model_version() -> None:
    class Versioned(Quick):
        version = 1

        def infer(self, spatial, global_inputs):
            return SimpleNamespace(outputs=self.evaluate(spatial, global_inputs), model_version=self.version)

    evaluator = Versioned()
    runner = SelfplayRunner(evaluator, settings(full_visits=8, fast_visits=4), TINY.search,
                            games_in_parallel=4, seed=0)
    versions = []
    for record in runner.run(12):
        versions.append(record.model_version)
        if len(versions) == 4:
            evaluator.version = 2  # a new model is serving from now on
    assert versions[:4] == [1, 1, 1, 1]
    assert versions[-4:] == [2, 2, 2, 2]


def test_runner_stops_on_request_and_can_run_again() -> None:
    stop = threading.Event()
    runner = SelfplayRunner(Quick(), settings(full_visits=8, fast_visits=4), TINY.search,
                            games_in_parallel=4, seed=0)
    records = []
    for record in runner.run(None, stop=stop):
        records.append(record)
        stop.set()
    assert len(records) >= 1
    assert len(list(runner.run(2))) == 2  # trees were reset: a new run works


def test_runner_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError):
        SelfplayRunner(Quick(), settings(), SearchConfig(), games_in_parallel=1)
    with pytest.raises(ValueError):
        list(SelfplayRunner(Quick(), settings(), SearchConfig(), games_in_parallel=2).run(0))


def test_search_config_builds_trees() -> None:
    tree = new_tree(NNCache(10, 81), SearchConfig(cpuct=1.3), seed=0)
    assert tree.cpuct == pytest.approx(1.3)
