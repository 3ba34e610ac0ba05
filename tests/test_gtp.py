"""`tengen gtp`: a scripted GTP session against the real command (tiny exported net), checked line
by line, including malformed input and illegal moves; the Lizzie / KaTrain analysis layouts;
and the engine's parts (time manager, handicap, move choice, rules) in-process."""
from __future__ import annotations

import io
import json
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from tengen.go.board import BLACK, WHITE, Board
from tengen.go.rules import parse_rules
from tengen.gtp.analysis import Analysis, MoveInfo, PolicyAnalyzer, choose_move, fills_own_eye
from tengen.gtp.engine import GtpEngine, handicap_points, parse_analyze_args, parse_rules_argument
from tengen.gtp.mcts_analyzer import MctsAnalyzer
from tengen.gtp.protocol import Command, GtpError, format_response, parse_command, parse_vertex
from tengen.gtp.timecontrol import TimeManager
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.export import export_model
from tengen.nn.model import build_model

VERTEX = r"(?:[A-HJ-T](?:1[0-9]|[1-9])|pass)"
# Leela Zero's lz-analyze layout as Lizzie parses it: integer winrate/prior/lcb in 0..10000.
LZ_ENTRY = rf"info move {VERTEX} visits \d+ winrate \d+ prior \d+ lcb \d+ order \d+ pv(?: {VERTEX})+"
LZ_LINE = re.compile(rf"{LZ_ENTRY}(?: {LZ_ENTRY})*")
# KataGo's kata-analyze layout (Lizzie, Sabaki, KaTrain): floats, ownership at the end on request.
FLOAT = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
KATA_ENTRY = (
    rf"info move {VERTEX} visits \d+ utility {FLOAT} winrate {FLOAT} scoreMean {FLOAT} "
    rf"scoreStdev {FLOAT} scoreLead {FLOAT} scoreSelfplay {FLOAT} prior {FLOAT} lcb {FLOAT} "
    rf"utilityLcb {FLOAT} order \d+ pv(?: {VERTEX})+"
)
KATA_LINE = re.compile(rf"{KATA_ENTRY}(?: {KATA_ENTRY})*(?P<own> ownership(?: {FLOAT})+)?")

REQUIRED = """protocol_version name version known_command list_commands quit boardsize clear_board
komi play genmove undo showboard final_score final_status_list set_free_handicap
place_free_handicap fixed_handicap time_settings time_left lz-analyze kata-analyze kata-set-rule
kata-set-rules kata-get-rules""".split()


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("gtp-model") / "tiny.pt"
    export_model(build_model("b1c16"), path, samples_seen=1234)
    return path


class Session:
    """`tengen gtp` as a subprocess; reads its stdout line by line with time limits."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tengen.cli", "gtp", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def line(self, timeout: float = 30.0) -> str:
        line = self.lines.get(timeout=timeout)
        assert line is not None, "engine closed its output"
        return line

    def response(self) -> list[str]:
        """Lines up to (not including) the empty line ending a response."""
        lines = []
        while (line := self.line()) != "":
            lines.append(line)
        return lines

    def ask(self, command: str) -> list[str]:
        self.send(command)
        return self.response()

    def no_output(self, wait: float = 0.3) -> bool:
        try:
            self.lines.get(timeout=wait)
        except queue.Empty:
            return True
        return False


@pytest.fixture
def session(tiny_export: Path) -> Iterator[Session]:
    s = Session("--model", str(tiny_export), "--threads", "1", "--size", "9", "--komi", "6.5", "--visits", "1")
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
    s.proc.wait()


@pytest.mark.parametrize("trained, size", [([7], 7), ([7, 9], 9), (None, 9)])
def test_defaults_are_the_loops_board_and_visits(tmp_path: Path, trained: list[int] | None, size: int) -> None:
    """Without --size the board is the largest size the export's sidecar says it was trained on
    (else 9, what the presets train); without --visits the engine searches the live curve's 100."""
    torch.manual_seed(0)
    export = tmp_path / "net.pt"
    export_model(build_model("b1c16"), export, samples_seen=0,
                 extra={"trained_board_sizes": trained} if trained else None)
    s = Session("--model", str(export), "--threads", "1")
    try:
        assert s.ask("version")[0].endswith(", visits 100)")
        last = "ABCDEFGHJ"[size - 1]
        assert s.ask(f"play b {last}{size}") == ["= "]  # the far corner is on the board
        assert s.ask(f"play w {'ABCDEFGHJK'[size]}1")[0].startswith("? ")  # one column past it is not
        s.send("quit")
        assert s.response() == ["= "]
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
        s.proc.wait()


