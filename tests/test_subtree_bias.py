"""Subtree value bias correction in the Cython MCTS (tengen.search.mcts, KataGo's "other methods"):
hand-computed corrections on scripted searches, the bookkeeping's invariants, and that it is off
at factor 0."""
from __future__ import annotations

import math

import numpy as np
import pytest
from test_search import SEMEAI, Hashed, random_position

from tengen.config import SearchConfig
from tengen.go.board import BLACK, WHITE, Board
from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL
from tengen.search.mcts import Tree
from tengen.search.nn_cache import NNCache
from tengen.search.single_search import new_tree, run

LAMBDA, ALPHA = 0.35, 0.8  # KataGo's values


class Scripted:
    """A 'net' read from a script of move sequences from the empty 9x9 board: each position
    (recognised by its stones: no captures in a script) gets logit 0 at its listed moves and -30
    elsewhere and at pass, and a utility u from Black's view (value P(win) = (1 + u) / 2 for the
    player to move with Black's u turned round for White, no draws, score 0). A position that is
    not in the script fails the test."""

    def __init__(self, script: dict[tuple[int, ...], tuple[tuple[int, ...], float]]) -> None:
        self.table = {(frozenset(line[0::2]), frozenset(line[1::2])): entry for line, entry in script.items()}

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        n, _, h, w = spatial.shape
        policy = np.full((n, h * w + 1), -30.0, np.float32)
        value = np.full((n, 3), -60.0, np.float32)
        for i in range(n):
            own = frozenset(np.flatnonzero(spatial[i, 1].ravel()).tolist())
            opp = frozenset(np.flatnonzero(spatial[i, 2].ravel()).tolist())
            black_to_move = len(own) == len(opp)
            moves, u = self.table[(own, opp) if black_to_move else (opp, own)]
            policy[i, list(moves)] = 0.0
            u_mover = u if black_to_move else -u
            value[i, :2] = math.log((1 + u_mover) / 2), math.log((1 - u_mover) / 2)
        return {"policy": policy, "value": value, "score": np.zeros((n, 2), np.float32)}


def scripted_tree(factor: float = LAMBDA, fpu_reduction: float = 10.0) -> Tree:
    """No NN cache, utility without the score term; a large FPU reduction keeps every search on the
    script's moves (an unvisited move is worth the parent's value minus that)."""
    return Tree(NNCache(0, 81), fpu_reduction=fpu_reduction, score_utility_weight=0.0,
                subtree_bias_factor=factor, subtree_bias_exponent=ALPHA)


def node_at(state: dict, path: tuple[int, ...]) -> int:
    """Index of the node reached by the move indices `path` in a subtree_bias_state()."""
    ni = 0
    for move in path:
        (ni,) = np.flatnonzero((state["parent"] == ni) & (state["move"] == move))
    return int(ni)


def step_search(tree: Tree, evaluator, visits: int) -> list[tuple[list[int], dict]]:
    """Search the empty 9x9 board one leaf at a time; (leaf path, state after its backup) per leaf."""
    tree.set_position(Board(9))
    tree.start_search(visits)
    spatial = np.zeros((1, NUM_SPATIAL, 9, 9), np.float32)
    global_inputs = np.zeros((1, NUM_GLOBAL), np.float32)
    out = []
    while not tree.done:
        assert tree.select_leaves(1, spatial, global_inputs) == 1
        (path,) = tree.pending_paths()
        evaluation = evaluator.evaluate(spatial, global_inputs)
        tree.backup(evaluation["policy"], evaluation["value"], evaluation["score"])
        out.append((path, tree.subtree_bias_state()))
    return out


