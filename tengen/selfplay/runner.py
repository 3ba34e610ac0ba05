"""Many games in one process, their leaves evaluated in shared batches.

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

`BatchedRunner` is that loop for any game generator; it also drives games between two nets
(tengen.gate.net_match: one tree per side, each side's leaves batched for its own evaluator).
`SelfplayRunner` plays SelfPlayGames with one evaluator.
"""
from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Sequence, cast

import numpy as np

from tengen.config import Config, SearchConfig
from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL
from tengen.loop.rows import row_count
from tengen.nn.evaluator import Evaluator
from tengen.proto import game_pb2
from tengen.search.mcts import Tree, backup_batch, select_batch
from tengen.search.nn_cache import NNCache
from tengen.search.single_search import new_tree
from tengen.selfplay.game import GameSteps, SelfPlayGame, SelfplaySettings


@dataclass
class RunnerStats:
    games: int = 0
    moves: int = 0  # positions played, all kinds of turns
    rows: int = 0  # training rows: full-search (recorded) turns, side branches included
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


class Slot:
    """One game at a time: its trees (one per evaluator, kept across games) and the game's generator."""

    def __init__(self, trees: list[Tree]) -> None:
        self.trees = trees
        self.game: Any = None
        self.steps: Generator[None, None, Any] | None = None

    @property
    def tree(self) -> Tree:
        return self.trees[0]

    def searching(self) -> bool:
        """A search is set up and not finished on one of the slot's trees."""
        return any(t.target_visits > 0 and not t.done for t in self.trees)


class _Half:
    def __init__(self, slots: list[Slot], rows: int, side: int, evaluators: int) -> None:
        self.slots = slots
        self.spatial = [np.zeros((rows, NUM_SPATIAL, side, side), np.float32) for _ in range(evaluators)]
        self.global_inputs = [np.zeros((rows, NUM_GLOBAL), np.float32) for _ in range(evaluators)]
        self.trees: list[list[Tree]] = [[] for _ in range(evaluators)]
        self.active: list[Slot] = []
        self.counts = [np.zeros(0, np.int32) for _ in range(evaluators)]  # leaves per active game (none yet)
        self.futures: list[concurrent.futures.Future | None] = [None] * evaluators

    def idle(self) -> bool:
        return not self.active and all(f is None for f in self.futures)


def per_evaluator(search: SearchConfig | Sequence[SearchConfig], n: int) -> list[SearchConfig]:
    """The search settings of each of `n` evaluators: one for all, or one each."""
    searches = list(search) if isinstance(search, (list, tuple)) else [cast(SearchConfig, search)] * n
    if len(searches) != n:
        raise ValueError(f"{len(searches)} search settings for {n} evaluators")
    return searches


