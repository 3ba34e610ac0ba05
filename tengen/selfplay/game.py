"""One self-play game (KataGo paper §6 and Appendix C), written as a generator over searches.

`SelfPlayGame(tree, settings, seed).play()` is a generator: it sets up a search on its `Tree`
(a full or fast move search, or a one-visit evaluation of the raw policy) and yields; whoever
drives it (tengen.selfplay.runner, which batches the leaves of many games) runs that search to
`tree.done` and resumes it. When the game is over the generator returns its `GameRecord`.

Per game (Appendix C): board size from the preset's weights; komi ~ N(mean, 1) (5%: stdev 10)
rounded to a half point; ko rule positional or situational and multi-stone suicide on or off,
uniformly; KataGo scoring. 5% of games are handicap games where Black first gets extra free moves
sampled from the raw policy (none on boards up to 10x10, up to 1/2/3 from 11/15/19), followed in
90% of them by komi compensation (komi += the net's predicted score lead, a few times). The first
r ~ Exp(mean 0.04 B^2) moves come from the raw policy. In 5% of games, after r ~ Exp(mean
0.025 B^2) turns, the game branches permanently: 3-10 random legal moves each get one evaluation,
the best for the mover is played and komi compensates (§6.2.2).

Per turn (§6.1, §6.2): playout cap randomization - with probability p a full search of N visits
(Dirichlet noise, root temperature, forced playouts, a fresh tree), recorded as a training turn
with its pruned policy target; otherwise a fast search of n visits with no noise that keeps the
previous tree as a visit cap, not recorded. The move is drawn from the (pruned) visit counts raised
to 1/T, T decaying from 0.8 to 0.2 with a half-life of B turns (B = the board's side). No
resignation: when for 5 turns the losing side's best winrate has stayed under 5%, full searches
shrink towards n visits and their rows weigh 0.1 + 0.9 lambda (§6.2.1; see `lopsided_factor`).
Policy surprise weighting (KataGo's "other methods" notes): with `surprise_weighting` on, each full
search also records its policy surprise, KL(policy target || root prior), from which the trainer
writes surprising positions into the window more often (tengen.loop.rows.frequency_weights).
Side branches (§6.2.2): after 2.5% of search turns the game branches temporarily from the
position before the move just played: an alternative move (any legal board move but the one
played) is drawn from the net's raw policy at temperature 1 (70%), 2 (25%) or infinity (5%), and
the position after it gets a full search, recorded as a `SideBranch` of the GameRecord (its row's
value target is that search's value; it has no score or ownership target). A quarter of the time
the branch goes on: the search's own move choice is played and the next position searched, and so
on recursively (the paper says only "continued for an additional move"; playing the search's
choice keeps the branch about how the bad move is answered). Then the game resumes from the main
line. The branch draws its randomness from a stream of its own, so the main line makes the same
random choices as with branching off.

Endgame (§6.2.3): the game ends at once when every point is pass-alive, and once the opponent has
passed four times in a row, moves in pass-alive territory are not searched. Not done: the
second heuristic, a tiny root bias against moves where the net's ownership says the outcome is
settled (the tree does not keep the net's ownership output).
"""
from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Generator

import numpy as np

from tengen.config import Config
from tengen.go import passalive
from tengen.go.board import BLACK, WHITE, Board
from tengen.go.rules import Rules
from tengen.loop.rows import MAX_POLICY_SURPRISE
from tengen.proto import game_pb2
from tengen.search.mcts import Tree
from tengen.search.single_search import SearchResult, read_result

# One yield of the game generator: "run the search that is set up on my tree". A whole game returns
# its record; a part of one (komi compensation, a turn, a branch) returns nothing.
GameSteps = Generator[None, None, game_pb2.GameRecord]
PartSteps = Generator[None, None, None]


