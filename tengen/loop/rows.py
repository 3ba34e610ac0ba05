"""GameRecord -> training rows, by replaying the game with the rules engine.

Rows are built from the moves, not stored features, so the input encoding can change without
regenerating data (DESIGN.md, data flow 2). Only full-search turns (playout cap randomization,
paper §3.1/§6) become rows: the main line's, then those of the side branches (§6.2.2) in record
order. Targets (paper §4.1-4.2, App. B), all from the view of the player to move at that turn:

- policy: the pruned root visit counts of that turn, normalised;
- opponent policy: the next turn's policy target when the next turn was a full search, else a
  one-hot of the move actually played next (a sample of the opponent's reply); all zeros after the
  last move (zero cross-entropy, so that row simply has no opponent-policy loss);
- value: (win, loss, no-result) of the final score; a draw (score 0) is half win, half loss;
- score: the final score (komi included) from the mover's side;
- ownership: the final owner of each point, +1 the mover's, -1 the opponent's, 0 neither;
- weight: the turn's sample weight;
- final_weight: 1, the weight of the score and ownership targets;
- short-term value and score (KataGo's "other methods" notes, short-term targets): the searches'
  own values averaged exponentially over the turns ahead, see `short_term_targets`; with
  short_term_weight 1 (0 for side-branch rows, which have none).

A side-branch row (a position the game never reached, so it has no final position) takes the
search's own (win, loss, no-result) as its value target and has final_weight 0: its score and
ownership targets (left 0) are not trained on. Its opponent policy is the next search of its
branch, if any. It has no short-term targets either (short_term_weight 0): a branch is a search or
a few, with no outcome to end on, so the average would be mostly its own search's value, which is
already its value target.

Policy surprise weighting (KataGo's "other methods" notes, used from its g170 run): when self-play
recorded each full search's policy surprise, the window gets a row more or less often than once:
`window_rows` writes it floor(w) times and once more with probability w - floor(w), w its
frequency weight (`frequency_weights`), with draws seeded by the game id so a record always
gives the same rows. The rows' loss weights do not change.

Boards smaller than the buffer (`pos_len`) sit in its top-left corner, the rest zero, and policy
vectors are indexed `y * pos_len + x` with pass last, so rows of every board size share one array
layout (the net masks the rest, paper §4.3). Random symmetries are applied when sampling
(tengen.train.window), not here.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from tengen.config import MAX_MOVES_FACTOR
from tengen.go import passalive, planes
from tengen.go.board import Board
from tengen.go.rules import IllegalMoveError, parse_rules
from tengen.loop.ids import id_problem
from tengen.proto import game_pb2

# Sample weights are 1, or less in lopsided games (§3.5); a larger one would act as a learning
# rate multiplier on one row (3e38 turned every weight into NaN within 30 seconds).
MAX_WEIGHT = 1.0
# Policy surprise, KL(target || root prior) in nats: self-play floors the prior at
# exp(-MAX_POLICY_SURPRISE) (~1e-13), which bounds it; a larger value is not a search's.
MAX_POLICY_SURPRISE = 30.0
# The notes' split of a game's frequency weight: this share in proportion to surprise, the rest
# uniform.
SURPRISE_SHARE = 0.5
# A value target's three categories, the order of the net's value head.
WIN, LOSS, NO_RESULT = 0, 1, 2
_VALUE_SUM_TOLERANCE = 1e-3


class RecordError(ValueError):
    """A GameRecord that cannot be trained on; `.reason` says why (it goes to the DLQ)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass
class TrainingRows:
    """The rows of one game, N = number of full-search turns (main line, then side branches; a
    window's copy has each repeated: `window_rows`), L = the buffer's board length."""

    x_size: int
    y_size: int
    spatial: np.ndarray  # float32 [N, NUM_SPATIAL, L, L] (binary planes, tengen.go.planes)
    global_inputs: np.ndarray  # float32 [N, NUM_GLOBAL]
    policy: np.ndarray  # float32 [N, L*L + 1], sums to 1
    opponent_policy: np.ndarray  # float32 [N, L*L + 1], sums to 1 or is all zero
    value: np.ndarray  # float32 [N, 3] (win, loss, no-result)
    score: np.ndarray  # float32 [N]
    ownership: np.ndarray  # float32 [N, L, L] in {-1, 0, 1}
    weight: np.ndarray  # float32 [N]
    # float32 [N]: weight of the score and ownership targets, 0 for side-branch rows; None = all 1
    final_weight: np.ndarray | None = None
    # float32 [N, 2]: short-term (value, score) targets (`short_term_targets`), and float32 [N] their
    # weight: 1, 0 for side-branch rows; None = no short-term targets (rows from an older window).
    short_term: np.ndarray | None = None
    short_term_weight: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.weight)

    @property
    def pos_len(self) -> int:
        return self.spatial.shape[-1]

    def final_weights(self) -> np.ndarray:
        """final_weight, with None read as all 1."""
        return np.ones(len(self), np.float32) if self.final_weight is None else self.final_weight

    def short_term_weights(self) -> np.ndarray:
        """short_term_weight, with None read as all 0 (no targets)."""
        return np.zeros(len(self), np.float32) if self.short_term_weight is None else self.short_term_weight

    def repeated(self, counts: np.ndarray) -> "TrainingRows":
        """Each row i `counts[i]` times, in order."""
        repeated: dict[str, Any] = {
            f.name: np.repeat(value, counts, axis=0)
            for f in dataclasses.fields(self) if isinstance(value := getattr(self, f.name), np.ndarray)
        }
        return dataclasses.replace(self, **repeated)


def decode(data: bytes) -> game_pb2.GameRecord:
    """Parse serialized GameRecord bytes; RecordError if they are not one."""
    record = game_pb2.GameRecord()
    try:
        record.ParseFromString(data)
    except Exception as err:  # protobuf raises DecodeError, or RuntimeWarning-ish errors on junk
        raise RecordError(f"malformed GameRecord bytes: {err}") from err
    return record


def validate(record: game_pb2.GameRecord) -> None:
    """Raise RecordError(reason) unless the record is well formed and replays legally (its side
    branches included)."""
    _check_fields(record)
    for _ in _positions(record):
        pass


def row_count(record: game_pb2.GameRecord) -> int:
    """How many training rows `record` gives: its full-search turns, side branches included (the
    window gets as many in expectation: see `window_rows`)."""
    return sum(1 for m in record.moves if m.full_search) + sum(len(b.searches) for b in record.side_branches)


def frequency_weights(record: game_pb2.GameRecord) -> np.ndarray:
    """float64 [row_count]: how often each row of `rows_from_record` goes into the window, in
    expectation.

    1 each unless the full searches carry `policy_surprise` s_i: then the n rows' total n is
    split as the notes say, (1 - SURPRISE_SHARE) uniformly and SURPRISE_SHARE in proportion to
    s_i, w_i = (1 - SURPRISE_SHARE) + SURPRISE_SHARE * n * s_i / sum(s) (KataGo's rule with every
    row's weight 1). A game where no search was surprising keeps 1 each.
    """
    searches = _full_searches(record)
    surprise = np.array([m.policy_surprise for m in searches], np.float64)
    total = surprise.sum()
    if not all(m.HasField("policy_surprise") for m in searches) or total <= 0:
        return np.ones(len(searches))
    return (1.0 - SURPRISE_SHARE) + SURPRISE_SHARE * len(searches) * surprise / total


def repeats(record: game_pb2.GameRecord) -> np.ndarray:
    """int64 [row_count]: how many times each row is written: floor(w) and once more with
    probability w - floor(w), w = frequency_weights(record), drawn from a generator seeded by the
    game id (the same record always gives the same counts)."""
    weights = frequency_weights(record)
    seed = int.from_bytes(hashlib.blake2b(record.id.encode(), digest_size=8).digest(), "little")
    whole = np.floor(weights)
    extra = np.random.default_rng(seed).random(len(weights)) < weights - whole
    return whole.astype(np.int64) + extra