class BatchedRunner:
    """Plays games `games_in_parallel` at a time; `run()` yields what each game's generator returns.

    Each slot holds one Tree per evaluator (tree e is searched with evaluator e, so each evaluator
    has its own NN cache, and with search settings e where `search` is one per evaluator). A game
    is a generator that sets up a search on one of its slot's trees and yields; the runner runs that
    search to `done` and resumes it. Per half and evaluator the leaves go into one batch, so with two
    evaluators a half has up to two batches in flight.
    Subclasses say how a game starts (`_new_game`) and what a finished one gives (`_finished`).
    """

    def __init__(
        self,
        evaluators: Sequence[Evaluator],
        caches: Sequence[NNCache],
        search: SearchConfig | Sequence[SearchConfig],
        board_side: int,
        *,
        games_in_parallel: int = 16,
        leaves_per_game: int = 1,
        seed: int = 0,
    ) -> None:
        if games_in_parallel < 2:
            raise ValueError(f"games_in_parallel must be >= 2 (two halves), got {games_in_parallel}")
        if leaves_per_game < 1:
            raise ValueError(f"leaves_per_game must be >= 1, got {leaves_per_game}")
        if not evaluators or len(evaluators) != len(caches):
            raise ValueError("one NN cache per evaluator, at least one evaluator")
        self.evaluators = list(evaluators)
        self.leaves_per_game = leaves_per_game
        self.seed = seed
        self.stats = RunnerStats()
        n = len(self.evaluators)
        searches = per_evaluator(search, n)
        slots = [
            Slot([new_tree(caches[e], searches[e], seed * 100003 + i + 1_000_033 * e) for e in range(n)])
            for i in range(games_in_parallel)
        ]
        half = games_in_parallel // 2
        self._halves = [
            _Half(slots[:half], half * leaves_per_game, board_side, n),
            _Half(slots[half:], (games_in_parallel - half) * leaves_per_game, board_side, n),
        ]
        self._games_started = 0
        self._infer = [getattr(e, "infer", None) for e in self.evaluators]
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    # -- what subclasses define ------------------------------------------------------------------

    def _new_game(self, slot: Slot, index: int) -> tuple[Any, Generator[None, None, Any]]:
        """(the game object, its generator) for the `index`-th game started in this run."""
        raise NotImplementedError

    def _finished(self, slot: Slot, result: Any) -> Any:
        """What run() yields for a game whose generator returned `result`."""
        return result

    def _served_by(self, slot: Slot, evaluator: int, version: int) -> None:
        """Evaluator `evaluator` (one with `infer`) answered for the slot's game with `version`."""

    # -- the loop ----------------------------------------------------------------------------------

    def _start(self, slot: Slot) -> None:
        index = self._games_started
        self._games_started += 1
        slot.game, slot.steps = self._new_game(slot, index)
        next(slot.steps)  # runs up to its first search

    def _advance(self, slot: Slot, finished: list[Any], more: Callable[[], bool]) -> None:
        """Resume the slot's game while it has no search running; start new games while `more()`
        (asked before each start, so a run never starts more games than it was asked for)."""
        while slot.steps is not None and not slot.searching():
            moves = len(slot.game.moves)
            try:
                slot.steps.send(None)
            except StopIteration as stop:
                self.stats.moves += len(slot.game.moves) - moves
                self.stats.games += 1
                finished.append(self._finished(slot, stop.value))
                slot.game = slot.steps = None
                if more():
                    self._start(slot)
                continue
            self.stats.moves += len(slot.game.moves) - moves

    def _prepare(self, half: _Half, finished: list[Any], more: Callable[[], bool]) -> None:
        """Advance the half's games, gather their leaves and send them off, one batch per evaluator."""
        for slot in half.slots:
            if slot.steps is None and more():
                self._start(slot)
            self._advance(slot, finished, more)
        half.active = [s for s in half.slots if s.steps is not None]
        for e, evaluator in enumerate(self.evaluators):
            half.trees[e] = [s.trees[e] for s in half.active]
            half.futures[e] = None
            counts = select_batch(half.trees[e], half.spatial[e], half.global_inputs[e], self.leaves_per_game)
            half.counts[e] = counts
            total = int(counts.sum())
            if total:
                spatial, global_inputs = half.spatial[e][:total], half.global_inputs[e][:total]
                infer = self._infer[e]
                call = infer if infer is not None else evaluator.evaluate
                if self._pool is None:
                    raise RuntimeError("batches are sent only while run() is playing")
                half.futures[e] = self._pool.submit(call, spatial, global_inputs)

    def _finish(self, half: _Half) -> None:
        """Wait for the half's batches and back them up."""
        for e, future in enumerate(half.futures):
            if future is None:
                continue
            waited = time.monotonic()
            out = future.result()
            self.stats.eval_wait_s += time.monotonic() - waited
            half.futures[e] = None
            self.stats.batches += 1  # counted once answered: a batch in flight is not evaluated yet
            self.stats.leaves += int(half.counts[e].sum())
            if self._infer[e] is not None:
                version = int(out.model_version)
                out = out.outputs
                for slot, count in zip(half.active, half.counts[e]):
                    if count:
                        self._served_by(slot, e, version)
            backup_batch(
                half.trees[e],
                half.counts[e],
                out["policy"],
                out["value"],
                out["score"],
                out.get("ownership"),
                out.get("uncertainty"),
            )

    def play_for(self, seconds: float) -> dict[str, float]:
        """Play for `seconds` (the games then in progress are dropped); the stats of that time."""
        stop = threading.Event()
        timer = threading.Timer(seconds, stop.set)
        timer.start()
        try:
            for _ in self.run(None, stop=stop):
                pass
        finally:
            timer.cancel()
        return self.stats.as_dict()

    def run(self, num_games: int | None = None, stop: threading.Event | None = None) -> Generator[Any, None, None]:
        """Play until `num_games` games have finished (forever when None) or `stop` is set
        (games in progress are then dropped); yields each finished game's result. Closing the
        iterator early also drops the games in progress."""
        if num_games is not None and num_games < 1:
            raise ValueError(f"num_games must be >= 1, got {num_games}")
        self.stats = RunnerStats()
        self._games_started = 0
        for half in self._halves:
            for slot in half.slots:
                slot.game = slot.steps = None
        finished: list[Any] = []
        yielded = 0

        def more() -> bool:
            return (num_games is None or self._games_started < num_games) and not (stop and stop.is_set())

        workers = 2 * len(self.evaluators)
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="runner-eval") as pool:
            self._pool = pool
            try:
                for half in self._halves:
                    self._prepare(half, finished, more)
                while True:
                    for half in self._halves:
                        self._finish(half)
                        self._prepare(half, finished, more)  # overlaps the other half's batches
                        while finished:
                            yield finished.pop(0)
                            yielded += 1
                    idle = all(h.idle() for h in self._halves)
                    if idle or (stop is not None and stop.is_set()):
                        break
                    if num_games is not None and yielded >= num_games:
                        break
            finally:
                for half in self._halves:  # never leave a batch running on a closed pool
                    for e, future in enumerate(half.futures):
                        if future is not None:
                            future.cancel()
                            concurrent.futures.wait([future])
                            half.futures[e] = None
                    for slot in half.slots:
                        if slot.steps is not None:
                            slot.steps.close()
                        slot.game = slot.steps = None
                        for tree in slot.trees:
                            _discard_pending(tree)
                self._pool = None