def test_scripted_session(session: Session) -> None:
    s = session
    exact = [
        ("protocol_version", ["= 2"]),
        ("1 name", ["=1 tengen"]),
        ("known_command play", ["= true"]),
        ("known_command kata-analyze", ["= true"]),
        ("known_command frobnicate", ["= false"]),
        ("known_command", ["? known_command takes one command name"]),
        # Malformed and unknown commands are answered, never fatal; ids are kept.
        ("frobnicate", ["? unknown command"]),
        ("7 frobnicate now", ["?7 unknown command"]),
        ("42", ["?42 unknown command"]),
        ("\x01na\x02me # a comment", ["= tengen"]),
        ("\tname\t", ["= tengen"]),
        ("boardsize 25", ["? unacceptable size"]),
        ("boardsize 6", ["? unacceptable size"]),
        ("boardsize nine", ["? board size must be an integer, got 'nine'"]),
        ("boardsize", ["? boardsize takes a size (or width and height)"]),
        ("3 boardsize 9", ["=3 "]),
        ("clear_board", ["= "]),
        ("komi 6.25", ["? komi must be a multiple of 0.5 within +-81, got 6.25"]),
        ("komi lots", ["? komi must be a number, got 'lots'"]),
        ("komi 5.5", ["= "]),
        ("get_komi", ["= 5.5"]),
        ("final_score", ["= W+5.5"]),
        ("komi 6.5", ["= "]),
        # play: every kind of bad move is refused and leaves the board as it was.
        ("play black D4", ["= "]),
        ("play white D4", ["? illegal move (occupied)"]),
        ("play white Z9", ["? invalid vertex 'Z9'"]),
        ("play white I5", ["? invalid vertex 'I5'"]),
        ("play white J10", ["? vertex J10 is off the 9x9 board"]),
        ("play purple E5", ["? invalid color 'purple'"]),
        ("play white", ["? play takes a color and a vertex"]),
        ("undo", ["= "]),
        ("undo", ["? cannot undo"]),
    ]
    for command, expected in exact:
        got = s.ask(command)
        assert got == expected, command
    # Bytes that are not UTF-8, and digits that are not ASCII, are unknown commands too.
    assert s.proc.stdin is not None
    s.proc.stdin.buffer.write(b"\xff\xfe name\n")
    s.proc.stdin.buffer.flush()
    assert s.response() == ["? unknown command"]
    assert s.ask("\u00b2 name") == ["? unknown command"]
    # Blank lines and comments get no response at all.
    s.send("")
    s.send("   # only a comment")
    assert s.no_output()

    # Ko: Black may not retake at once.
    for command in ["play b C4", "play w F4", "play b D5", "play w E5", "play b D3", "play w E3",
                    "play b E4", "play w D4"]:
        assert s.ask(command) == ["= "], command
    assert s.ask("play b E4") == ["? illegal move (ko)"]
    board_lines = s.ask("showboard")
    assert board_lines[0] == "= "
    assert board_lines[1] == "   A B C D E F G H J"
    assert board_lines[11] == "   A B C D E F G H J"
    assert board_lines[6] == " 5 . . . X O . . . . 5"
    assert board_lines[7] == " 4 . . X O . O . . . 4"  # E4 was captured
    assert board_lines[12].startswith("black to move, move 8, last white D4, komi 6.5")

    # genmove answers a legal vertex and plays it.
    reply = s.ask("5 genmove black")
    assert len(reply) == 1 and re.fullmatch(rf"=5 {VERTEX}", reply[0]), reply
    move = reply[0].split()[1]
    assert move not in ("pass", "E4")  # the engine passes only when that wins; E4 is ko
    assert s.ask(f"play white {move}") == ["? illegal move (occupied)"]
    assert s.ask("undo") == ["= "]
    assert s.ask("genmove w")[0].startswith("= ")
    assert s.ask("genmove x") == ["? invalid color 'x'"]

    # list_commands names every command the issue asks for.
    listed = s.ask("list_commands")
    assert listed[0] == "= "
    assert set(REQUIRED) <= set(listed[1:])

    # Dead stones: Black A1 inside White's pass-alive corner (eyes B1 and D1).
    s.ask("clear_board")
    for v in ["A2", "B2", "C2", "D2", "E2", "E1", "C1"]:
        assert s.ask(f"play white {v}") == ["= "]
    assert s.ask("play black A1") == ["= "]
    assert s.ask("final_status_list dead") == ["= A1"]
    assert s.ask("final_status_list alive") == ["= A2 B2 C2 D2 E2 C1 E1"]
    assert s.ask("final_status_list seki") == ["= "]
    assert s.ask("final_status_list sleepy") == ["? final_status_list takes alive, dead or seki"]
    assert s.ask("final_score") == ["= W+87.5"]  # the whole board is White's, plus komi

    # Handicap.
    assert s.ask("fixed_handicap 2") == ["? board not empty"]
    s.ask("clear_board")
    assert s.ask("fixed_handicap 10") == ["? invalid number of handicap stones 10: 2..9 on this board"]
    assert s.ask("fixed_handicap 4") == ["= G7 C3 G3 C7"]
    assert s.ask("showboard")[-1].startswith("white to move, move 0")
    assert s.ask("undo") == ["? cannot undo"]
    s.ask("clear_board")
    placed = s.ask("place_free_handicap 3")[0].split()
    assert placed[0] == "=" and len(placed) == 4
    s.ask("clear_board")
    assert s.ask("set_free_handicap A1 A1") == ["? a vertex is listed twice"]
    assert s.ask("set_free_handicap A1") == ["? set_free_handicap needs at least two vertices"]
    assert s.ask("set_free_handicap A1 pass") == ["? a handicap stone cannot be a pass"]
    assert s.ask("set_free_handicap D4 F6") == ["= "]
    assert s.ask("genmove white")[0].startswith("= ")

    # Time control.
    assert s.ask("time_settings 300 30 5") == ["= "]
    assert s.ask("time_left black 120 0") == ["= "]
    assert s.ask("time_left white 20 3") == ["= "]
    assert s.ask("time_left red 1 1") == ["? invalid color 'red'"]
    assert s.ask("time_settings 1 2") == ["? time_settings takes main_time byo_yomi_time byo_yomi_stones"]
    assert s.ask("time_settings -1 0 0") == ["? time settings must not be negative"]

    # Rules.
    rules = json.loads(s.ask("kata-get-rules")[0][2:])
    assert rules["ko"] == "POSITIONAL" and rules["suicide"] is False and rules["scoring"] == "AREA"
    assert s.ask("kata-set-rules tromp-taylor") == ["= "]
    assert json.loads(s.ask("kata-get-rules")[0][2:])["tengen"] == "ko=positional,suicide=yes,scoring=area"
    assert s.ask("kata-set-rule ko SIMPLE") == ["= "]
    assert json.loads(s.ask("kata-get-rules")[0][2:])["ko"] == "SIMPLE"
    assert s.ask("kata-set-rule scoring TERRITORY") == [
        "? scoring 'TERRITORY' is not supported: tengen plays area scoring only"
    ]
    assert s.ask("kata-set-rule colour blue") == ["? unknown rules field 'colour'"]
    assert s.ask("kata-set-rules no-such-rules")[0].startswith("? unknown rules 'no-such-rules'")
    assert s.ask('kata-set-rules {"ko":"SITUATIONAL","scoring":"AREA","suicide":false,"tax":"NONE"}') == ["= "]
    assert json.loads(s.ask("kata-get-rules")[0][2:])["tengen"] == "ko=situational,suicide=no,scoring=area"

    assert s.ask("9 quit") == ["=9 "]
    assert s.proc.wait(timeout=10) == 0


