"""KataGo's JSON analysis engine protocol over tengen's analyzers (`tengen analysis`).

The protocol is KataGo's docs/Analysis_Engine.md: one JSON query per input line, answers one JSON
line each on the output, in any order. A query names a game (`moves`, `initialStones`, `rules`,
`komi`, board sizes) and the turns to analyse (`analyzeTurns`, default the last); each turn
becomes a task, answered with `moveInfos`, `rootInfo` and on request `ownership`, `policy`,
per-move ownership and PV visits. Special actions: `query_version`, `query_models`, `clear_cache`,
`terminate` and `terminate_all`. A bad query gets ``{"id", "field", "error"}`` (a line that is not
a JSON object with a string id gets ``{"error"}``); settings tengen reads but cannot honour get
``{"id", "field", "warning"}`` and the query goes on.

Tasks wait in a priority queue (higher `priority` first, then the earlier query) and are searched
by worker threads, one analyzer each (tengen.gtp.mcts_analyzer or the raw policy of tengen.gtp.analysis;
queries are parsed by tengen.gtp.analysis_query);
their net evaluations share batches through tengen.gtp.batching. Terminating a queued task answers
it at once with `noResults`; a running one stops and reports what it has, as KataGo does.

Values are from the perspective of `reportAnalysisWinratesAs` (BLACK, WHITE or SIDETOMOVE; the
engine's default, per-query through `overrideSettings`). tengen's net predicts one score (its
mean), so scoreLead, scoreMean and scoreSelfplay are the same number.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import itertools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import numpy as np

from tengen.go.board import BLACK, WHITE, Board
from tengen.gtp.analysis import Analysis, Analyzer, PolicyAnalyzer, utility
from tengen.gtp.analysis_query import ACTIONS, PERSPECTIVES, QueryError, Task, is_int, parse_query
from tengen.gtp.batching import BatchingEvaluator
from tengen.gtp.protocol import format_vertex

log = logging.getLogger(__name__)


def _round(value: float, digits: int = 8) -> float:
    value = float(value)
    return float(f"{value:.{digits}g}") if math.isfinite(value) else value


def position_hashes(board: Board) -> tuple[str, str]:
    """(thisHash, symHash): 32 hex digits for the stones, the player to move and the simple-ko
    ban; symHash is the least over the board's symmetries (so equal for symmetric positions)."""
    grid = board.stones().astype(np.int8)
    if board.ko_point is not None:
        grid[divmod(board.ko_point, board.x_size)] = 3
    variants = [grid, grid[::-1], grid[:, ::-1], grid[::-1, ::-1]]
    if board.x_size == board.y_size:
        variants += [v.T for v in variants]

    def digest(g: np.ndarray) -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(bytes([board.to_move, g.shape[0], g.shape[1]]))
        h.update(np.ascontiguousarray(g).tobytes())
        return h.hexdigest().upper()

    hashes = [digest(v) for v in variants]
    return hashes[0], min(hashes)


