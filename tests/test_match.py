"""The match runner and `tengen eval gnugo` with real engines: `tengen gtp` (tiny exported net) and
GNU Go (installed through `make gnugo` when missing); forfeits by engines that misbehave; the
GTP client; the summary's statistics."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tengen.cli import main
from tengen.go.passalive import final_score, result_string
from tengen.go.sgf import read_game, replay
from tengen.gtp.client import CommandFailed, EngineDied, EngineTimeout, GtpClient
from tengen.gtp.engine_match import EngineMatchSettings, EngineSpec, Match, parse_engine_score
from tengen.nn.export import export_model
from tengen.nn.model import build_model
from tengen.ratings.config import sqlite_url
from tengen.ratings.store import RatingsStore
from tengen.stats import elo_difference, wilson_interval

ROOT = Path(__file__).resolve().parent.parent

# A GTP engine that misbehaves on purpose: it always answers genmove with A1 (illegal the second
# time), or never answers genmove at all with --hang.
MISBEHAVING = """
import sys, time
hang = "--hang" in sys.argv
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words[0] == "quit":
        print("= \\n", flush=True)
        break
    if words[0] == "genmove":
        if hang:
            time.sleep(60)
        print("= A1\\n", flush=True)
    elif words[0] == "list_commands":
        print("= genmove\\nplay\\nquit\\n", flush=True)
    else:
        print("= \\n", flush=True)