def test_a_single_line_by_hand() -> None:
    # The policy forces the line 40, 0, 80 from the empty board; Black's utilities by the net:
    # root 0, n1 (after 40) 0.1, n2 (after 0) 0.5, n3 (after 80) -0.3. Every node is alone in its
    # bucket, so ObsBias = its own ObsError. Four visits:
    #   visit 2: n1 evaluated, NodeUtility 0.1 (empty bucket).
    #   visit 3: n2 evaluated, NodeUtility 0.5; walking up, n1 has 1 child visit:
    #     ObsError(n1) = 0.5 - 0.1 = 0.4, NodeUtility(n1) = 0.1 + 0.35 * 0.4 = 0.24,
    #     u_sum(n1) = 0.24 + 0.5 = 0.74.
    #   visit 4: n3 evaluated, NodeUtility -0.3: u_sum(n2) = 0.5 - 0.3 = 0.2, u_sum(n1) = 0.44. Up:
    #     n2: ObsError = (0.2 - 0.5) / 1 - 0.5 = -0.8, NodeUtility = 0.5 + 0.35 * -0.8 = 0.22,
    #         u_sum(n2) = 0.22 - 0.3 = -0.08 (change -0.28, carried up);
    #     n1: u_sum = 0.44 - 0.28 = 0.16, ObsError = (0.16 - 0.24) / 2 - 0.1 = -0.14 (weight 2^0.8,
    #         alone), NodeUtility = 0.1 + 0.35 * -0.14 = 0.051, u_sum(n1) = 0.051 - 0.08 = -0.029.
    # Root child 40 (Black's view): -0.029 / 3; n1's child 0 (White's view): 0.08 / 2 = 0.04;
    # n2's child 80 (Black's view): -0.3. Without the correction: 0.1, -0.1 and -0.3.
    script = {(): ((40,), 0.0), (40,): ((0,), 0.1), (40, 0): ((80,), 0.5), (40, 0, 80): ((1,), -0.3)}
    for factor, expected in ((0.0, (0.1, -0.1, -0.3)), (LAMBDA, (-0.029 / 3, 0.04, -0.3))):
        tree = scripted_tree(factor)
        run(Board(9), Scripted(script), 4, tree=tree, leaves_per_batch=1)
        got = [tree.children(path) for path in ((), (40,), (40, 0))]
        assert [c["moves"].tolist() for c in got] == [[40], [0], [80]]
        assert [c["visits"].tolist() for c in got] == [[3], [2], [1]]
        assert [float(c["utility"][0]) for c in got] == pytest.approx(expected, abs=1e-6)
    state = tree.subtree_bias_state()  # of the corrected search
    nodes = [node_at(state, path) for path in ((), (40,), (40, 0), (40, 0, 80))]
    assert state["node_utility"][nodes].tolist() == pytest.approx([0.0, 0.051, 0.22, -0.3], abs=1e-6)
    assert state["nn_utility"][nodes].tolist() == pytest.approx([0.0, 0.1, 0.5, -0.3], abs=1e-6)
    assert state["weight"][nodes].tolist() == pytest.approx([0.0, 2 ** ALPHA, 1.0, 0.0])


# Two branches that meet the same local fight: Black opens in a far corner (A1 = 0 or B1 = 80),
# then White 40, Black 49, White 31, Black 39 in the centre, out of reach of both corners' 5x5.
A1, B1, L1, L2, L3, L4 = 0, 80, 40, 49, 31, 39


class TwoBranches(Scripted):
    """Utility 0 everywhere except after L3: -0.4 in A's branch, 0.2 in B's; at the root A1 has a
    slightly higher prior than B1, so the search opens with A1."""

    def __init__(self) -> None:
        script = {(): ((A1, B1), 0.0)}
        for first, after_l3 in ((A1, -0.4), (B1, 0.2)):
            line = (first, L1, L2, L3, L4)
            for depth in range(1, 6):
                script[line[:depth]] = ((line[depth],) if depth < 5 else (1,), after_l3 if depth == 4 else 0.0)
        super().__init__(script)

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        out = super().evaluate(spatial, global_inputs)
        out["policy"][spatial[:, 1:3].sum(axis=(1, 2, 3)) == 0, B1] = -0.01
        return out


