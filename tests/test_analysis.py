"""`tengen analysis`: KataGo's JSON analysis engine protocol, as KaTrain drives it.

The KaTrain fixtures copy the structure of the queries KaTrain's engine sends. Source:
sanderland/katrain, katrain/core/engine.py as stored at commit
d9c94b95106dceddfd617d69d9d7d51fc1594210 (KataGoEngine.request_analysis builds the query,
_write_stdin_thread adds the id "QUERY:n" last and writes json.dumps(query), terminate_query sends
{"action": "terminate", "terminateId"}), with the defaults of katrain/config.json (KaTrain
1.14.0: max_visits 500, fast_visits 25, max_time 8.0, wide_root_noise 0.04). Later engine.py
versions (pondering) add a private "_kt_continuous" key that they pop before writing, so the
line sent is the same. `tests/data/katrain_queries.jsonl` holds such lines literally; the
`katrain_query` builder makes the same fields (ids, rules names, priorities,
reportAnalysisWinratesAs BLACK, maxTime and wideRootNoise in overrideSettings,
reportDuringSearchEvery, avoidMoves for "find alternatives" and regions of interest) with small
visits to stay fast. The answers are read the way KaTrain reads
them (`KaTrainReader` below mirrors the keys and types its engine and GameNode use). The
examples of KataGo's docs/Analysis_Engine.md are answered as documented.
"""
from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tengen.go.board import BLACK, WHITE, Board
from tengen.gtp.analysis_engine import AnalysisEngine, create_engine
from tengen.gtp.analysis_query import parse_kata_rules, tengen_rules
from tengen.gtp.batching import BatchingEvaluator
from tengen.gtp.protocol import parse_vertex
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.export import export_model
from tengen.nn.model import build_model


@pytest.fixture(scope="module")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("analysis-model") / "tiny.pt"
    export_model(build_model("b1c16"), path, samples_seen=1234)
    return path


@pytest.fixture(scope="module")
def evaluator(tiny_export: Path) -> TorchEvaluator:
    return TorchEvaluator(tiny_export, num_threads=1)


