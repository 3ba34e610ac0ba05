"""`tengen eval versions A B`: two versions of a data dir play the gating match until the SPRT of
tengen.gate.decision decides; the printed score and verdict are the games' own, and the games go
to ratings. tengen.gate.validation's stop is also fed fixed results (a clearly stronger side, one
whose games finish out of order)."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import pytest
import torch

import tengen.gate.net_match
from tengen.cli import main
from tengen.gate.decision import Score
from tengen.gate.validation import ACCEPT, REJECT, UNDECIDED, Validation
from tengen.loop.ledger import END_RESIGN, MatchGameResult
from tengen.nn.export import export_model
from tengen.nn.model import build_model
from tengen.ratings.config import sqlite_url
from tengen.ratings.store import RatingsStore

GAME_LINE = re.compile(r"^game (\d+): (\S+) \(B\) vs (\S+) \(W\): (\S+) by (.+), (\d+) moves; ")


def _result(index: int, winner_side: int | None) -> MatchGameResult:
    """Game `index` (side index % 2 has Black) won by `winner_side` (None: a draw), by resignation."""
    black_side = index % 2
    winner = "draw" if winner_side is None else "B" if winner_side == black_side else "W"
    return MatchGameResult(index=index, black_side=black_side, winner=winner, score=None if winner_side is not None
                           else 0.0, end=END_RESIGN, moves=30, board_size=7, rules="katago", komi=7.5)


def _feed(results: list[MatchGameResult], taken: list[int]) -> Iterator[MatchGameResult]:
    for result in results:
        taken.append(result.index)
        yield result


def test_the_sprt_stops_a_clearly_stronger_side_after_15_games_and_not_one_more() -> None:
    """|W - L| >= 15 leaves Wald's bounds (ln 19 = 2.94; 15 ln(0.55/0.45) = 3.01, 14 of them 2.81)."""
    for winner, verdict in ((0, ACCEPT), (1, REJECT)):
        taken: list[int] = []
        validation = Validation(200).take(_feed([_result(i, winner) for i in range(200)], taken))
        assert (validation.verdict, len(validation.results), taken) == (verdict, 15, list(range(15)))
        assert validation.score == (Score(15, 0) if winner == 0 else Score(0, 15))
    assert "LLR 3.01 >= 2.94 after 15 games in order" in Validation(200).take(
        [_result(i, 0) for i in range(15)]).explain()


def test_the_sprt_counts_games_in_index_order() -> None:
    """Games 1..20 won by A finish before game 0: the test waits for game 0, as gating's does."""
    taken: list[int] = []
    results = [_result(i, 0) for i in range(1, 21)] + [_result(0, 1)]
    validation = Validation(40).take(_feed(results, taken))
    assert taken == [*range(1, 21), 0] and validation.verdict == ACCEPT
    assert validation.sequential_score == Score(20, 1) and validation.score == Score(20, 1)