def test_a_bias_seen_in_one_branch_corrects_the_other() -> None:
    # The root's FPU reduction of 1.35 keeps B1 unvisited until A's line has 5 visits, then the
    # search turns to B's line (the order is checked first).
    steps = step_search(scripted_tree(fpu_reduction=1.35), TwoBranches(), 10)
    a_line, b_line = [A1, L1, L2, L3, L4], [B1, L1, L2, L3]
    assert [path for path, _ in steps] == [[]] + [a_line[:d] for d in range(1, 6)] + [b_line[:d] for d in range(1, 5)]
    state = steps[-1][1]
    xa, za, xb, wb = (node_at(state, path) for path in ((A1, L1, L2), (A1, L1, L2, L3), (B1, L1, L2), (B1, L1, L2, L3)))
    ya, yb = node_at(state, (A1, L1)), node_at(state, (B1, L1))
    buckets = state["bucket"]
    assert buckets[xa] == buckets[xb] and buckets[za] == buckets[wb]  # same last two moves and 5x5
    assert buckets[ya] != buckets[yb] and len({buckets[xa], buckets[za], buckets[ya], buckets[yb]}) == 4
    # A's line after its 5th visit (Z = A1 L1 L2 L3, net -0.4, one child at 0):
    #   ObsError(Z) = 0 - (-0.4) = 0.4 (weight 1): NodeUtility(Z) = -0.4 + 0.35 * 0.4 = -0.26;
    #   X = A1 L1 L2 (net 0, 2 child visits): ObsError(X) = -0.26 / 2 - 0 = -0.13 (weight 2^0.8),
    #   NodeUtility(X) = 0.35 * -0.13 = -0.0455.
    err_xa = -0.13
    after_xb = steps[8][1]  # B's line reaches X's bucket from the other corner:
    assert after_xb["node_utility"][xb] == pytest.approx(LAMBDA * err_xa, abs=1e-6)  # -0.0455, net 0
    assert after_xb["u_sum"][xb] == pytest.approx(LAMBDA * err_xa, abs=1e-6)
    # B's next visit evaluates W = B1 L1 L2 L3 (net 0.2) in Z's bucket: NodeUtility(W) =
    # 0.2 + 0.35 * 0.4 = 0.34; then X_B has one child visit: ObsError = 0.34 (weight 1), and X's
    # bucket holds (-0.13 * 2^0.8 + 0.34 * 1) / (2^0.8 + 1) = 0.0414638..., so
    # NodeUtility(X_B) = 0.35 * 0.0414638 = 0.0145123.
    w = 2 ** ALPHA
    bias_x = (err_xa * w + 0.34) / (w + 1)
    assert state["node_utility"][wb] == pytest.approx(0.34, abs=1e-6)
    assert state["node_utility"][xb] == pytest.approx(LAMBDA * bias_x, abs=1e-6)
    assert LAMBDA * bias_x == pytest.approx(0.0145123, abs=1e-7)
    assert state["u_sum"][xb] == pytest.approx(LAMBDA * bias_x + 0.34, abs=1e-6)
    # X_A is off that path: its NodeUtility stays what its last visit set (stale, as in KataGo).
    assert state["node_utility"][xa] == pytest.approx(LAMBDA * err_xa, abs=1e-6)
    (slot,) = np.flatnonzero(state["bucket_keys"] == buckets[xa])
    assert state["bucket_error_weight"][slot] == pytest.approx(err_xa * w + 0.34, abs=1e-6)
    assert state["bucket_weight"][slot] == pytest.approx(w + 1)


class OneMove:
    """Policy all on one move index wherever it is legal, value and score 0."""

    def __init__(self, move: int) -> None:
        self.move = move

    def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
        n, _, h, w = spatial.shape
        policy = np.full((n, h * w + 1), -30.0, np.float32)
        policy[:, self.move] = 0.0
        return {"policy": policy, "value": np.zeros((n, 3), np.float32), "score": np.zeros((n, 2), np.float32)}


def bucket_after(board: Board, move: int) -> int:
    """The bucket of the node a search reaches by `move` from `board` (whose history counts)."""
    tree = Tree(NNCache(0, 81), subtree_bias_factor=LAMBDA)
    run(board, OneMove(move), 2, tree=tree, leaves_per_batch=1)
    state = tree.subtree_bias_state()
    return int(state["bucket"][node_at(state, (move,))])


def played(moves: list[int], diagram: str | None = None, to_move: int = BLACK) -> Board:
    board = Board(9) if diagram is None else Board.from_diagram(diagram, to_move=to_move)
    for move in moves:
        board.play(move)
    return board