def window_rows(record: game_pb2.GameRecord, pos_len: int | None = None) -> TrainingRows:
    """What a window stores of `record`: the rows of `rows_from_record`, row i `repeats(record)[i]`
    times in a row."""
    rows = rows_from_record(record, pos_len)
    return rows.repeated(repeats(record))


def rows_from_record(record: game_pb2.GameRecord, pos_len: int | None = None) -> TrainingRows:
    """Validate `record`, replay it and return the rows of its full-search turns.

    `pos_len` is the buffer's board length (default: the board's own, for square boards);
    it must fit the board.
    """
    from tengen.go import features  # compiled module; imported here so validation needs only the board

    _check_fields(record)
    x_size, y_size = record.x_size, record.y_size
    length = max(x_size, y_size) if pos_len is None else pos_len
    if not (x_size <= length <= planes.MAX_BOARD and y_size <= length):
        raise ValueError(f"pos_len {length} does not fit a {x_size}x{y_size} board (max {planes.MAX_BOARD})")
    n = row_count(record)
    # the optional targets, all present here (written through these names: the fields may be None)
    final_weight = np.ones(n, np.float32)
    short_term = np.zeros((n, 2), np.float32)
    short_term_weight = np.zeros(n, np.float32)
    rows = TrainingRows(
        x_size=x_size,
        y_size=y_size,
        spatial=np.zeros((n, planes.NUM_SPATIAL, length, length), np.float32),
        global_inputs=np.zeros((n, planes.NUM_GLOBAL), np.float32),
        policy=np.zeros((n, length * length + 1), np.float32),
        opponent_policy=np.zeros((n, length * length + 1), np.float32),
        value=np.zeros((n, 3), np.float32),
        score=np.zeros(n, np.float32),
        ownership=np.zeros((n, length, length), np.float32),
        weight=np.zeros(n, np.float32),
        final_weight=final_weight,
        short_term=short_term,
        short_term_weight=short_term_weight,
    )
    main_short_term = short_term_targets(record)
    black_owner = np.zeros((length, length), np.float32)
    black_owner[:y_size, :x_size] = np.asarray(record.ownership, np.float32).reshape(y_size, x_size)
    # Main-line rows first, then side-branch rows, each in record order.
    main_row, branch_row = 0, n - sum(len(b.searches) for b in record.side_branches)
    for pos in _positions(record, keep_history=True):
        move = pos.move
        if not move.full_search:
            continue
        if pos.branch is None:
            row, main_row = main_row, main_row + 1
        else:
            row, branch_row = branch_row, branch_row + 1
        features.encode(pos.board, rows.spatial[row], rows.global_inputs[row], pos.prev1, pos.prev2)
        _policy_into(rows.policy[row], move, x_size, y_size, length)
        line = record.moves if pos.branch is None else record.side_branches[pos.branch].searches
        if pos.index + 1 < len(line):
            reply = line[pos.index + 1]
            if reply.full_search:
                _policy_into(rows.opponent_policy[row], reply, x_size, y_size, length)
            else:
                rows.opponent_policy[row, _buffer_index(reply.move, x_size, y_size, length)] = 1.0
        rows.weight[row] = move.weight
        if pos.branch is not None:  # the search's value; no score or ownership target
            value = np.array([move.value_win, move.value_loss, move.value_no_result], np.float32)
            rows.value[row] = value / value.sum()
            final_weight[row] = 0.0
            continue
        sign = 1.0 if move.color == game_pb2.BLACK else -1.0
        mover_score = sign * record.final_score
        if mover_score > 0:
            rows.value[row, WIN] = 1.0
        elif mover_score < 0:
            rows.value[row, LOSS] = 1.0
        else:
            rows.value[row, WIN] = rows.value[row, LOSS] = 0.5
        rows.score[row] = mover_score
        rows.ownership[row] = sign * black_owner
        short_term[row] = main_short_term[pos.index]
        short_term_weight[row] = 1.0
    return rows