def test_analysis_streams_until_the_next_command(session: Session) -> None:
    s = session
    for command in ["play b E5", "play w C3"]:
        assert s.ask(command) == ["= "]
    # lz-analyze: "=" at once, then a line every interval (5 cs) until the next command.
    s.send("11 lz-analyze 5")
    assert s.line() == "=11"
    started = time.monotonic()
    lz = [s.line() for _ in range(3)]
    assert time.monotonic() - started >= 0.05  # at least two intervals apart
    for line in lz:
        assert LZ_LINE.fullmatch(line), line
        entries = line.split("info ")[1:]
        assert len(entries) == 10
        assert [int(re.search(r"order (\d+)", e).group(1)) for e in entries] == list(range(10))
        for entry in entries:
            assert 0 <= int(re.search(r"winrate (\d+)", entry).group(1)) <= 10000
            assert 0 <= int(re.search(r"prior (\d+)", entry).group(1)) <= 10000
        assert "move E5 " not in line and "move C3 " not in line  # occupied points are never candidates
    # The next command ends the stream with the empty line, then gets its own answer.
    s.send("kata-analyze B 5 ownership true maxmoves 4")
    while (line := s.line()) != "":
        assert LZ_LINE.fullmatch(line)
    assert s.line() == "="
    kata = s.line()
    match = KATA_LINE.fullmatch(kata)
    assert match and match.group("own"), kata
    assert len(kata.split("info ")) - 1 == 4
    ownership = [float(v) for v in match.group("own").split()[1:]]
    assert len(ownership) == 81 and all(-1 <= v <= 1 for v in ownership)
    priors = [float(v) for v in re.findall(r" prior (\S+)", kata)]
    assert all(0 <= p <= 1 for p in priors) and sum(priors) <= 1.0 + 1e-6
    # An empty line also ends the analysis.
    s.send("")
    while s.line() != "":
        pass
    assert s.no_output()
    # Without an interval: exactly one report.
    s.send("kata-analyze")
    assert s.line() == "="
    assert KATA_LINE.fullmatch(s.line())
    assert s.no_output(0.3)
    s.send("name")
    assert s.line() == ""  # the analysis response ends first
    assert s.response() == ["= tengen"]
    # Bad analyze options are ordinary errors.
    assert s.ask("kata-analyze B 5 colour red") == ["? unknown analyze option 'colour'"]
    assert s.ask("lz-analyze 5 ownership maybe") == ["? ownership must be true or false, got 'maybe'"]
    # lz-genmove_analyze: analysis lines, then the move, in one ordinary response.
    s.send("lz-genmove_analyze b 1")
    lines = s.response()
    assert lines[0] == "="
    assert all(LZ_LINE.fullmatch(line) for line in lines[1:-1])
    assert re.fullmatch(rf"play {VERTEX}", lines[-1])
    assert s.ask("showboard")[-1].startswith("white to move, move 3")