def test_buckets_are_the_last_moves_and_the_5x5_around_the_last() -> None:
    # Black's last move at 40 = (4, 4): its 5x5 spans columns and rows 2..6.
    def key(first: int, prev: int) -> int:
        return bucket_after(played([first, prev]), 40)

    assert key(0, 8) == key(80, 8)  # a stone outside the 5x5 does not count
    assert key(0, 8) != key(20, 8) and key(0, 8) != key(60, 8)  # corners of it do: (2, 2), (6, 6)
    assert key(0, 8) != key(0, 72)  # the move before last (both outside the 5x5)
    # Which stones in the 5x5 are in atari: White (6, 6) at its corner loses a liberty to Black
    # (7, 6) just outside it; a Black stone elsewhere outside changes nothing.
    corner = "\n".join("".join("O" if (x, y) == (6, 6) else "X" if (x, y) in ((5, 6), (6, 5)) else "."
                               for x in range(9)) for y in range(9))
    plain = bucket_after(played([8], corner, WHITE), 40)
    assert bucket_after(played([61, 8], corner, BLACK), 40) != plain  # (7, 6): White (6, 6) in atari
    assert bucket_after(played([44, 8], corner, BLACK), 40) == plain  # (8, 4)
    # The ko ban: Black 40 takes White (3, 4) in a ko, or plays the same shape with (3, 4) empty.
    ko = """
    . . . . . . . . .
    . . . . . . . . .
    . . . . . . . . .
    . . . X O . . . .
    . . X O . O . . .
    . . . X O . . . .
    . . . . . . . . .
    . . . . . . . . .
    . . . . . . . . .
    """
    taken = played([80], ko, WHITE)
    same_shape = played([80], ko.replace("X O . O", "X . . O"), WHITE)
    assert bucket_after(taken, 40) != bucket_after(same_shape, 40)
    # After a pass: no pattern, but who passed counts.
    assert bucket_after(played([0, 40]), 81) == bucket_after(played([80, 40]), 81)
    assert bucket_after(played([0, 40]), 81) != bucket_after(played([40]), 81)


def check_invariants(tree: Tree) -> dict:
    """u_sum = NodeUtility + the children's u_sum at every evaluated node (visits x NodeUtility at a
    terminal one), bucket sums = the sums of their nodes' shares, weights = (child visits)^alpha."""
    tree.check()
    state = tree.subtree_bias_state()
    parent, u_sum, node_u = state["parent"], state["u_sum"], state["node_utility"]
    children_u = np.zeros_like(u_sum)
    np.add.at(children_u, parent[1:], u_sum[1:])
    terminal = state["terminal"]
    np.testing.assert_allclose(u_sum[~terminal], (node_u + children_u)[~terminal], rtol=0, atol=1e-9)
    np.testing.assert_allclose(u_sum[terminal], (state["visits"] * node_u)[terminal], rtol=0, atol=1e-9)
    bucket, weight = state["bucket"], state["weight"]
    assert bucket[0] == 0 and weight[0] == 0 and node_u[0] == state["nn_utility"][0]  # the root has none
    assert (bucket[terminal] == 0).all() and (bucket[1:][~terminal[1:]] != 0).all()
    shared = weight > 0
    assert set(state["bucket_keys"].tolist()) == set(bucket[shared].tolist())
    for key, err_w, weight_sum in zip(state["bucket_keys"], state["bucket_error_weight"], state["bucket_weight"]):
        members = bucket == key
        assert err_w == pytest.approx(state["error_weight"][members].sum(), abs=1e-9)
        assert weight_sum == pytest.approx(weight[members].sum(), abs=1e-9)
    child_visits = weight[shared] ** (1 / ALPHA)  # as of each node's last visit: at most now
    np.testing.assert_allclose(child_visits, np.round(child_visits), atol=1e-6)
    assert (np.round(child_visits) >= 1).all() and (np.round(child_visits) <= state["visits"][shared] - 1).all()
    return state