# Short-term targets' mean horizon is 1 / (1 - lambda) turns: 6 on 19x19 (lambda = 5/6, the
# notes' value), shorter in proportion to the board's area, 1 + 5 area / 361 turns (9x9: 2.1 turns,
# lambda = 0.53; 7x7: 1.7, lambda = 0.40), so that it never falls below the current turn alone.
SHORT_TERM_HORIZON_19 = 6.0


def short_term_lambda(area: int) -> float:
    """lambda of the short-term targets for a board of `area` points: 1 - 1 / horizon, horizon =
    1 + (SHORT_TERM_HORIZON_19 - 1) area / 361."""
    return 1.0 - 1.0 / (1.0 + (SHORT_TERM_HORIZON_19 - 1.0) * area / 361.0)


def short_term_targets(record: game_pb2.GameRecord) -> np.ndarray:
    """float32 [len(moves), 2]: for each main-line move t, from its mover's view,
    (1 - lambda) sum_{t' >= t} lambda^(t' - t) x(t'), x = the root search's (win - loss, score mean)
    at t' turned to t's mover's view (negated where the other colour moved), lambda =
    short_term_lambda(area).

    The weight lambda^(T - t) of the turns past the last move T - 1 goes to the final outcome
    (sign of the final score, and the final score), not renormalised away: the game's result is
    what every later search would have found, and renormalising would put ever more weight on the
    last few searches near the end. A move without a search (a raw-policy opening move: its
    values are all 0) passes its weight on to the turns after it. Computed backwards in Black's
    view: y(t) = (1 - lambda) x(t) + lambda y(t + 1), y(T) = the outcome.
    """
    lam = short_term_lambda(record.x_size * record.y_size)
    outcome = np.array([np.sign(record.final_score), record.final_score], np.float64)  # Black's view
    out = np.zeros((len(record.moves), 2), np.float32)
    ahead = outcome
    for t in range(len(record.moves) - 1, -1, -1):
        move = record.moves[t]
        sign = 1.0 if move.color == game_pb2.BLACK else -1.0
        if move.value_win + move.value_loss + move.value_no_result > 0:  # the move had a search
            searched = sign * np.array([move.value_win - move.value_loss, move.score_mean], np.float64)
            ahead = (1.0 - lam) * searched + lam * ahead
        out[t] = sign * ahead
    return out


def _buffer_index(move: int, x_size: int, y_size: int, length: int) -> int:
    """A board move index (`y * x_size + x`, pass last) as an index into the L x L buffer."""
    if move == x_size * y_size:
        return length * length
    y, x = divmod(move, x_size)
    return y * length + x


def _policy_into(out: np.ndarray, move: game_pb2.Move, x_size: int, y_size: int, length: int) -> None:
    visits = np.asarray(move.policy_visits, np.float64)
    for target, share in zip(move.policy_moves, visits / visits.sum()):
        out[_buffer_index(target, x_size, y_size, length)] = share


@dataclass
class _Position:
    """A position that a move (or a side branch's search) of the record was made in."""

    branch: int | None  # None: the main line; else the index of the side branch
    index: int  # the move's index in record.moves, or the search's in the branch's searches
    move: game_pb2.Move
    board: Board  # live: use it before asking for the next position
    prev1: Board | None  # 1 and 2 turns earlier (only with keep_history)
    prev2: Board | None


def _positions(record: game_pb2.GameRecord, keep_history: bool = False) -> Iterator[_Position]:
    """Every move of the main line in order, each followed by the searches of the side branch
    that leaves the main line there (if any). Assumes _check_fields passed."""
    branches = {b.move_index: n for n, b in enumerate(record.side_branches)}
    for index, board, prev1, prev2 in _replay(record, keep_history):
        _check_policy_legal(f"move {index}", record.moves[index], board)
        yield _Position(None, index, record.moves[index], board, prev1, prev2)
        if index in branches:
            yield from _replay_branch(record, branches[index], board, prev1, keep_history)


