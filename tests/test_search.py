"""The Cython MCTS core (tengen.search.mcts) and the result reading of tengen.search.single_search."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from tengen.go import features, passalive
from tengen.go.board import WHITE, Board
from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL, PREV_PASS_1
from tengen.search.mcts import Tree, backup_batch, select_batch
from tengen.search.nn_cache import NNCache
from tengen.search.root_noise import dirichlet_alphas
from tengen.search.score_utility import expected_atan
from tengen.search.single_search import prune_visits, read_result, run
from tengen.search.symmetry import symmetry_index

# Black to move on 7x7. Two chains in a semeai: Black's (row 2) has one liberty at the right
# end, White's (row 3) one at the left end (0, 3), shared by nobody. Capturing at (0, 3) (move
# 21) wins; connecting out at (6, 2) or anything else loses at komi 7.5 (checked below).
SEMEAI = """
O . O O O . O
O O O O O O O
O X X X X X .
. O O O O O X
X X X X X X X
X X X X X X X
X . X X X . X
"""
SEMEAI_CAPTURE = 21


class Uniform:
    """Uniform policy, equal win/loss/no-result, score 0 +- 0: no knowledge at all."""

    def __init__(self) -> None:
        self.calls = 0
        self.rows = 0

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        n, _, h, w = spatial.shape
        self.calls += 1
        self.rows += n
        return {"policy": np.zeros((n, h * w + 1), np.float32), "value": np.zeros((n, 3), np.float32),
                "score": np.zeros((n, 2), np.float32), "ownership": np.zeros((n, h, w), np.float32)}


class Hashed:
    """A deterministic 'net': outputs are a fixed function of the board's own features (cropped
    by the ON_BOARD mask, so the buffer size does not matter, as with the real masked net), and
    it records every batch it saw."""

    def __init__(self) -> None:
        self.batches: list[tuple[np.ndarray, np.ndarray]] = []

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        self.batches.append((spatial.copy(), global_inputs.copy()))
        n, _, h, w = spatial.shape
        policy = np.full((n, h * w + 1), -30.0, np.float32)
        value = np.zeros((n, 3), np.float32)
        score = np.zeros((n, 2), np.float32)
        for i in range(n):
            bh = int(spatial[i, 0, :, 0].sum())
            bw = int(spatial[i, 0, 0, :].sum())
            flat = spatial[i, :, :bh, :bw].ravel()
            proj = _projection(flat.size, bh * bw + 5)
            out = flat @ proj / 8.0 + global_inputs[i].sum()
            grid = np.full((h, w), -30.0, np.float32)
            grid[:bh, :bw] = out[:bh * bw].reshape(bh, bw)
            policy[i, :h * w] = grid.ravel()
            policy[i, h * w] = out[bh * bw]
            value[i] = out[bh * bw + 1:bh * bw + 4]
            score[i] = out[-1], abs(out[-1]) + 1.0
        return {"policy": policy, "value": value, "score": score, "ownership": np.zeros((n, h, w), np.float32)}


class Peaked:
    """9x9: the same policy everywhere, three moves (points 0, 1, 2) at equal logits, the other
    79 and pass 12 nats below them."""

    logits = np.r_[np.zeros(3), np.full(79, -12.0)].astype(np.float32)

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        n = spatial.shape[0]
        return {"policy": np.tile(self.logits, (n, 1)), "value": np.zeros((n, 3), np.float32),
                "score": np.zeros((n, 2), np.float32), "ownership": np.zeros((n, 9, 9), np.float32)}


class Equivariant:
    """A 'net' that commutes with the board's symmetries: each point's policy logit is a weighted
    sum of its feature planes plus its four neighbours' stones; value and score from plane totals.
    Any symmetry of its input gives the same output, mapped: random symmetry must change nothing."""

    def __init__(self) -> None:
        self.rows = 0

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        n, c, h, w = spatial.shape
        self.rows += n
        weights = np.linspace(-1.0, 1.0, c, dtype=np.float32)
        local = np.einsum("nchw,c->nhw", spatial, weights)
        stones = spatial[:, 1] - spatial[:, 2]
        padded = np.pad(stones, ((0, 0), (1, 1), (1, 1)))
        local += 0.7 * (padded[:, :-2, 1:-1] + padded[:, 2:, 1:-1] + padded[:, 1:-1, :-2] + padded[:, 1:-1, 2:])
        local = np.where(spatial[:, 0] > 0, local, -30.0)
        policy = np.concatenate([local.reshape(n, h * w), np.full((n, 1), -1.0, np.float32)], axis=1)
        own, opp = spatial[:, 1].sum(axis=(1, 2)), spatial[:, 2].sum(axis=(1, 2))
        libs = spatial[:, 3:6].sum(axis=(1, 2, 3))
        value = np.stack([0.1 * own + 0.01 * libs, 0.1 * opp, np.zeros(n)], axis=1).astype(np.float32)
        score = np.stack([own - opp + 0.05 * libs, np.ones(n)], axis=1).astype(np.float32)
        return {"policy": policy.astype(np.float32), "value": value, "score": score,
                "ownership": np.zeros((n, h, w), np.float32)}


class Owner:
    """Uniform policy, even value and score 0, and an ownership map: a fixed one (`fixed`, the
    mover's view, by move index) or, without it, one that commutes with the board's symmetries:
    +-1/3 per own/opponent stone among a point's four neighbours."""

    def __init__(self, fixed: np.ndarray | None = None) -> None:
        self.fixed = fixed

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        n, _, h, w = spatial.shape
        if self.fixed is not None:
            ownership = np.tile(self.fixed.reshape(1, h, w), (n, 1, 1)).astype(np.float32)
        else:
            stones = np.pad(spatial[:, 1] - spatial[:, 2], ((0, 0), (1, 1), (1, 1)))
            near = stones[:, :-2, 1:-1] + stones[:, 2:, 1:-1] + stones[:, 1:-1, :-2] + stones[:, 1:-1, 2:]
            ownership = np.clip(near / 3.0, -1.0, 1.0).astype(np.float32) * spatial[:, 0]
        return {"policy": np.zeros((n, h * w + 1), np.float32), "value": np.zeros((n, 3), np.float32),
                "score": np.zeros((n, 2), np.float32), "ownership": ownership}


_PROJECTIONS: dict[tuple[int, int], np.ndarray] = {}


def _projection(rows: int, cols: int) -> np.ndarray:
    if (rows, cols) not in _PROJECTIONS:
        _PROJECTIONS[rows, cols] = np.random.default_rng(rows + cols).normal(size=(rows, cols)).astype(np.float32)
    return _PROJECTIONS[rows, cols]


def random_position(size: int, moves: int, seed: int) -> list[Board]:
    """A random legal game's positions, oldest first (the last is `moves` moves in)."""
    rng = random.Random(seed)
    boards = [Board(size)]
    for _ in range(moves):
        board = boards[-1].copy()
        legal = np.flatnonzero(board.legal_moves()[:-1])
        board.play(int(rng.choice(legal)) if len(legal) else board.pass_move)
        boards.append(board)
    return boards


def buffers(rows: int, side: int) -> tuple[np.ndarray, np.ndarray]:
    return (np.zeros((rows, NUM_SPATIAL, side, side), np.float32),
            np.zeros((rows, NUM_GLOBAL), np.float32))


def test_visit_counts_add_up_with_leaves_in_flight() -> None:
    tree = Tree(NNCache(1000, 81), seed=1)
    tree.set_position(Board(9))
    tree.start_search(300, noise=True, forced_playouts=True)
    spatial, global_inputs = buffers(16, 9)
    evaluator = Hashed()
    while not tree.done:
        n = tree.select_leaves(16, spatial, global_inputs)
        paths = tree.pending_paths()
        assert len(paths) == n == tree.num_pending
        assert len({tuple(p) for p in paths}) == n  # virtual loss spreads the leaves apart
        tree.check()  # in-flight counts agree along every pending path
        out = evaluator.evaluate(spatial[:n], global_inputs[:n])
        tree.backup(out["policy"], out["value"], out["score"])
        tree.check()
    assert tree.visits == 300
    children = tree.children()
    assert children["visits"].sum() == 299  # every playout but the root's own evaluation
    assert children["num_legal"] == 82
    assert max(len(b[0]) for b in evaluator.batches) == 16


class PassHappy:
    """A net that loves passing first and never thinks of passing back: pass logit +4 when the
    last move was not a pass, -6 when it was; every point 0; no idea who is winning."""

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        n, _, h, w = spatial.shape
        policy = np.zeros((n, h * w + 1), np.float32)
        policy[:, h * w] = np.where(global_inputs[:, PREV_PASS_1] > 0, -6.0, 4.0)
        return {"policy": policy, "value": np.zeros((n, 3), np.float32), "score": np.zeros((n, 2), np.float32),
                "ownership": np.zeros((n, h, w), np.float32)}


@pytest.mark.parametrize("visits", [8, 16, 32, 64])
def test_a_pass_that_lets_the_opponent_end_the_game_is_valued_as_that_end(visits: int) -> None:
    # White to move; Black's lone stone owns the whole empty 7x7 board by area: if White passes,
    # Black passes back and wins by 49 - 7.5. The net puts 0.98 on White's pass and almost
    # nothing on Black's pass back, so a search that values the node after White's pass by the
    # net alone (value 0) never reaches Black's winning reply and passes.
    board = Board.from_diagram("""
. . . . . . .
. . . . . . .
. . . . . . .
. . . X . . .
. . . . . . .
. . . . . . .
. . . . . . .
""", komi=7.5, to_move=WHITE)
    after = board.copy()
    after.play(board.pass_move)
    after.play(board.pass_move)
    assert passalive.final_score(after) == 49 - 7.5
    tree = Tree(NNCache(1000, 49), seed=3)
    result = run(board, PassHappy(), visits, tree=tree, leaves_per_batch=1)
    pass_index = 49
    visited = dict(zip(result.moves.tolist(), result.visits.tolist()))
    utility = dict(zip(result.moves.tolist(), result.utility.tolist()))
    if visited[pass_index] == 1:
        # White's utility after its pass is the terminal loss, -1 - c_score (2/pi) atan(41.5 / 7),
        # not the net's 0. (Later visits also average in Black's other replies, valued 0.)
        assert utility[pass_index] == pytest.approx(-1 - 0.5 * 2 / math.pi * math.atan(41.5 / 7), abs=0.05)
    assert result.best_move() != pass_index


@pytest.mark.parametrize("leaves", [1, 8])
def test_uniform_search_finds_the_semeai_capture(leaves: int) -> None:
    board = Board.from_diagram(SEMEAI, komi=7.5)
    # The premise, by the rules engine: capturing and then passing wins; passing and letting
    # White capture loses; connecting out lets White connect too, and loses by half a point.
    won = board.copy()
    won.play(SEMEAI_CAPTURE)
    assert passalive.final_score(won) > 0
    lost = board.copy()
    lost.play(board.pass_move)
    lost.play(2 * 7 + 6)  # White captures Black's chain
    assert passalive.final_score(lost) < 0
    connected = board.copy()
    connected.play(2 * 7 + 6)
    connected.play(SEMEAI_CAPTURE)
    assert passalive.final_score(connected) < 0
    result = run(board, Uniform(), 400, leaves_per_batch=leaves)
    assert result.best_move() == SEMEAI_CAPTURE
    assert result.win > result.loss


def test_terminal_child_after_two_passes_has_the_exact_value() -> None:
    board = Board.from_diagram(SEMEAI, komi=7.5, to_move=2)
    board.play(board.pass_move)  # White passed: Black's pass ends the game
    tree = Tree(NNCache(100, 49), seed=0)
    run(board, Uniform(), 200, tree=tree)
    children = tree.children()
    pass_index = int(np.flatnonzero(children["moves"] == board.pass_move)[0])
    ended = board.copy()
    ended.play(board.pass_move)
    x = passalive.final_score(ended)  # Black's view; Black is the root player
    expected = np.sign(x) + 0.5 * (2 / math.pi) * math.atan((x - tree.x0) / 7.0)
    assert children["visits"][pass_index] > 0
    assert children["utility"][pass_index] == pytest.approx(expected, abs=1e-9)


def test_forced_playouts_and_their_pruning() -> None:
    board = Board(9)
    deficits = {}
    for forced in (False, True):
        tree = Tree(NNCache(2000, 81), seed=3)
        result = run(board, Hashed(), 600, tree=tree, noise=True, forced_playouts=forced)
        total = result.visits.sum()
        owed = np.sqrt(2 * result.priors * total) - result.visits
        deficits[forced] = owed[result.visits > 0].max()
        if forced:
            assert not np.array_equal(result.pruned, result.visits)
            check_pruning(result.visits, result.pruned, result.priors, result.utility, tree.cpuct)
        else:
            assert np.array_equal(result.pruned, result.visits)
    # With forced playouts every visited root child ends with about sqrt(2 P sum N) visits.
    assert deficits[True] <= 1.0 < deficits[False]


def check_pruning(visits, pruned, priors, utility, cpuct) -> None:
    """The properties of policy target pruning (KataGo §5.3)."""
    total = visits.sum()
    best = int(np.argmax(visits))
    assert pruned[best] == visits[best]
    puct_best = utility[best] + cpuct * priors[best] * math.sqrt(total) / (1 + visits[best])
    for c in range(len(visits)):
        if c == best:
            continue
        forced = math.floor(math.sqrt(2 * priors[c] * total))
        assert 0 <= pruned[c] <= visits[c]
        # children reduced to one playout are pruned; an unreduced single playout stays
        assert pruned[c] != 1 or visits[c] == 1
        if pruned[c] == 0:
            continue
        removed = visits[c] - pruned[c]
        assert removed <= forced
        puct = utility[c] + cpuct * priors[c] * math.sqrt(total) / (1 + pruned[c])
        if removed > 0:
            assert puct < puct_best  # never subtracts past PUCT(c*)
            if removed < forced:  # stopped early: one more would have reached PUCT(c*)
                assert utility[c] + cpuct * priors[c] * math.sqrt(total) / pruned[c] >= puct_best


def test_prune_visits_on_chosen_numbers() -> None:
    visits = np.array([100, 30, 8, 1, 0, 2])
    priors = np.array([0.4, 0.3, 0.2, 0.05, 0.03, 0.02])
    utility = np.array([0.2, 0.1, -0.5, -0.9, 0.0, 0.5])
    pruned = prune_visits(visits, priors, utility, 1.1)
    check_pruning(visits, pruned, priors, utility, 1.1)
    assert pruned[0] == 100 and pruned[3] == 0 and pruned[4] == 0
    # The good low-prior child (utility above the best's PUCT) keeps its two visits.
    assert pruned[5] == 2
    # PUCT(c*) = 0.2 + 1.1 * 0.4 * sqrt(141) / 101 = 0.2517. The bad child (utility -0.5) would
    # have been chosen again at 2 visits (PUCT -0.5 + 2.611 / 3 = 0.370) but not at 3 (0.153).
    assert pruned[2] == 3
    # Child 1 needs 25 visits to stay below c*, so 5 of its floor(sqrt(2*0.3*141)) = 9 go.
    assert pruned[1] == 25
    with pytest.raises(ValueError):
        prune_visits(visits, priors[:3], utility, 1.1)


def test_prune_keeps_single_visits_it_did_not_reduce() -> None:
    # PUCT(c*) = 0.2 + 1.1 * 0.5 * sqrt(12) / 11 = 0.373. Child 1 at 0 visits would have PUCT
    # 0.3 + 1.1 * 0.2 * sqrt(12) = 1.06 >= 0.373, so nothing is taken from it and it keeps its
    # single visit; child 2 at 0 visits has -0.8 + 1.1 * 0.3 * sqrt(12) = 0.343 < 0.373, so its
    # visit goes.
    visits = np.array([10, 1, 1])
    priors = np.array([0.5, 0.2, 0.3])
    utility = np.array([0.2, 0.3, -0.8])
    pruned = prune_visits(visits, priors, utility, 1.1)
    check_pruning(visits, pruned, priors, utility, 1.1)
    assert list(pruned) == [10, 1, 0]


def test_noise_and_temperature_only_at_the_root() -> None:
    board = random_position(9, 12, seed=5)[-1]
    for noise in (False, True):
        tree = Tree(NNCache(500, 81), seed=11)
        evaluator = Hashed()
        run(board, evaluator, 60, tree=tree, noise=noise)
        raw = tree.raw_policy()
        legal = board.legal_moves()
        spatial, global_inputs = evaluator.batches[0][0][:1], evaluator.batches[0][1][:1]
        expected = softmax_over(evaluator.evaluate(spatial, global_inputs)["policy"][0], legal)
        np.testing.assert_allclose(raw, expected, rtol=1e-5, atol=1e-7)
        priors = tree.root_priors()
        assert priors.sum() == pytest.approx(1.0)
        if noise:
            tempered = np.where(legal, raw, 0.0) ** (1 / 1.03)
            tempered /= tempered.sum()
            assert np.all(priors >= 0.75 * tempered - 1e-7)  # noise only adds mass
            assert np.abs(priors - tempered).max() > 0.01
        else:
            np.testing.assert_allclose(priors, raw, rtol=1e-5, atol=1e-7)
        # Below the root the priors are the net's, noise or not.
        child = int(tree.children()["moves"][0])
        after = board.copy()
        after.play(child)
        sp = np.zeros((1, NUM_SPATIAL, 9, 9), np.float32)
        gl = np.zeros((1, NUM_GLOBAL), np.float32)
        features.encode(after, sp[0], gl[0], board)
        child_expected = softmax_over(evaluator.evaluate(sp, gl)["policy"][0], after.legal_moves())
        child_stats = tree.children([child])
        got = np.zeros(82)
        got[child_stats["moves"]] = child_stats["priors"]
        visited = child_stats["moves"]
        np.testing.assert_allclose(got[visited], child_expected[visited], rtol=1e-5, atol=1e-7)


def test_root_temperature_alone_without_noise_weight() -> None:
    board = random_position(9, 6, seed=2)[-1]
    tree = Tree(NNCache(100, 81), noise_weight=0.0, seed=1)
    run(board, Hashed(), 10, tree=tree, noise=True)
    raw = tree.raw_policy().astype(np.float64)
    tempered = raw ** (1 / 1.03)
    tempered /= tempered.sum()
    np.testing.assert_allclose(tree.root_priors(), tempered, rtol=1e-5, atol=1e-8)


def test_dirichlet_noise_spreads_over_legal_moves_with_the_scaled_alpha() -> None:
    # Uniform priors, noise weight just below 1: the root priors are nearly the Dirichlet draw.
    # With alpha = 10.83 / 82 per move, E[max share] is large and most shares are tiny.
    maxima = []
    for seed in range(30):
        tree = Tree(NNCache(0, 81), noise_weight=0.999, root_policy_temperature=1.0, seed=seed)
        run(Board(9), Uniform(), 1, tree=tree, noise=True)
        priors = tree.root_priors()
        assert priors.sum() == pytest.approx(1.0)
        maxima.append(priors.max())
    # Dirichlet(alpha=0.132) over 82 moves: the largest share averages about 0.3; uniform = 0.012.
    assert 0.15 < np.mean(maxima) < 0.5


def test_shaped_dirichlet_alphas_by_hand() -> None:
    # log min(0.01, P): [ln .01, ln .01, ln .001, ln .0001], mean -6.3321; above it: 1.7269 twice, 0
    # twice; so the shaped half goes 1/2, 1/2, 0, 0 and the alphas are 4 (0.5 (shaped + 1/4)).
    priors = np.array([0.5, 0.3, 0.001, 0.0001])
    np.testing.assert_allclose(dirichlet_alphas(priors, 4.0, True), [1.5, 1.5, 0.5, 0.5], rtol=1e-6)
    np.testing.assert_allclose(dirichlet_alphas(priors, 4.0, False), [1.0, 1.0, 1.0, 1.0])
    # Every prior at or above 0.01 (or all equal): nothing stands out, uniform.
    np.testing.assert_allclose(dirichlet_alphas(np.array([0.2, 0.3, 0.5]), 3.0, True), [1.0, 1.0, 1.0])
    # A move far above the hopeless mass but below 1%: shaped noise gives it more than the uniform
    # share, the hopeless ones less.
    priors = np.array([0.9, 0.09, 0.005] + [1e-6] * 47)
    shaped = dirichlet_alphas(priors, 10.83, True)
    assert shaped.sum() == pytest.approx(10.83)
    assert shaped[2] > 3 * 10.83 / 50 and shaped[3] < 10.83 / 50


def test_shaped_noise_lands_where_its_alphas_say() -> None:
    # Noise weight just below 1, temperature 1: each root prior is a Dirichlet share, whose mean is
    # alpha_k / total; 300 seeded searches of the empty 9x9 under a fixed one-hot-ish policy.
    board = Board(9)
    legal = board.legal_moves()
    expected = dirichlet_alphas(softmax_over(Peaked().logits, legal)[legal], 10.83, True) / 10.83
    means = np.zeros(82)
    for seed in range(300):
        tree = Tree(NNCache(0, 81), noise_weight=0.999, root_policy_temperature=1.0, shaped_noise=True, seed=seed)
        run(board, Peaked(), 1, tree=tree, noise=True)
        means += tree.root_priors() / 300
    # The three favoured moves get 4x the share of the 79 others on average (by hand: 0.5 (1/3 +
    # 1/82) = 0.1728 each against 0.5 / 82 = 0.0061).
    assert expected[:3] == pytest.approx([0.1728] * 3, abs=1e-4)
    assert means[:3] == pytest.approx(expected[:3], abs=0.04)
    assert means[3:81].mean() == pytest.approx(0.5 / 82, rel=0.25)


@pytest.mark.parametrize(("turns", "temperature"), [(0, 1.25), (9, 1.175), (18, 1.1375)])
def test_root_temperature_decays_with_a_half_life_of_the_board_side(turns: int, temperature: float) -> None:
    boards = random_position(9, turns, seed=3) if turns else [Board(9)]
    tree = Tree(NNCache(100, 81), noise_weight=0.0, root_policy_temperature=1.1, root_policy_temperature_early=1.25)
    run(boards[-1], Hashed(), 10, tree=tree, noise=True)
    assert tree.root_temperature == pytest.approx(temperature)
    raw = tree.raw_policy().astype(np.float64)
    tempered = raw ** (1 / temperature)
    np.testing.assert_allclose(tree.root_priors(), tempered / tempered.sum(), rtol=1e-5, atol=1e-8)


def test_symmetry_index_is_the_dihedral_group() -> None:
    # 9x9, point (x=1, y=2) = index 19: its 8 images, by hand.
    images = [symmetry_index(s, 19, 9, 9) for s in range(8)]
    assert images == [19, 2 * 9 + 7, 6 * 9 + 1, 6 * 9 + 7, 1 * 9 + 2, 1 * 9 + 6, 7 * 9 + 2, 7 * 9 + 6]
    assert symmetry_index(5, 81, 9, 9) == 81  # pass
    assert [symmetry_index(s, 0, 9, 7) for s in range(4)] == [0, 8, 54, 62]  # 9 wide, 7 high
    with pytest.raises(ValueError):
        symmetry_index(4, 0, 9, 7)  # a rectangle has no transpose


def _game(moves: list[int], size: int, sym: int = 0) -> list[Board]:
    boards = [Board(size)]
    for move in moves:
        board = boards[-1].copy()
        board.play(symmetry_index(sym, move, size, size))
        boards.append(board)
    return boards


@pytest.mark.parametrize(("leaves", "width", "height", "side"), [(1, 9, 9, 9), (8, 9, 9, 9), (8, 9, 9, 13),
                                                                 (8, 9, 7, 13), (4, 7, 11, 11)])
def test_random_symmetry_with_an_equivariant_net_changes_no_visit(leaves: int, width: int, height: int,
                                                                  side: int) -> None:
    # The same search, symmetry off and on: identical visits and values (the net commutes with the
    # symmetries, so only a wrong mapping of features or policy would show). side > the board: the
    # board in a larger buffer's corner, as a runner of mixed board sizes writes it; rectangles have
    # only the 4 mirrorings, and a swapped width and height would show there.
    area = width * height
    moves = [int(m) for m in np.random.default_rng(5).permutation(area)[:7]]
    history = [Board(width, height)]
    for move in moves:
        history.append(history[-1].copy())
        history[-1].play(move)
    results = []
    for symmetric in (False, True):
        evaluator = Equivariant()
        tree = Tree(NNCache(10000, area), random_symmetry=symmetric, seed=3)
        tree.set_position(history[-1], history[-2], history[-3])
        tree.start_search(300)
        spatial, global_inputs = buffers(leaves, side)
        while not tree.done:
            n = tree.select_leaves(leaves, spatial, global_inputs)
            if n:
                out = evaluator.evaluate(spatial[:n], global_inputs[:n])
                tree.backup(out["policy"], out["value"], out["score"])
        results.append(read_result(tree))
        tree.check()
    off, on = results
    np.testing.assert_array_equal(off.moves, on.moves)
    np.testing.assert_array_equal(off.visits, on.visits)
    np.testing.assert_allclose(off.priors, on.priors, rtol=1e-5)
    assert on.root_utility == pytest.approx(off.root_utility, abs=1e-9)


def test_random_symmetry_reads_an_asymmetric_net_through_the_drawn_symmetry() -> None:
    # Hashed is no function of the board's symmetry class: the root's raw policy must be exactly
    # the net's policy under one of the 8 symmetries, mapped back, and the draw must vary by seed.
    history = _game([40, 30, 22, 50], 9)
    board = history[-1]
    legal = board.legal_moves()
    sp = np.zeros((1, NUM_SPATIAL, 9, 9), np.float32)
    gl = np.zeros((1, NUM_GLOBAL), np.float32)
    features.encode(board, sp[0], gl[0], history[-2], history[-3])
    candidates = []
    for s in range(8):
        moved = np.zeros_like(sp)
        for i in range(81):
            j = symmetry_index(s, i, 9, 9)
            moved[0, :, j // 9, j % 9] = sp[0, :, i // 9, i % 9]
        logits = Hashed().evaluate(moved, gl)["policy"][0]
        candidates.append(softmax_over(logits[[symmetry_index(s, i, 9, 9) for i in range(82)]], legal))
    drawn = set()
    for seed in range(24):
        tree = Tree(NNCache(0, 81), random_symmetry=True, seed=seed)
        run(board, Hashed(), 1, prev1=history[-2], prev2=history[-3], tree=tree)
        raw = tree.raw_policy().astype(np.float64)
        match = [s for s in range(8) if np.allclose(raw, candidates[s], rtol=1e-4, atol=1e-7)]
        assert len(match) == 1, f"seed {seed}: the policy is no symmetry's"
        drawn.add(match[0])
    assert len(drawn) >= 6


def test_a_mirrored_transposition_is_a_cache_hit_mapped_back() -> None:
    # The same game played rotated (symmetry 6: transpose, then mirror y): with random symmetry its
    # root is a hit of the first game's entry, its policy that entry mapped.
    moves = [40, 12, 30, 58, 3]
    for sym in range(1, 8):
        cache = NNCache(1000, 81)
        first, rotated = _game(moves, 9), _game(moves, 9, sym)
        tree = Tree(cache, random_symmetry=True, seed=0)
        run(first[-1], Hashed(), 1, prev1=first[-2], prev2=first[-3], tree=tree)
        policy = tree.raw_policy().copy()
        evaluator = Hashed()
        tree = Tree(cache, random_symmetry=True, seed=1)
        run(rotated[-1], evaluator, 1, prev1=rotated[-2], prev2=rotated[-3], tree=tree)
        assert evaluator.batches == [], f"symmetry {sym}: not a hit"
        mapped = tree.raw_policy()
        np.testing.assert_allclose([mapped[symmetry_index(sym, i, 9, 9)] for i in range(82)], policy, rtol=1e-6)
    # Without random symmetry the rotated game is a miss (the key is not canonical).
    cache = NNCache(1000, 81)
    run(_game(moves, 9)[-1], Hashed(), 1, tree=Tree(cache, seed=0))
    evaluator = Hashed()
    run(_game(moves, 9, 6)[-1], evaluator, 1, tree=Tree(cache, seed=0))
    assert len(evaluator.batches) == 1


def _ending_position() -> Board:
    """7x7, Black to move: a one-eyed Black ring around (2, 2); Black stones at (5, 1) and (5, 3)
    with (5, 2) between them; a White stone at (5, 5)."""
    ring = [(1, 1), (2, 1), (3, 1), (1, 2), (3, 2), (1, 3), (2, 3), (3, 3), (5, 1), (5, 3)]
    board = Board(7)
    for i, (x, y) in enumerate(ring):
        board.play(y * 7 + x)
        board.play(5 * 7 + 5 if i == 0 else board.pass_move)
    return board


def test_ending_bias_by_hand() -> None:
    own = np.zeros(49)
    own[2 * 7 + 2] = 1.0    # Black's own eye, touching only its own chain: -0.5
    own[2 * 7 + 5] = 1.0    # joins two Black chains that are not pass-alive: free
    own[4 * 7 + 5] = 0.98   # touches the White stone: free
    own[6 * 7 + 0] = -0.97  # White's: -0.5 (0.02 / 0.05) = -0.2
    own[6 * 7 + 6] = -1.0   # White's: -0.5
    own[4 * 7 + 4] = 0.5    # nobody's for sure: free
    expected = np.zeros(50)
    expected[2 * 7 + 2], expected[6 * 7 + 0], expected[6 * 7 + 6] = -0.5, -0.2, -0.5
    board = _ending_position()
    cache = NNCache(1000, 49, ownership=True)
    tree = Tree(cache, ending_bonus_points=0.5)
    run(board, Owner(own), 20, tree=tree)
    np.testing.assert_allclose(tree.root_ending_bonus(), expected, atol=1e-6)
    # The root found in the cache keeps its ownership; a cache that does not keep it gives none.
    evaluator = Owner(own)
    tree = Tree(cache, ending_bonus_points=0.5)
    run(board, evaluator, 1, tree=tree)
    np.testing.assert_allclose(tree.root_ending_bonus(), expected, atol=1e-6)
    plain = NNCache(1000, 49)
    run(board, Owner(own), 20, tree=Tree(plain))
    tree = Tree(plain, ending_bonus_points=0.5)
    run(board, Owner(own), 1, tree=tree)
    assert not tree.root_ending_bonus().any()
    # Off: no bias.
    tree = Tree(NNCache(0, 49))
    run(board, Owner(own), 20, tree=tree)
    assert not tree.root_ending_bonus().any()


def test_ending_bias_reads_ownership_through_the_drawn_symmetry() -> None:
    board = _ending_position()
    biases = []
    for symmetric in (False, True):
        for seed in range(4):
            tree = Tree(NNCache(0, 49), ending_bonus_points=0.5, random_symmetry=symmetric, seed=seed)
            run(board, Owner(), 8, tree=tree)
            biases.append(tree.root_ending_bonus())
    assert biases[0][2 * 7 + 2] == pytest.approx(-0.5)  # four Black neighbours: ownership 1
    for bias in biases[1:]:
        np.testing.assert_allclose(bias, biases[0], atol=1e-6)


def test_ending_bias_moves_visits_off_surely_owned_points() -> None:
    # Every move equal to the net; White surely owns the bottom three rows: with the bias the
    # search spends fewer visits there, without it about as many as elsewhere.
    own = np.zeros(49)
    own[4 * 7:] = -1.0
    board = Board(7)
    shares = []
    for bonus in (0.0, 0.5):
        result = run(board, Owner(own), 400, tree=Tree(NNCache(1000, 49, ownership=True), ending_bonus_points=bonus))
        visits = np.zeros(50)
        visits[result.moves] = result.visits
        shares.append(visits[4 * 7:49].mean() / visits[:4 * 7].mean())
    assert shares[0] > 0.8 and shares[1] < 0.75 * shares[0]


def softmax_over(logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    out = np.where(legal, np.exp(logits - logits[legal].max()), 0.0)
    return out / out.sum()


def test_score_utility_table_against_numerical_integration() -> None:
    rng = np.random.default_rng(0)
    x = np.linspace(-130, 130, 65001)
    for _ in range(60):
        m = rng.uniform(-6, 6) if rng.random() < 0.8 else rng.uniform(-60, 60)
        s = rng.uniform(0.01, 5.5)
        density = np.exp(-0.5 * ((x - m) / s) ** 2)
        reference = np.trapz((2 / np.pi) * np.arctan(x) * density, x) / np.trapz(density, x)
        assert expected_atan(m, s) == pytest.approx(reference, abs=3e-4)
    assert expected_atan(0.7, 0.0) == pytest.approx((2 / np.pi) * np.arctan(0.7), abs=1e-6)
    assert expected_atan(1e9, 2.0) == pytest.approx(1.0, abs=1e-6)
    assert expected_atan(-2.0, 1.0) == pytest.approx(-expected_atan(2.0, 1.0), abs=1e-12)


def test_nn_cache_hits_replace_evaluations() -> None:
    board = random_position(9, 10, seed=4)[-1]
    cache = NNCache(5000, 81)
    first_eval, second_eval = Hashed(), Hashed()
    # One leaf at a time, so the first search takes the same path as the second, which never
    # waits for an evaluation (no virtual loss).
    first = run(board, first_eval, 200, tree=Tree(cache, seed=0), leaves_per_batch=1)
    misses = cache.misses
    second = run(board, second_eval, 200, tree=Tree(cache, seed=0), leaves_per_batch=1)
    assert second_eval.batches == []  # every leaf came from the cache
    assert cache.misses == misses and cache.hits >= 199
    np.testing.assert_array_equal(first.visits, second.visits)
    assert second.win == pytest.approx(first.win)
    # A different komi is a different key.
    other = Board(9, komi=6.5)
    for color, move in board.history:
        other.to_move = color
        other.play(move)
    third_eval = Hashed()
    run(other, third_eval, 20, tree=Tree(cache, seed=0))
    assert third_eval.batches


def test_nn_cache_evicts_the_least_recently_used() -> None:
    cache = NNCache(2, 81)
    a, b, c = (random_position(9, 3, seed=s)[-1] for s in (1, 2, 3))

    def probe(board: Board) -> bool:
        hits = cache.hits
        run(board, Uniform(), 1, tree=Tree(cache, seed=0))
        return cache.hits > hits

    assert not probe(a) and not probe(b)
    assert probe(a)  # a is now more recent than b
    assert not probe(c)  # evicts b
    assert len(cache) == 2
    assert probe(a) and probe(c)
    assert not probe(b)  # evicts a (least recently used)
    assert not probe(a)


def test_tiny_cache_under_heavy_eviction_stays_consistent() -> None:
    cache = NNCache(37, 81)
    for seed in range(6):
        tree = Tree(cache, seed=seed)
        run(random_position(9, 8 + seed, seed)[-1], Hashed(), 150, tree=tree, noise=seed % 2 == 1)
        tree.check()
        assert len(cache) == 37


def test_leaf_features_match_the_encoder_with_real_history() -> None:
    history = random_position(9, 24, seed=9)
    board, prev1, prev2 = history[-1], history[-2], history[-3]
    tree = Tree(NNCache(0, 81), seed=0)
    tree.set_position(board, prev1, prev2)
    tree.start_search(120)
    spatial, global_inputs = buffers(8, 11)  # a larger buffer: the board sits top-left
    evaluator = Hashed()
    checked = 0
    while not tree.done:
        n = tree.select_leaves(8, spatial, global_inputs)
        for row, path in enumerate(tree.pending_paths()):
            line = [prev2, prev1, board]
            for move in path:
                nxt = line[-1].copy()
                nxt.play(move)
                line.append(nxt)
            want_sp = np.zeros((NUM_SPATIAL, 11, 11), np.float32)
            want_gl = np.zeros(NUM_GLOBAL, np.float32)
            features.encode(line[-1], want_sp, want_gl, line[-2], line[-3])
            np.testing.assert_array_equal(spatial[row], want_sp)
            np.testing.assert_array_equal(global_inputs[row], want_gl)
            checked += 1
        out = evaluator.evaluate(spatial[:n], global_inputs[:n])
        tree.backup(out["policy"], out["value"], out["score"])
    assert checked == sum(len(s) for s, _ in evaluator.batches) > 60  # the rest: terminal visits
    assert any(s[:, 13].any() for s, _ in evaluator.batches)  # ladder history was exercised


def test_ladder_history_at_the_start_of_a_game_repeats_the_oldest_position() -> None:
    start = Board(9)
    tree = Tree(NNCache(0, 81), seed=0)
    tree.set_position(start)
    tree.start_search(30)
    spatial, global_inputs = buffers(30, 9)
    n = tree.select_leaves(1, spatial, global_inputs)
    want_sp = np.zeros((NUM_SPATIAL, 9, 9), np.float32)
    want_gl = np.zeros(NUM_GLOBAL, np.float32)
    features.encode(start, want_sp, want_gl)
    np.testing.assert_array_equal(spatial[0], want_sp)
    assert n == 1


def test_advance_keeps_the_subtree_as_a_visit_cap() -> None:
    history = random_position(9, 15, seed=12)
    board, prev1 = history[-1], history[-2]
    evaluator = Hashed()
    tree = Tree(NNCache(0, 81), seed=0)
    result = run(board, evaluator, 200, tree=tree, prev1=prev1)
    move = result.best_move()
    kept = int(result.visits[list(result.moves).index(move)])
    grandchildren = tree.children([move])
    tree.advance(move)
    tree.check()
    assert tree.visits == kept
    np.testing.assert_array_equal(tree.children()["visits"], grandchildren["visits"])
    # A fast search with reuse adds only what the cap still allows.
    tree.start_search(kept + 10, reuse=True)
    spatial, global_inputs = buffers(4, 9)
    evaluated = 0
    after, before = board.copy(), board
    after.play(move)
    while not tree.done:
        n = tree.select_leaves(4, spatial, global_inputs)
        for row, path in enumerate(tree.pending_paths()):  # history features still right
            line = [prev1, before, after]
            for m in path:
                nxt = line[-1].copy()
                nxt.play(m)
                line.append(nxt)
            want_sp = np.zeros((NUM_SPATIAL, 9, 9), np.float32)
            want_gl = np.zeros(NUM_GLOBAL, np.float32)
            features.encode(line[-1], want_sp, want_gl, line[-2], line[-3])
            np.testing.assert_array_equal(spatial[row], want_sp)
        evaluated += n
        out = evaluator.evaluate(spatial[:n], global_inputs[:n])
        tree.backup(out["policy"], out["value"], out["score"])
    assert tree.visits == kept + 10 and evaluated == 10
    tree.check()
    # Searching the cap again costs nothing.
    tree.start_search(kept, reuse=True)
    assert tree.done


def test_select_batch_packs_trees_of_different_sizes() -> None:
    boards = [random_position(9, 10, 1)[-1], random_position(7, 6, 2)[-1], random_position(9, 3, 3)[-1]]
    alone = [run(b, Hashed(), 50, tree=Tree(NNCache(0, 81), seed=0), leaves_per_batch=2) for b in boards]
    trees = []
    for b in boards:
        tree = Tree(NNCache(0, 81), seed=0)
        tree.set_position(b)
        tree.start_search(50)
        trees.append(tree)
    spatial, global_inputs = buffers(2 * len(trees), 9)
    evaluator = Hashed()
    while not all(t.done for t in trees):
        counts = select_batch(trees, spatial, global_inputs, 2)
        total = int(counts.sum())
        out = evaluator.evaluate(spatial[:total], global_inputs[:total])
        backup_batch(trees, counts, out["policy"], out["value"], out["score"])
    for tree, expected in zip(trees, alone):
        got = read_result(tree)
        np.testing.assert_array_equal(got.moves, expected.moves)
        np.testing.assert_array_equal(got.visits, expected.visits)


def test_bad_input_is_refused() -> None:
    tree = Tree(NNCache(10, 81))
    spatial, global_inputs = buffers(4, 9)
    with pytest.raises(RuntimeError):
        tree.select_leaves(1, spatial, global_inputs)
    tree.set_position(Board(9))
    with pytest.raises(RuntimeError):
        tree.select_leaves(1, spatial, global_inputs)
    with pytest.raises(ValueError):
        tree.start_search(0)
    tree.start_search(10)
    with pytest.raises(ValueError):
        tree.select_leaves(1, *buffers(4, 7))  # buffer smaller than the board
    with pytest.raises(ValueError):
        tree.select_leaves(5, spatial, global_inputs)  # more leaves than rows
    n = tree.select_leaves(1, spatial, global_inputs)
    with pytest.raises(ValueError):
        tree.backup(np.zeros((n, 50), np.float32), np.zeros((n, 3), np.float32), np.zeros((n, 2), np.float32))
    with pytest.raises(RuntimeError):
        tree.start_search(10)  # evaluations pending
    over = Board(9)
    over.play(over.pass_move)
    over.play(over.pass_move)
    tree2 = Tree(NNCache(10, 81))
    tree2.set_position(over)
    with pytest.raises(ValueError):
        tree2.start_search(10)
    with pytest.raises(ValueError):
        Tree(NNCache(10, 81), cpuct=0.0)
    with pytest.raises(ValueError):
        NNCache(-1)
