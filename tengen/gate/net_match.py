"""Games between two nets with gating's settings (KataGo paper §6.2.4, Appendices D and E).

`MatchGame(trees, settings, index, seed).play()` is a generator like SelfPlayGame's: it sets up a
search on the tree of the side to move and yields; tengen.selfplay.runner runs it. Each side has a
tree of its own (and through it its own NN cache, since the nets differ): after every move both
trees advance, so each side's next search reuses what it had searched below the new position.

Appendix D's changes to self-play: board size and rules still random (App. C), but komi fixed at
7.5 and no handicap; every move from a full search of `visits` (the tree kept from earlier moves
counts towards it: "searching until the tree is size N"); move temperature starting at 0.5
(decaying to the self-play end value with a half-life of B turns); no Dirichlet noise, no forced
playouts, no playout cap randomization, and the root with the same FPU reduction as the rest of
the tree (tengen.search.mcts does that for searches without noise). Resignation: once for the last
5 turns the searches of both sides gave the same player a winrate under 5%, that player resigns.

Colours: game `index` has side `index % 2` as Black, and games 2k and 2k+1 share board size and
rules, so each side plays both colours under the same conditions.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Generator, Sequence

import numpy as np

from tengen.config import Config, SearchConfig
from tengen.go import passalive
from tengen.go.board import BLACK, WHITE, Board
from tengen.loop.ledger import END_MOVE_CAP, END_PASS_ALIVE, END_RESIGN, END_TWO_PASSES, MatchGameResult
from tengen.nn.evaluator import Evaluator
from tengen.search.mcts import Tree
from tengen.search.nn_cache import NNCache
from tengen.search.single_search import read_result
from tengen.selfplay.game import move_temperature, random_rules, sample_by_visits
from tengen.selfplay.runner import BatchedRunner, Slot, per_evaluator


@dataclass
class NetMatchSettings:
    """How two nets play each other. The fields without a default are the preset's (their defaults
    live in tengen.config only: build this with `from_config`); resigning is the paper's."""

    board_sizes: list[int]
    board_size_weights: list[float]
    komi: float
    visits: int
    temperature_start: float
    temperature_end: float
    max_moves_factor: float
    resign_winrate: float = 0.05
    resign_turns: int = 5

    @classmethod
    def from_config(cls, config: Config, samples: int | None = None) -> "NetMatchSettings":
        """The preset's match settings for a candidate trained on `samples`: the boards it would
        play once served (GameConfig.boards_at; None: the final boards)."""
        game, gating = config.game, config.gating
        boards = game.boards_at(samples)
        return cls(board_sizes=list(boards.sizes), board_size_weights=list(boards.weights),
                   komi=gating.komi, visits=gating.visits, temperature_start=gating.temperature,
                   temperature_end=min(config.search.temperature_end, gating.temperature),
                   max_moves_factor=game.max_moves_factor)


def resigning_color(black_winrates: Sequence[float], turns: int, threshold: float) -> int | None:
    """The colour that resigns now, or None: BLACK (WHITE) when each of the last `turns` searches,
    whichever side ran it, gave Black (White) a winrate under `threshold`."""
    if len(black_winrates) < turns:
        return None
    recent = np.asarray(black_winrates[-turns:])
    if np.all(recent < threshold):
        return BLACK
    if np.all(1.0 - recent < threshold):
        return WHITE
    return None