def _check_policy_legal(where: str, move: game_pb2.Move, board: Board) -> None:
    """A search only visits legal moves: a policy target on an occupied (or otherwise illegal)
    point is not a search's."""
    for target in move.policy_moves:
        if not board.is_legal(target):
            raise RecordError(f"{where}: policy target {target} is illegal there: {board.illegal_reason(target)}")


def _replay_branch(record: game_pb2.GameRecord, number: int, at: Board, prev: Board | None,
                   keep_history: bool) -> Iterator[_Position]:
    """The positions of side branch `number`, which leaves the main line at `at` (the live main
    board before moves[move_index], left untouched; `prev` the position before it)."""
    branch = record.side_branches[number]
    where = f"side branch {number} (at move {branch.move_index})"
    main_move = record.moves[branch.move_index].move
    if branch.alternative == main_move:
        raise RecordError(f"{where}: the alternative {branch.alternative} is the main line's own move")
    board = at.copy()
    prev1, prev2 = (at.copy(), prev) if keep_history else (None, None)
    try:
        board.play(branch.alternative)
    except IllegalMoveError as err:
        raise RecordError(f"{where}: the alternative {branch.alternative} is illegal: {err.reason}") from err
    for k, search in enumerate(branch.searches):
        if board.game_over:
            raise RecordError(f"{where}: search {k} comes after two passes ended the branch")
        if search.color != board.to_move:
            raise RecordError(f"{where}: search {k} is for {_color_name(search.color)} but "
                              f"{_color_name(board.to_move)} is to move")
        _check_policy_legal(f"{where}, search {k}", search, board)
        yield _Position(number, k, search, board, prev1, prev2)
        if keep_history:
            prev1, prev2 = board.copy(), prev1
        try:  # also checks the last search's choice, which is never played on
            board.play(search.move)
        except IllegalMoveError as err:
            raise RecordError(f"{where}: search {k}'s move {search.move} is illegal: {err.reason}") from err


def _replay(
    record: game_pb2.GameRecord, keep_history: bool = False
) -> Iterator[tuple[int, Board, Board | None, Board | None]]:
    """Yield (move number, board before that move, board 1 turn earlier, board 2 turns earlier)
    for each move, then check the end. The earlier boards (for the ladder-history features) are
    kept only with `keep_history`, else None.

    The board is live: consumers must use it before asking for the next item. Assumes
    _check_fields passed.
    """
    x_size, y_size = record.x_size, record.y_size
    board = Board(x_size, y_size, parse_rules(record.rules), record.komi)
    try:
        board.place_stones(black=list(record.initial_black), white=list(record.initial_white))
    except ValueError as err:
        raise RecordError(f"bad initial stones: {err}") from err
    board.to_move = int(record.first_to_move)  # game_pb2.Color uses the board's numbers
    prev1: Board | None = None
    prev2: Board | None = None
    for index, move in enumerate(record.moves):
        if board.game_over:
            raise RecordError(f"move {index}: played after two consecutive passes ended the game")
        if move.color != board.to_move:
            board.to_move = int(move.color)  # e.g. black's free handicap moves
        yield index, board, prev1, prev2
        if keep_history:
            prev1, prev2 = board.copy(), prev1
        try:
            board.play(move.move)
        except IllegalMoveError as err:
            raise RecordError(f"move {index} ({_color_name(move.color)} {move.move}) is illegal: {err.reason}") from err
    if record.end_reason == game_pb2.TWO_PASSES and not board.game_over:
        raise RecordError("end_reason is TWO_PASSES but the moves do not end with two passes")
    if record.end_reason == game_pb2.PASS_ALIVE and not passalive.all_pass_alive(board):
        raise RecordError("end_reason is PASS_ALIVE but the final position is not all pass-alive")
    # The targets must be what the rules make of the final position.
    expected = passalive.final_score(board)
    if not math.isclose(expected, record.final_score, abs_tol=1e-3):
        raise RecordError(f"final_score {record.final_score} but the final position scores {expected}")
    owner = passalive.ownership(board).ravel()
    if not np.array_equal(owner, np.asarray(record.ownership)):
        wrong = int(np.count_nonzero(owner != np.asarray(record.ownership)))
        raise RecordError(f"ownership disagrees with the final position at {wrong} points")


