"""The `tengen` command's top level: help, an error for an unknown command, and every command's
errors as one line without a traceback."""
import argparse
import concurrent.futures
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tengen.cli import build_parser, main


def test_help_lists_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "usage: tengen" in out
    assert "bench" in out


def test_version_names_the_package_version_and_the_checkout_s_commit() -> None:
    from tengen.loop.record import source_commit

    done = subprocess.run([sys.executable, "-m", "tengen.cli", "--version"], capture_output=True, text=True, check=True)
    commit, _ = source_commit()
    assert done.stdout.startswith("tengen 0.1.0") and commit is not None and f"(commit {commit[:12]}" in done.stdout


def _help(*command: str) -> str:
    """The --help text as a user reads it, with argparse's line wrapping undone."""
    out = subprocess.run([sys.executable, "-m", "tengen.cli", *command, "--help"], capture_output=True, text=True,
                         check=True, env={**os.environ, "COLUMNS": "80"}).stdout
    return " ".join(out.split())


def test_help_texts_say_what_the_commands_do() -> None:
    # The strength service is one of the processes `tengen run` starts.
    assert "strength" in _help("run").split("options:")[0] and "gating, strength" in _help()
    # A hand hot swap that self-play follows needs the broker (models promote announces on it).
    assert "TENGEN_KAFKA_BOOTSTRAP=... tengen models promote" in _help("run")
    # Reading the leaderboard takes no write-side flags.
    for action in ("top", "player"):
        assert "--token" not in _help("ratings", action) and "--max-batch" not in _help("ratings", action)
    assert "--token" in _help("ratings", "import") and "--max-batch" in _help("ratings", "import")
    # models init names every architecture there is, and no other.
    from tengen.commands.models import ARCHITECTURE_NAMES
    from tengen.nn.model import ARCHITECTURES

    assert set(re.findall(r"\bb\d+c\d+(?:nbt)?\b", ARCHITECTURE_NAMES)) == set(ARCHITECTURES)
    assert "b20c256 (the paper's" in _help("models", "init")
    # The explicit rules example survives wrapping at 80 columns.
    assert "'ko=simple,suicide=no'" in _help("sgf", "check")


def test_unknown_command_is_an_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "no-such-command"], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


def test_parser_builds() -> None:
    assert build_parser().prog == "tengen"


# ------------------------------------------------------------------ every command's errors

def _free_port() -> int:
    """A local port nobody listens on (an unreachable server)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _leaf_commands(parser: argparse.ArgumentParser) -> list[str]:
    """The progs of the commands that run something ("tengen models promote"), from the parser."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [parser.prog]
    return [leaf for a in subs for sub in a.choices.values() for leaf in _leaf_commands(sub)]


def _bad_inputs(tmp: Path) -> dict[str, list[str]]:
    """One bad input per command: a missing or bad file, a bad flag value, an unknown preset or
    architecture, an unreachable server (with a short wait where the command has one)."""
    a_file = tmp / "a-file"
    a_file.write_text("not a directory\n")
    bad_sgf = tmp / "bad.sgf"
    bad_sgf.write_text("not an SGF game\n")
    missing = str(tmp / "missing")
    nobody = f"127.0.0.1:{_free_port()}"
    return {
        "tengen bench go": ["--seconds", "0"],
        "tengen bench features": ["--positions", "0"],
        "tengen bench ratings": ["--versions", "x"],
        "tengen bench train": ["--arch", "nope"],
        "tengen bench inference": ["--arch", "nope"],
        "tengen bench nn": ["--arch", "nope"],
        "tengen bench gpu": ["--arch", "nope"],
        "tengen bench mcts": ["--sizes", "x"],
        "tengen bench selfplay": ["--preset", "nope"],
        "tengen bench loop": ["--preset", "nope"],
        "tengen bench ab": ["--preset", "nope"],
        "tengen bench fit": ["--window", missing, "--held-out", missing],
        "tengen bench slow-clients": ["--connections", "0"],
        "tengen bench gpu-loop": ["--processes", "0"],
        "tengen sgf check": [missing + ".sgf"],
        "tengen sgf score": [str(bad_sgf)],
        "tengen ratings top": ["--data-dir", missing],
        "tengen ratings player": ["v1", "--url", nobody],
        "tengen ratings import": [missing + ".csv", "--data-dir", str(tmp / "data")],
        "tengen models init": ["--arch", "nope", "--out", str(tmp / "m.pt")],
        "tengen models export": [missing + ".pt", "--onnx", str(tmp / "m.onnx")],
        "tengen models list": ["--no-such-flag"],
        "tengen models promote": [missing + ".pt", "--triton", nobody],
        "tengen models configure": ["--model-repository", missing],
        "tengen models prepare": ["--preset", "no-such-preset", "--model-repository", str(tmp / "repo")],
        "tengen triton": ["--model-repository", str(a_file)],
        "tengen gtp": ["--triton", nobody, "--model", "tengen", "--triton-wait", "0.5"],
        "tengen analysis": ["--model", missing + ".pt"],
        "tengen match": ["--black", "", "--white", "gnugo"],
        "tengen eval gnugo": ["--model", missing + ".pt"],
        "tengen eval versions": ["3", "4", "--data-dir", missing],
        "tengen run": ["--preset", "nope", "--data-dir", str(tmp / "run")],
        "tengen chaos": ["--data-dir", str(a_file)],
        "tengen status": ["--data-dir", str(tmp / "no-such-run")],
    }


# tengen's log format (tengen.logs): progress lines such as a retry are not the error line.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING) ")


def test_every_command_errors_in_one_line(tmp_path: Path) -> None:
    """Each command of the CLI's table, given a bad input: a non-zero exit, no traceback, and one
    line on stderr besides log records (which are one line each)."""
    cases = _bad_inputs(tmp_path)
    assert sorted(cases) == sorted(_leaf_commands(build_parser())), "a command without a bad-input case"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENGEN_")}
    env.update(TMPDIR=str(tmp_path), TENGEN_DATA_DIR=str(tmp_path / "data"))

    def attempt(prog: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "tengen.cli", *prog.split()[1:], *cases[prog]]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:  # mostly interpreter starts
        results = dict(zip(cases, pool.map(attempt, cases)))
    for prog, result in results.items():
        lines = [line for line in result.stderr.splitlines() if not LOG_LINE.match(line)]
        assert result.returncode != 0, (prog, result.stderr)
        assert "Traceback" not in result.stderr, (prog, result.stderr)
        assert len(lines) == 1 and lines[0].strip(), (prog, result.stderr)
    assert results["tengen triton"].stderr.startswith("tengen triton: [Errno 17] File exists")


def test_an_unexpected_exception_names_its_type_and_leaves_its_traceback_in_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import tengen.bench.features

    def crash(args: object) -> dict:
        return {"rate": 1 / 0}

    monkeypatch.setattr(tengen.bench.features, "run", crash)
    monkeypatch.setattr(tengen.commands.bench, "exit_on_signals", lambda: None)  # keep pytest's handlers
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["bench", "features", "--seconds", "1"]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("tengen bench features: division by zero (unexpected ZeroDivisionError; traceback in ")
    crash_log = Path(line.rsplit("traceback in ", 1)[1].rstrip(")"))
    assert crash_log.parent == tmp_path and "in crash" in crash_log.read_text()