class Output:
    """The engine's stdout: every line must be one JSON object; kept in a queue."""

    def __init__(self) -> None:
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.raw: list[str] = []
        self._buffer = ""

    def write(self, text: str) -> int:
        self._buffer += text
        while "\n" in self._buffer:
            line, self._buffer = self._buffer.split("\n", 1)
            self.raw.append(line)
            self.lines.put(json.loads(line))
        return len(text)

    def flush(self) -> None:
        pass

    def next(self, timeout: float = 30.0) -> dict[str, Any]:
        return self.lines.get(timeout=timeout)

    def take(self, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        return [self.next(timeout) for _ in range(n)]

    def empty(self, wait: float = 0.2) -> bool:
        time.sleep(wait)
        return self.lines.empty()


class Session:
    def __init__(self, engine: AnalysisEngine, out: Output) -> None:
        self.engine, self.out = engine, out

    def send(self, query: dict[str, Any] | str) -> None:
        self.engine.handle_line(query if isinstance(query, str) else json.dumps(query))

    def final(self, qid: str, timeout: float = 30.0) -> dict[str, Any]:
        """The next non-partial answer for `qid` (warnings and partial reports skipped)."""
        while True:
            message = self.out.next(timeout)
            if message.get("id") == qid and "warning" not in message and not message.get("isDuringSearch"):
                return message


@pytest.fixture
def session(evaluator: TorchEvaluator) -> Iterator[Session]:
    out = Output()
    engine = create_engine(evaluator, threads=2, out=out, max_visits=8, version="0.1.0")
    yield Session(engine, out)
    engine.stop(wait=False)


@pytest.fixture
def single(evaluator: TorchEvaluator) -> Iterator[Session]:
    """One worker and no batcher: deterministic evaluations, a queue that can be held up."""
    out = Output()
    engine = create_engine(evaluator, threads=1, out=out, max_visits=8)
    yield Session(engine, out)
    engine.stop(wait=False)


# ------------------------------------------------------------------ KaTrain's side

KATRAIN_OVERRIDES = {"reportAnalysisWinratesAs": "BLACK", "maxTime": 8.0, "wideRootNoise": 0.04}


def katrain_query(qid: str, moves: list[list[str]], *, size: tuple[int, int] = (9, 9), rules: str = "japanese",
                  komi: float = 6.5, visits: int = 8, priority: int = 1000, ownership: bool = True,
                  next_move: list[str] | None = None, initial_stones: list[list[str]] | None = None,
                  initial_player: str = "B", avoid: list[dict[str, Any]] | None = None,
                  report_every: float | None = 1) -> dict[str, Any]:
    """A query as KaTrain's KataGoEngine.request_analysis builds it (and send_query ids it)."""
    if next_move:
        moves = moves + [next_move]
    query: dict[str, Any] = {
        "rules": rules,
        "priority": priority,
        "analyzeTurns": [len(moves)],
        "maxVisits": visits,
        "komi": komi,
        "boardXSize": size[0],
        "boardYSize": size[1],
        "includeOwnership": ownership and not next_move,
        "includeMovesOwnership": ownership and not next_move,
        "includePolicy": not next_move,
        "initialStones": initial_stones or [],
        "initialPlayer": initial_player,
        "moves": moves,
        "overrideSettings": dict(KATRAIN_OVERRIDES),
    }
    if report_every is not None:
        query["reportDuringSearchEvery"] = report_every
    if avoid:
        query["avoidMoves"] = avoid
    query["id"] = qid
    return query


KATRAIN_QUERIES = Path(__file__).parent / "data" / "katrain_queries.jsonl"


def var_to_grid(array: list[float], size: tuple[int, int]) -> list[list[float]]:
    """KaTrain's utils.var_to_grid: row-major from the top, grid[y][x] with y = 0 at the bottom."""
    grid: list[list[float]] = [[]] * size[1]
    ix = 0
    for y in range(size[1] - 1, -1, -1):
        grid[y] = array[ix: ix + size[0]]
        ix += size[0]
    return grid


class KaTrainReader:
    """What KaTrain's engine read thread and GameNode.set_analysis / candidate_moves /
    policy_ranking do with an answer, with the types they rely on checked."""

    def __init__(self, size: tuple[int, int]) -> None:
        self.size = size
        self.moves: dict[str, dict[str, Any]] = {}
        self.root: dict[str, Any] | None = None
        self.ownership: list[float] | None = None
        self.policy: list[float] | None = None
        self.completed = False

    def feed(self, analysis: dict[str, Any]) -> str:
        assert "id" in analysis, "KaTrain drops lines without an id"
        if "error" in analysis:
            assert isinstance(analysis["error"], str)
            return "error"
        if "warning" in analysis:
            return "warning"
        if "terminateId" in analysis:
            return "terminate"
        partial = analysis.get("isDuringSearch", False)
        assert isinstance(partial, bool)
        if analysis.get("noResults", False):
            return "noResults"
        root = analysis["rootInfo"]
        assert isinstance(root["visits"], int) and root["visits"] >= 1
        for move in analysis["moveInfos"]:  # GameNode.update_move_analysis / set_analysis
            assert isinstance(move["move"], str) and isinstance(move["order"], int)
            assert isinstance(move["visits"], int) and isinstance(move["pv"], list)
            assert all(isinstance(m, str) for m in move["pv"])
            for key in ("scoreLead", "winrate", "prior", "scoreStdev", "utility", "lcb"):
                assert isinstance(move[key], float), key
            cur = self.moves.get(move["move"])
            if cur is None or cur["visits"] < move["visits"]:
                self.moves[move["move"]] = dict(move)
        self.ownership = analysis.get("ownership")
        self.policy = analysis.get("policy")
        self.root = root
        self.completed = self.completed or not partial
        return "partial" if partial else "final"

    def candidate_moves(self, next_player: str) -> list[dict[str, Any]]:
        assert self.root is not None
        sign = {"B": 1, "W": -1}[next_player]
        root_score, root_winrate = self.root["scoreLead"], self.root["winrate"]
        assert isinstance(root_score, float) and isinstance(root_winrate, float)
        top = [d for d in self.moves.values() if d["order"] == 0]
        top_score = top[0]["scoreLead"] if top else root_score
        return sorted(
            [{"pointsLost": sign * (root_score - d["scoreLead"]),
              "relativePointsLost": sign * (top_score - d["scoreLead"]),
              "winrateLost": sign * (root_winrate - d["winrate"]), **d} for d in self.moves.values()],
            key=lambda d: (d["order"], d["pointsLost"]),
        )

    def policy_ranking(self) -> list[tuple[float, tuple[int, int] | None]]:
        assert self.policy is not None
        szx, szy = self.size
        grid = var_to_grid(self.policy, (szx, szy))
        moves: list[tuple[float, tuple[int, int] | None]] = [
            (grid[y][x], (x, y)) for x in range(szx) for y in range(szy)]
        moves.append((self.policy[-1], None))
        return sorted(moves, key=lambda mp: -mp[0])


def replay(moves: list[list[str]], size: tuple[int, int], rules: str = "chinese") -> Board:
    board = Board(size[0], size[1], rules)
    for color, vertex in moves:
        board.to_move = BLACK if color == "B" else WHITE
        board.play(parse_vertex(vertex, size[0], size[1]))
    return board


GAME = [["B", "E5"], ["W", "C3"], ["B", "G7"], ["W", "C7"], ["B", "G3"], ["W", "D4"]]


def test_katrain_queries_answered_in_the_shape_katrain_parses(session: Session) -> None:
    size = (9, 9)
    query = katrain_query("QUERY:1", GAME, size=size)
    session.send(query)
    reader = KaTrainReader(size)
    kinds = []
    while not reader.completed:
        message = session.out.next()
        kinds.append(reader.feed(message))
        if message.get("warning"):  # japanese rules are approximated, wideRootNoise is ignored
            assert message["id"] == "QUERY:1" and message["field"] in ("rules", "overrideSettings")
    assert kinds.count("final") == 1 and "warning" in kinds
    root = reader.root
    assert root is not None and root["visits"] == 8
    assert root["currentPlayer"] == "B"  # after six moves
    assert isinstance(reader.ownership, list) and len(reader.ownership) == 81
    assert isinstance(reader.policy, list) and len(reader.policy) == 82
    candidates = reader.candidate_moves("B")
    assert candidates and candidates[0]["order"] == 0 and candidates[0]["visits"] >= 1
    board = replay(GAME, size)
    for move in candidates:  # KaTrain's AI reads per-move ownership (simple style) and the PV
        assert len(move["ownership"]) == 81
        pv_board = board.copy()
        for vertex in move["pv"]:
            pv_board.play(parse_vertex(vertex, *size))  # every PV move is legal in turn
    ranking = reader.policy_ranking()  # KaTrain's grid: (x, y) with y = 0 the bottom row
    assert ranking[0][0] > 0 and len(ranking) == 82
    for prior, point in ranking:
        move = board.pass_move if point is None else (size[1] - 1 - point[1]) * size[0] + point[0]
        assert (prior == -1) == (not board.is_legal(move))

    # The refinement query KaTrain sends for a played move (next_move): no ownership, no policy.
    session.send(katrain_query("QUERY:2", GAME, size=size, next_move=["B", "D6"], report_every=None))
    answer = session.final("QUERY:2")
    assert answer["turnNumber"] == len(GAME) + 1
    assert "ownership" not in answer and "policy" not in answer
    assert all("ownership" not in m for m in answer["moveInfos"])
    assert answer["rootInfo"]["currentPlayer"] == "W"

    # "Find alternatives": the moves already shown are avoided at the root.
    shown = [m["move"] for m in candidates if m["move"] != "pass"][:3]
    session.send(katrain_query("QUERY:3", GAME, size=size, priority=100, report_every=None,
                               avoid=[{"moves": shown, "player": "B", "untilDepth": 1}]))
    alternatives = session.final("QUERY:3")
    assert alternatives["moveInfos"] and not {m["move"] for m in alternatives["moveInfos"]} & set(shown)

    # A region of interest: every move outside it avoided for both players.
    inside = {f"{c}{r}" for c in "DEF" for r in (4, 5, 6)}
    outside = [f"{c}{r}" for c in "ABCDEFGHJ" for r in range(1, 10) if f"{c}{r}" not in inside]
    session.send(katrain_query("QUERY:4", GAME, size=size, report_every=None, ownership=False,
                               avoid=[{"moves": outside, "player": p, "untilDepth": 1} for p in "BW"]))
    local = session.final("QUERY:4")
    assert {m["move"] for m in local["moveInfos"]} <= inside | {"pass"}

    # KaTrain's terminate_query for a query it no longer needs: echoed back with terminateId.
    session.send({"action": "terminate", "terminateId": "QUERY:1", "id": "QUERY:5"})
    assert KaTrainReader(size).feed(session.final("QUERY:5")) == "terminate"


def test_katrain_literal_queries(tiny_export: Path) -> None:
    """The lines of tests/data/katrain_queries.jsonl, as KaTrain writes them to the engine's stdin
    (see the module docstring for their source), answered by the command in the shape KaTrain
    parses: analysis with progress reports, a played move's refinement, "find alternatives", a
    region of interest, a handicap game on 9x13, and a terminate."""
    lines = KATRAIN_QUERIES.read_text().splitlines()
    queries = [json.loads(line) for line in lines]
    # The builder the other tests use makes the same query, key for key and in KaTrain's order.
    built = katrain_query("QUERY:1", GAME, visits=500, priority=1)
    assert list(built.items()) == list(queries[0].items())
    proc = _start("--model", str(tiny_export), "--runtime", "torch")
    out, err = proc.communicate("\n".join(lines) + "\n", timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err, err
    readers = {q["id"]: KaTrainReader((q.get("boardXSize", 9), q.get("boardYSize", 9))) for q in queries}
    kinds: dict[str, list[str]] = {qid: [] for qid in readers}
    answers: dict[str, dict[str, Any]] = {}
    for message in map(json.loads, out.splitlines()):
        kind = readers[message["id"]].feed(message)
        kinds[message["id"]].append(kind)
        if kind == "final":
            answers[message["id"]] = message
    assert "error" not in sum(kinds.values(), [])
    assert kinds["QUERY:6"] == ["terminate"]
    # QUERY:1 may be stopped by the terminate (a final answer with what it has) or dropped from
    # the queue (noResults); every other query is answered once, in full.
    assert kinds["QUERY:1"].count("final") + kinds["QUERY:1"].count("noResults") == 1
    for query in queries[1:5]:
        qid = query["id"]
        assert kinds[qid].count("final") == 1 and answers[qid]["rootInfo"]["visits"] == query["maxVisits"]
    assert "ownership" not in answers["QUERY:2"] and "policy" not in answers["QUERY:2"]
    assert not {m["move"] for m in answers["QUERY:3"]["moveInfos"]} & {"E4", "D6", "F3"}
    outside = set(queries[3]["avoidMoves"][0]["moves"])
    assert answers["QUERY:4"]["moveInfos"] and not {m["move"] for m in answers["QUERY:4"]["moveInfos"]} & outside
    assert len(answers["QUERY:5"]["ownership"]) == 9 * 13 and answers["QUERY:5"]["rootInfo"]["currentPlayer"] == "B"
    assert readers["QUERY:5"].policy_ranking()[0][0] > 0


@pytest.mark.parametrize("rules", ["japanese", "chinese", "korean", "aga", "stone_scoring"])
def test_katrain_rules_handicap_and_rectangular_boards(session: Session, rules: str) -> None:
    size = (9, 13)  # KaTrain allows "x:y" board sizes
    stones = [["B", "C3"], ["B", "G11"]]  # two handicap stones, white to play first
    query = katrain_query(f"QUERY:{rules}", [["W", "E7"]], size=size, rules=rules, komi=0.5,
                          initial_stones=stones, initial_player="W", visits=4, report_every=None)
    session.send(query)
    answer = session.final(query["id"])
    assert "error" not in answer, answer
    assert len(answer["ownership"]) == 9 * 13 and len(answer["policy"]) == 9 * 13 + 1
    assert answer["rootInfo"]["currentPlayer"] == "B"
    for move in answer["moveInfos"]:
        move_index = parse_vertex(move["move"], *size)
        assert 0 <= move_index <= 9 * 13


def test_documented_examples(session: Session) -> None:
    # The example query of Analysis_Engine.md: three turns of a 2-stone handicap game.
    session.send('{"id":"foo","initialStones":[["B","Q4"],["B","C4"]],"moves":[["W","P5"],["B","P6"]],'
                 '"rules":"tromp-taylor","komi":7.5,"boardXSize":19,"boardYSize":19,"analyzeTurns":[0,1,2]}')
    answers = sorted((session.final("foo") for _ in range(3)), key=lambda a: a["turnNumber"])
    assert [a["turnNumber"] for a in answers] == [0, 1, 2]
    assert [a["rootInfo"]["currentPlayer"] for a in answers] == ["W", "B", "W"]
    for answer in answers:
        assert answer["isDuringSearch"] is False
        assert answer["rootInfo"]["visits"] == 8  # the engine's default maxVisits
        info = answer["moveInfos"][0]
        assert set(info) >= {"lcb", "move", "order", "prior", "pv", "scoreLead", "scoreMean", "scoreSelfplay",
                             "scoreStdev", "utility", "utilityLcb", "visits", "winrate"}
        assert set(answer["rootInfo"]) >= {"scoreLead", "scoreSelfplay", "scoreStdev", "symHash", "thisHash",
                                           "utility", "visits", "winrate"}
        assert [m["order"] for m in answer["moveInfos"]] == list(range(len(answer["moveInfos"])))
        assert sum(m["visits"] for m in answer["moveInfos"]) == 7  # the root's own visit is the 8th
    # The actions, answered by echoing the query with what the docs add.
    session.send('{"id":"foo","action":"query_version"}')
    assert session.final("foo") == {"id": "foo", "action": "query_version", "version": "0.1.0",
                                    "git_hash": "<omitted>"}
    session.send('{"id":"foo","action":"clear_cache"}')
    assert session.final("foo") == {"id": "foo", "action": "clear_cache"}
    session.send('{"id":"bar","action":"terminate","terminateId":"foo","turnNumbers":[1,2]}')
    assert session.final("bar") == {"id": "bar", "action": "terminate", "terminateId": "foo",
                                    "turnNumbers": [1, 2]}
    session.send('{"id":"baz","action":"terminate_all"}')
    assert session.final("baz") == {"id": "baz", "action": "terminate_all"}


def test_policy_ownership_and_perspective_facts(single: Session) -> None:
    """Facts a wrong implementation fails: -1 exactly on illegal points (stones, the ko point),
    the pass last, ownership row-major from the top, values flipped per perspective."""
    # A ko on 9x9: Black's F5 has one liberty (E5); White takes it, and Black may not retake at once.
    moves = [["B", "D5"], ["W", "F6"], ["B", "E6"], ["W", "F4"], ["B", "E4"], ["W", "G5"], ["B", "F5"],
             ["W", "E5"]]
    size = (9, 9)
    board = replay(moves[:-1], size)
    base = {"moves": moves[:-1], "rules": "chinese", "komi": 7.5, "boardXSize": 9, "boardYSize": 9,
            "includePolicy": True, "includeOwnership": True, "maxVisits": 1}
    single.send({**base, "id": "a", "overrideSettings": {"reportAnalysisWinratesAs": "BLACK"}})
    black = single.final("a")
    single.send({**base, "id": "b", "overrideSettings": {"reportAnalysisWinratesAs": "WHITE"}})
    white = single.final("b")
    policy = black["policy"]
    legal = board.legal_moves()
    assert len(policy) == 82 and policy[-1] >= 0
    assert [p == -1 for p in policy] == [not ok for ok in legal]
    stones = board.stones().ravel()
    assert all(policy[i] == -1 for i in np.flatnonzero(stones))  # every occupied point
    assert sum(p for p in policy if p >= 0) == pytest.approx(1.0, abs=1e-4)
    # The same position from the other side: winrates mirrored, scores and ownership negated.
    assert white["rootInfo"]["rawWinrate"] == pytest.approx(1 - black["rootInfo"]["rawWinrate"], abs=1e-6)
    assert white["rootInfo"]["rawLead"] == pytest.approx(-black["rootInfo"]["rawLead"], abs=1e-5)
    assert np.allclose(white["ownership"], -np.array(black["ownership"]), atol=2e-6)
    assert white["policy"] == policy
    # SIDETOMOVE with White to move equals WHITE.
    single.send({**base, "id": "c", "overrideSettings": {"reportAnalysisWinratesAs": "SIDETOMOVE"}})
    assert single.final("c")["rootInfo"]["rawWinrate"] == white["rootInfo"]["rawWinrate"]

    # After White's capture at E5 (a ko), Black may not retake at F5: that empty point is -1 too.
    ko_board = replay(moves, size)
    single.send({**base, "moves": moves, "id": "ko"})
    ko_policy = single.final("ko")["policy"]
    ko_point = ko_board.ko_point
    assert ko_point == parse_vertex("F5", *size) and ko_board.stones().ravel()[ko_point] == 0
    assert ko_policy[ko_point] == -1
    assert [p == -1 for p in ko_policy] == [not ok for ok in ko_board.legal_moves()]


def test_pv_visits_moves_ownership_and_turns(session: Session) -> None:
    size = (9, 9)
    session.send({"id": "pv", "moves": GAME, "rules": "chinese", "komi": 7, "boardXSize": 9, "boardYSize": 9,
                  "maxVisits": 24, "includePVVisits": True, "includeMovesOwnership": True,
                  "analyzeTurns": [6, 2, 2, 0]})
    answers = sorted((session.final("pv") for _ in range(3)), key=lambda a: a["turnNumber"])
    assert [a["turnNumber"] for a in answers] == [0, 2, 6]  # duplicates analysed once
    assert session.out.empty()
    for answer in answers:
        board = replay(GAME[: answer["turnNumber"]], size)
        for info in answer["moveInfos"]:
            assert len(info["pvVisits"]) == len(info["pv"]) and info["pvVisits"][0] == info["visits"]
            assert info["pvVisits"] == sorted(info["pvVisits"], reverse=True)
            assert len(info["ownership"]) == 81
            line = board.copy()
            for vertex in info["pv"]:
                line.play(parse_vertex(vertex, *size))


def test_errors_and_warnings(single: Session) -> None:
    s = single
    good = {"moves": [["B", "D4"]], "rules": "chinese", "komi": 7.5, "boardXSize": 9, "boardYSize": 9,
            "maxVisits": 1}
    s.send("this is not json")
    error = s.out.next()
    assert set(error) == {"error"} and "could not parse input line as json request" in error["error"]
    s.send("[1, 2]")
    assert set(s.out.next()) == {"error"}
    s.send({**good})  # no id
    assert s.out.next() == {"error": 'Request must have a string "id" field'}
    cases = [
        ({"moves": [["B", "D4"], ["W", "D4"]]}, "moves", "Illegal move 1: D4"),
        ({"moves": [["B", "Z99"]]}, "moves", "Could not parse board location: Z99"),
        ({"moves": [["X", "D4"]]}, "moves", "Could not parse player: X"),
        ({"moves": "D4"}, "moves", "Must be an array of pairs"),
        ({"boardXSize": 5}, "boardXSize", "Must provide an integer from 7 to 19"),
        ({"boardYSize": 25}, "boardYSize", "Must provide an integer from 7 to 19"),
        ({"rules": "no-such-rules"}, "rules", "Could not parse rules"),
        ({"komi": 7.3}, "komi", "half-integer"),
        ({"maxVisits": 0}, "maxVisits", "Must be an integer from 1"),
        ({"analyzeTurns": [5]}, "analyzeTurns", "Invalid turn number: 5"),
        ({"includePolicy": "yes"}, "includePolicy", "Must be a boolean"),
        ({"initialStones": [["B", "pass"]]}, "initialStones", "Could not parse board location: pass"),
        ({"overrideSettings": {"reportAnalysisWinratesAs": "ME"}}, "overrideSettings", "Could not set settings"),
    ]
    for change, field_name, message in cases:
        s.send({**good, **change, "id": "bad"})
        answer = s.out.next()
        assert answer["id"] == "bad" and answer["field"] == field_name and message in answer["error"], answer
    s.send({key: value for key, value in good.items() if key != "moves"} | {"id": "bad"})
    assert s.out.next()["field"] == "moves"
    assert s.out.empty()  # errors end a query: no analysis follows
    # Warnings, then the analysis: unknown settings and fields, rules tengen approximates.
    s.send({**good, "id": "warn", "rules": "japanese", "overrideSettings": {"fooBar": 1}, "extra": 3})
    warnings = [s.out.next() for _ in range(3)]
    assert {w["field"] for w in warnings} == {"rules", "overrideSettings", "extra"}
    assert all(w["id"] == "warn" and isinstance(w["warning"], str) for w in warnings)
    assert s.final("warn")["rootInfo"]["visits"] == 1
    s.send({"id": "act", "action": "fly"})
    assert s.out.next()["field"] == "action"
    s.send({"id": "t", "action": "terminate"})
    assert s.out.next() == {"id": "t", "field": "terminateId",
                            "error": 'Requests for a terminate action must have a string "terminateId" field'}


def _running(engine: AnalysisEngine, qid: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(t.id == qid and t.state == "running" for t in engine._open):
            return
        time.sleep(0.01)
    raise AssertionError(f"{qid} never started")


def test_terminate_and_priority(single: Session) -> None:
    s = single
    base = {"moves": [], "rules": "chinese", "komi": 7.5, "boardXSize": 9, "boardYSize": 9}
    s.send({**base, "id": "long", "maxVisits": 100_000})
    _running(s.engine, "long")
    s.send({**base, "id": "low", "maxVisits": 2, "priority": 0})
    s.send({**base, "id": "high", "maxVisits": 2, "priority": 5})
    s.send({**base, "id": "doomed", "maxVisits": 2, "priority": 9, "analyzeTurns": [0]})
    # A queued query is answered at once with noResults, then the action is echoed.
    s.send({"id": "t1", "action": "terminate", "terminateId": "doomed"})
    assert s.out.next() == {"id": "doomed", "isDuringSearch": False, "noResults": True, "turnNumber": 0}
    assert s.out.next()["id"] == "t1"
    # The running one stops and reports what it has; then the queue goes highest priority first.
    s.send({"id": "t2", "action": "terminate", "terminateId": "long"})
    messages = s.out.take(4)
    ids = [m["id"] for m in messages]
    assert ids.index("t2") < 2 and [i for i in ids if i != "t2"] == ["long", "high", "low"]
    stopped = next(m for m in messages if m["id"] == "long")
    assert 1 <= stopped["rootInfo"]["visits"] < 100_000
    # terminate_all: queued and running alike.
    s.send({**base, "id": "x", "maxVisits": 100_000})
    _running(s.engine, "x")
    s.send({**base, "id": "y", "maxVisits": 100_000})
    s.send({"id": "all", "action": "terminate_all"})
    messages = s.out.take(3)
    assert {m["id"] for m in messages} == {"x", "y", "all"}
    assert next(m for m in messages if m["id"] == "y")["noResults"] is True
    assert s.engine.wait_idle(30)


def test_reports_during_search(single: Session) -> None:
    single.send({"id": "r", "moves": [], "rules": "chinese", "komi": 7.5, "boardXSize": 9, "boardYSize": 9,
                 "maxVisits": 100_000, "reportDuringSearchEvery": 0.05})
    partial = single.out.next()
    assert partial["id"] == "r" and partial["isDuringSearch"] is True and partial["moveInfos"]
    single.send({"id": "stop", "action": "terminate", "terminateId": "r"})
    final = single.final("r")
    assert final["isDuringSearch"] is False and final["rootInfo"]["visits"] >= partial["rootInfo"]["visits"]


def test_rules_mapping() -> None:
    japanese, _ = parse_kata_rules("japanese")
    rules, notes = tengen_rules(japanese)  # type: ignore[arg-type]
    assert (rules.ko, rules.suicide) == ("simple", False) and any("territory" in n for n in notes)
    tt, _ = parse_kata_rules("Tromp_Taylor")
    rules, notes = tengen_rules(tt)  # type: ignore[arg-type]
    assert (rules.ko, rules.suicide, rules.scoring, notes) == ("positional", True, "area", [])
    nz, _ = parse_kata_rules("new-zealand")
    assert tengen_rules(nz)[0].suicide and tengen_rules(nz)[0].ko == "situational"  # type: ignore[arg-type]
    obj, komi = parse_kata_rules({"ko": "SITUATIONAL", "scoring": "AREA", "suicide": False, "komi": 6})
    assert komi == 6 and tengen_rules(obj)[0].ko == "situational"  # type: ignore[arg-type]
    legacy, _ = parse_kata_rules("koSIMPLEscoreAREAtaxNONEsui0button0")
    assert tengen_rules(legacy)[0].ko == "simple"  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        parse_kata_rules({"ko": "NONE"})


def test_handicap_bonus_komi(single: Session) -> None:
    """Chinese rules give White one point per handicap stone (KataGo's whiteHandicapBonus N)."""
    base = {"moves": [], "initialStones": [["B", "C3"], ["B", "G7"]], "komi": 0.5, "boardXSize": 9,
            "boardYSize": 9, "maxVisits": 1}
    single.send({**base, "id": "tt", "rules": "tromp-taylor"})
    single.send({**base, "id": "cn", "rules": "chinese"})
    single.send({**base, "id": "cn0", "rules": "chinese", "whiteHandicapBonus": "0"})
    answers = {a["id"]: a for a in single.out.take(3)}
    # Same stones and ko/suicide except the komi: the net sees 2.5 under chinese, 0.5 otherwise.
    assert answers["cn"]["rootInfo"]["rawLead"] != answers["cn0"]["rootInfo"]["rawLead"]
    assert all(a["rootInfo"]["currentPlayer"] == "W" for a in answers.values())


def test_batching_evaluator_merges_concurrent_requests() -> None:
    calls: list[int] = []

    class Fake:
        def evaluate(self, spatial: np.ndarray, global_inputs: np.ndarray) -> dict[str, np.ndarray]:
            calls.append(len(spatial))
            return {"value": spatial[:, 0, 0, :1] * 2.0}

    batcher = BatchingEvaluator(Fake(), wait_s=5.0)
    ready = threading.Barrier(4)
    results: dict[int, np.ndarray] = {}

    def work(i: int) -> None:
        with batcher.working():
            ready.wait()
            spatial = np.full((i + 1, 18, 9, 9), float(i), np.float32)
            results[i] = batcher.evaluate(spatial, np.zeros((i + 1, 10), np.float32))["value"]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert calls == [1 + 2 + 3 + 4]  # one batch for the four waiting workers
    assert all(results[i].shape == (i + 1, 1) and np.all(results[i] == 2.0 * i) for i in range(4))
    # Board sizes do not mix: two shapes, two batches.
    calls.clear()
    out = {}
    done = threading.Barrier(2)

    def other(size: int) -> None:
        with batcher.working():
            done.wait()
            out[size] = batcher.evaluate(np.ones((1, 18, size, size), np.float32), np.zeros((1, 10), np.float32))

    threads = [threading.Thread(target=other, args=(n,)) for n in (9, 13)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(calls) == [1, 1] and set(out) == {9, 13}
    batcher.close()


def test_concurrent_queries_share_batches(evaluator: TorchEvaluator, caplog: pytest.LogCaptureFixture) -> None:
    """Eight queries at once on four workers over a real (random) net: the evaluations of
    different searches are merged, more than one search's request per net call on average (a
    count, not a timing: the collector waits for every busy worker's request)."""
    out = Output()
    engine = create_engine(evaluator, threads=4, out=out, max_visits=64)
    assert engine.batcher is not None
    session = Session(engine, out)
    for i in range(8):
        session.send({"id": f"q{i}", "moves": GAME[: i % 4], "rules": "chinese", "komi": 7.5, "boardXSize": 9,
                      "boardYSize": 9})
    answers = [out.next(timeout=120) for _ in range(8)]  # in any order
    assert sorted(a["id"] for a in answers) == [f"q{i}" for i in range(8)]
    assert all(a["rootInfo"]["visits"] == 64 for a in answers)
    with caplog.at_level("INFO", logger="tengen.gtp.analysis_engine"):
        engine.stop()
    batcher = engine.batcher
    assert batcher.requests > batcher.batches > 0 and batcher.mean_requests() > 1.0
    assert batcher.rows / batcher.batches > batcher.mean_requests()  # each request holds several leaves
    assert f"analysis: {batcher.batches} net evaluations, mean batch" in caplog.text


# ------------------------------------------------------------------ the command


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tengen.cli", "analysis", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)


def test_command_end_of_input_and_sigterm(tiny_export: Path) -> None:
    model = ("--model", str(tiny_export), "--runtime", "torch", "--max-visits", "4")
    # End of input: queued queries are finished first, then a clean exit.
    proc = _start(*model)
    query = katrain_query("QUERY:1", GAME, visits=4, report_every=None)
    out, err = proc.communicate(
        "\n".join([json.dumps(query), "{bad", json.dumps({"id": "v", "action": "query_version"})]) + "\n", timeout=60
    )
    assert proc.returncode == 0, err
    messages = [json.loads(line) for line in out.splitlines()]
    assert {"error"} in [set(m) for m in messages]
    assert any(m.get("id") == "QUERY:1" and "rootInfo" in m for m in messages)
    assert "Started, ready to begin handling requests" in err and "Traceback" not in err
    # SIGTERM during a long search: a prompt exit 0, no traceback.
    proc = _start(*model)
    assert proc.stdin is not None and proc.stderr is not None
    while "Started, ready" not in proc.stderr.readline():
        pass
    proc.stdin.write(
        json.dumps(
            {"id": "long", "moves": [], "rules": "chinese", "boardXSize": 9, "boardYSize": 9, "maxVisits": 100_000}
        )
        + "\n"
    )
    proc.stdin.flush()
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "Traceback" not in err


def _katrain_session(*args: str, query: dict[str, Any]) -> tuple[KaTrainReader, list[dict[str, Any]]]:
    """`tengen analysis ARGS` given `query` and query_models, read as KaTrain reads the answers."""
    proc = _start(*args)
    out, err = proc.communicate(
        json.dumps(query) + "\n" + json.dumps({"id": "m", "action": "query_models"}) + "\n", timeout=120
    )
    assert proc.returncode == 0 and "Traceback" not in err, err
    messages = [json.loads(line) for line in out.splitlines()]
    reader = KaTrainReader((query["boardXSize"], query["boardYSize"]))
    for message in messages:
        if message["id"] == query["id"]:
            reader.feed(message)
    return reader, [m["models"] for m in messages if m["id"] == "m"]


@pytest.mark.slow  # about 20 s: Triton loads the model through its Python backend
def test_katrain_query_through_triton(triton_server: Any, tiny_export: Path) -> None:
    """--triton: a KaTrain query answered through the real Triton of tests/conftest.py, in the shape
    KaTrain parses, with the same raw policy as the export run in-process."""
    from tengen.infra.triton.client import load_model
    from tengen.infra.triton.repository import render_config

    name = "analysis-tiny"
    triton_server.repository.create_model(name, render_config(name, max_batch_size=64))
    triton_server.repository.write_version(name, tiny_export)
    load_model(triton_server.grpc_url, name)
    query = katrain_query("QUERY:1", GAME, visits=16, report_every=None)
    common = ("--max-batch", "64", "--analysis-threads", "2")
    triton, triton_models = _katrain_session(
        "--triton", triton_server.grpc_url, "--model", name, "--model-version", "1", *common, query=query
    )
    local, _ = _katrain_session("--model", str(tiny_export), "--runtime", "torch", *common, query=query)
    assert triton_models == [
        [{"name": name, "internalName": name, "maxBatchSize": 64, "usesHumanSLProfile": False, "version": 1}]
    ]
    for reader in (triton, local):
        assert reader.completed and reader.root is not None and reader.root["visits"] == 16
        assert reader.candidate_moves("B") and len(reader.ownership or []) == 81
    assert triton.policy is not None and local.policy is not None
    assert np.allclose(triton.policy, local.policy, atol=1e-4)  # the same net behind both
    assert triton.root is not None and local.root is not None
    assert triton.root["rawWinrate"] == pytest.approx(local.root["rawWinrate"], abs=1e-4)


def test_command_errors_are_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "analysis", "--model", str(tmp_path / "none.pt")],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: cannot load the model: no exported model at")
    assert "Traceback" not in result.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "analysis", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "Override Engine Command" in help_text and "--analysis-threads" in help_text