def test_bad_model_is_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "gtp", "--model", str(tmp_path / "none.pt")],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "cannot load the model: no exported model at" in result.stderr


# ------------------------------------------------------------------ in-process parts


@pytest.fixture(scope="module")
def analyzer(tiny_export: Path) -> PolicyAnalyzer:
    return PolicyAnalyzer(TorchEvaluator(tiny_export, num_threads=1))


def test_protocol_parsing() -> None:
    assert parse_command("12 play b D4 # move") == Command(12, "play", ["b", "D4"])
    assert parse_command("   ") is None
    assert parse_command("# nothing") is None
    assert format_response(3, True, "D4") == "=3 D4\n\n"
    assert format_response(None, False, "illegal move") == "? illegal move\n\n"
    assert format_response(None, True, "a\n\nb") == "= \na\nb\n\n"  # no empty line inside
    assert parse_vertex("a9", 9, 9) == 0
    assert parse_vertex("J1", 9, 9) == 80
    assert parse_vertex("PASS", 9, 9) == 81
    assert parse_vertex("T19", 19, 19) == 18
    for bad in ("I3", "A0", "A10", "B", "", "D4x"):
        with pytest.raises(GtpError):
            parse_vertex(bad, 9, 9)


def test_handicap_points() -> None:
    def names(n: int, size: int) -> list[str]:
        from tengen.go.sgf import move_to_gtp

        return [move_to_gtp(m, size, size) for m in handicap_points(n, size, size)]

    assert names(9, 19) == ["Q16", "D4", "Q4", "D16", "D10", "Q10", "K16", "K4", "K10"]
    assert names(5, 13) == ["K10", "D4", "K4", "D10", "G7"]
    assert names(4, 7) == ["E5", "C3", "E3", "C5"]
    with pytest.raises(GtpError):
        handicap_points(5, 8, 8)  # even boards have no centre point
    with pytest.raises(GtpError):
        handicap_points(1, 19, 19)