@dataclass
class SelfplaySettings:
    """Everything a game needs to know. The fields without a default are the preset's (their
    defaults live in tengen.config only: build this with `from_config`); the rest are the paper's."""

    board_sizes: list[int]
    board_size_weights: list[float]
    komi_mean: float
    komi_stdev: float
    wide_komi_prob: float
    handicap_prob: float
    max_moves_factor: float
    full_visits: int
    fast_visits: int
    full_search_prob: float
    temperature_start: float
    temperature_end: float
    surprise_weighting: bool  # record each full search's policy surprise (module docstring)
    wide_komi_stdev: float = 10.0
    handicap_compensation_prob: float = 0.9
    komi_compensation_rounds: int = 3
    opening_moves_mean: float = 0.04  # x B^2
    permanent_branch_prob: float = 0.05
    permanent_branch_turn_mean: float = 0.025  # x B^2
    permanent_branch_candidates: tuple[int, int] = (3, 10)
    lopsided_winrate: float = 0.05
    lopsided_turns: int = 5
    lopsided_min_weight: float = 0.1
    pass_alive_passes: int = 4  # opponent passes in a row before pass-alive territory is off limits
    side_branch_prob: float = 0.025  # per search turn (§6.2.2)
    # (probability, temperature) of the raw policy the alternative move is drawn from
    side_branch_temperatures: tuple[tuple[float, float], ...] = ((0.7, 1.0), (0.25, 2.0), (0.05, math.inf))
    side_branch_continue_prob: float = 0.25  # a branch goes on for another search

    @classmethod
    def from_config(cls, config: Config, samples: int | None = None) -> "SelfplaySettings":
        """The preset's settings for games of a net trained on `samples` (the curriculum's boards,
        GameConfig.boards_at; None: the final boards)."""
        game, search = config.game, config.search
        boards = game.boards_at(samples)
        return cls(
            board_sizes=list(boards.sizes), board_size_weights=list(boards.weights),
            komi_mean=boards.komi_mean, komi_stdev=game.komi_stdev, wide_komi_prob=game.wide_komi_prob,
            handicap_prob=game.handicap_prob, max_moves_factor=game.max_moves_factor,
            full_visits=search.full_visits, fast_visits=search.fast_visits,
            full_search_prob=search.full_search_prob, temperature_start=search.temperature_start,
            temperature_end=search.temperature_end, surprise_weighting=config.selfplay.surprise_weighting,
        )


def max_handicap(side: int) -> int:
    """Appendix C: extra free Black moves allowed by board size."""
    if side <= 10:
        return 0
    if side <= 14:
        return 1
    if side <= 18:
        return 2
    return 3


def move_temperature(turn: int, side: float, start: float, end: float) -> float:
    """T decays from `start` to `end` with a half-life of `side` turns."""
    return end + (start - end) * 0.5 ** (turn / side)


