"""How the GTP engine decides and analyses: the Analyzer interface and the raw-net analyzer.

An Analyzer turns a position into an `Analysis`: candidate moves, best first, each with visits,
winrate, score lead, prior, lower confidence bound and principal variation, plus the root's value
and (on request) ownership; every figure from the perspective of the player to move. The engine
picks its move from the analysis (`choose_move`), streams it for lz-analyze / kata-analyze
(`format_lz`, `format_kata`) and judges dead stones with its ownership.

`PolicyAnalyzer` needs no search: one evaluation of the position gives priors, value, score and
ownership; with a visit budget above 1 it also evaluates the children of the most likely moves
(one batch) so each candidate gets its own winrate, score and a two-move PV. With a budget of 1 it
is the plain policy player: the move with the highest prior; above 1, the evaluated child with
the best utility (a one-ply search). The MCTS-backed analyzer (see
`tengen.gtp.mcts_analyzer`) implements the same interface.

Besides what the GTP engine shows, an analysis carries what KataGo's JSON analysis engine reports
(`tengen analysis`, tengen.gtp.analysis_engine): the net's own evaluation of the position
(`raw`: value, score and policy before any search), per candidate the net's ownership after the
move and the visits along its PV. Both analyzers take `allowed` (a root move mask, for KataGo's
avoidMoves / allowMoves) and `visited_only` (list only the searched candidates).
"""
from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tengen.go.board import BLACK, EMPTY, Board
from tengen.go.features import encode
from tengen.go.passalive import final_score
from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL
from tengen.gtp.protocol import format_vertex
from tengen.nn.evaluator import Evaluator

LCB_Z = 1.96  # width of the lower confidence bound on a move's winrate, in standard errors
SCORE_UTILITY_WEIGHT = 0.5  # KataGo's c_score, used for the reported utility


@dataclass
class MoveInfo:
    """One candidate move; winrate, score and utility from the mover's perspective."""

    move: int
    visits: int
    winrate: float
    score_lead: float
    prior: float
    pv: list[int]
    score_stdev: float = 0.0
    lcb: float = 0.0
    utility: float = 0.0
    pv_visits: list[int] | None = None  # visits of each position along `pv` (None: unknown)
    ownership: np.ndarray | None = None  # float [y_size, x_size]: the net's, after the move, mover's view


@dataclass
class NetEval:
    """The net's own evaluation of the analysed position, before any search; mover's view."""

    winrate: float
    score_mean: float
    score_stdev: float
    no_result: float
    policy: np.ndarray  # float [area + 1]: softmax over the legal moves, 0 where illegal


@dataclass
class Analysis:
    """A position's analysis. `moves` is best first (its index is the `order` field)."""

    to_move: int
    visits: int
    winrate: float
    score_lead: float
    moves: list[MoveInfo] = field(default_factory=list)
    ownership: np.ndarray | None = None  # float [y_size, x_size] in [-1, 1], mover's perspective
    priors: np.ndarray | None = None  # float [area + 1]: every move's prior (0 when illegal)
    score_stdev: float = 0.0
    utility: float | None = None  # the root's utility (None: not computed)
    raw: NetEval | None = None  # the net's evaluation of the root itself


Progress = Callable[[Analysis], None]


class Analyzer(Protocol):
    """What the GTP engine needs from a move chooser."""

    def analyze(
        self,
        board: Board,
        previous: Sequence[Board],
        visits: int,
        *,
        max_moves: int = 10,
        ownership: bool = False,
        deadline: float | None = None,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        progress_interval: float = 0.0,
        allowed: np.ndarray | None = None,
        visited_only: bool = False,
    ) -> Analysis:
        """Analyse `board` (the player to move is `board.to_move`). `previous`: the positions
        before it, oldest first (may be empty). `visits`: the budget (net evaluations or
        playouts); `deadline`: a `time.monotonic()` by which to answer; `stop`: set to end early.
        `progress`, when given, is called with intermediate analyses about every
        `progress_interval` seconds; the returned analysis is the final one. `allowed`: bool
        [area + 1], the only root moves to consider (pass always may be). `visited_only`: list
        only the candidates that got visits (up to `max_moves`), or the best by prior when none
        did."""
        ...