def test_time_manager() -> None:
    tm = TimeManager()
    assert tm.budget(BLACK, 81) is None  # no time control
    tm.settings(300, 30, 5)
    assert tm.budget(BLACK, 80) == pytest.approx(300 / 40 + 30 / 5 - 0.5)
    tm.time_left(BLACK, 20, 4)  # in byo-yomi: 4 stones in 20 s
    assert tm.budget(BLACK, 80) == pytest.approx(20 / 4 - 0.5)
    tm.time_left(WHITE, 0.2, 1)
    assert tm.budget(WHITE, 80) == pytest.approx(0.05)  # never below the floor
    tm.settings(0, 10, 0)  # byo-yomi time without stones: no limit
    assert tm.budget(BLACK, 80) is None
    with pytest.raises(ValueError):
        tm.settings(-1, 0, 0)


def test_analyze_arguments() -> None:
    o = parse_analyze_args(["W", "25", "ownership", "true", "maxmoves", "3"], BLACK)
    assert (o.color, o.interval, o.max_moves, o.ownership) == (WHITE, 0.25, 3, True)
    o = parse_analyze_args(["interval", "100", "minmoves", "15"], BLACK)
    assert (o.color, o.interval, o.max_moves, o.ownership) == (BLACK, 1.0, 15, False)
    for bad in (["maxmoves"], ["maxmoves", "0"], ["-5"], ["pvVisits", "yes"]):
        with pytest.raises(GtpError):
            parse_analyze_args(bad, BLACK)


def test_rules_argument() -> None:
    katago = parse_rules("katago")
    assert parse_rules_argument("chinese", katago) == parse_rules("chinese")
    assert parse_rules_argument('{"suicide": true}', katago).suicide is True
    assert parse_rules_argument("koSITUATIONALscoreAREAtaxNONEsui0button0", katago).ko == "situational"
    for bad in ('{"hasButton": true}', '{"scoring": "TERRITORY"}', "[1]", "{oops"):
        with pytest.raises(GtpError):
            parse_rules_argument(bad, katago)


def test_policy_analyzer(analyzer: PolicyAnalyzer) -> None:
    board = Board(9, 9)
    board.play(40)
    one = analyzer.analyze(board, [Board(9, 9)], visits=1, max_moves=82, ownership=True)
    assert one.visits == 1 and one.to_move == WHITE
    assert 40 not in [m.move for m in one.moves]
    assert len(one.moves) == 81  # 80 empty points and the pass
    assert sum(m.prior for m in one.moves) == pytest.approx(1.0)
    assert [m.prior for m in one.moves] == sorted((m.prior for m in one.moves), reverse=True)
    assert one.ownership is not None and one.ownership.shape == (9, 9)
    # With a budget, the top children are evaluated and ranked by utility.
    five = analyzer.analyze(board, [], visits=5, max_moves=10)
    assert five.visits == 5
    assert [m.visits for m in five.moves] == [1, 1, 1, 1] + [0] * 6
    utilities = [m.utility for m in five.moves[:4]]
    assert utilities == sorted(utilities, reverse=True)
    assert all(len(m.pv) == 2 for m in five.moves[:4])
    assert {m.move for m in five.moves[:4]} == {m.move for m in one.moves[:4]}


