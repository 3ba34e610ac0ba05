"""Many self-play games in one process, their leaves evaluated in shared batches.

The G games are split into two halves. Each step of a half gathers one leaf per game (`k` with
virtual loss) into one batch (`select_batch`, no Python work per game), sends it to the evaluator
on a worker thread, and meanwhile the main thread backs up and advances the other half, whose
batch has just come back. So tree work overlaps inference and the evaluator always has the next
batch waiting (DESIGN.md, data flow 1). A game whose search finishes is resumed at once (its next
move, or a new game in its slot); searches served entirely by the NN cache finish without a batch.

The evaluator is anything with `evaluate(spatial, globals) -> dict` (tengen.nn.evaluator); one
that also has `infer(spatial, globals)` returning an object with `.outputs` and `.model_version`
(TritonEvaluator) lets each game carry the newest model version that evaluated any of its
positions.
"""
from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from tengen.config import Config, SearchConfig
from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL
from tengen.nn.evaluator import Evaluator
from tengen.proto import game_pb2
from tengen.search.mcts import NNCache, Tree, backup_batch, select_batch
from tengen.search.search import new_tree
from tengen.search.selfplay import GameSteps, SelfPlayGame, SelfplaySettings


@dataclass
class RunnerStats:
    games: int = 0
    moves: int = 0  # positions played, all kinds of turns
    rows: int = 0  # full-search (recorded) turns
    batches: int = 0
    leaves: int = 0  # positions evaluated by the net
    eval_wait_s: float = 0.0  # main thread blocked on the evaluator
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, float]:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        return {"games": self.games, "moves": self.moves, "rows": self.rows, "batches": self.batches,
                "leaves": self.leaves, "elapsed_s": elapsed, "games_per_s": self.games / elapsed,
                "moves_per_s": self.moves / elapsed, "leaves_per_s": self.leaves / elapsed,
                "mean_batch": self.leaves / max(self.batches, 1), "eval_wait_s": self.eval_wait_s}


class _Slot:
    """One game at a time: its tree (kept across games) and the game's generator."""

    def __init__(self, tree: Tree) -> None:
        self.tree = tree
        self.game: SelfPlayGame | None = None
        self.steps: GameSteps | None = None


class _Half:
    def __init__(self, slots: list[_Slot], rows: int, side: int) -> None:
        self.slots = slots
        self.spatial = np.zeros((rows, NUM_SPATIAL, side, side), np.float32)
        self.global_inputs = np.zeros((rows, NUM_GLOBAL), np.float32)
        self.trees: list[Tree] = []
        self.active: list[_Slot] = []
        self.counts: np.ndarray | None = None
        self.future: concurrent.futures.Future | None = None