def sample_by_visits(moves: np.ndarray, visits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """A move drawn proportionally to visits^(1 / temperature)."""
    positive = visits > 0
    if not positive.any():
        raise ValueError("no move has visits")
    logs = np.log(visits[positive].astype(np.float64)) / temperature
    weights = np.exp(logs - logs.max())
    return int(rng.choice(moves[positive], p=weights / weights.sum()))


def random_rules(rng: np.random.Generator) -> Rules:
    """Appendix C: positional or situational superko, suicide on or off, uniformly; KataGo scoring."""
    ko = "positional" if rng.random() < 0.5 else "situational"
    return Rules(ko=ko, suicide=bool(rng.random() < 0.5), scoring="katago")


def lopsided_factor(black_winrates: list[float], turns: int, threshold: float) -> float | None:
    """lambda of §6.2.1, or None while the game is not lopsided.

    The game is lopsided when over the last `turns` searches the losing side's winrate stayed
    below `threshold`; p is its highest winrate over those turns and lambda = p / threshold, from
    1 (just lopsided) down to 0 (hopeless). Full searches then use lambda N + (1 - lambda) n
    visits and rows weigh 0.1 + 0.9 lambda. (The paper's printed visit formula has n and N the
    other way round, which would search hopeless positions hardest; its stated intent, and the
    weight formula, point this way.)
    """
    if len(black_winrates) < turns:
        return None
    recent = np.asarray(black_winrates[-turns:])
    for loser in (recent, 1.0 - recent):
        if np.all(loser < threshold):
            return float(loser.max()) / threshold
    return None


class SelfPlayGame:
    """One game; `play()` is the generator described in the module docstring."""

    def __init__(self, tree: Tree, settings: SelfplaySettings, seed: int,
                 game_id: str | None = None, model_name: str = "", model_version: int = 0) -> None:
        if not settings.board_sizes or len(settings.board_sizes) != len(settings.board_size_weights):
            raise ValueError("board_sizes and board_size_weights must be non-empty and of one length")
        self.tree = tree
        self.settings = settings
        self.rng = np.random.default_rng(seed)
        self.branch_rng = np.random.default_rng([seed, 1])  # side branches only: the main line's draws stay put
        self.game_id = game_id or uuid.uuid4().hex
        self.model_name = model_name
        self.model_version = model_version
        self.searches = {"full": 0, "fast": 0, "raw": 0, "side": 0}
        self.board: Board | None = None
        self.prev: list[Board | None] = [None, None]  # positions 1 and 2 turns ago
        self.moves: list[game_pb2.Move] = []
        self.side_branches: list[game_pb2.SideBranch] = []
        self.black_winrates: list[float] = []
        self.pass_streak = {BLACK: 0, WHITE: 0}  # each player's passes in a row

    def _board(self) -> Board:
        """The board of the game in progress (`play()` sets it up)."""
        if self.board is None:
            raise RuntimeError("the game has no board before play()")
        return self.board

    # ---------------------------------------------------------------- game setup

    def _random_komi(self, area: int) -> float:
        s = self.settings
        stdev = s.wide_komi_stdev if self.rng.random() < s.wide_komi_prob else s.komi_stdev
        value = float(np.clip(self.rng.normal(s.komi_mean, stdev), s.komi_mean - 3 * stdev, s.komi_mean + 3 * stdev))
        return _round_komi(value, area)

    def _new_board(self) -> Board:
        s = self.settings
        weights = np.asarray(s.board_size_weights, np.float64)
        side = int(self.rng.choice(s.board_sizes, p=weights / weights.sum()))
        return Board(side, side, random_rules(self.rng), self._random_komi(side * side))

    # ---------------------------------------------------------------- moves

    def _play(self, move: int, color: game_pb2.Color, result: SearchResult | None, full: bool, weight: float) -> None:
        """Play `move` for `color` on the board and the tree, and record it."""
        board = self._board()
        if board.to_move != color:
            raise ValueError(f"{color} plays but {board.to_move} is to move")
        self.moves.append(_move_record(move, color, result, full, weight, self.settings.surprise_weighting))
        self.pass_streak[color] = self.pass_streak[color] + 1 if move == board.pass_move else 0
        self.prev = [board.copy(), self.prev[0]]
        board.play(move)
        self.tree.advance(move)

    def _set_to_move(self, color: int) -> None:
        """Let `color` move next (Black's free handicap moves)."""
        board = self._board()
        if board.to_move != color:
            board.to_move = color
            self.tree.set_position(board, *self.prev)

    def _evaluate(self) -> Generator[None, None, SearchResult]:
        """One evaluation of the current position (the raw policy, value and score)."""
        self.tree.set_position(self.board, *self.prev)
        self.tree.start_search(1)
        self.searches["raw"] += 1
        yield
        return read_result(self.tree)

    def _raw_policy_move(self, temperature: float = 1.0,
                         allow_pass: bool = False) -> Generator[None, None, tuple[int, SearchResult]]:
        result = yield from self._evaluate()
        candidates = result.raw_policy > 0
        if not allow_pass:
            candidates[-1] = False
        if not candidates.any():
            return self._board().pass_move, result
        return draw_from_policy(result.raw_policy, candidates, temperature, self.rng), result

    def _compensate_komi(self) -> PartSteps:
        """Set komi so the net predicts an even game: komi += Black's predicted lead, a few
        times (Appendix C, §6.2.2)."""
        board = self._board()
        area = board.x_size * board.y_size
        for _ in range(self.settings.komi_compensation_rounds):
            result = yield from self._evaluate()
            black_lead = result.score_mean if board.to_move == BLACK else -result.score_mean
            komi = _round_komi(board.komi + black_lead, area)
            if komi == board.komi:
                break
            self.board = board = _with_komi(board, komi)  # (prev only feeds ladder planes: komi-free)
        self.tree.set_position(board, *self.prev)

    def _permanent_branch(self) -> PartSteps:
        """§6.2.2: 3-10 random legal moves, one evaluation each; play the mover's favourite."""
        board = self._board()
        legal = np.flatnonzero(board.legal_moves()[:-1])
        if len(legal) == 0:
            return
        low, high = self.settings.permanent_branch_candidates
        count = min(len(legal), int(self.rng.integers(low, high + 1)))
        best_move, best_value = -1, math.inf
        for move in self.rng.choice(legal, size=count, replace=False):
            after = board.copy()
            after.play(int(move))
            self.tree.set_position(after, board, self.prev[0])
            self.tree.start_search(1)
            self.searches["raw"] += 1
            yield
            value = self.tree.root_value()  # the opponent's view: lower is better for the mover
            if value["utility"] < best_value:
                best_move, best_value = int(move), value["utility"]
        self.tree.set_position(board, *self.prev)
        self._play(best_move, board.to_move, None, False, 1.0)
        yield from self._compensate_komi()

    def _allowed_moves(self) -> np.ndarray | None:
        """Once the opponent has passed `pass_alive_passes` times in a row, moves inside either
        player's pass-alive territory are off limits (§6.2.3)."""
        board = self._board()
        if self.pass_streak[3 - board.to_move] < self.settings.pass_alive_passes:
            return None
        territory = passalive.pass_alive_map(board).ravel() != 0
        return np.append(~territory, True)

    # ---------------------------------------------------------------- the game

    def play(self) -> GameSteps:
        s = self.settings
        self.board = self._new_board()
        board_len = math.sqrt(self.board.x_size * self.board.y_size)
        self.tree.set_position(self.board)
        handicap = 0
        if self.rng.random() < s.handicap_prob and max_handicap(self.board.x_size) > 0:
            handicap = int(self.rng.integers(1, max_handicap(self.board.x_size) + 1))
            for _ in range(handicap):
                self._set_to_move(BLACK)
                move, result = yield from self._raw_policy_move()
                self._play(move, BLACK, result, False, 1.0)
            self._set_to_move(BLACK)  # Black's normal first move follows the free ones
            if self.rng.random() < s.handicap_compensation_prob:
                yield from self._compensate_komi()
        branch_turn = None
        if self.rng.random() < s.permanent_branch_prob:
            branch_turn = int(round(self.rng.exponential(s.permanent_branch_turn_mean * board_len**2)))
        opening = int(round(self.rng.exponential(s.opening_moves_mean * board_len**2)))
        max_moves = int(s.max_moves_factor * self.board.x_size * self.board.y_size)
        end_reason = game_pb2.MOVE_CAP
        turn = 0
        while len(self.moves) < max_moves:
            if self.board.game_over:
                end_reason = game_pb2.TWO_PASSES
                break
            if passalive.all_pass_alive(self.board):
                end_reason = game_pb2.PASS_ALIVE
                break
            if turn == branch_turn:
                yield from self._permanent_branch()
            elif turn < opening:
                move, result = yield from self._raw_policy_move()
                self._play(move, self.board.to_move, result, False, 1.0)
            else:
                yield from self._search_turn(turn, board_len)
            turn += 1
        return self._record(handicap, end_reason)

    def _search_turn(self, turn: int, board_len: float) -> PartSteps:
        s = self.settings
        lam = lopsided_factor(self.black_winrates, s.lopsided_turns, s.lopsided_winrate)
        weight = 1.0 if lam is None else s.lopsided_min_weight + (1 - s.lopsided_min_weight) * lam
        full = bool(self.rng.random() < s.full_search_prob)
        allowed = self._allowed_moves()
        full_visits = (
            s.full_visits if lam is None else max(s.fast_visits, round(lam * s.full_visits + (1 - lam) * s.fast_visits))
        )
        if full:
            self.tree.start_search(full_visits, noise=True, forced_playouts=True, allowed=allowed)
        else:
            self.tree.start_search(s.fast_visits, reuse=allowed is None, allowed=allowed)
        self.searches["full" if full else "fast"] += 1
        yield
        result = read_result(self.tree)
        board = self._board()
        black_win = result.win + 0.5 * result.no_result
        self.black_winrates.append(black_win if board.to_move == BLACK else 1.0 - black_win)
        temperature = move_temperature(turn, board_len, s.temperature_start, s.temperature_end)
        move = _choose_move(result, temperature, self.rng)
        self._play(move, board.to_move, result, full, weight)
        if self.branch_rng.random() < s.side_branch_prob:
            yield from self._side_branch(result.raw_policy, full_visits, weight, temperature)

    def _side_branch(self, raw_policy: np.ndarray, visits: int, weight: float, temperature: float) -> PartSteps:
        """§6.2.2: branch off before the move just played (see the module docstring), then put the
        tree back on the main line."""
        s, rng = self.settings, self.branch_rng
        at, at_prev = self.prev  # the branch point (copies, kept as they are) and the turn before it
        if at is None:
            raise RuntimeError("a side branch needs a move played before it")
        main_move = self.moves[-1].move
        candidates = at.legal_moves().astype(bool)
        candidates[[main_move, at.pass_move]] = False
        if not candidates.any():
            return
        probabilities, temperatures = zip(*s.side_branch_temperatures)
        branch_temperature = temperatures[
            rng.choice(len(temperatures), p=np.asarray(probabilities) / sum(probabilities))
        ]
        alternative = draw_from_policy(raw_policy, candidates, branch_temperature, rng)
        board, prev = at.copy(), (at, at_prev)
        board.play(alternative)
        branch = game_pb2.SideBranch(move_index=len(self.moves) - 1, alternative=alternative)
        while not (board.game_over or passalive.all_pass_alive(board)):
            self.tree.set_position(board, *prev)
            self.tree.start_search(visits, noise=True, forced_playouts=True)
            self.searches["side"] += 1
            yield
            result = read_result(self.tree)
            if not (result.pruned > 0).any():  # a one-visit search (lopsided game, tiny n): no policy target
                break
            move = _choose_move(result, temperature, rng)
            branch.searches.append(_move_record(move, board.to_move, result, True, weight, s.surprise_weighting))
            if rng.random() >= s.side_branch_continue_prob:
                break
            prev = (board.copy(), prev[0])
            board.play(move)
        if branch.searches:
            self.side_branches.append(branch)
        self.tree.set_position(self.board, *self.prev)

    def _record(self, handicap: int, end_reason: game_pb2.EndReason) -> game_pb2.GameRecord:
        board = self._board()
        score = passalive.final_score(board)
        record = game_pb2.GameRecord(
            id=self.game_id,
            x_size=board.x_size,
            y_size=board.y_size,
            rules=board.rules.to_string(),
            komi=board.komi,
            handicap=handicap,
            first_to_move=game_pb2.BLACK,
            model_version=self.model_version,
            model_name=self.model_name,
            final_score=score,
            result=passalive.result_string(score),
            end_reason=end_reason,
        )
        record.moves.extend(self.moves)
        record.side_branches.extend(self.side_branches)
        record.ownership.extend(int(o) for o in passalive.ownership(board).ravel())
        record.created.GetCurrentTime()
        return record


def _move_record(
    move: int, color: game_pb2.Color, result: SearchResult | None, full: bool, weight: float, surprise: bool
) -> game_pb2.Move:
    """A GameRecord move; with a search result, its value and (full searches) its policy target
    and, with `surprise`, its policy surprise."""
    record = game_pb2.Move(move=move, color=color, full_search=full, weight=weight)
    if result is not None:
        record.value_win = result.win
        record.value_loss = result.loss
        record.value_no_result = max(0.0, 1.0 - result.win - result.loss)
        record.score_mean = result.score_mean
        if full:
            moves, visits = result.policy_target()
            record.policy_moves.extend(int(m) for m in moves)
            record.policy_visits.extend(int(v) for v in visits)
            if surprise:
                record.policy_surprise = policy_surprise(result)
    return record


def policy_surprise(result: SearchResult) -> float:
    """KL(policy target || prior) in nats, the prior being the search's own at the root: the net's
    policy after root temperature and Dirichlet noise, as KataGo uses ("noised softmaxed"), not
    the raw one. Priors are floored at exp(-MAX_POLICY_SURPRISE), which bounds the result."""
    keep = result.pruned > 0
    target = result.pruned[keep] / result.pruned[keep].sum()
    prior = np.maximum(result.priors[keep], math.exp(-MAX_POLICY_SURPRISE))
    return float(np.clip(np.sum(target * np.log(target / prior)), 0.0, MAX_POLICY_SURPRISE))


def _choose_move(result: SearchResult, temperature: float, rng: np.random.Generator) -> int:
    """The move a search turn plays: drawn from the pruned visits at `temperature`."""
    if (result.pruned > 0).any():
        return sample_by_visits(result.moves, result.pruned, temperature, rng)
    return int(np.argmax(result.raw_policy))  # a one-visit search: only the root was evaluated


def draw_from_policy(policy: np.ndarray, candidates: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """A move among `candidates` (bool mask) drawn from `policy` ** (1 / temperature); uniformly at
    temperature infinity, or when the policy gives the candidates no weight."""
    weights = np.where(candidates, np.asarray(policy, np.float64), 0.0)
    if math.isinf(temperature) or weights.sum() <= 0:
        weights = candidates.astype(np.float64)
    elif temperature != 1.0:
        weights = weights ** (1.0 / temperature)
    return int(rng.choice(len(weights), p=weights / weights.sum()))


def _round_komi(value: float, area: int) -> float:
    """Nearest whole or half point, within the board's +-area."""
    return float(np.clip(round(value * 2) / 2, -area, area))


def _with_komi(board: Board, komi: float) -> Board:
    """`board` replayed from its start under another komi (the komi is fixed at construction)."""
    out = Board(board.x_size, board.y_size, board.rules, komi)
    for color, move in board.history:
        if out.to_move != color:
            out.to_move = color
        out.play(move)
    if out.to_move != board.to_move:
        out.to_move = board.to_move
    return out