# Black owns columns A-E (with eyes), White columns G-J, column F is neutral: B+17.5 as it stands.
WALLS = """
. X . X X . O . .
X X X X X . O . .
. . . . X . O . .
X X X X X . O . .
. . . . X . O . .
X X X X X . O . .
. . . . X . O . .
X X X X X . O . .
. X . . X . O . .
"""


def test_choose_move_passes_only_when_it_wins() -> None:
    board = Board.from_diagram(WALLS, komi=0.5)
    stones = board.stones()
    assert fills_own_eye(board, stones, 0, BLACK)  # A9: a true eye in the corner
    assert not fills_own_eye(board, stones, 0, WHITE)
    assert not fills_own_eye(board, stones, 5, BLACK)  # F9: neutral

    def analysis(b: Board, *moves: int) -> Analysis:
        return Analysis(b.to_move, 1, 0.5, 0.0, [MoveInfo(m, 1, 0.5, 0.0, 0.1, [m]) for m in moves])

    # The net's favourite is the pass, but Black does not pass first; it skips its own eyes.
    assert choose_move(board, analysis(board, 81, 0, 2, 5)) == 5
    board.play(5)
    board.play(81)  # White passes; Black leads by the rules engine's count, so Black passes
    assert choose_move(board, analysis(board, 6, 7)) == 81
    # After Black's pass, White is behind: it plays on even though the net prefers to pass.
    white = Board.from_diagram(WALLS, komi=0.5)
    white.play(81)
    assert choose_move(white, analysis(white, 81, 8)) == 8
    # With no candidate left, any legal move that is not an own eye, else a pass.
    assert choose_move(white, analysis(white)) not in (81, 0, 2)


def test_engine_survives_internal_errors(analyzer: PolicyAnalyzer) -> None:
    """A failure inside a command is an error response, never the end of the engine."""

    class Broken:
        def analyze(self, *args: object, **kwargs: object) -> Analysis:
            raise RuntimeError("net exploded")

    out = io.StringIO()
    engine = GtpEngine(Broken(), size=9, out=out)  # type: ignore[arg-type]
    assert engine.execute("genmove b")
    assert engine.execute("2 name")
    assert out.getvalue() == "? internal error: net exploded\n\n=2 tengen\n\n"
    assert engine.board.num_moves == 0


def test_rules_change_replays_the_game(analyzer: PolicyAnalyzer) -> None:
    out = io.StringIO()
    engine = GtpEngine(analyzer, size=9, out=out)
    # Legal under suicide=yes, illegal under suicide=no: Black's two-stone suicide at A9/B9.
    engine.execute("kata-set-rules tromp-taylor")
    for command in ["play w C9", "play w A8", "play w B8", "play b A9", "play w E5", "play b B9"]:
        engine.execute(command)
    assert engine.board.stones()[0, 0] == 0  # the suicide removed both black stones
    out.truncate(0)
    out.seek(0)
    engine.execute("kata-set-rule suicide false")
    assert out.getvalue().startswith("? move 6 (black B9) would be illegal (suicide)")
    assert engine.rules.suicide is True and len(engine.moves) == 6
    engine.execute("komi 0")
    assert engine.board.komi == 0 and len(engine.moves) == 6
    np.testing.assert_array_equal(engine.board.stones()[0, :3], [0, 0, 2])


# ------------------------------------------------------------------ MCTS-backed analysis


@pytest.fixture(scope="module")
def mcts(tiny_export: Path) -> MctsAnalyzer:
    return MctsAnalyzer(TorchEvaluator(tiny_export, num_threads=1))


