"""Reading a finished search, policy target pruning, and a one-game search loop.

`run(board, evaluator, visits)` is the simplest use of `tengen.search.mcts.Tree`: it gathers up to
`leaves_per_batch` leaves (virtual loss keeps them apart), evaluates them as one batch and backs
them up until the root has its visits. The self-play runner (tengen.selfplay.runner) does the same
for many games at once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tengen.config import SearchConfig
from tengen.go.board import Board
from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL
from tengen.nn.evaluator import Evaluator
from tengen.search.mcts import Tree
from tengen.search.nn_cache import NNCache


@dataclass
class SearchResult:
    """A finished search, from the view of the player to move at the root."""

    moves: np.ndarray  # int64 move indices of the root's searched children
    visits: np.ndarray  # int64 completed visits per child
    pruned: np.ndarray  # int64 visits after policy target pruning (= visits without forced playouts)
    priors: np.ndarray  # float64 search priors (after root temperature and noise)
    utility: np.ndarray  # float64 average utility per child
    num_legal: int  # legal (allowed) moves at the root
    win: float  # root value: P(win), P(loss), P(no result) averaged over the search
    loss: float
    no_result: float
    score_mean: float
    score_stdev: float
    root_utility: float
    raw_policy: np.ndarray  # float32 [area + 1]: the net's policy at the root

    def policy_target(self) -> tuple[np.ndarray, np.ndarray]:
        """(moves, visits) of the children that keep visits after pruning: the sparse policy
        training target of a GameRecord move."""
        keep = self.pruned > 0
        return self.moves[keep], self.pruned[keep]

    def best_move(self) -> int:
        """The child with the most (pruned) visits."""
        return int(self.moves[int(np.argmax(self.pruned))])


def prune_visits(visits: np.ndarray, priors: np.ndarray, utility: np.ndarray, cpuct: float) -> np.ndarray:
    """Policy target pruning (KataGo paper §5.3).

    c* is the child with the most visits. From every other child subtract up to its forced
    playouts floor(sqrt(2 P(c) sum N)), as long as its PUCT value, with the final utility held
    fixed, stays below PUCT(c*); a child that this reduced to one visit is pruned to 0. A child
    that nothing was taken from keeps its visits, even a single one: at small visit counts most
    children have one visit the search chose, and dropping them all leaves the best child alone
    in the target, so the policy locks onto whatever it already prefers (a pass, say).
    """
    visits = np.asarray(visits, np.int64)
    priors = np.asarray(priors, np.float64)
    utility = np.asarray(utility, np.float64)
    if not (visits.shape == priors.shape == utility.shape) or visits.ndim != 1:
        raise ValueError("visits, priors and utility must be 1-D arrays of one length")
    out = visits.copy()
    total = int(visits.sum())
    if total == 0:
        return out
    best = int(np.argmax(visits))
    sqrt_total = math.sqrt(total)
    best_puct = utility[best] + cpuct * priors[best] * sqrt_total / (1 + visits[best])
    for c in range(len(visits)):
        if c == best or visits[c] == 0:
            continue
        forced = math.floor(math.sqrt(2.0 * priors[c] * total))
        gap = best_puct - utility[c]
        if gap <= 0:
            keep_at_least = int(visits[c])  # PUCT(c) >= PUCT(c*) already: nothing to subtract
        else:
            # smallest N' with utility + cpuct P sqrt(total) / (1 + N') < best_puct
            keep_at_least = max(0, math.floor(cpuct * priors[c] * sqrt_total / gap - 1.0) + 1)
        out[c] = visits[c] - min(forced, max(0, int(visits[c]) - keep_at_least))
        if out[c] < visits[c] and out[c] <= 1:
            out[c] = 0
    return out


def read_result(tree: Tree) -> SearchResult:
    """The SearchResult of a finished search (pruned when it used forced playouts)."""
    if not tree.done:
        raise RuntimeError("the search is not finished")
    children = tree.children()
    value = tree.root_value()
    if tree.forced_playouts:
        pruned = prune_visits(children["visits"], children["priors"], children["utility"], tree.cpuct)
    else:
        pruned = children["visits"].copy()
    raw = tree.raw_policy()
    return SearchResult(
        moves=children["moves"], visits=children["visits"], pruned=pruned, priors=children["priors"],
        utility=children["utility"], num_legal=int(children["num_legal"]), win=value["win"],
        loss=value["loss"], no_result=value["no_result"], score_mean=value["score_mean"],
        score_stdev=value["score_stdev"], root_utility=value["utility"],
        raw_policy=raw if raw is not None else np.zeros(tree.x_size * tree.y_size + 1, np.float32),
    )


def new_tree(cache: NNCache, config: SearchConfig, seed: int) -> Tree:
    """A Tree with the search constants of a config section."""
    return Tree(
        cache, cpuct=config.cpuct, fpu_reduction=config.fpu_reduction, root_fpu_reduction=0.0,
        noise_weight=config.noise_weight, dirichlet_alpha_total=config.dirichlet_alpha_total,
        root_policy_temperature=config.root_policy_temperature,
        root_policy_temperature_early=config.root_policy_temperature + config.root_policy_temperature_boost,
        shaped_noise=config.shaped_noise,
        random_symmetry=config.random_symmetry, ending_bonus_points=config.ending_bonus_points,
        subtree_bias_factor=config.subtree_bias_factor, subtree_bias_exponent=config.subtree_bias_exponent,
        score_utility_weight=config.score_utility_weight, uncertainty_weighting=config.uncertainty_weighting,
        cpuct_variance_scaling=config.cpuct_variance_scaling, seed=seed,
    )


def run(board: Board, evaluator: Evaluator, visits: int, *, prev1: Board | None = None,
        prev2: Board | None = None, tree: Tree | None = None, noise: bool = False,
        forced_playouts: bool = False, leaves_per_batch: int = 8) -> SearchResult:
    """Search `board` with `visits` visits and return the result. A fresh tree with KataGo's
    constants and a private cache is used unless `tree` is given."""
    if leaves_per_batch < 1:
        raise ValueError(f"leaves_per_batch must be >= 1, got {leaves_per_batch}")
    if tree is None:
        tree = new_tree(NNCache(4 * visits, board.x_size * board.y_size), SearchConfig(), seed=0)
    tree.set_position(board, prev1, prev2)
    tree.start_search(visits, noise=noise, forced_playouts=forced_playouts)
    spatial = np.zeros((leaves_per_batch, NUM_SPATIAL, board.y_size, board.x_size), np.float32)
    global_inputs = np.zeros((leaves_per_batch, NUM_GLOBAL), np.float32)
    while not tree.done:
        n = tree.select_leaves(leaves_per_batch, spatial, global_inputs)
        if n:
            out = evaluator.evaluate(spatial[:n], global_inputs[:n])
            tree.backup(out["policy"], out["value"], out["score"], ownership=out.get("ownership"),
                        uncertainty=out.get("uncertainty"))
    return read_result(tree)
