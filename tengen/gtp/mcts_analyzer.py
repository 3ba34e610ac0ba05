"""The MCTS-backed Analyzer: tengen.search's tree (KataGo's PUCT, FPU, score utility, NN cache)
behind the GTP engine's `--visits N`.

A search runs in batches of leaves until the root has its visits, the deadline of the time manager
passes, or `stop` is set (lz-analyze / kata-analyze end at the next command), reporting the
analysis every `progress_interval` seconds meanwhile. No noise, no forced playouts: the engine
plays the most visited move (tengen.gtp.analysis.choose_move).

Per candidate: visits, search prior, utility (the average over its subtree) and the principal
variation (most visited child, level by level) come from the tree; the root's winrate and score
lead are the search's averages. The tree reports only utilities per child, so a candidate's
winrate and score lead are the net's evaluation of the position after that move (one batch per
analysis, remembered across progress reports), with the net's ownership after each of them. One
more evaluation of the root itself gives the raw net's view (`Analysis.raw`) and the ownership.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import numpy as np

from tengen.config import SearchConfig
from tengen.go.board import Board
from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL
from tengen.gtp.analysis import (
    Analysis,
    MoveInfo,
    NetEval,
    PolicyAnalyzer,
    Progress,
    encode_batch,
    history_pair,
    lower_bound,
    utility,
    winrate_from_value,
)
from tengen.nn.evaluator import Evaluator
from tengen.search.nn_cache import NNCache
from tengen.search.single_search import new_tree

MAX_PV = 12  # moves of a principal variation

# A candidate's values from the net's evaluation of the position after it, for the root player:
# winrate, score lead, score stdev, ownership [y_size, x_size].
ChildValue = tuple[float, float, float, np.ndarray]


class MctsAnalyzer:
    def __init__(
        self,
        evaluator: Evaluator,
        config: SearchConfig | None = None,
        *,
        leaves_per_batch: int = 8,
        seed: int = 0,
    ) -> None:
        if leaves_per_batch < 1:
            raise ValueError(f"leaves_per_batch must be >= 1, got {leaves_per_batch}")
        self.evaluator = evaluator
        self.config = config or SearchConfig()
        self.leaves_per_batch = leaves_per_batch
        # kept across moves and analyses
        self.cache = NNCache(self.config.nn_cache_size, ownership=self.config.ending_bonus_points > 0)
        self.tree = new_tree(self.cache, self.config, seed)
        # Positions the tree cannot search (the game is over) and root ownership.
        self.raw = PolicyAnalyzer(evaluator)

    def analyze(
        self,
        board: Board,
        previous: Sequence[Board],
        visits: int,
        *,
        max_moves: int = 10,
        ownership: bool = False,
        deadline: float | None = None,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        progress_interval: float = 0.0,
        allowed: np.ndarray | None = None,
        visited_only: bool = False,
    ) -> Analysis:
        if board.game_over:  # two passes: nothing to search, the raw net still has an opinion
            return self.raw.analyze(board, previous, 1, max_moves=max_moves, ownership=ownership,
                                    progress=progress, allowed=allowed, visited_only=visited_only)
        prev1, prev2 = history_pair(previous)
        tree = self.tree
        tree.set_position(board, prev1, prev2)
        tree.start_search(visits, allowed=allowed)
        k = self.leaves_per_batch
        spatial = np.zeros((k, NUM_SPATIAL, board.y_size, board.x_size), np.float32)
        global_inputs = np.zeros((k, NUM_GLOBAL), np.float32)
        child_values: dict[int, ChildValue] = {}
        root = self.raw.analyze(board, previous, 1, max_moves=1, ownership=True)
        raw, own = root.raw, (root.ownership if ownership else None)
        next_report = time.monotonic() + progress_interval
        while not tree.done:
            # Stop between batches (nothing pending), and only once the root has been evaluated.
            if tree.visits > 0 and ((stop is not None and stop.is_set())
                                    or (deadline is not None and time.monotonic() >= deadline)):
                break
            n = tree.select_leaves(k, spatial, global_inputs)
            if n:
                out = self.evaluator.evaluate(spatial[:n], global_inputs[:n])
                tree.backup(out["policy"], out["value"], out["score"], ownership=out.get("ownership"))
            if progress is not None and progress_interval > 0 and time.monotonic() >= next_report \
                    and tree.visits > 0:
                progress(self._read(board, max_moves, own, child_values, raw, visited_only))
                next_report = time.monotonic() + progress_interval
        analysis = self._read(board, max_moves, own, child_values, raw, visited_only)
        if progress is not None:
            progress(analysis)
        return analysis

    def _child_values(self, board: Board, moves: list[int], known: dict[int, ChildValue]) -> None:
        """Evaluate the positions after `moves` not yet in `known`: (winrate, score lead, score
        stdev, ownership) for the player at the root."""
        todo = [m for m in moves if m not in known]
        if not todo:
            return
        children = []
        for move in todo:
            child = board.copy()
            child.play(move)
            children.append((child, board, None))
        spatial, global_inputs = encode_batch(children)
        out = self.evaluator.evaluate(spatial, global_inputs)
        for i, move in enumerate(todo):
            known[move] = (1.0 - winrate_from_value(out["value"][i]), -float(out["score"][i, 0]),
                           float(out["score"][i, 1]),
                           -np.array(out["ownership"][i, : board.y_size, : board.x_size], np.float64))

    def _pv(self, move: int, visits: int) -> tuple[list[int], list[int]]:
        """The principal variation from `move` (most visited child, level by level) and the
        visits of each of its positions."""
        path, counts = [move], [visits]
        while len(path) < MAX_PV:
            try:
                children = self.tree.children(path)
            except KeyError:
                break
            if len(children["visits"]) == 0 or children["visits"].max() == 0:
                break
            best = int(np.argmax(children["visits"]))
            path.append(int(children["moves"][best]))
            counts.append(int(children["visits"][best]))
        return path, counts

    def _read(self, board: Board, max_moves: int, ownership: np.ndarray | None,
              child_values: dict[int, ChildValue], raw: NetEval | None = None,
              visited_only: bool = False) -> Analysis:
        tree = self.tree
        root = tree.root_value()
        children = tree.children()
        priors = tree.root_priors()
        visited = {int(m): (int(v), float(u)) for m, v, u in
                   zip(children["moves"], children["visits"], children["utility"]) if v > 0}
        # Most visited first; then the rest of the legal moves by prior.
        ranked = sorted(visited, key=lambda m: (-visited[m][0], -priors[m]))
        rest = [int(m) for m in np.argsort(-priors, kind="stable") if priors[m] > 0 and int(m) not in visited]
        if visited_only:
            shown = ranked[: max(1, max_moves)] or rest[:1]
        else:
            shown = (ranked + rest)[: max(1, max_moves)]
        self._child_values(board, shown, child_values)
        moves = []
        for move in shown:
            winrate, score, stdev, own = child_values[move]
            count, searched = visited.get(move, (0, 0.0))
            pv, pv_visits = self._pv(move, count) if count else ([move], [0])
            moves.append(MoveInfo(
                move=move, visits=count, winrate=winrate, score_lead=score, prior=float(priors[move]),
                pv=pv, score_stdev=stdev,
                lcb=lower_bound(winrate, count),
                utility=searched if count else utility(winrate, score, board),
                pv_visits=pv_visits, ownership=own,
            ))
        return Analysis(
            to_move=board.to_move,
            visits=tree.visits,
            winrate=root["win"] + 0.5 * root["no_result"],
            score_lead=root["score_mean"],
            moves=moves,
            ownership=ownership,
            priors=priors,
            score_stdev=root["score_stdev"],
            utility=root["utility"],
            raw=raw,
        )