def _color_name(color: int) -> str:
    names: dict[int, str] = {game_pb2.BLACK: "B", game_pb2.WHITE: "W"}
    return names.get(color, f"color {color}")


def _check_fields(record: game_pb2.GameRecord) -> None:
    """Every check that needs no replay; RecordError names the first problem."""
    if not isinstance(record, game_pb2.GameRecord):
        raise RecordError(f"expected a GameRecord, got {type(record).__name__}")
    if problem := id_problem(record.id):
        raise RecordError(f"game id {problem}")
    x_size, y_size = record.x_size, record.y_size
    for name, size in (("x_size", x_size), ("y_size", y_size)):
        if not planes.MIN_BOARD <= size <= planes.MAX_BOARD:
            raise RecordError(f"{name} {size} is outside {planes.MIN_BOARD}..{planes.MAX_BOARD}")
    area = x_size * y_size
    try:
        parse_rules(record.rules)
    except ValueError as err:
        raise RecordError(f"bad rules: {err}") from err
    _check_half_integer("komi", record.komi, limit=area)
    if record.first_to_move not in (game_pb2.BLACK, game_pb2.WHITE):
        raise RecordError(f"first_to_move must be BLACK or WHITE, got {record.first_to_move}")
    if record.handicap > area:
        raise RecordError(f"handicap {record.handicap} exceeds the board's {area} points")
    for name, stones in (("initial_black", record.initial_black), ("initial_white", record.initial_white)):
        if any(s >= area for s in stones):
            raise RecordError(f"{name} has a point outside 0..{area - 1}")
    if record.model_version < 0:
        raise RecordError(f"model_version must be >= 0, got {record.model_version}")
    max_moves = int(MAX_MOVES_FACTOR * area)
    if len(record.moves) > max_moves:
        raise RecordError(f"{len(record.moves)} moves: a {x_size}x{y_size} game has at most {max_moves}")
    branch_searches = sum(len(b.searches) for b in record.side_branches)
    if branch_searches > max_moves:
        raise RecordError(f"{branch_searches} side-branch searches: a {x_size}x{y_size} game has at most {max_moves}")
    for index, move in enumerate(record.moves):
        _check_move(f"move {index}", move, area)
    _check_half_integer("final_score", record.final_score, limit=area + abs(record.komi))
    if not float(record.final_score + record.komi).is_integer():
        raise RecordError(f"final_score {record.final_score} + komi {record.komi} is not a whole number of points")
    _check_result(record.result, record.final_score)
    if len(record.ownership) != area:
        raise RecordError(f"ownership has {len(record.ownership)} points, the board {area}")
    if any(o not in (-1, 0, 1) for o in record.ownership):
        raise RecordError("ownership values must be -1, 0 or 1")
    if record.end_reason not in (game_pb2.TWO_PASSES, game_pb2.PASS_ALIVE, game_pb2.MOVE_CAP):
        raise RecordError(f"end_reason {record.end_reason} is not one of TWO_PASSES, PASS_ALIVE, MOVE_CAP")
    last_index = -1
    for number, branch in enumerate(record.side_branches):
        _check_side_branch(number, branch, last_index, len(record.moves), area)
        last_index = branch.move_index
    searches = _full_searches(record)
    with_surprise = sum(m.HasField("policy_surprise") for m in searches)
    if with_surprise not in (0, len(searches)):
        raise RecordError(f"policy_surprise is set on {with_surprise} of {len(searches)} full searches: "
                          "it must be on all of them or on none")


def _full_searches(record: game_pb2.GameRecord) -> list[game_pb2.Move]:
    """The moves that become rows, in row order: the main line's full searches, then the side
    branches' searches."""
    return [m for m in record.moves if m.full_search] + [m for b in record.side_branches for m in b.searches]


