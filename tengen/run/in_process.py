"""The training loop in one process, without services: self-play -> window -> learner -> SWA
candidate -> self-play, every candidate taking over self-play at once (no gating).

It is the same data flow as the distributed loop (DESIGN.md) with the same pieces: the self-play
runner (tengen.selfplay.runner) on an in-process TorchEvaluator instead of Triton, each finished
GameRecord replayed into rows (tengen.loop.rows) and appended to a window (tengen.train.window)
instead of going through Kafka, and a learner (the trainer's tengen.train.learner.Learner,
passed in: the library does not import services) that trains on the window and makes SWA
candidates. It exists for tests and diagnosis of what the loop learns at a preset, e.g. whether
self-play locks into a passing equilibrium (`pass_counts`).

Scheduling is deterministic: after each finished game the learner trains until it is level with
the data (`can_train`: about `samples_per_row` samples per row ever appended), and a candidate due
in those steps replaces the self-play net before the runner resumes (the batches already sent are
answered by the old net: `CurrentNet`). With one seed and one torch thread count a run repeats
itself, which makes a test of what the loop learns a fixed experiment rather than a race.
"""
from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable, Protocol

import numpy as np

from tengen.config import Config
from tengen.loop.rows import window_rows
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.model import KataGoNet
from tengen.proto import game_pb2
from tengen.selfplay.runner import SelfplayRunner
from tengen.train.window import Window


class Learner(Protocol):
    """What the loop needs of tengen.train.learner.Learner."""

    window: Window
    model: KataGoNet

    def can_train(self) -> bool: ...
    def step(self) -> dict[str, float]: ...
    def snapshot_due(self) -> bool: ...
    def take_snapshot(self) -> bool: ...
    def candidate(self) -> KataGoNet: ...


def pass_counts(records: Iterable[game_pb2.GameRecord], skip_last: int = 10) -> tuple[int, int]:
    """(passes, moves) of the records' main lines, not counting each game's last `skip_last`
    moves (a game ends with passes whoever plays it; the question is who passes before that)."""
    passes = moves = 0
    for record in records:
        pass_move = record.x_size * record.y_size
        counted = record.moves[: max(0, len(record.moves) - skip_last)]
        moves += len(counted)
        passes += sum(1 for m in counted if m.move == pass_move)
    return passes, moves


class CurrentNet:
    """An evaluator that answers with the net set last, switched only between batches.

    `set(net, version, submitted)` first waits until the evaluator has answered `submitted`
    batches (the runner's `stats.batches`: every batch handed to the evaluator so far), so each
    batch is evaluated by the net that was current when the runner sent it, whatever the threads'
    timing: a run repeats itself. The wait is for at most the two batches in flight.
    """

    def __init__(self, net: KataGoNet, version: int = 0) -> None:
        self.version = version
        self._evaluator = TorchEvaluator(net)
        self._answered = 0
        self._changed = threading.Condition()

    def set(self, net: KataGoNet, version: int, submitted: int) -> None:
        evaluator = TorchEvaluator(net)
        with self._changed:
            self._changed.wait_for(lambda: self._answered >= submitted)
            self._evaluator, self.version = evaluator, version

    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        try:
            return self._evaluator.evaluate(spatial, globals)
        finally:
            with self._changed:
                self._answered += 1
                self._changed.notify_all()


@dataclass
class LoopResult:
    """What a run of the loop made. Version 0 is the starting net, version k the k-th candidate;
    each record's `model_version` is the version that played it (the one current when it began)."""

    start_net: KataGoNet
    candidates: list[KataGoNet] = field(default_factory=list)
    records: list[game_pb2.GameRecord] = field(default_factory=list)
    samples: int = 0  # training samples the learner took
    losses: list[dict[str, float]] = field(default_factory=list)  # the step reports, in order

    @property
    def final_net(self) -> KataGoNet:
        return self.candidates[-1] if self.candidates else self.start_net

    def games_of(self, version: int) -> list[game_pb2.GameRecord]:
        return [r for r in self.records if r.model_version == version]


def learn_in_process(config: Config, learner: Learner, games: int, *, seed: int = 0,
                     on_game: Callable[[game_pb2.GameRecord, LoopResult], None] | None = None,
                     until: Callable[[LoopResult], bool] | None = None) -> LoopResult:
    """Run the loop for `games` self-play games at `config`'s self-play and search settings,
    training `learner` (on its own window) as described in the module docstring.

    The self-play net starts as a copy of `learner.model` and is replaced by each candidate.
    `on_game` is called after each finished game has been trained on (for progress output);
    `until`, checked then too, ends the loop early when it returns True (a CPU budget).
    """
    if games < 1:
        raise ValueError(f"games must be >= 1, got {games}")
    window = learner.window
    result = LoopResult(start_net=copy.deepcopy(learner.model).cpu().eval())
    net = CurrentNet(result.start_net)
    runner = SelfplayRunner.from_config(config, net, seed=seed, id_prefix=f"loop{seed}")
    for record in runner.run(games):
        window.append(record.id, window_rows(record, window.pos_len))
        result.records.append(record)
        while learner.can_train():
            result.losses.append(learner.step())
            result.samples += config.trainer.batch_size
            if learner.snapshot_due() and learner.take_snapshot():
                result.candidates.append(learner.candidate())
                net.set(result.candidates[-1], len(result.candidates), runner.stats.batches)
        if net.version != runner.model_version:  # the runner waits here, between its batches
            runner.cache.clear()  # the old net's evaluations (but those of the batches in flight)
            runner.model_version = net.version  # games started from now on carry the new version
        if on_game is not None:
            on_game(record, result)
        if until is not None and until(result):
            break  # the runner's games in progress are dropped with its generator
    return result