def build_answer(task: Task, analysis: Analysis, during_search: bool) -> dict[str, Any]:
    """KataGo's answer for one analysed turn, from the task's perspective."""
    board, settings = task.board, task.settings
    x_size, y_size = board.x_size, board.y_size
    to_move = board.to_move
    flip = (settings.perspective == "BLACK" and to_move == WHITE) or (
        settings.perspective == "WHITE" and to_move == BLACK
    )
    sign = -1.0 if flip else 1.0

    def rate(value: float) -> float:
        return _round(1.0 - value if flip else value)

    def vertex(move: int) -> str:
        return format_vertex(move, x_size, y_size)

    move_infos = []
    for order, info in enumerate(analysis.moves):
        pv = info.pv[: 1 + settings.pv_len]
        entry: dict[str, Any] = {
            "move": vertex(info.move),
            "visits": info.visits,
            "edgeVisits": info.visits,
            "winrate": rate(info.winrate),
            "scoreLead": _round(sign * info.score_lead),
            "scoreMean": _round(sign * info.score_lead),
            "scoreSelfplay": _round(sign * info.score_lead),
            "scoreStdev": _round(info.score_stdev),
            "prior": _round(info.prior),
            "utility": _round(sign * info.utility),
            "lcb": rate(info.lcb),
            "utilityLcb": _round(sign * (info.utility - 2.0 * (info.winrate - info.lcb))),
            "order": order,
            "pv": [vertex(m) for m in pv],
        }
        if settings.include_pv_visits:
            counts = info.pv_visits if info.pv_visits is not None else [info.visits]
            entry["pvVisits"] = [int(c) for c in (list(counts) + [0] * len(pv))[: len(pv)]]
        if settings.include_moves_ownership and info.ownership is not None:
            entry["ownership"] = np.round(sign * info.ownership.ravel(), 6).tolist()
        move_infos.append(entry)

    root_utility = (
        analysis.utility if analysis.utility is not None else utility(analysis.winrate, analysis.score_lead, board)
    )
    this_hash, sym_hash = position_hashes(board)
    root: dict[str, Any] = {
        "visits": analysis.visits,
        "winrate": rate(analysis.winrate),
        "scoreLead": _round(sign * analysis.score_lead),
        "scoreSelfplay": _round(sign * analysis.score_lead),
        "scoreStdev": _round(analysis.score_stdev),
        "utility": _round(sign * root_utility),
        "currentPlayer": "B" if to_move == BLACK else "W",
        "thisHash": this_hash,
        "symHash": sym_hash,
    }
    raw = analysis.raw
    if raw is not None:
        root.update(
            {
                "rawWinrate": rate(raw.winrate),
                "rawLead": _round(sign * raw.score_mean),
                "rawScoreSelfplay": _round(sign * raw.score_mean),
                "rawScoreSelfplayStdev": _round(raw.score_stdev),
                "rawNoResultProb": _round(raw.no_result),
            }
        )
    answer: dict[str, Any] = {
        "id": task.id,
        "isDuringSearch": during_search,
        "turnNumber": task.turn,
        "moveInfos": move_infos,
        "rootInfo": root,
    }
    if settings.include_ownership and analysis.ownership is not None:
        answer["ownership"] = np.round(sign * np.asarray(analysis.ownership).ravel(), 6).tolist()
    if settings.include_policy:
        priors = raw.policy if raw is not None else analysis.priors
        legal = board.legal_moves()
        if priors is None:
            priors = legal / legal.sum()
        answer["policy"] = [_round(p, 6) if ok else -1 for p, ok in zip(np.asarray(priors).tolist(), legal)]
    return answer


# ----------------------------------------------------------------------------------- engine