def _check_side_branch(number: int, branch: game_pb2.SideBranch, last_index: int, moves: int, area: int) -> None:
    where = f"side branch {number}"
    if not last_index < branch.move_index < moves:
        raise RecordError(f"{where}: move_index {branch.move_index} must be within {last_index + 1}..{moves - 1} "
                          "(after the previous branch's, before the end of the game)")
    if branch.alternative >= area:
        raise RecordError(f"{where}: the alternative {branch.alternative} must be a board move within 0..{area - 1}")
    if not branch.searches:
        raise RecordError(f"{where}: no searches")
    for k, search in enumerate(branch.searches):
        if not search.full_search:
            raise RecordError(f"{where}, search {k}: must be a full search")
        _check_move(f"{where}, search {k}", search, area)


def _check_move(where: str, move: game_pb2.Move, area: int) -> None:
    if move.move > area:
        raise RecordError(f"{where}: move index {move.move} is outside 0..{area} (pass = {area})")
    if move.color not in (game_pb2.BLACK, game_pb2.WHITE):
        raise RecordError(f"{where}: color must be BLACK or WHITE, got {move.color}")
    if len(move.policy_moves) != len(move.policy_visits):
        raise RecordError(
            f"{where}: {len(move.policy_moves)} policy_moves but {len(move.policy_visits)} policy_visits"
        )
    if any(m > area for m in move.policy_moves):
        raise RecordError(f"{where}: a policy move is outside 0..{area}")
    if len(set(move.policy_moves)) != len(move.policy_moves):
        raise RecordError(f"{where}: a policy move is listed twice")
    if any(v == 0 for v in move.policy_visits):
        raise RecordError(f"{where}: policy visits must be > 0 (leave pruned moves out)")
    if move.full_search and not move.policy_moves:
        raise RecordError(f"{where}: a full search needs a policy target")
    values = (move.value_win, move.value_loss, move.value_no_result)
    if not all(math.isfinite(v) and 0.0 <= v <= 1.0 for v in values):
        raise RecordError(f"{where}: search value probabilities must be within 0..1, got {values}")
    if move.full_search and abs(sum(values) - 1.0) > _VALUE_SUM_TOLERANCE:
        raise RecordError(f"{where}: search value probabilities sum to {sum(values)}, not 1")
    if not math.isfinite(move.score_mean):
        raise RecordError(f"{where}: score_mean is not finite")
    if not (math.isfinite(move.weight) and 0 <= move.weight <= MAX_WEIGHT):
        raise RecordError(f"{where}: weight must be within 0..{MAX_WEIGHT:g}, got {move.weight}")
    if move.HasField("policy_surprise"):
        if not move.full_search:
            raise RecordError(f"{where}: policy_surprise on a move that is not a full search")
        if not (math.isfinite(move.policy_surprise) and 0 <= move.policy_surprise <= MAX_POLICY_SURPRISE):
            raise RecordError(f"{where}: policy_surprise must be within 0..{MAX_POLICY_SURPRISE:g}, "
                              f"got {move.policy_surprise}")


def _check_half_integer(name: str, value: float, limit: float) -> None:
    if not math.isfinite(value) or abs(value) > limit or not float(2 * value).is_integer():
        raise RecordError(f"{name} must be a whole or half number within +-{limit}, got {value}")


def _check_result(result: str, final_score: float) -> None:
    """`result` must be "B+x", "W+x" (x = |final_score|) or "0" for a draw."""
    if final_score == 0:
        if result not in ("0", "Draw"):
            raise RecordError(f"result {result!r} but final_score 0 is a draw ('0')")
        return
    winner = "B" if final_score > 0 else "W"
    prefix, _, margin = result.partition("+")
    try:
        ok = prefix == winner and math.isclose(float(margin), abs(final_score))
    except ValueError:
        ok = False
    if not ok:
        raise RecordError(f"result {result!r} disagrees with final_score {final_score} "
                          f"(expected {winner}+{abs(final_score):g})")