"""


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(1)
    path = tmp_path_factory.mktemp("match-model") / "tiny.pt"
    export_model(build_model("b1c16"), path, samples_seen=1234)
    return path


def json_line(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_eval_gnugo_writes_sgfs_and_ratings(gnugo: str, tiny_export: Path, tmp_path: Path, capsys) -> None:
    sgf_dir, data_dir = tmp_path / "sgf", tmp_path / "data"
    code = main([
        "eval", "gnugo", "--model", str(tiny_export), "--level", "1", "--games", "2", "--size", "9",
        "--komi", "7.5", "--max-moves", "200", "--sgf-dir", str(sgf_dir), "--data-dir", str(data_dir),
        "--gnugo", gnugo, "--visits", "1",
    ])
    out = capsys.readouterr().out
    assert code == 0, out
    summary = json_line(out)
    assert (summary["a"], summary["b"], summary["games"], summary["unreported"]) == ("tiny", "gnugo-l1", 2, 0)
    assert summary["a_wins"] + summary["a_losses"] + summary["draws"] == 2
    assert 0 <= summary["a_rate_low"] <= summary["a_score_rate"] <= summary["a_rate_high"] <= 1
    assert "95% Wilson interval" in out

    sgfs = sorted(sgf_dir.glob("*.sgf"))
    assert len(sgfs) == 2
    results, passes = [], []
    for number, path in enumerate(sgfs, start=1):
        game = read_game(path.read_bytes())
        board = replay(game)  # every move legal under the match's rules
        assert (game.x_size, game.komi) == (9, 7.5)
        assert (game.player_black, game.player_white) == (("tiny", "gnugo-l1") if number == 1 else ("gnugo-l1", "tiny"))
        assert 0 < len(game.moves) <= 200
        if board.game_over or len(game.moves) == 200:  # scored endings: the referee's count
            assert game.result == result_string(final_score(board))
        else:
            assert game.result[2:] in ("R", "F", "T")
        assert game.comment.startswith("tengen match ")
        if board.game_over:
            assert "gnugo-l1's final_score" in game.comment  # cross-checked with GNU Go's count
        results.append(game.result)
        passes.append(board.game_over)
    assert any(passes)  # GNU Go captures the tiny net's stones and both pass
    assert len(list(sgf_dir.glob("*.stderr.log"))) == 2

    store = RatingsStore(sqlite_url(data_dir))
    try:
        games = sorted(store.games(), key=lambda g: g.game_id)
        players = {p.name: p for p in store.players()}
    finally:
        store.close()
    assert [(g.black, g.white, g.source) for g in games] == [
        ("tiny", "gnugo-l1", "eval-gnugo"), ("gnugo-l1", "tiny", "eval-gnugo")
    ]
    assert [g.result for g in games] == [r[0] if r != "0" else "draw" for r in results]
    assert (players["gnugo-l1"].kind, players["tiny"].kind) == ("anchor", "model")
    assert players["tiny"].training_samples == 1234


def test_match_alternates_colours_and_caps_moves(gnugo: str, tmp_path: Path, capsys) -> None:
    command = f"{gnugo} --mode gtp --level 0"
    code = main([
        "match", "--black", command, "--white", command + " --chinese-rules", "--black-name", "g0",
        "--white-name", "g0-chinese", "--games", "2", "--size", "7", "--komi", "0.5", "--max-moves", "6",
        "--sgf-dir", str(tmp_path), "--no-ratings",
    ])
    out = capsys.readouterr().out
    assert code == 0, out
    assert out.count("by move cap, 6 moves") == 2
    assert "game 1: g0 (B) vs g0-chinese (W)" in out and "game 2: g0-chinese (B) vs g0 (W)" in out
    games = [read_game(p.read_bytes()) for p in sorted(tmp_path.glob("*.sgf"))]
    assert [len(g.moves) for g in games] == [6, 6]
    assert [g.x_size for g in games] == [7, 7]


def test_match_reports_to_the_ratings_service(gnugo: str, tmp_path: Path, capsys) -> None:
    """--ratings: every game goes to a running ratings service over gRPC, with its write token."""
    from tengen.ratings.api import RatingsApi
    from tengen.ratings.book import RatingsBook
    from tengen.ratings.server import RatingsServer

    store = RatingsStore(sqlite_url(tmp_path / "service"))
    server = RatingsServer(RatingsApi(RatingsBook(store), "secret"), "127.0.0.1", 0, 0)
    server.start()
    try:
        code = main([
            "match", "--black", f"{gnugo} --mode gtp --level 0", "--white", f"{gnugo} --mode gtp --level 1",
            "--black-name", "gnugo-l0", "--white-name", "gnugo-l1", "--black-kind", "anchor",
            "--games", "2", "--size", "9", "--max-moves", "4", "--json",
            "--ratings", f"127.0.0.1:{server.grpc_port}", "--token", "secret",
        ])
        out = capsys.readouterr().out
        assert code == 0, out
        assert out.count("\n") == 1  # --json: only the summary line
        assert json_line(out)["unreported"] == 0
        games = sorted(store.games(), key=lambda g: g.game_id)
        assert [(g.black, g.white, g.source) for g in games] == [
            ("gnugo-l0", "gnugo-l1", "match"), ("gnugo-l1", "gnugo-l0", "match")
        ]
        kinds = {p.name: p.kind for p in store.players()}
        assert kinds == {"gnugo-l0": "anchor", "gnugo-l1": "engine"}  # B undeclared: a new engine
    finally:
        server.stop(grace=1.0)
        store.close()


def test_same_names_are_refused(capsys) -> None:
    assert main(["match", "--black", "gnugo --mode gtp", "--white", "gnugo --mode gtp --level 2", "--no-ratings"]) == 2
    assert "name them with --black-name and --white-name" in capsys.readouterr().err


def test_a_name_that_is_not_a_safe_id_is_refused_before_any_game(capsys) -> None:
    assert main(["match", "--black", "gnugo --mode gtp", "--white", "gnugo --mode gtp --level 2",
                 "--black-name", "GNU Go", "--no-ratings"]) == 2
    assert "the ratings name 'GNU Go' holds ' '" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flag", "result_suffix", "reason"), [("", "F", "illegal move"), ("--hang", "T", "timeout")]
)
def test_misbehaving_engine_forfeits(gnugo: str, tmp_path: Path, flag: str, result_suffix: str, reason: str) -> None:
    script = tmp_path / "misbehaving.py"
    script.write_text(MISBEHAVING)
    bad = EngineSpec("bad", f"{sys.executable} {script} {flag}")
    good = EngineSpec("gnugo-l0", f"{gnugo} --mode gtp --level 0")
    settings = EngineMatchSettings(games=2, size=9, move_timeout=1.0, sgf_dir=tmp_path)
    summary = Match(bad, good, settings).run()
    assert [(o.result, o.reason) for o in summary.outcomes] == [
        (f"W+{result_suffix}", reason), (f"B+{result_suffix}", reason)
    ]
    assert summary.tally() == (0, 2, 0)
    # The forfeited games are still valid records of what was played.
    for path in sorted(tmp_path.glob("*.sgf")):
        game = read_game(path.read_bytes())
        replay(game)
        assert game.result.endswith(result_suffix)


def test_engine_that_cannot_start_forfeits(gnugo: str, tmp_path: Path) -> None:
    settings = EngineMatchSettings(games=1, size=9)
    summary = Match(EngineSpec("gone", "true"), EngineSpec("gnugo", f"{gnugo} --mode gtp"), settings).run()
    assert [(o.result, o.reason, o.moves) for o in summary.outcomes] == [("W+F", "engine failed to start", 0)]


def test_gtp_client_errors(gnugo: str) -> None:
    with GtpClient(f"{gnugo} --mode gtp", timeout=10) as engine:
        assert engine.send("protocol_version") == "2"
        assert engine.send("1 boardsize 9") == ""  # an id is stripped from the answer
        with pytest.raises(CommandFailed) as failed:
            engine.send("play black Z99")
        assert failed.value.message
        assert engine.known_command("genmove") and not engine.known_command("kata-analyze")
        assert engine.send("name") == "GNU Go"  # still usable after a refusal
    with pytest.raises(EngineDied):
        GtpClient("true").send("name", timeout=5)
    with pytest.raises(EngineTimeout):
        GtpClient(["sleep", "30"]).send("name", timeout=0.2)
    with pytest.raises(EngineDied):
        GtpClient("/no/such/engine")


def test_statistics() -> None:
    low, high = wilson_interval(5, 10)
    assert (round(low, 4), round(high, 4)) == (0.2366, 0.7634)
    low, high = wilson_interval(0, 4)
    assert low == 0.0 and 0.48 < high < 0.49
    assert elo_difference(0.75) == pytest.approx(190.85, abs=0.01)
    assert elo_difference(0.5) == 0.0 and elo_difference(1.0) == float("inf")
    assert parse_engine_score("B+3.5") == 3.5
    assert parse_engine_score("W+12") == -12.0
    assert parse_engine_score("0") == 0.0
    assert parse_engine_score("W+R") is None
    assert parse_engine_score("nonsense") is None
