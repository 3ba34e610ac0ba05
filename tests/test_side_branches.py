"""Temporary side branches (KataGo paper §6.2.2): self-play makes them at the expected rate
without touching the main line, and the trainer's replay validates them and turns each branch
search into a row whose value target is the search's value, with no score or ownership target."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
import pytest
import torch
from test_search_selfplay import Quick, RecordingTree, accepted, new_game, play_game, settings

from tengen.data.synthetic import random_game
from tengen.go import planes
from tengen.go.board import Board
from tengen.go.rules import parse_rules
from tengen.loop.rows import RecordError, row_count, rows_from_record, validate
from tengen.proto import game_pb2
from tengen.selfplay.game import draw_from_policy
from tengen.train.learner import batch_tensors
from tengen.train.window import Window


def branch_point(record: game_pb2.GameRecord, index: int) -> Board:
    """The main-line position before moves[index]."""
    board = Board(record.x_size, record.y_size, parse_rules(record.rules), record.komi)
    board.place_stones(black=list(record.initial_black), white=list(record.initial_white))
    board.to_move = int(record.first_to_move)
    for move in record.moves[:index]:
        board.to_move = int(move.color)
        board.play(move.move)
    board.to_move = int(record.moves[index].color)
    return board


def legal_board_moves(board: Board, excluded: int = -1) -> list[int]:
    return [int(m) for m in np.flatnonzero(board.legal_moves()[:-1]) if m != excluded]


def search(board: Board, move: int, win: float, loss: float, weight: float = 0.8) -> game_pb2.Move:
    """A full-search entry for `board`'s player to move, choosing `move`."""
    others = legal_board_moves(board, move)[:2]
    return game_pb2.Move(move=move, color=board.to_move, full_search=True, policy_moves=[move, *others],
                         policy_visits=[10, 3, 2][: 1 + len(others)], value_win=win, value_loss=loss,
                         value_no_result=1.0 - win - loss, score_mean=2.5, weight=weight)


def with_branches(seed: int = 11) -> game_pb2.GameRecord:
    """A random 9x9 game with two hand-made side branches: one search at move 10, two at move 20."""
    record = random_game(np.random.default_rng(seed), 9, full_search_prob=0.3)
    for index, searches in ((10, 1), (20, 2)):
        board = branch_point(record, index)
        alternative = legal_board_moves(board, record.moves[index].move)[0]
        branch = record.side_branches.add(move_index=index, alternative=alternative)
        board.play(alternative)
        for k in range(searches):
            move = legal_board_moves(board)[-1]
            branch.searches.append(search(board, move, win=0.2 + 0.1 * k, loss=0.7 - 0.1 * k))
            board.play(move)
    return record


# ------------------------------------------------------------------ self-play


def test_side_branches_come_at_the_expected_rate() -> None:
    config = settings(permanent_branch_prob=0.0, handicap_prob=0.0, full_visits=6, fast_visits=2)
    assert config.side_branch_prob == 0.025
    turns = branches = 0
    for seed in range(16):
        game = new_game(seed, config)
        record = play_game(game, Quick())
        accepted(record)
        turns += game.searches["full"] + game.searches["fast"]
        branches += len(record.side_branches)
        assert game.searches["side"] == sum(len(b.searches) for b in record.side_branches)
    # p = 0.025 over about 1,500 search turns: about 37 branches (standard deviation about 6)
    assert turns > 1000
    assert 0.012 < branches / turns < 0.04


def test_every_branch_is_a_full_search_off_the_main_line() -> None:
    config = settings(permanent_branch_prob=0.0, handicap_prob=0.0, full_visits=6, fast_visits=2,
                      side_branch_prob=1.0, max_moves_factor=1.0)
    searches = branches = continued = 0
    for seed in range(6):
        game = new_game(seed, config, RecordingTree)
        record = play_game(game, Quick())
        rows = accepted(record)
        assert len(rows) == row_count(record)
        search_turns = game.searches["full"] + game.searches["fast"]
        assert len(record.side_branches) >= 0.9 * search_turns  # all but those with no alternative
        noisy = [s for s in game.tree.starts if s.get("noise")]
        assert len(noisy) == game.searches["full"] + game.searches["side"]
        assert all(s["forced_playouts"] and s["visits"] <= config.full_visits for s in noisy)
        for branch in record.side_branches:
            assert branch.alternative != record.moves[branch.move_index].move
            assert branch.alternative < record.x_size * record.y_size  # never a pass
            assert all(s.full_search and s.policy_moves for s in branch.searches)
        branches += len(record.side_branches)
        searches += sum(len(b.searches) for b in record.side_branches)
        continued += sum(len(b.searches) > 1 for b in record.side_branches)
    # each branch goes on with probability 1/4: 1/(1 - 1/4) searches per branch on average
    assert branches > 200
    assert 0.15 < continued / branches < 0.35
    assert 1.2 < searches / branches < 1.5


