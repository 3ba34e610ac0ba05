"""`tengen sgf check|score`: exit codes and messages."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tengen.cli import main

# 7x7, Black owns columns A-C, White columns D-G: Tromp-Taylor 21 - 28 - 0.5.
WALLS = b"(;GM[1]FF[4]SZ[7]KM[0.5]AB[ca:cg]AW[da:dg];B[tt];W[tt])"
MULTI_STONE_SUICIDE = b"(;SZ[7]KM[7.5];B[ba];W[aa];B[bb];W[gg];B[ac];W[ab])"
KO = b"(;SZ[7]AB[ba][ab][bc][cb]AW[ca][db][cc];W[bb];B[cb])"


def write(tmp_path: Path, data: bytes, name: str = "game.sgf") -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_check_legal_game(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, WALLS)
    code, out, _ = run(["sgf", "check", path], capsys)
    assert code == 0
    assert out.count("\n") == 1
    assert "ok: 2 legal moves (2 passes, 14 setup stones) on 7x7, komi 0.5" in out
    assert "rules ko=positional,suicide=no,scoring=katago" in out


def test_check_names_the_first_illegal_move(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, MULTI_STONE_SUICIDE)
    code, out, _ = run(["sgf", "check", path], capsys)
    assert code == 1
    assert out.strip() == f"{path}: move 6 (W A6): illegal (suicide)"
    # The same game is legal where multi-stone suicide is.
    code, out, _ = run(["sgf", "check", path, "--rules", "tromp-taylor"], capsys)
    assert code == 0 and "ok: 6 legal moves" in out
    code, out, _ = run(["sgf", "check", "--rules", "ko=simple,suicide=yes", path], capsys)
    assert code == 0

    path = write(tmp_path, KO, "ko.sgf")
    code, out, _ = run(["sgf", "check", path, "--rules", "ko=simple,suicide=no"], capsys)
    assert code == 1 and out.strip().endswith("move 2 (B C6): illegal (ko)")

    path = write(tmp_path, KO.replace(b";B[cb]", b";B[];W[];B[cb]"), "superko.sgf")
    code, out, _ = run(["sgf", "check", path], capsys)
    assert code == 1 and out.strip().endswith("move 4 (B C6): illegal (superko)")
    assert run(["sgf", "check", path, "--rules", "ko=simple,suicide=no"], capsys)[0] == 0


def test_check_unreadable_files(tmp_path: Path, capsys) -> None:
    code, out, err = run(["sgf", "check", str(tmp_path / "missing.sgf")], capsys)
    assert code == 2 and out == ""
    assert "cannot read" in err and "missing.sgf" in err

    path = write(tmp_path, b"(;SZ[abc];B[aa])")
    code, out, err = run(["sgf", "check", path], capsys)
    assert code == 2
    assert err.strip() == f"tengen sgf: {path}: bad SZ value 'abc': expected N or W:H"

    path = write(tmp_path, b"(;SZ[7]AB[ba][ab]AW[aa])")
    code, out, err = run(["sgf", "check", path], capsys)
    assert code == 2 and "bad AB/AW values" in err

    path = write(tmp_path, b"(;SZ[9];B[aa];W[bb")
    code, _, err = run(["sgf", "score", path], capsys)
    assert code == 2 and "not a readable SGF game" in err


def test_bad_rules_argument(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, WALLS)
    with pytest.raises(SystemExit) as info:
        main(["sgf", "check", path, "--rules", "ko=sometimes,suicide=no"])
    assert info.value.code == 2
    assert "unknown ko rule 'sometimes'" in capsys.readouterr().err


def test_score(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, WALLS)
    assert run(["sgf", "score", path], capsys)[:2] == (0, "W+7.5\n")
    assert run(["sgf", "score", path, "--rules", "tromp-taylor"], capsys)[:2] == (0, "W+7.5\n")
    path = write(tmp_path, WALLS.replace(b"KM[0.5]", b"KM[-7]"), "even.sgf")
    assert run(["sgf", "score", path, "--rules", "tromp-taylor"], capsys)[:2] == (0, "0\n")
    path = write(tmp_path, WALLS.replace(b"KM[0.5]", b"KM[-9]"), "black.sgf")
    assert run(["sgf", "score", path], capsys)[:2] == (0, "B+2\n")


def test_score_counts_pass_alive_territory_by_default(tmp_path: Path, capsys) -> None:
    # Black's chain (column B plus A4) has two vital eyes, so it is pass-alive; the white stone
    # at A7 inside its upper eye is dead. KataGo's scoring gives Black that eye (3 points) and
    # not White the stone: Black 8 + 3 + 3, White 7 + 28. Tromp-Taylor counts the stone alive
    # and the eye's two empty points as neutral: Black 8 + 3, White 8 + 28.
    data = b"(;SZ[7]KM[0]AB[ba:bg][ad]AW[ca:cg][aa];B[tt];W[tt])"
    path = write(tmp_path, data)
    assert run(["sgf", "score", path], capsys)[:2] == (0, "W+21\n")
    assert run(["sgf", "score", path, "--rules", "chinese"], capsys)[:2] == (0, "W+21\n")
    assert run(["sgf", "score", path, "--rules", "tromp-taylor"], capsys)[:2] == (0, "W+25\n")
    path = write(tmp_path, data.replace(b"KM[0]", b"RU[tromp-taylor]KM[0]"), "tt.sgf")
    assert run(["sgf", "score", path], capsys)[:2] == (0, "W+25\n")


def test_score_illegal_game(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, MULTI_STONE_SUICIDE)
    code, out, err = run(["sgf", "score", path], capsys)
    assert code == 1 and out == ""
    assert "move 6 (W A6): illegal (suicide)" in err
    # Under tromp-taylor the suicide is legal and removes White's two stones.
    # Black: 3 stones + A7, A6; White: G1; komi 7.5.
    code, out, _ = run(["sgf", "score", path, "--rules", "tromp-taylor"], capsys)
    assert (code, out) == (0, "W+3.5\n")


def test_installed_command_and_help(tmp_path: Path) -> None:
    path = write(tmp_path, MULTI_STONE_SUICIDE)
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "sgf", "check", path],
        capture_output=True, text=True,
    )
    assert result.returncode == 1
    assert "move 6 (W A6): illegal (suicide)" in result.stdout
    help_text = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "sgf", "score", "--help"],
        capture_output=True, text=True, check=True,
    ).stdout
    help_text = re.sub(r"-\s+", "-", " ".join(help_text.split()))  # undo argparse's wrapping
    assert "'area' (tromp-taylor) count every stone as alive" in help_text
    assert "pass-alive territory" in help_text