class SelfplayRunner:
    """Plays games `games_in_parallel` at a time; `run()` yields finished GameRecords."""

    def __init__(self, evaluator: Evaluator, settings: SelfplaySettings, search: SearchConfig, *,
                 games_in_parallel: int = 16, leaves_per_game: int = 1, seed: int = 0,
                 model_name: str = "", model_version: int = 0, id_prefix: str | None = None) -> None:
        if games_in_parallel < 2:
            raise ValueError(f"games_in_parallel must be >= 2 (two halves), got {games_in_parallel}")
        if leaves_per_game < 1:
            raise ValueError(f"leaves_per_game must be >= 1, got {leaves_per_game}")
        self.evaluator = evaluator
        self.settings = settings
        self.leaves_per_game = leaves_per_game
        self.seed = seed
        self.model_name = model_name
        self.model_version = model_version
        self.id_prefix = id_prefix
        self.stats = RunnerStats()
        side = max(settings.board_sizes)
        self.cache = NNCache(search.nn_cache_size, side * side)
        slots = [_Slot(new_tree(self.cache, search, seed * 100003 + i)) for i in range(games_in_parallel)]
        half = games_in_parallel // 2
        self._halves = [_Half(slots[:half], half * leaves_per_game, side),
                        _Half(slots[half:], (games_in_parallel - half) * leaves_per_game, side)]
        self._games_started = 0
        self._infer = getattr(evaluator, "infer", None)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    @classmethod
    def from_config(cls, config: Config, evaluator: Evaluator, **kwargs: Any) -> "SelfplayRunner":
        kwargs.setdefault("games_in_parallel", config.selfplay.games_in_parallel)
        kwargs.setdefault("model_name", config.run.model_name)
        return cls(evaluator, SelfplaySettings.from_config(config), config.search, **kwargs)

    def _new_game(self, slot: _Slot) -> None:
        index = self._games_started
        self._games_started += 1
        game_id = f"{self.id_prefix}-{index}" if self.id_prefix else None
        slot.game = SelfPlayGame(slot.tree, self.settings, seed=self.seed * 1_000_003 + index,
                                 game_id=game_id, model_name=self.model_name, model_version=self.model_version)
        slot.steps = slot.game.play()
        next(slot.steps)  # runs up to its first search

    def _advance(self, slot: _Slot, finished: list[game_pb2.GameRecord], more: bool) -> None:
        """Resume the slot's game while its search is done; start new games while `more`."""
        while slot.steps is not None and slot.tree.done:
            moves = len(slot.game.moves)
            try:
                slot.steps.send(None)
            except StopIteration as stop:
                record: game_pb2.GameRecord = stop.value
                record.model_version = max(record.model_version, slot.game.model_version)
                self.stats.moves += len(slot.game.moves) - moves
                self.stats.games += 1
                self.stats.rows += sum(1 for m in record.moves if m.full_search)
                finished.append(record)
                slot.game = slot.steps = None
                if more:
                    self._new_game(slot)
                continue
            self.stats.moves += len(slot.game.moves) - moves

    def _prepare(self, half: _Half, finished: list[game_pb2.GameRecord], more: bool) -> None:
        """Advance the half's games, gather their leaves and send them off as one batch."""
        for slot in half.slots:
            if slot.steps is None and more:
                self._new_game(slot)
            self._advance(slot, finished, more)
        half.active = [s for s in half.slots if s.steps is not None]
        half.trees = [s.tree for s in half.active]
        half.future = None
        half.counts = select_batch(half.trees, half.spatial, half.global_inputs, self.leaves_per_game)
        total = int(half.counts.sum())
        if total:
            spatial, global_inputs = half.spatial[:total], half.global_inputs[:total]
            call = self._infer if self._infer is not None else self.evaluator.evaluate
            half.future = self._pool.submit(call, spatial, global_inputs)
            self.stats.batches += 1
            self.stats.leaves += total

    def _finish(self, half: _Half) -> None:
        """Wait for the half's batch and back it up."""
        if half.future is None:
            return
        waited = time.monotonic()
        out = half.future.result()
        self.stats.eval_wait_s += time.monotonic() - waited
        half.future = None
        if self._infer is not None:
            version = int(out.model_version)
            out = out.outputs
            for slot, count in zip(half.active, half.counts):
                if count and version > slot.game.model_version:
                    slot.game.model_version = version
        backup_batch(half.trees, half.counts, out["policy"], out["value"], out["score"])

    def run(self, num_games: int | None = None, stop: threading.Event | None = None) -> Iterator[game_pb2.GameRecord]:
        """Play until `num_games` games have finished (forever when None) or `stop` is set
        (games in progress are then dropped); yields each finished game's record."""
        if num_games is not None and num_games < 1:
            raise ValueError(f"num_games must be >= 1, got {num_games}")
        self.stats = RunnerStats()
        self._games_started = 0
        for half in self._halves:
            for slot in half.slots:
                slot.game = slot.steps = None
        finished: list[game_pb2.GameRecord] = []
        yielded = 0

        def more() -> bool:
            return (num_games is None or self._games_started < num_games) and not (stop and stop.is_set())

        with concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="selfplay-eval") as pool:
            self._pool = pool
            try:
                for half in self._halves:
                    self._prepare(half, finished, more())
                while True:
                    for half in self._halves:
                        self._finish(half)
                        self._prepare(half, finished, more())  # overlaps the other half's batch
                        while finished:
                            yield finished.pop(0)
                            yielded += 1
                    idle = all(h.future is None and not h.active for h in self._halves)
                    if idle or (stop is not None and stop.is_set()):
                        break
                    if num_games is not None and yielded >= num_games:
                        break
            finally:
                for half in self._halves:  # never leave a batch running on a closed pool
                    if half.future is not None:
                        half.future.cancel()
                        concurrent.futures.wait([half.future])
                        half.future = None
                    for slot in half.slots:
                        if slot.steps is not None:
                            slot.steps.close()
                        slot.game = slot.steps = None
                        _discard_pending(slot.tree)
                self._pool = None


def _discard_pending(tree: Tree) -> None:
    """Forget a search that was cut off (the tree is reset at the next game's first move)."""
    if tree.num_pending:
        tree.abandon()