def test_branching_leaves_the_main_line_as_it_was() -> None:
    """With one-visit main-line searches (the net's favourite move, no randomness) the branched
    game plays exactly the moves of the unbranched one: the game goes on from the main line and
    branching draws no random numbers of the main line's."""
    records = {}
    for prob in (0.0, 1.0):
        config = settings(permanent_branch_prob=0.0, handicap_prob=0.0, full_search_prob=0.0,
                          fast_visits=1, full_visits=6, side_branch_prob=prob, opening_moves_mean=0.05)
        game = new_game(4, config)
        records[prob] = play_game(game, Quick())
        accepted(records[prob])
        np.testing.assert_array_equal(game.tree.board().stones(), game.board.stones())  # back on the main line
    plain, branched = records[0.0], records[1.0]
    assert not plain.side_branches and len(branched.side_branches) > 10
    assert (plain.x_size, plain.komi, plain.rules) == (branched.x_size, branched.komi, branched.rules)
    assert [(m.move, m.color) for m in plain.moves] == [(m.move, m.color) for m in branched.moves]
    assert plain.final_score == branched.final_score and list(plain.ownership) == list(branched.ownership)


def test_alternative_moves_follow_the_raw_policy_at_its_temperature() -> None:
    rng = np.random.default_rng(0)
    policy = np.array([0.6, 0.3, 0.1, 0.0, 0.5], np.float32)  # the last entry is the pass
    candidates = np.array([True, True, True, True, False])
    draws = {t: np.bincount([draw_from_policy(policy, candidates, t, rng) for _ in range(4000)], minlength=5) / 4000
             for t in (1.0, 2.0, math.inf)}
    np.testing.assert_allclose(draws[1.0], [0.6, 0.3, 0.1, 0, 0], atol=0.03)
    sharp = np.sqrt([0.6, 0.3, 0.1])
    np.testing.assert_allclose(draws[2.0][:3], sharp / sharp.sum(), atol=0.03)
    np.testing.assert_allclose(draws[math.inf], [0.25, 0.25, 0.25, 0.25, 0], atol=0.03)
    assert draws[2.0][3] == 0  # zero policy stays out below temperature infinity


# ------------------------------------------------------------------ replay into rows


def test_branch_rows_take_the_search_value_and_no_score_or_ownership() -> None:
    record = with_branches()
    validate(record)
    rows = rows_from_record(record)
    main = [m for m in record.moves if m.full_search]
    assert len(rows) == len(main) + 3 == row_count(record)
    np.testing.assert_array_equal(rows.final_weight[: len(main)], 1.0)
    np.testing.assert_array_equal(rows.final_weight[len(main):], 0.0)
    plain = rows_from_record(_without_branches(record))  # the main line's rows do not change
    for name in ("spatial", "policy", "opponent_policy", "value", "score", "ownership", "weight"):
        np.testing.assert_array_equal(getattr(rows, name)[: len(main)], getattr(plain, name))

    row = len(main)
    for branch in record.side_branches:
        board = branch_point(record, branch.move_index)
        board.play(branch.alternative)
        for k, entry in enumerate(branch.searches):
            mover = board.to_move
            assert mover == entry.color
            stones = board.stones()
            np.testing.assert_array_equal(rows.spatial[row, planes.OWN_STONE], stones == mover)
            np.testing.assert_array_equal(rows.spatial[row, planes.OPP_STONE], stones == 3 - mover)
            assert rows.spatial[row, planes.PREV_MOVE_1].ravel()[
                branch.alternative if k == 0 else branch.searches[k - 1].move] == 1
            np.testing.assert_allclose(rows.value[row], [entry.value_win, entry.value_loss, entry.value_no_result],
                                       atol=1e-6)
            assert rows.score[row] == 0 and not rows.ownership[row].any()
            assert rows.weight[row] == pytest.approx(entry.weight)
            visits = np.asarray(entry.policy_visits, np.float64)
            np.testing.assert_allclose(rows.policy[row, list(entry.policy_moves)], visits / visits.sum(), rtol=1e-6)
            if k + 1 < len(branch.searches):  # the next search of the branch is the opponent's policy
                nxt = branch.searches[k + 1]
                np.testing.assert_allclose(rows.opponent_policy[row, list(nxt.policy_moves)],
                                           np.divide(nxt.policy_visits, sum(nxt.policy_visits)), rtol=1e-6)
            else:
                assert not rows.opponent_policy[row].any()
            board.play(entry.move)
            row += 1