class MatchGame:
    """One game of a match; `play()` is the generator described in the module docstring."""

    def __init__(self, trees: Sequence[Tree], settings: NetMatchSettings, index: int, seed: int = 0) -> None:
        if len(trees) != 2:
            raise ValueError(f"a match game needs one tree per side, got {len(trees)}")
        if not settings.board_sizes or len(settings.board_sizes) != len(settings.board_size_weights):
            raise ValueError("board_sizes and board_size_weights must be non-empty and of one length")
        if index < 0:
            raise ValueError(f"game index must be >= 0, got {index}")
        self.trees = list(trees)
        self.settings = settings
        self.index = index
        self.black_side = index % 2
        self.conditions_rng = np.random.default_rng([seed, index // 2])  # shared by the colour pair
        self.rng = np.random.default_rng([seed, index, 1])
        self.board: Board | None = None
        self.moves: list[int] = []
        self.black_winrates: list[float] = []

    def _new_board(self) -> Board:
        s, rng = self.settings, self.conditions_rng
        weights = np.asarray(s.board_size_weights, np.float64)
        side = int(rng.choice(s.board_sizes, p=weights / weights.sum()))
        return Board(side, side, random_rules(rng), s.komi)

    def _side_to_move(self, board: Board) -> int:
        return self.black_side if board.to_move == BLACK else 1 - self.black_side

    def play(self) -> Generator[None, None, MatchGameResult]:
        s = self.settings
        self.board = board = self._new_board()
        for tree in self.trees:
            tree.set_position(board)
        board_len = math.sqrt(board.x_size * board.y_size)
        max_moves = int(s.max_moves_factor * board.x_size * board.y_size)
        end, resigned = END_MOVE_CAP, None
        while len(self.moves) < max_moves:
            if board.game_over:
                end = END_TWO_PASSES
                break
            if passalive.all_pass_alive(board):
                end = END_PASS_ALIVE
                break
            tree = self.trees[self._side_to_move(board)]
            tree.start_search(s.visits, reuse=True)
            yield
            result = read_result(tree)
            black_win = result.win + 0.5 * result.no_result
            self.black_winrates.append(black_win if board.to_move == BLACK else 1.0 - black_win)
            resigned = resigning_color(self.black_winrates, s.resign_turns, s.resign_winrate)
            if resigned is not None:
                end = END_RESIGN
                break
            temperature = move_temperature(len(self.moves), board_len, s.temperature_start, s.temperature_end)
            if not (result.visits > 0).any():  # a one-visit search: only the root was evaluated
                move = int(np.argmax(result.raw_policy))
            elif temperature <= 0:
                move = result.best_move()
            else:
                move = sample_by_visits(result.moves, result.visits, temperature, self.rng)
            board.play(move)
            for t in self.trees:
                t.advance(move)
            self.moves.append(move)
        if resigned is not None:
            score, winner = None, "W" if resigned == BLACK else "B"
        else:
            score = float(passalive.final_score(board))
            winner = "B" if score > 0 else "W" if score < 0 else "draw"
        return MatchGameResult(index=self.index, black_side=self.black_side, winner=winner, score=score, end=end,
                               moves=len(self.moves), board_size=board.x_size, rules=board.rules.to_string(),
                               komi=board.komi, move_list=tuple(int(m) for m in self.moves))


class MatchRunner(BatchedRunner):
    """Plays match games between evaluators[0] and evaluators[1], `games_in_parallel` at a time,
    through the self-play runner's batched loop; `play(indices)` yields MatchGameResults."""

    def __init__(self, evaluators: Sequence[Evaluator], settings: NetMatchSettings,
                 search: SearchConfig | Sequence[SearchConfig], *, games_in_parallel: int = 16,
                 leaves_per_game: int = 1, seed: int = 0) -> None:
        """`search`: the search settings of both sides, or one per evaluator (an A/B of a search
        method plays each net with its own arm's search)."""
        if len(evaluators) != 2:
            raise ValueError(f"a match has two evaluators, got {len(evaluators)}")
        self.settings = settings
        side = max(settings.board_sizes)
        searches = per_evaluator(search, 2)
        caches = [NNCache(s.nn_cache_size, side * side, ownership=s.ending_bonus_points > 0) for s in searches]
        super().__init__(evaluators, caches, searches, side, games_in_parallel=games_in_parallel,
                         leaves_per_game=leaves_per_game, seed=seed)
        self._indices: list[int] = []

    def play(self, indices: Sequence[int], stop: Any = None) -> Generator[MatchGameResult, None, None]:
        """Play the games with these indices (in this order, as slots come free); results come in
        the order the games finish. Closing the iterator drops the games in progress."""
        if not indices or len(set(indices)) != len(indices) or min(indices) < 0:
            raise ValueError("game indices must be distinct, non-negative and at least one")
        self._indices = list(indices)
        return self.run(len(self._indices), stop=stop)

    def _new_game(self, slot: Slot, index: int) -> tuple[MatchGame, Generator[None, None, MatchGameResult]]:
        game = MatchGame(slot.trees, self.settings, self._indices[index], seed=self.seed)
        return game, game.play()