class SelfplayRunner(BatchedRunner):
    """Plays self-play games `games_in_parallel` at a time; `run()` yields finished GameRecords."""

    def __init__(
        self,
        evaluator: Evaluator,
        settings: SelfplaySettings,
        search: SearchConfig,
        *,
        games_in_parallel: int = 16,
        leaves_per_game: int = 1,
        seed: int = 0,
        model_name: str = "",
        model_version: int = 0,
        id_prefix: str | None = None,
    ) -> None:
        self.evaluator = evaluator
        self.settings = settings
        self.model_name = model_name
        self.model_version = model_version
        self.id_prefix = id_prefix
        side = max(settings.board_sizes)
        self.cache = NNCache(search.nn_cache_size, side * side, ownership=search.ending_bonus_points > 0)
        super().__init__(
            [evaluator],
            [self.cache],
            search,
            side,
            games_in_parallel=games_in_parallel,
            leaves_per_game=leaves_per_game,
            seed=seed,
        )

    @classmethod
    def from_config(cls, config: Config, evaluator: Evaluator, samples: int | None = None,
                    **kwargs: Any) -> "SelfplayRunner":
        """A runner of the preset's games for a net trained on `samples` (SelfplaySettings.from_config)."""
        kwargs.setdefault("games_in_parallel", config.selfplay.games_in_parallel)
        kwargs.setdefault("leaves_per_game", config.selfplay.leaves_per_game)
        kwargs.setdefault("model_name", config.run.model_name)
        return cls(evaluator, SelfplaySettings.from_config(config, samples), config.search, **kwargs)

    def _new_game(self, slot: Slot, index: int) -> tuple[SelfPlayGame, GameSteps]:
        game_id = f"{self.id_prefix}-{index}" if self.id_prefix else None
        game = SelfPlayGame(
            slot.tree,
            self.settings,
            seed=self.seed * 1_000_003 + index,
            game_id=game_id,
            model_name=self.model_name,
            model_version=self.model_version,
        )
        return game, game.play()

    def _finished(self, slot: Slot, record: game_pb2.GameRecord) -> game_pb2.GameRecord:
        record.model_version = max(record.model_version, slot.game.model_version)
        self.stats.rows += row_count(record)
        return record

    def _served_by(self, slot: Slot, evaluator: int, version: int) -> None:
        if version > slot.game.model_version:
            slot.game.model_version = version


def _discard_pending(tree: Tree) -> None:
    """Forget a search that was cut off (the tree is reset at the next game's first move)."""
    if tree.num_pending:
        tree.abandon()