class AnalysisEngine:
    """Reads queries, schedules their turns on worker threads, writes the answers.

    analyzers: one per worker thread (each is used by its thread only). batcher: the
    BatchingEvaluator the analyzers share, if any (each search is marked as working on it; it is
    closed when the engine stops). models: what `query_models` reports. version:
    `query_version`'s version string."""

    def __init__(
        self,
        analyzers: Sequence[Analyzer],
        *,
        out: TextIO,
        max_visits: int = 500,
        perspective: str = "BLACK",
        version: str = "",
        models: list[dict[str, Any]] | None = None,
        batcher: BatchingEvaluator | None = None,
        quit_without_waiting: bool = False,
    ) -> None:
        if not analyzers:
            raise ValueError("at least one analyzer is needed")
        if perspective not in PERSPECTIVES:
            raise ValueError(f"perspective must be one of {', '.join(PERSPECTIVES)}")
        self.analyzers = list(analyzers)
        self.out = out
        self.max_visits = max_visits
        self.perspective = perspective
        self.version = version
        self.models = models or []
        self.batcher = batcher
        self.quit_without_waiting = quit_without_waiting
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._queue: list[Task] = []
        self._open: list[Task] = []  # queued and running tasks
        self._seq = itertools.count()
        self._clear = [False] * len(self.analyzers)
        self._stopping = False
        self._silent = False  # after a broken output or a quick quit: write nothing more
        self._threads = [
            threading.Thread(target=self._worker, args=(i,), name=f"analysis-{i}", daemon=True)
            for i in range(len(self.analyzers))
        ]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------------ output

    def write(self, message: dict[str, Any]) -> None:
        try:
            line = json.dumps(message, separators=(",", ":"), allow_nan=False)
        except ValueError:  # a value that is not finite: say so rather than write invalid JSON
            line = json.dumps({"id": message.get("id"), "error": "internal error: a value is not finite"})
        with self._write_lock:
            if self._silent:
                return
            try:
                self.out.write(line + "\n")
                self.out.flush()
                return
            except (BrokenPipeError, OSError, ValueError):  # the reader went away
                self._silent = True
        log.warning("the output is closed; analysis stops")
        self._abort()

    def error(self, message: str, qid: str | None = None, field_name: str | None = None) -> None:
        out: dict[str, Any] = {}
        if qid is not None:
            out["id"] = qid
        if field_name is not None:
            out["field"] = field_name
        out["error"] = message
        self.write(out)

    # ------------------------------------------------------------------ input

    def run(self, inp: TextIO) -> int:
        """Answer queries from `inp` until its end, then (unless quitting without waiting) finish
        the open tasks; returns 0."""
        for line in inp:
            self.handle_line(line)
            if self._silent:
                break
        self.stop(wait=not self.quit_without_waiting)
        return 0

    def handle_line(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        try:
            query = json.loads(line)
        except (ValueError, RecursionError) as error:
            self.error(f"{error} - could not parse input line as json request: {line}")
            return
        if not isinstance(query, dict):
            self.error(f"Request line was valid json but was not an object, ignoring: {line}")
            return
        qid = query.get("id")
        if not isinstance(qid, str):
            self.error('Request must have a string "id" field')
            return
        action = query.get("action")
        if isinstance(action, str):
            self.action(query, action)
            return
        warnings: list[tuple[str, str]] = []
        try:
            parsed = parse_query(
                query,
                default_visits=self.max_visits,
                perspective=self.perspective,
                seq=lambda: next(self._seq),
                warnings=warnings,
            )
        except QueryError as error:  # the warnings found before the error, then the error
            for field_name, message in warnings:
                self.write({"id": qid, "field": field_name, "warning": message})
            self.error(error.message, qid, error.field)
            return
        except Exception as error:  # a query must never end the engine
            log.exception("query %r failed", qid)
            self.error(f"internal error: {error}", qid)
            return
        for field_name, message in parsed.warnings:
            self.write({"id": qid, "field": field_name, "warning": message})
        with self._cond:
            if self._stopping:
                return
            for task in parsed.tasks:
                heapq.heappush(self._queue, task)
                self._open.append(task)
            self._cond.notify_all()

    def action(self, query: dict[str, Any], action: str) -> None:
        qid = query["id"]
        if action == "query_version":
            self.write({**query, "version": self.version, "git_hash": "<omitted>"})
        elif action == "query_models":
            self.write({**query, "models": self.models})
        elif action == "clear_cache":
            with self._cond:  # each worker empties its cache before its next search
                self._clear = [True] * len(self._clear)
            self.write(query)
        elif action in ("terminate", "terminate_all"):
            target = query.get("terminateId")
            if action == "terminate" and not isinstance(target, str):
                self.error('Requests for a terminate action must have a string "terminateId" field', qid, "terminateId")
                return
            turns = query.get("turnNumbers")
            if turns is not None and (not isinstance(turns, list) or not all(is_int(t) for t in turns)):
                self.error(
                    "If provided, must be an array of integers indicating turns to terminate", qid, "turnNumbers"
                )
                return
            self.terminate(target if action == "terminate" else None, turns)
            self.write(query)
        else:
            self.error("'action' field must be one of " + ", ".join(f"'{a}'" for a in ACTIONS), qid, "action")

    # ------------------------------------------------------------------ scheduling

    def terminate(self, qid: str | None, turns: list[int] | None = None) -> None:
        """Terminate the open tasks of query `qid` (all queries when None), only `turns` of them
        when given: queued ones are answered with noResults now, running ones stop and report."""
        with self._cond:
            for task in list(self._open):
                if (qid is None or task.id == qid) and (turns is None or task.turn in turns):
                    self._terminate(task)

    def _terminate(self, task: Task) -> None:  # with self._cond held
        if task.terminated:
            return
        task.terminated = True
        task.stop.set()
        if task.state == "queued":
            self._open.remove(task)
            self._cond.notify_all()
            self.write({"id": task.id, "isDuringSearch": False, "noResults": True, "turnNumber": task.turn})

    def pending(self) -> int:
        """Tasks queued or running."""
        with self._cond:
            return len(self._open)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no task is queued or running; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._open, timeout)

    def _abort(self) -> None:
        """Drop the queued tasks, stop the running ones, write nothing more; no waiting."""
        with self._cond:
            self._silent = True
            for task in list(self._open):
                task.terminated = True
                task.stop.set()
                if task.state == "queued":
                    self._open.remove(task)
            self._queue.clear()
            self._stopping = True
            self._cond.notify_all()

    def stop(self, wait: bool = True) -> None:
        """Stop the workers: after the open tasks are done (`wait`), or now, answering nothing more."""
        if wait:
            self.wait_idle()
        else:
            self._abort()
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if threading.current_thread() not in self._threads:
            for thread in self._threads:
                thread.join(timeout=None if wait else 5.0)
            if self.batcher is not None:
                self.batcher.close()
                log.info("analysis: %s", self.batcher.summary())  # the measured batching

    def _next(self, index: int) -> Task | None:
        with self._cond:
            while True:
                while self._queue:
                    task = heapq.heappop(self._queue)
                    if not task.terminated:
                        task.state = "running"
                        if self._clear[index]:
                            self._clear[index] = False
                            cache = getattr(self.analyzers[index], "cache", None)
                            if cache is not None:
                                cache.clear()
                        return task
                if self._stopping:
                    return None
                self._cond.wait()

    def _worker(self, index: int) -> None:
        analyzer = self.analyzers[index]
        while (task := self._next(index)) is not None:
            try:
                self._search(analyzer, task)
            except Exception as error:  # one failing search must not take the worker down
                log.exception("analysis of %r turn %d failed", task.id, task.turn)
                self.error(f"internal error: {error}", task.id)
            finally:
                with self._cond:
                    task.state = "done"
                    if task in self._open:
                        self._open.remove(task)
                    self._cond.notify_all()

    def _search(self, analyzer: Analyzer, task: Task) -> None:
        settings = task.settings
        started = time.monotonic()
        deadline = started + settings.max_time if settings.max_time else None
        progress: Callable[[Analysis], None] | None = None
        interval = 0.0
        if settings.report_every is not None:
            interval = settings.report_every
            first = started + (settings.first_report_after or settings.report_every)
            last = [0.0]

            def report(analysis: Analysis) -> None:
                now = time.monotonic()
                # The final analysis is reported once, as the answer with isDuringSearch false.
                if (
                    now >= first
                    and now - last[0] >= interval * 0.5
                    and analysis.visits < settings.visits
                    and not task.stop.is_set()
                ):
                    last[0] = now
                    self.write(build_answer(task, analysis, during_search=True))

            progress = report

        context = self.batcher.working() if self.batcher is not None else contextlib.nullcontext()
        with context:
            analysis = analyzer.analyze(
                task.board,
                task.previous,
                settings.visits,
                max_moves=task.board.area + 1,
                ownership=settings.include_ownership,
                deadline=deadline,
                stop=task.stop,
                progress=progress,
                progress_interval=interval,
                allowed=task.allowed,
                visited_only=True,
            )
        self.write(build_answer(task, analysis, during_search=False))