@pytest.mark.parametrize("position", ["random 9x9", "semeai 7x7"])
def test_bookkeeping_invariants_after_a_long_search_and_tree_reuse(position: str) -> None:
    # The semeai's search ends games: terminal nodes, revisited.
    board = random_position(9, 12, seed=5)[-1] if position == "random 9x9" else Board.from_diagram(SEMEAI, komi=7.5)
    side = board.x_size
    tree = Tree(NNCache(4096, side * side), subtree_bias_factor=LAMBDA, subtree_bias_exponent=ALPHA, seed=2)
    result = run(board, Hashed(), 1500, tree=tree, noise=True, leaves_per_batch=8)
    state = check_invariants(tree)
    counts = np.unique(state["bucket"][state["weight"] > 0], return_counts=True)[1]
    assert counts.max() >= 2  # buckets are shared
    assert np.abs(state["node_utility"] - state["nn_utility"]).max() > 0.01  # and correct something
    if position == "semeai 7x7":
        assert (state["visits"][state["terminal"]] > 1).any()
    # Tree reuse: the kept subtree's shares rebuild the buckets, its new root loses its correction.
    tree.advance(result.best_move())
    state = check_invariants(tree)
    assert state["visits"][0] > 1 and len(state["bucket_keys"]) > 0
    _search_reused(tree, 2500, side)
    check_invariants(tree)


def _search_reused(tree: Tree, visits: int, side: int) -> None:
    """Search the kept tree on to `visits`, 8 leaves a batch, with the Hashed net."""
    tree.start_search(visits, reuse=True)
    spatial = np.zeros((8, NUM_SPATIAL, side, side), np.float32)
    global_inputs = np.zeros((8, NUM_GLOBAL), np.float32)
    net = Hashed()
    while not tree.done:
        n = tree.select_leaves(8, spatial, global_inputs)
        if n:
            out = net.evaluate(spatial[:n], global_inputs[:n])
            tree.backup(out["policy"], out["value"], out["score"])


def _search(tree: Tree, moves: int) -> list:
    """A noised search with forced playouts, then the same tree reused after the best move."""
    boards = random_position(9, moves, seed=moves)
    result = run(boards[-1], Hashed(), 300, tree=tree, noise=True, forced_playouts=True, leaves_per_batch=8)
    out = [result.visits.tolist(), result.utility.tolist(), result.root_utility, result.score_mean]
    tree.advance(result.best_move())
    _search_reused(tree, 500, 9)
    children = tree.children()
    return out + [children["visits"].tolist(), children["utility"].tolist(), tree.root_value()]


@pytest.mark.parametrize("moves", [9, 20])
def test_factor_zero_is_the_plain_search(moves: int) -> None:
    plain = _search(Tree(NNCache(2000, 81), seed=moves), moves)
    assert _search(Tree(NNCache(2000, 81), subtree_bias_factor=0.0, subtree_bias_exponent=0.3, seed=moves),
                   moves) == plain
    # With a factor too small to move any sum (NodeUtility == the net's utility, every change 0),
    # the bookkeeping runs, the tree is reused and rebuilt, and nothing changes, bit for bit.
    assert _search(Tree(NNCache(2000, 81), subtree_bias_factor=1e-300, seed=moves), moves) == plain
    assert _search(Tree(NNCache(2000, 81), subtree_bias_factor=LAMBDA, seed=moves), moves) != plain


def test_settings_reach_the_tree_and_are_checked() -> None:
    assert (SearchConfig().subtree_bias_factor, SearchConfig().subtree_bias_exponent) == (0.0, 0.8)
    searches = [_search(new_tree(NNCache(2000, 81), config, seed=4), 9) for config in (
        SearchConfig(), SearchConfig(subtree_bias_factor=LAMBDA), SearchConfig(subtree_bias_factor=LAMBDA,
                                                                               subtree_bias_exponent=0.5))]
    assert searches[0] != searches[1] != searches[2]  # the factor, then the exponent, reach the tree
    for factor, exponent in ((-0.1, 0.8), (0.35, -1.0)):
        with pytest.raises(ValueError, match="subtree bias"):
            Tree(NNCache(0, 81), subtree_bias_factor=factor, subtree_bias_exponent=exponent)