def test_mcts_analyzer(mcts: MctsAnalyzer) -> None:
    board = Board(9, 9)
    previous = [board.copy()]
    board.play(40)
    reports: list[int] = []
    result = mcts.analyze(board, previous, 300, max_moves=82, ownership=True,
                          progress=lambda a: reports.append(a.visits), progress_interval=1e-9)
    assert result.visits == 300 and reports[-1] == 300
    assert reports == sorted(reports) and len(reports) > 2  # intermediate reports, growing
    visited = [m for m in result.moves if m.visits]
    assert sum(m.visits for m in visited) == 299  # the root's own evaluation is the 300th
    assert [m.visits for m in visited] == sorted((m.visits for m in visited), reverse=True)
    assert all(m.visits == 0 and m.pv == [m.move] for m in result.moves[len(visited):])
    assert 40 not in [m.move for m in result.moves]
    for m in visited:
        assert m.pv[0] == m.move and 1 <= len(m.pv) <= 12
        assert 0.0 <= m.lcb <= m.winrate <= 1.0
    assert result.ownership is not None and result.ownership.shape == (9, 9)
    assert result.priors is not None and result.priors.sum() == pytest.approx(1.0, abs=1e-4)
    playable = [m.move for m in visited if m.move != 81 and not fills_own_eye(board, board.stones(), m.move, WHITE)]
    assert choose_move(board, result) == playable[0]  # the most visited move the engine may play
    # stop and deadline end a search early, but never before the root is evaluated.
    stop = threading.Event()
    stop.set()
    assert 1 <= mcts.analyze(board, previous, 10_000, stop=stop).visits < 10_000
    assert 1 <= mcts.analyze(board, previous, 10_000, deadline=time.monotonic()).visits < 10_000
    # After two passes there is nothing to search: the raw net answers.
    board.play(81)
    board.play(81)
    assert mcts.analyze(board, [], 50).visits == 1


def test_engine_with_mcts_streams_growing_analysis(mcts: MctsAnalyzer) -> None:
    out = io.StringIO()
    engine = GtpEngine(mcts, visits=24, analysis_visits=100_000, size=9, out=out)
    engine.execute("1 genmove b")
    assert re.fullmatch(rf"=1 {VERTEX}\n\n", out.getvalue())
    engine.execute("2 kata-analyze 2 maxmoves 5")
    time.sleep(0.5)
    engine.execute("3 name")
    lines = out.getvalue().split("\n")
    start = lines.index("=2")
    stream = lines[start + 1 : lines.index("", start)]
    assert len(stream) >= 3
    totals = []
    for line in stream:
        assert KATA_LINE.fullmatch(line), line
        assert len(line.split("info ")) - 1 == 5
        totals.append(sum(int(v) for v in re.findall(r" visits (\d+)", line)))
    assert totals == sorted(totals) and totals[-1] > totals[0]  # the search goes on between reports
    assert out.getvalue().endswith("\n\n=3 tengen\n\n")


@pytest.mark.slow  # about 20 s: Triton loads the model through its Python backend
def test_gtp_through_triton(triton_server, tiny_export: Path) -> None:
    """--triton: the same export served by the real Triton plays the same moves as in-process."""
    from tengen.infra.triton.client import load_model
    from tengen.infra.triton.repository import render_config

    name = "gtp-tiny"
    triton_server.repository.create_model(name, render_config(name, max_batch_size=16))
    triton_server.repository.write_version(name, tiny_export)
    load_model(triton_server.grpc_url, name)
    script = ["boardsize 9", "genmove b", "genmove w", "genmove b"]
    moves = {}
    for label, args in {
        "triton": ("--triton", triton_server.grpc_url, "--model", name, "--model-version", "1", "--visits", "1"),
        "local": ("--model", str(tiny_export), "--threads", "1", "--visits", "1"),
    }.items():
        s = Session(*args)
        try:
            assert s.ask("version")[0].startswith("= 0.1.0 (")
            moves[label] = [s.ask(c)[0] for c in script]
            s.send("kata-analyze")
            assert s.line() == "="
            assert KATA_LINE.fullmatch(s.line())
            s.send("quit")
            assert s.line() == "" and s.response() == ["= "]
            assert s.proc.wait(timeout=30) == 0
        finally:
            if s.proc.poll() is None:
                s.proc.kill()
    assert moves["triton"] == moves["local"]
    assert all(re.fullmatch(rf"= {VERTEX}", m) for m in moves["local"][1:])
