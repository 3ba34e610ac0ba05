"""Short-term value and score targets (KataGo's "other methods" notes): hand-computed on a short game,
sign flips included; rows and the window carry them; windows of the previous format stay usable."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tengen.data.synthetic import random_game
from tengen.go import passalive
from tengen.go.board import Board
from tengen.go.rules import parse_rules
from tengen.loop.rows import rows_from_record, short_term_lambda, short_term_targets
from tengen.proto import game_pb2
from tengen.train.window import FORMAT, FORMAT_WITHOUT_SHORT_TERM, MANIFEST, Window, row_dtype

B, W = game_pb2.BLACK, game_pb2.WHITE


def _hand_game() -> game_pb2.GameRecord:
    """7x7, komi 7: B 0, W 48, B pass (no search: a raw-policy move), W pass. Searches, each in its
    mover's view: (win - loss, score) = (0.2, 1.0), (-0.4, -2.0), none, (0.6, 3.0)."""
    board = Board(7, 7, parse_rules("tromp-taylor"), 7.0)
    record = game_pb2.GameRecord(id="hand", x_size=7, y_size=7, rules=parse_rules("tromp-taylor").to_string(),
                                 komi=7.0, first_to_move=B, end_reason=game_pb2.TWO_PASSES)
    plays = [(0, B, (0.6, 0.4, 1.0)), (48, W, (0.3, 0.7, -2.0)), (49, B, None), (49, W, (0.8, 0.2, 3.0))]
    for move, color, search in plays:
        entry = record.moves.add(move=move, color=color, weight=1.0)
        if search is not None:
            entry.full_search = True
            entry.policy_moves.append(move)
            entry.policy_visits.append(10)
            entry.value_win, entry.value_loss, entry.score_mean = search
        board.play(move)
    record.final_score = passalive.final_score(board)
    record.result = passalive.result_string(record.final_score)
    record.ownership.extend(int(o) for o in passalive.ownership(board).ravel())
    return record


def test_lambda_is_five_sixths_on_19x19_and_shorter_on_smaller_boards() -> None:
    assert short_term_lambda(361) == pytest.approx(5 / 6)
    # mean horizon 1 / (1 - lambda) = 1 + 5 area / 361
    assert 1 / (1 - short_term_lambda(81)) == pytest.approx(1 + 5 * 81 / 361)
    assert 0 < short_term_lambda(49) < short_term_lambda(81) < short_term_lambda(361)


def test_short_term_targets_by_hand_with_sign_flips_and_the_outcome_at_the_end() -> None:
    record = _hand_game()
    assert record.final_score == -7.0  # one stone each, komi 7: White wins by 7
    lam = short_term_lambda(49)
    # In Black's view: the searches are +0.2/+1 (B), +0.4/+2 (W's -0.4/-2 flipped), none, -0.6/-3
    # (W's again); the outcome is a Black loss by 7: -1/-7.
    # y3 = (1-l)(-0.6) + l(-1); y2 = y3 (no search); y1 = (1-l)(0.4) + l y2; y0 = (1-l)(0.2) + l y1
    value = [0.0] * 4
    score = [0.0] * 4
    value[3] = (1 - lam) * -0.6 + lam * -1.0
    score[3] = (1 - lam) * -3.0 + lam * -7.0
    value[2], score[2] = value[3], score[3]
    value[1] = (1 - lam) * 0.4 + lam * value[2]
    score[1] = (1 - lam) * 2.0 + lam * score[2]
    value[0] = (1 - lam) * 0.2 + lam * value[1]
    score[0] = (1 - lam) * 1.0 + lam * score[1]
    # Each row in its mover's view: B, W, B, W.
    expected = np.array([[value[0], score[0]], [-value[1], -score[1]], [value[2], score[2]], [-value[3], -score[3]]])
    np.testing.assert_allclose(short_term_targets(record), expected, rtol=1e-6)
    # The closed form of row 0: the searched turns ahead, the turn without a search skipped (its
    # weight passed on), the outcome weighted lambda^3.
    closed = (1 - lam) * (0.2 + lam * 0.4 + lam**2 * -0.6) + lam**3 * -1.0
    assert short_term_targets(record)[0, 0] == pytest.approx(closed, rel=1e-6)

    rows = rows_from_record(record)  # rows: the three full searches (moves 0, 1 and 3)
    np.testing.assert_allclose(rows.short_term, expected[[0, 1, 3]], rtol=1e-6)
    np.testing.assert_array_equal(rows.short_term_weight, [1, 1, 1])


def test_side_branch_rows_have_no_short_term_target() -> None:
    record = random_game(np.random.default_rng(5), 7, full_search_prob=1.0)
    board = Board(7, 7, parse_rules(record.rules), record.komi)
    alternative = next(m for m in np.flatnonzero(board.legal_moves()[:49]) if m != record.moves[0].move)
    branch = record.side_branches.add(move_index=0, alternative=int(alternative))
    branch.searches.add(move=48, color=W, full_search=True, policy_moves=[48], policy_visits=[3],
                        value_win=0.5, value_loss=0.5, weight=1.0)
    rows = rows_from_record(record)
    assert rows.short_term_weight[-1] == 0 and rows.short_term_weight[:-1].all()
    np.testing.assert_array_equal(rows.short_term[-1], [0, 0])


def test_the_window_keeps_short_term_targets(tmp_path) -> None:
    rows = rows_from_record(_hand_game())
    with Window(tmp_path / "w", pos_len=7, c=100) as window:
        window.append("hand", rows)
        batch = window.sample(64, np.random.default_rng(0), augment=False)
    assert json.loads((tmp_path / "w" / MANIFEST).read_text())["format"] == FORMAT
    for k, row in enumerate(batch.rows):
        np.testing.assert_array_equal(batch.short_term[k], rows.short_term[row])
    assert (batch.short_term_weight == 1).all()


def test_a_window_of_the_previous_format_stays_readable_and_appendable(tmp_path) -> None:
    rows = rows_from_record(_hand_game())
    directory = tmp_path / "old"
    with Window(directory, pos_len=7, c=100) as window:
        window.append("first", rows)
    # Rewrite it as a format-2 window would be: the same records without the two new fields.
    old_dtype = row_dtype(7, short_term=False)
    shard = next((directory / "shards").iterdir())
    records = np.fromfile(shard, row_dtype(7))
    old = np.zeros(len(records), old_dtype)
    for name in old_dtype.names:
        old[name] = records[name]
    old.tofile(shard)
    manifest = json.loads((directory / MANIFEST).read_text())
    (directory / MANIFEST).write_text(json.dumps({**manifest, "format": FORMAT_WITHOUT_SHORT_TERM}))

    with Window(directory, pos_len=7, c=100) as window:
        assert window.append("second", rows)  # appended in the window's own format
        batch = window.sample(32, np.random.default_rng(1), augment=False)
        assert window.n_total == 2 * len(rows)
    assert json.loads((directory / MANIFEST).read_text())["format"] == FORMAT_WITHOUT_SHORT_TERM
    assert (batch.short_term_weight == 0).all() and (batch.short_term == 0).all()
    np.testing.assert_array_equal(batch.score, rows.score[batch.rows % len(rows)])
