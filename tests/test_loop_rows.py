"""Replaying a GameRecord gives rows whose inputs and targets match what the record says."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tengen.data.synthetic import random_game
from tengen.go import planes
from tengen.go.board import BLACK, Board
from tengen.go.rules import parse_rules
from tengen.loop.rows import (
    RecordError,
    TrainingRows,
    decode,
    frequency_weights,
    repeats,
    rows_from_record,
    window_rows,
)
from tengen.proto import game_pb2


@pytest.mark.parametrize("x_size, y_size, pos_len", [(9, 9, None), (7, 7, 19), (7, 9, 9)])
def test_rows_match_the_recorded_targets(x_size: int, y_size: int, pos_len: int | None) -> None:
    record = random_game(np.random.default_rng(x_size * 100 + y_size), x_size, y_size, full_search_prob=0.4)
    rows = rows_from_record(record, pos_len)
    length = pos_len or x_size
    full = [i for i, m in enumerate(record.moves) if m.full_search]
    assert len(rows) == len(full) > 5 and rows.spatial.shape == (len(full), planes.NUM_SPATIAL, length, length)
    assert (rows.x_size, rows.y_size, rows.pos_len) == (x_size, y_size, length)

    def at(move: int) -> int:  # a board move index as a buffer index
        return length * length if move == x_size * y_size else (move // x_size) * length + move % x_size

    owner = np.zeros((length, length))
    owner[:y_size, :x_size] = np.reshape(record.ownership, (y_size, x_size))
    board = Board(x_size, y_size, parse_rules(record.rules), record.komi)
    row = 0
    for i, move in enumerate(record.moves):
        if move.full_search:
            mover = board.to_move
            assert mover == move.color
            sign = 1 if mover == BLACK else -1
            stones = board.stones()
            spatial = rows.spatial[row]
            np.testing.assert_array_equal(spatial[planes.OWN_STONE, :y_size, :x_size], stones == mover)
            np.testing.assert_array_equal(spatial[planes.OPP_STONE, :y_size, :x_size], stones == 3 - mover)
            assert spatial[planes.ON_BOARD].sum() == x_size * y_size == spatial[planes.ON_BOARD, :y_size, :x_size].sum()
            assert spatial[:, y_size:, :].sum() == 0 and spatial[:, :, x_size:].sum() == 0
            if i > 0 and record.moves[i - 1].move != x_size * y_size:
                assert spatial[planes.PREV_MOVE_1].ravel()[at(record.moves[i - 1].move)] == 1
            assert rows.global_inputs[row, planes.KOMI] == pytest.approx(-sign * record.komi / 15)

            visits = np.asarray(move.policy_visits, np.float64)
            expected = np.zeros(length * length + 1)
            for m, v in zip(move.policy_moves, visits / visits.sum()):
                expected[at(m)] = v
            np.testing.assert_allclose(rows.policy[row], expected, rtol=1e-6)
            reply = np.zeros(length * length + 1)
            if i + 1 < len(record.moves):
                nxt = record.moves[i + 1]
                if nxt.full_search:
                    for m, v in zip(nxt.policy_moves, np.divide(nxt.policy_visits, sum(nxt.policy_visits))):
                        reply[at(m)] = v
                else:
                    reply[at(nxt.move)] = 1
            np.testing.assert_allclose(rows.opponent_policy[row], reply, rtol=1e-6)
            score = sign * record.final_score
            assert rows.score[row] == score
            win = 1.0 if score > 0 else 0.0 if score < 0 else 0.5
            np.testing.assert_array_equal(rows.value[row], [win, 1 - win, 0])
            np.testing.assert_array_equal(rows.ownership[row], sign * owner)
            assert rows.weight[row] == move.weight
            row += 1
        board.play(move.move)
    assert row == len(rows)


def test_handicap_game_rows_are_from_each_movers_view() -> None:
    record = random_game(np.random.default_rng(3), 9, initial_black=(20, 24, 60), full_search_prob=1.0)
    assert record.first_to_move == game_pb2.WHITE
    rows = rows_from_record(record)
    assert len(rows) == len(record.moves)
    # Row 0 is White's first move: the handicap stones are the opponent's.
    assert rows.spatial[0, planes.OPP_STONE].ravel()[[20, 24, 60]].tolist() == [1, 1, 1]
    assert rows.spatial[0, planes.OWN_STONE].sum() == 0
    assert rows.score[0] == -record.final_score and rows.score[1] == record.final_score


def test_rows_refuse_a_bad_record() -> None:
    record = random_game(np.random.default_rng(4), 9)
    record.moves[5].move = record.moves[2].move if record.moves[2].move != 81 else record.moves[3].move
    with pytest.raises(RecordError):
        rows_from_record(record)
    with pytest.raises(ValueError, match="pos_len"):
        rows_from_record(random_game(np.random.default_rng(4), 9), pos_len=7)


def _surprising_record() -> game_pb2.GameRecord:
    """Full searches with policy surprise 0.0 and 0.1 on the main line, a fast search between
    them, and one of 0.5 in a side branch (only the fields frequency_weights reads)."""
    record = game_pb2.GameRecord(id="hand", moves=[
        game_pb2.Move(full_search=True, policy_surprise=0.0), game_pb2.Move(),
        game_pb2.Move(full_search=True, policy_surprise=0.1)])
    record.side_branches.add(move_index=1).searches.add(full_search=True, policy_surprise=0.5)
    return record


def _assert_same_rows(got: TrainingRows, expected: TrainingRows) -> None:
    for field in dataclasses.fields(TrainingRows):
        np.testing.assert_array_equal(getattr(got, field.name), getattr(expected, field.name), err_msg=field.name)


def test_frequency_weights_split_the_total_half_uniformly_half_by_surprise() -> None:
    # Total 3: 0.5 each uniformly, the other 1.5 split 0 : 0.1 : 0.5 = 0 : 0.25 : 1.25.
    record = _surprising_record()
    np.testing.assert_allclose(frequency_weights(record), [0.5, 0.75, 1.75])
    for move in (record.moves[0], record.moves[2], record.side_branches[0].searches[0]):
        move.policy_surprise = 0.0
    np.testing.assert_array_equal(frequency_weights(record), [1, 1, 1])  # nothing surprising: as before
    for move in (record.moves[0], record.moves[2], record.side_branches[0].searches[0]):
        move.ClearField("policy_surprise")
    np.testing.assert_array_equal(frequency_weights(record), [1, 1, 1])  # no surprise recorded


def test_repeats_write_each_row_its_frequency_weight_in_expectation() -> None:
    record = _surprising_record()
    counts = []
    for number in range(4000):
        record.id = f"game-{number}"
        counts.append(repeats(record))
    counts = np.array(counts)
    assert set(counts[:, 0]) == {0, 1} and set(counts[:, 1]) == {0, 1} and set(counts[:, 2]) == {1, 2}
    # 4000 draws each: the standard error of a mean is at most 0.5 / sqrt(4000) = 0.008
    np.testing.assert_allclose(counts.mean(axis=0), [0.5, 0.75, 1.75], atol=0.03)
    assert abs(counts.sum(axis=1).mean() - 3.0) < 0.05  # the game's rows: 3 in expectation


def test_window_rows_repeat_the_same_rows_for_the_same_game() -> None:
    record = random_game(np.random.default_rng(11), 9, full_search_prob=0.5)
    rng = np.random.default_rng(12)
    for move in record.moves:
        if move.full_search:
            move.policy_surprise = float(rng.exponential(0.3))
    rows, counts = rows_from_record(record), repeats(record)
    assert (counts == 0).any() and (counts > 1).any()
    index = np.repeat(np.arange(len(rows)), counts)
    stored = window_rows(record)
    _assert_same_rows(stored, dataclasses.replace(rows, **{
        f.name: getattr(rows, f.name)[index] for f in dataclasses.fields(TrainingRows)
        if isinstance(getattr(rows, f.name), np.ndarray)}))
    _assert_same_rows(window_rows(decode(record.SerializeToString())), stored)  # redelivered: the same rows
    record.id = "another game"
    assert not np.array_equal(repeats(record), counts)  # the draws follow the game id


def test_records_without_surprise_give_todays_rows() -> None:
    record = random_game(np.random.default_rng(13), 9, full_search_prob=0.5)
    assert not any(m.HasField("policy_surprise") for m in record.moves)
    _assert_same_rows(window_rows(record), rows_from_record(record))