def test_branch_rows_keep_their_masks_through_the_window_and_trainer(tmp_path) -> None:
    record = with_branches()
    rows = rows_from_record(record)
    window = Window(tmp_path / "window", pos_len=9, c=1000)
    assert window.append(record.id, rows)
    window.close()
    reopened = Window(tmp_path / "window", pos_len=9, c=1000)
    batch = reopened.sample(256, np.random.default_rng(0), augment=False)
    np.testing.assert_array_equal(batch.final_weight, rows.final_weight[batch.rows])
    assert 0 < (batch.final_weight == 0).sum() < 256
    _, _, targets = batch_tensors(batch, torch.device("cpu"))
    assert torch.equal(targets.ownership_weight, torch.from_numpy(batch.final_weight))
    assert torch.equal(targets.score_weight, torch.from_numpy(batch.final_weight))


def _without_branches(record: game_pb2.GameRecord) -> game_pb2.GameRecord:
    plain = game_pb2.GameRecord()
    plain.CopyFrom(record)
    plain.ClearField("side_branches")
    return plain


# ------------------------------------------------------------------ bad branches


def _second(r: game_pb2.GameRecord) -> game_pb2.SideBranch:
    return r.side_branches[1]


def _occupied_alternative(r: game_pb2.GameRecord) -> None:
    stones = branch_point(r, 20).stones().ravel()
    _second(r).alternative = int(np.flatnonzero(stones)[0])


def _out_of_turn(r: game_pb2.GameRecord) -> None:
    entry = _second(r).searches[1]
    entry.color = game_pb2.BLACK if entry.color == game_pb2.WHITE else game_pb2.WHITE


def _illegal_choice(r: game_pb2.GameRecord) -> None:
    branch = _second(r)
    branch.searches[1].move = branch.searches[0].move  # occupied by then


def _after_two_passes(r: game_pb2.GameRecord) -> None:
    branch = _second(r)
    pass_move = r.x_size * r.y_size
    for entry in branch.searches:
        entry.move = pass_move
    extra = branch.searches.add()
    extra.CopyFrom(branch.searches[0])


BAD_BRANCHES: dict[str, tuple[Callable[[game_pb2.GameRecord], None], str]] = {
    "branch point past the end": (lambda r: setattr(_second(r), "move_index", len(r.moves)), "move_index"),
    "branch points out of order": (lambda r: setattr(_second(r), "move_index", 5), "after the previous branch"),
    "alternative is the main move": (lambda r: setattr(_second(r), "alternative", r.moves[20].move),
                                     "is the main line's own move"),
    "alternative is a pass": (lambda r: setattr(_second(r), "alternative", 81), "must be a board move"),
    "alternative on a stone": (_occupied_alternative, "alternative"),
    "no searches": (lambda r: _second(r).ClearField("searches"), "no searches"),
    "fast search": (lambda r: setattr(_second(r).searches[0], "full_search", False), "must be a full search"),
    "no policy": (lambda r: _second(r).searches[0].ClearField("policy_moves"), "policy_moves"),
    "value sum": (lambda r: setattr(_second(r).searches[0], "value_win", 0.9), "sum to"),
    "nan weight": (lambda r: setattr(_second(r).searches[1], "weight", float("nan")), "weight must be"),
    "out of turn": (_out_of_turn, "is to move"),
    "illegal choice": (_illegal_choice, "search 1's move"),
    "search after the end": (_after_two_passes, "after two passes ended the branch"),
}


@pytest.mark.parametrize("name", sorted(BAD_BRANCHES))
def test_malformed_side_branches_are_refused(name: str) -> None:
    record = with_branches()
    breaker, reason = BAD_BRANCHES[name]
    breaker(record)
    with pytest.raises(RecordError) as err:
        validate(record)
    assert reason in err.value.reason and "side branch 1" in err.value.reason
    with pytest.raises(RecordError):
        rows_from_record(record)
