"""`tengen ratings top|player|import`, on the data dir's store and against a running service."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tengen.cli import main
from tengen.ratings.api import RatingsApi
from tengen.ratings.book import RatingsBook
from tengen.ratings.server import RatingsServer
from tengen.ratings.store import RatingsStore

CSV = """game_id,black,white,winner,date
t1,alpha,beta,B,2024-05-01
t2,beta,alpha,W,2024-05-01
t3,alpha,gamma,draw,2024-05-02
t4,gamma,beta,B,2024-05-02
t5,beta,gamma,b,2024-05-03

t6,alpha,beta,W,2024-05-03
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "TENGEN_RATINGS_URL",
        "TENGEN_DATABASE_URL",
        "TENGEN_RATINGS_TOKEN",
        "TENGEN_RATINGS__PRIOR_DRAWS",
        "TENGEN_DATA_DIR",
    ):
        monkeypatch.delenv(name, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["ratings", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_import_top_player_on_the_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    results = tmp_path / "results.csv"
    results.write_text(CSV)
    code, out, _ = run(capsys, "import", str(results), "--data-dir", str(data))
    assert code == 0
    assert "imported 6 new games" in out and "0 already stored, 3 players" in out
    assert (data / "ratings.sqlite").exists()

    code, out, _ = run(capsys, "import", str(results), "--data-dir", str(data))
    assert code == 0 and "imported 0 new games" in out and "6 already stored" in out

    code, out, _ = run(capsys, "top", "--json", "--data-dir", str(data))
    board = json.loads(out)
    assert [r["name"] for r in board["ratings"]] == ["alpha", "gamma", "beta"]
    assert board["summary"]["total_games"] == 6 and board["summary"]["prior_draws"] == 2.0
    alpha = board["ratings"][0]
    assert (alpha["wins"], alpha["losses"], alpha["draws"]) == (2, 1, 1)
    assert alpha["elo_low"] < alpha["elo"] < alpha["elo_high"]

    code, out, _ = run(capsys, "top", "--n", "2", "--data-dir", str(data))
    lines = out.splitlines()
    assert code == 0 and "Bayesian Elo over 6 games" in lines[0]
    assert len(lines) == 4 and "alpha" in lines[2] and "gamma" in lines[3]

    # A heavier prior pulls the ratings towards each other.
    code, out, _ = run(capsys, "top", "--json", "--prior-draws", "30", "--data-dir", str(data))
    heavy = json.loads(out)["ratings"]
    assert heavy[0]["elo"] - heavy[-1]["elo"] < alpha["elo"] - board["ratings"][-1]["elo"]

    code, out, _ = run(capsys, "player", "beta", "--data-dir", str(data))
    assert code == 0
    assert out.startswith("beta (engine)")
    assert "5 games: 2 wins, 3 losses, 0 draws" in out
    code, out, _ = run(capsys, "player", "beta", "--json", "--data-dir", str(data))
    report = json.loads(out)
    assert {h["opponent"]: (h["wins"], h["losses"]) for h in report["head_to_head"]} == {
        "alpha": (1, 2),
        "gamma": (1, 1),
    }

    code, _, err = run(capsys, "player", "nobody", "--data-dir", str(data))
    assert code == 1 and "unknown player 'nobody'" in err


@pytest.mark.parametrize(
    "text, message",
    [
        ("game_id,black,white,winner\nx1,a,b,B\nx2,a,b,maybe\n", "line 3: unknown result 'maybe'"),
        ("game_id,black,white,winner\nx1,a,b,B\nx2,a,a,W\n", "line 3: game 'x2': 'a' cannot play against itself"),
        ("game_id,black,white,winner\nx1,a,b,B\n,a,b,W\n", "line 3: game: game id is missing"),
        ("game_id,black,white,winner\nx1,a,b,\n", "line 2: winner is missing"),
        ("game_id,black,white,winner\nx1,a,b,B\nx1,b,a,B\n", "line 3: game id 'x1' already used on line 2"),
        ("game_id,black,white\nx1,a,b\n", "line 1: missing column(s) winner"),
        ("game_id,black,white,winner\n", "no games"),
    ],
)
def test_bad_csv_names_the_line_and_imports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    data = tmp_path / "data"
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text("game_id,black,white,winner\nkeep,c,d,B\n")
    bad.write_text(text)
    assert run(capsys, "import", str(good), "--data-dir", str(data))[0] == 0
    code, _, err = run(capsys, "import", str(bad), "--data-dir", str(data))
    assert code == 1
    assert message in err and str(bad) in err
    store = RatingsStore(f"sqlite:///{data / 'ratings.sqlite'}")
    assert [g.game_id for g in store.games()] == ["keep"]
    store.close()


def test_missing_file_and_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A missing file is refused before the store is opened, so no empty store is left behind.
    with pytest.raises(SystemExit) as exit_:
        main(["ratings", "import", str(tmp_path / "none.csv"), "--data-dir", str(tmp_path)])
    assert exit_.value.code == 2 and "cannot read" in capsys.readouterr().err
    assert not (tmp_path / "ratings.sqlite").exists()
    for argv in (["top", "--prior-draws", "0"], ["top", "--n", "-2"]):
        with pytest.raises(SystemExit) as exit_:
            main(["ratings", *argv, "--data-dir", str(tmp_path)])
        assert exit_.value.code == 2
        assert "must be" in capsys.readouterr().err
    # Reading a data dir without ratings is an error, and creates nothing there.
    typo = tmp_path / "no-such-run"
    for action in (["top"], ["player", "tengen-v1"]):
        code, out, err = run(capsys, *action, "--data-dir", str(typo))
        assert code == 1 and "no ratings in" in err and not out
    assert not typo.exists()


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RatingsServer]:
    store = RatingsStore(f"sqlite:///{tmp_path / 'service.sqlite'}", max_batch=4)
    server = RatingsServer(RatingsApi(RatingsBook(store), "cli-token"), "127.0.0.1", 0, 0)
    server.start()
    yield server
    server.stop(grace=1.0)
    store.close()


def test_commands_talk_to_the_service_when_url_is_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, service: RatingsServer
) -> None:
    monkeypatch.setenv("TENGEN_RATINGS_URL", f"127.0.0.1:{service.grpc_port}")
    data = tmp_path / "cli-data"
    results = tmp_path / "results.csv"
    results.write_text(CSV)
    # Without the token the service refuses the import.
    code, _, err = run(capsys, "import", str(results), "--data-dir", str(data))
    assert code == 1 and "Bearer" in err
    monkeypatch.setenv("TENGEN_RATINGS_TOKEN", "cli-token")
    # Six games go to a service taking four per report: two batches.
    code, out, _ = run(capsys, "import", str(results), "--data-dir", str(data), "--kind", "anchor", "--max-batch", "4")
    assert code == 0 and "imported 6 new games" in out
    code, out, _ = run(capsys, "top", "--json", "--data-dir", str(data))
    ratings = json.loads(out)["ratings"]
    assert [(r["name"], r["kind"]) for r in ratings] == [("alpha", "anchor"), ("gamma", "anchor"), ("beta", "anchor")]
    code, out, _ = run(capsys, "player", "gamma", "--data-dir", str(data))
    assert code == 0 and "gamma (anchor)" in out
    assert not data.exists()  # nothing was opened locally

    # The same reads from the store directly give the same numbers.
    local = RatingsBook(service.api.book.store).leaderboard()
    assert [round(r.elo, 6) for r in local.ratings] == [round(r["elo"], 6) for r in ratings]


def test_unreachable_service_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("TENGEN_RATINGS_URL", f"127.0.0.1:{port}")
    code, _, err = run(capsys, "top", "--data-dir", str(tmp_path))
    assert code == 1 and f"ratings service at 127.0.0.1:{port}" in err and "UNAVAILABLE" in err


def test_a_reader_that_stops_early_is_not_an_error(tmp_path: Path) -> None:
    """`tengen ratings top --json | head` once ended in a BrokenPipe traceback."""
    import subprocess
    import sys

    data = tmp_path / "data"
    results = tmp_path / "results.csv"
    # 600 players: the JSON leaderboard is far larger than a pipe's buffer.
    results.write_text(
        "game_id,black,white,winner,date\n"
        + "".join(f"g{i},player-{i},player-{(i + 1) % 600},B,2024-05-01\n" for i in range(600))
    )
    assert main(["ratings", "import", str(results), "--data-dir", str(data)]) == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "tengen.cli", "ratings", "top", "--json", "--n", "0", "--data-dir", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.read(10)  # the reader takes a little and goes away
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err and b"BrokenPipe" not in err, err.decode()
    assert proc.returncode in (0, 141)  # 141 = 128 + SIGPIPE, what a shell reports for such a writer