def create_engine(
    evaluator: Any,
    *,
    threads: int = 2,
    search: str = "mcts",
    out: TextIO,
    max_visits: int = 500,
    perspective: str = "BLACK",
    version: str = "",
    models: list[dict[str, Any]] | None = None,
    max_batch: int = 256,
    quit_without_waiting: bool = False,
) -> AnalysisEngine:
    """An engine with `threads` workers over `evaluator`: tengen's MCTS (`search` "mcts") or the
    raw policy with a one-ply look ("policy") per worker, their evaluations batched together
    when there is more than one."""
    from tengen.config import SearchConfig
    from tengen.gtp.mcts_analyzer import MctsAnalyzer

    if search not in ("mcts", "policy"):
        raise ValueError(f"search must be mcts or policy, got {search!r}")
    batcher = BatchingEvaluator(evaluator, max_batch=max_batch) if threads > 1 else None
    shared = batcher if batcher is not None else evaluator
    analyzers: list[Any]
    if search == "mcts":
        # One NN cache per worker (a cache serves one thread); together the default's size.
        config = SearchConfig(nn_cache_size=max(1024, SearchConfig().nn_cache_size // threads))
        analyzers = [MctsAnalyzer(shared, config, seed=i) for i in range(threads)]
    else:
        analyzers = [PolicyAnalyzer(shared) for _ in range(threads)]
    return AnalysisEngine(
        analyzers,
        out=out,
        max_visits=max_visits,
        perspective=perspective,
        version=version,
        models=models,
        batcher=batcher,
        quit_without_waiting=quit_without_waiting,
    )