def winrate_from_value(value_logits: np.ndarray) -> float:
    """Win probability of the mover from win/loss/no-result logits (a no-result is half a win)."""
    v = np.exp(value_logits - value_logits.max())
    v /= v.sum()
    return float(v[0] + 0.5 * v[2])


def utility(winrate: float, score_lead: float, board: Board) -> float:
    """KataGo's utility: win/loss in [-1, 1] plus c_score * (2/pi) * atan(score / sqrt(area))."""
    scale = math.sqrt(board.area)
    return (2.0 * winrate - 1.0) + SCORE_UTILITY_WEIGHT * (2.0 / math.pi) * math.atan(score_lead / scale)


def lower_bound(winrate: float, visits: int) -> float:
    """Lower confidence bound of a winrate averaged over `visits` evaluations (0 if unvisited)."""
    if visits <= 0:
        return 0.0
    spread = LCB_Z * math.sqrt(max(winrate * (1.0 - winrate), 1e-4) / visits)
    return min(1.0, max(0.0, winrate - spread))


def encode_batch(positions: Sequence[tuple[Board, Board | None, Board | None]],
                 side: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Input planes for (board, prev1, prev2) triples of one board size, or of boards of any size
    up to `side` padded top-left into side x side planes (their on-board plane masks the rest)."""
    first = positions[0][0]
    height, width = (side, side) if side is not None else (first.y_size, first.x_size)
    spatial = np.zeros((len(positions), NUM_SPATIAL, height, width), dtype=np.float32)
    global_inputs = np.zeros((len(positions), NUM_GLOBAL), dtype=np.float32)
    for i, (board, prev1, prev2) in enumerate(positions):
        encode(board, spatial[i], global_inputs[i], prev1, prev2 if prev1 is not None else None)
    return spatial, global_inputs


def history_pair(previous: Sequence[Board]) -> tuple[Board | None, Board | None]:
    """(prev1, prev2) for the encoder from positions oldest first."""
    prev1 = previous[-1] if previous else None
    prev2 = previous[-2] if len(previous) >= 2 else None
    return prev1, prev2


def allowed_mask(legal: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """The legal moves that `allowed` permits; pass stays permitted (as in tengen.search)."""
    if allowed is None:
        return legal
    mask = legal & np.asarray(allowed, dtype=bool)
    mask[-1] = legal[-1]
    return mask


def value_probabilities(value_logits: np.ndarray) -> np.ndarray:
    """Win, loss and no-result probabilities from the value head's logits."""
    v = np.exp(value_logits - value_logits.max())
    return v / v.sum()


def net_eval(out: dict[str, np.ndarray], i: int, legal: np.ndarray) -> NetEval:
    """Row `i` of an evaluator's outputs as a NetEval (policy over the `legal` moves)."""
    probs = value_probabilities(out["value"][i])
    return NetEval(winrate=float(probs[0] + 0.5 * probs[2]), score_mean=float(out["score"][i, 0]),
                   score_stdev=float(out["score"][i, 1]), no_result=float(probs[2]),
                   policy=legal_priors(out["policy"][i], legal))


def legal_priors(policy_logits: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """Softmax of the policy over the legal moves (pass included); 0 for illegal ones."""
    logits = np.where(legal, policy_logits.astype(np.float64), -np.inf)
    logits -= logits[legal].max()
    probs = np.exp(logits)
    return probs / probs.sum()


class PolicyAnalyzer:
    """Analysis from the raw net: one evaluation of the position, plus one batch evaluating the
    children of the top candidates when the visit budget allows (visits - 1 children at most)."""

    def __init__(self, evaluator: Evaluator) -> None:
        self.evaluator = evaluator

    def analyze(
        self,
        board: Board,
        previous: Sequence[Board],
        visits: int,
        *,
        max_moves: int = 10,
        ownership: bool = False,
        deadline: float | None = None,
        stop: threading.Event | None = None,
        progress: Progress | None = None,
        progress_interval: float = 0.0,
        allowed: np.ndarray | None = None,
        visited_only: bool = False,
    ) -> Analysis:
        prev1, prev2 = history_pair(previous)
        spatial, global_inputs = encode_batch([(board, prev1, prev2)])
        out = self.evaluator.evaluate(spatial, global_inputs)
        legal = board.legal_moves()
        raw = net_eval(out, 0, legal)
        priors = raw.policy if allowed is None else legal_priors(out["policy"][0], allowed_mask(legal, allowed))
        root_winrate, root_score, root_stdev = raw.winrate, raw.score_mean, raw.score_stdev
        order = [int(m) for m in np.argsort(-priors, kind="stable") if priors[m] > 0]
        shown = order[: max(1, max_moves)]
        expand = shown[: max(0, visits - 1)] if not (stop is not None and stop.is_set()) else []
        infos = {m: MoveInfo(m, 0, root_winrate, root_score, float(priors[m]), [m], root_stdev) for m in shown}
        if expand:
            children = []
            for move in expand:
                child = board.copy()
                child.play(move)
                children.append((child, board, prev1))
            cspatial, cglobal = encode_batch(children)
            cout = self.evaluator.evaluate(cspatial, cglobal)
            for i, move in enumerate(expand):
                info = infos[move]
                info.visits = 1
                info.winrate = 1.0 - winrate_from_value(cout["value"][i])
                info.score_lead = -float(cout["score"][i, 0])
                info.score_stdev = float(cout["score"][i, 1])
                reply_priors = legal_priors(cout["policy"][i], children[i][0].legal_moves())
                info.pv = [move, int(np.argmax(reply_priors))]
                info.pv_visits = [1, 0]
                info.ownership = -np.array(cout["ownership"][i, : board.y_size, : board.x_size], dtype=np.float64)
        for info in infos.values():
            info.lcb = lower_bound(info.winrate, info.visits)
            info.utility = utility(info.winrate, info.score_lead, board)
        # Evaluated children first, best utility first (a one-ply search); then the rest by prior.
        ranked = sorted(expand, key=lambda m: -infos[m].utility)
        if not visited_only or not ranked:
            ranked += [m for m in shown if m not in expand][: 1 if visited_only else None]
        analysis = Analysis(
            to_move=board.to_move,
            visits=1 + len(expand),
            winrate=root_winrate,
            score_lead=root_score,
            moves=[infos[m] for m in ranked],
            ownership=np.array(out["ownership"][0, : board.y_size, : board.x_size], dtype=np.float64)
            if ownership
            else None,
            priors=priors,
            score_stdev=root_stdev,
            utility=utility(root_winrate, root_score, board),
            raw=raw,
        )
        if progress is not None:
            progress(analysis)
        return analysis


# ---------------------------------------------------------------------------- move choice


def fills_own_eye(board: Board, stones: np.ndarray, move: int, color: int) -> bool:
    """Whether `move` fills a true single-point eye of `color`: every neighbour is its stone
    and the opponent holds fewer than two diagonals (none on the edge)."""
    if move >= board.area:
        return False
    y, x = divmod(move, board.x_size)
    if stones[y, x] != EMPTY:
        return False
    for ny, nx in ((y - 1, x), (y + 1, x), (y, x - 1), (y, x + 1)):
        if 0 <= ny < board.y_size and 0 <= nx < board.x_size and stones[ny, nx] != color:
            return False
    opponent, bad, edge = 3 - color, 0, False
    for ny, nx in ((y - 1, x - 1), (y - 1, x + 1), (y + 1, x - 1), (y + 1, x + 1)):
        if 0 <= ny < board.y_size and 0 <= nx < board.x_size:
            bad += stones[ny, nx] == opponent
        else:
            edge = True
    return bad < (1 if edge else 2)


def mover_leads(board: Board) -> bool:
    """Whether the mover is ahead if the game were scored now by the rules engine."""
    score = final_score(board)  # Black minus White, komi included
    return score > 0 if board.to_move == BLACK else score < 0


def passing_wins(board: Board) -> bool:
    """After the opponent's pass: would a pass now end the game with a win for the mover?"""
    return board.consecutive_passes >= 1 and mover_leads(board)


def choose_move(board: Board, analysis: Analysis) -> int:
    """The move to play, from the candidates best first. The referee of a match scores strictly
    by the rules engine, so the engine passes only when that wins: right after the opponent's pass
    while it leads on the board as it stands, or when no move is left. Otherwise: the best legal
    candidate other than pass that does not fill one of the mover's own eyes (under area scoring
    a move inside one's own territory costs nothing, a premature pass can cost the game)."""
    if passing_wins(board):
        return board.pass_move
    stones = board.stones()
    for info in analysis.moves:
        if info.move != board.pass_move and board.is_legal(info.move) \
                and not fills_own_eye(board, stones, info.move, board.to_move):
            return info.move
    # Every candidate shown was rejected: the other legal moves, by prior when the analysis has
    # them, that do not fill an own eye.
    legal = board.legal_moves()[: board.area]
    order = np.argsort(-analysis.priors[: board.area], kind="stable") if analysis.priors is not None \
        else np.arange(board.area)
    for move in order:
        if legal[move] and not fills_own_eye(board, stones, int(move), board.to_move):
            return int(move)
    return board.pass_move


# ------------------------------------------------------------------------ analysis output


def _pv(info: MoveInfo, board: Board) -> str:
    return " ".join(format_vertex(m, board.x_size, board.y_size) for m in info.pv)


def format_lz(analysis: Analysis, board: Board) -> str:
    """One lz-analyze line (Leela Zero's layout, read by Lizzie and Sabaki): winrate, prior and
    lcb as integers in 0..10000."""
    parts = []
    for order, info in enumerate(analysis.moves):
        parts.append(
            f"info move {format_vertex(info.move, board.x_size, board.y_size)} visits {info.visits} "
            f"winrate {round(info.winrate * 10000)} prior {round(info.prior * 10000)} "
            f"lcb {round(info.lcb * 10000)} order {order} pv {_pv(info, board)}"
        )
    return " ".join(parts)


def format_kata(analysis: Analysis, board: Board, ownership: bool = False) -> str:
    """One kata-analyze line (KataGo's layout, read by Lizzie, Sabaki and KaTrain's GTP mode):
    floats, winrate and prior in [0, 1], score in points; `ownership` + y_size * x_size values
    (row by row from the top-left) at the end when asked for."""
    parts = []
    for order, info in enumerate(analysis.moves):
        parts.append(
            f"info move {format_vertex(info.move, board.x_size, board.y_size)} visits {info.visits} "
            f"utility {info.utility:.6f} winrate {info.winrate:.6f} scoreMean {info.score_lead:.6f} "
            f"scoreStdev {info.score_stdev:.6f} scoreLead {info.score_lead:.6f} "
            f"scoreSelfplay {info.score_lead:.6f} prior {info.prior:.6f} lcb {info.lcb:.6f} "
            f"utilityLcb {info.utility - 2.0 * (info.winrate - info.lcb):.6f} order {order} "
            f"pv {_pv(info, board)}"
        )
    if ownership and analysis.ownership is not None:
        parts.append("ownership " + " ".join(f"{v:.6f}" for v in analysis.ownership.ravel()))
    return " ".join(parts)