def test_an_even_match_plays_to_the_cap_undecided() -> None:
    results = [_result(i, i // 2 % 2) for i in range(30)]  # A wins two, loses two, ...
    validation = Validation(30).take(results)
    assert (validation.verdict, len(validation.results)) == (UNDECIDED, 30)
    assert validation.explain().startswith("undecided at the cap of 30 games (LLR")
    with pytest.raises(ValueError, match="repeated"):
        Validation(30).take([_result(3, 0), _result(3, 0)])


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data dir whose model `tengen` has versions 1 and 2: two different random b1c16 nets."""
    data = tmp_path / "data"
    for version in (1, 2):
        torch.manual_seed(version)
        export_model(build_model("b1c16"), data / "models" / "tengen" / str(version) / "model.pt",
                     samples_seen=1000 * version)
    return data


def _stored(data: Path) -> tuple[list, dict]:
    store = RatingsStore(sqlite_url(data))
    try:
        return sorted(store.games(), key=lambda g: g.game_id), {p.name: p for p in store.players()}
    finally:
        store.close()


def test_two_versions_play_and_the_summary_is_the_games(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "versions", "2", "1", "--data-dir", str(data_dir), "--preset", "tiny", "--games", "4",
                 "--seed", "5", "--threads", "1", "--runtime", "torch"])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json.loads(out.strip().splitlines()[-1])
    games = sorted((m.groups() for line in out.splitlines() if (m := GAME_LINE.match(line))), key=lambda g: int(g[0]))
    assert [int(g[0]) for g in games] == [1, 2, 3, 4]
    # Colours alternate: A (version 2) has Black in games 1 and 3.
    assert [(g[1], g[2]) for g in games] == [("tengen-v2", "tengen-v1"), ("tengen-v1", "tengen-v2")] * 2
    a_wins = sum(g[3].startswith("B") == (g[1] == "tengen-v2") for g in games if g[3] != "0")
    draws = sum(g[3] == "0" for g in games)
    assert (summary["a"], summary["b"], summary["games"]) == ("tengen-v2", "tengen-v1", 4)
    assert (summary["a_wins"], summary["draws"], summary["a_losses"]) == (a_wins, draws, 4 - a_wins - draws)
    assert summary["sprt"] == UNDECIDED and summary["sprt_games"] == 4 and summary["unreported"] == 0
    assert f"tengen-v2: {a_wins} wins, {4 - a_wins - draws} losses, {draws} draws" in out
    assert "95% Wilson interval" in out and "Elo difference tengen-v2 - tengen-v1" in out
    assert "SPRT undecided at the cap of 4 games" in out
    assert (summary["visits"], summary["board_sizes"]) == (8, [7])  # the tiny preset's gating match

    stored, players = _stored(data_dir)
    assert [(g.black, g.white, g.result, g.source) for g in stored] == [
        (g[1], g[2], g[3][0] if g[3] != "0" else "draw", "eval-versions") for g in games]
    assert {name: (p.kind, p.training_samples) for name, p in players.items()} == {
        "tengen-v1": ("model", 1000), "tengen-v2": ("model", 2000)}


def test_the_command_stops_when_the_sprt_accepts(data_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The match fed with games that A (version 2) wins, or loses, every time: 15 games of the cap
    of 100 are played and rated, and the verdict is printed."""
    taken: list[int] = []
    for winner, verdict in ((0, ACCEPT), (1, REJECT)):
        taken.clear()

        def play(self: object, indices: list[int], stop: object = None) -> Iterator[MatchGameResult]:
            return _feed([_result(i, winner) for i in indices], taken)

        monkeypatch.setattr(tengen.gate.net_match.MatchRunner, "play", play)
        code = main(["eval", "versions", "2", "1", "--data-dir", str(data_dir), "--preset", "tiny",
                     "--games", "100", "--runtime", "torch"])
        out = capsys.readouterr().out
        assert code == 0, out
        summary = json.loads(out.strip().splitlines()[-1])
        assert (summary["sprt"], summary["games"], summary["sprt_games"], taken) == (verdict, 15, 15, list(range(15)))
        assert (summary["a_wins"], summary["a_losses"]) == ((15, 0) if winner == 0 else (0, 15))
        assert f"SPRT {verdict}: tengen-v2 scores p=" in out and "after 15 games in order" in out
    stored, _ = _stored(data_dir)
    assert len(stored) == 30  # both matches' games, each with an id of its own


@pytest.mark.parametrize("argv, message", [
    (["7", "1"], "tengen has no version 7 in {repo} (it has versions 1, 2)"),
    (["2", "{missing}"], "no export file at {missing}"),
    (["2", "2"], "A and B are the same export"),
    (["2", "1", "--model", "other"], "other has no version 2 in {repo} (it has no versions there)"),
    (["2", "1", "--names", "a b", "b"], "the ratings name of A 'a b' holds ' '"),
    (["2", "1", "--names", "x", "x"], "A and B would both be rated as 'x'"),
])
def test_bad_versions_are_refused_in_one_line(data_dir: Path, tmp_path: Path, argv: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    fill = {"repo": str(data_dir / "models"), "missing": str(tmp_path / "missing.pt")}
    argv = [a.format(**fill) for a in argv]
    assert main(["eval", "versions", *argv, "--data-dir", str(data_dir), "--preset", "tiny"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tengen eval versions: ") and message.format(**fill) in err, err
    assert not (data_dir / "ratings.sqlite").exists()  # nothing played, nothing rated


@pytest.mark.parametrize("flags", [["--games", "0"], ["--visits", "-1"], ["--size", "6"], ["--parallel", "x"]])
def test_bad_flags_are_argparse_errors(data_dir: Path, flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "versions", "2", "1", "--data-dir", str(data_dir), *flags])
    assert exit_.value.code == 2 and flags[0] in capsys.readouterr().err
