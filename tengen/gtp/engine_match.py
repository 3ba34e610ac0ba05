"""Matches between two GTP engines: play, adjudicate, record SGF, report to ratings, summarise.

Engine A plays Black in the odd-numbered games (1, 3, ...) and White in the others. The referee is
tengen's rules engine: every move is checked (an illegal or unreadable move, a crash or a move
later than the time limit forfeits the game), and the game ends on

- two passes in a row: scored by the rules engine (`final_score` under the match's rules); each
  engine's own `final_score` answer, when it has the command, is recorded next to it and a
  disagreement about the winner is logged and counted;
- the move cap: scored the same way;
- a resignation.

Every game is written as SGF (when an SGF dir is given) and reported to ratings right after it
ends. The summary gives engine A's score rate with a Wilson interval and the Elo difference that
rate implies.
"""
from __future__ import annotations

import json
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tengen.go.board import BLACK, WHITE, Board
from tengen.go.passalive import final_score, result_string
from tengen.go.rules import IllegalMoveError, Rules
from tengen.go.sgf import SgfGame, write_game
from tengen.gtp.client import CommandFailed, EngineError, EngineTimeout, GtpClient
from tengen.gtp.engine import rules_to_json
from tengen.gtp.protocol import GtpError, color_name, format_vertex, parse_vertex
from tengen.ratings.records import GameReport, PlayerInfo
from tengen.ratings.report import Reporter
from tengen.stats import elo_difference, wilson_interval

log = logging.getLogger(__name__)

_SCORE = re.compile(r"([BW])\+(\d+(?:\.\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class EngineSpec:
    """A player: its ratings name, the command line that starts it, and (optionally) how to
    declare it to ratings (kind None: not declared; a new name is then stored as an engine)."""

    name: str
    command: str
    kind: str | None = None
    training_samples: int | None = None

    def player_info(self) -> PlayerInfo | None:
        return None if self.kind is None else PlayerInfo(self.name, self.kind, self.training_samples)


@dataclass
class EngineMatchSettings:
    games: int
    size: int = 9
    komi: float = 7.5
    rules: Rules = field(default_factory=lambda: Rules())
    max_moves: int | None = None  # None: 3 x the board's area
    move_timeout: float = 120.0
    sgf_dir: Path | None = None
    source: str = "match"

    def move_cap(self) -> int:
        return self.max_moves if self.max_moves is not None else 3 * self.size * self.size


@dataclass
class GameOutcome:
    number: int
    black: str
    white: str
    winner: str  # "B", "W" or "draw" (the ratings result)
    result: str  # the SGF RE value: B+3.5, W+R, B+T, B+F, 0
    reason: str  # "two passes", "move cap", "resignation", "illegal move", "timeout", ...
    moves: int
    score: float | None = None  # rules engine's Black-minus-White when scored
    engine_scores: dict[str, str] = field(default_factory=dict)  # engine name -> its final_score
    disagreements: list[str] = field(default_factory=list)  # engines whose winner differed
    game_id: str = ""
    sgf_path: Path | None = None

    def winner_name(self) -> str | None:
        return {"B": self.black, "W": self.white}.get(self.winner)


def parse_engine_score(text: str) -> float | None:
    """Black-minus-White of a GTP final_score answer ("B+3.5", "W+2", "0"), None if unreadable
    (e.g. "W+R" or an engine's free text)."""
    text = text.strip()
    if text in ("0", "Draw", "draw", "Jigo", "jigo"):
        return 0.0
    match = _SCORE.fullmatch(text)
    if match is None:
        return None
    value = float(match.group(2))
    return value if match.group(1).upper() == "B" else -value


def winner_of(score: float) -> str:
    return "B" if score > 0 else "W" if score < 0 else "draw"


def new_match_id() -> str:
    """A match's id in its games' ids: when it started, and a random part for matches started at once."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


@dataclass
class MatchSummary:
    match_id: str
    a: str
    b: str
    outcomes: list[GameOutcome]
    unreported: int = 0

    def tally(self) -> tuple[int, int, int]:
        """(wins, losses, draws) of engine A."""
        wins = sum(o.winner_name() == self.a for o in self.outcomes)
        losses = sum(o.winner_name() == self.b for o in self.outcomes)
        return wins, losses, len(self.outcomes) - wins - losses

    def rate(self) -> float:
        wins, _, draws = self.tally()
        return (wins + 0.5 * draws) / len(self.outcomes) if self.outcomes else math.nan

    def interval(self) -> tuple[float, float]:
        wins, _, draws = self.tally()
        return wilson_interval(wins + 0.5 * draws, len(self.outcomes))

    def to_dict(self) -> dict[str, object]:
        wins, losses, draws = self.tally()
        low, high = self.interval()
        return {
            "match_id": self.match_id, "a": self.a, "b": self.b, "games": len(self.outcomes),
            "a_wins": wins, "a_losses": losses, "draws": draws, "a_score_rate": self.rate(),
            "a_rate_low": low, "a_rate_high": high,
            "score_disagreements": sum(bool(o.disagreements) for o in self.outcomes),
            "unreported": self.unreported,
        }

    def format(self) -> str:
        wins, losses, draws = self.tally()
        n = len(self.outcomes)
        if n == 0:
            return f"match {self.match_id}: no games played"
        low, high = self.interval()
        rate = self.rate()

        def elo(value: float) -> str:
            return f"{value:+.0f}" if math.isfinite(value) else ("+inf" if value > 0 else "-inf")

        black_wins = sum(o.winner == "B" for o in self.outcomes)
        reasons: dict[str, int] = {}
        for o in self.outcomes:
            reasons[o.reason] = reasons.get(o.reason, 0) + 1
        lines = [
            f"match {self.match_id}: {self.a} vs {self.b}, {n} games",
            f"  {self.a}: {wins} wins, {losses} losses, {draws} draws; score rate {rate:.3f} "
            f"(95% Wilson interval [{low:.3f}, {high:.3f}])",
            f"  Elo difference {self.a} - {self.b}: {elo(elo_difference(rate))} "
            f"(95% interval [{elo(elo_difference(low))}, {elo(elo_difference(high))}])",
            f"  Black won {black_wins} of {n}; endings: "
            + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())),
        ]
        disagreements = sum(bool(o.disagreements) for o in self.outcomes)
        if disagreements:
            lines.append(f"  {disagreements} games where an engine's final_score named another winner")
        if self.unreported:
            lines.append(f"  {self.unreported} games could not be reported to ratings")
        return "\n".join(lines)


class Match:
    """Plays `settings.games` games between engines A and B; see the module docstring."""

    def __init__(
        self,
        a: EngineSpec,
        b: EngineSpec,
        settings: EngineMatchSettings,
        reporter: Reporter | None = None,
        match_id: str | None = None,
        on_game: Callable[[GameOutcome], None] | None = None,
    ) -> None:
        if a.name == b.name:
            raise ValueError(f"both engines are named {a.name!r}; give them different names")
        if settings.games < 1:
            raise ValueError(f"games must be at least 1, got {settings.games}")
        Board(settings.size, settings.size, settings.rules, settings.komi)  # validates size and komi
        self.a, self.b = a, b
        self.settings = settings
        self.reporter = reporter
        self.match_id = match_id or new_match_id()
        self.on_game = on_game
        self._clients: dict[str, GtpClient] = {}
        self._pending: list[GameReport] = []

    # ------------------------------------------------------------------ engines

    def _client(self, spec: EngineSpec) -> GtpClient:
        client = self._clients.get(spec.name)
        if client is None or not client.alive:
            if client is not None:
                log.warning("%s is not running any more; restarting it", spec.name)
                client.close()
            stderr = None
            if self.settings.sgf_dir is not None:
                stderr = self.settings.sgf_dir / f"{self.match_id}-{spec.name}.stderr.log"
            client = GtpClient(spec.command, spec.name, stderr_path=stderr, timeout=self.settings.move_timeout)
            self._clients[spec.name] = client
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def _prepare(self, client: GtpClient) -> None:
        s = self.settings
        client.send(f"boardsize {s.size}")
        client.send("clear_board")
        client.send(f"komi {s.komi:g}")
        if client.known_command("kata-set-rules"):
            try:
                client.send("kata-set-rules " + _katago_rules(s.rules))
            except CommandFailed as error:
                log.warning("%s keeps its own rules: %s", client.name, error.message)

    # ------------------------------------------------------------------ one game

    def play_game(self, number: int) -> tuple[GameOutcome, SgfGame]:
        """Game `number` (1-based): A is Black when it is odd."""
        s = self.settings
        black_spec, white_spec = (self.a, self.b) if number % 2 == 1 else (self.b, self.a)
        players = {BLACK: black_spec, WHITE: white_spec}
        board = Board(s.size, s.size, s.rules, s.komi)
        moves: list[tuple[int, int]] = []
        game_id = f"{s.source}-{self.match_id}-{number:03d}"

        def outcome(winner: str, result: str, reason: str, score: float | None = None) -> GameOutcome:
            return GameOutcome(number, black_spec.name, white_spec.name, winner, result, reason,
                               len(moves), score, game_id=game_id)

        clients: dict[int, GtpClient] = {}
        result: GameOutcome | None = None
        for color, spec in players.items():
            try:
                clients[color] = self._client(spec)
                self._prepare(clients[color])
            except EngineError as error:
                log.error("game %d: %s could not start the game: %s", number, spec.name, error)
                if spec.name in self._clients:
                    self._clients[spec.name].kill()
                winner = "W" if color == BLACK else "B"
                result = outcome(winner, f"{winner}+F", "engine failed to start")
                break
        while result is None:
            if len(moves) >= s.move_cap():
                result = self._scored(board, clients, outcome, "move cap")
                break
            color = board.to_move
            other = WHITE if color == BLACK else BLACK
            mover = clients[color]
            winner = "W" if color == BLACK else "B"
            try:
                reply = mover.send(f"genmove {color_name(color)}", timeout=s.move_timeout)
            except EngineError as error:
                log.warning("game %d: %s forfeits: %s", number, mover.name, error)
                mover.kill()  # its state is unknown: restarted for the next game
                late = isinstance(error, EngineTimeout)
                result = outcome(
                    winner, f"{winner}+T" if late else f"{winner}+F", "timeout" if late else "engine failure"
                )
                break
            if reply.lower() == "resign":
                result = outcome(winner, f"{winner}+R", "resignation")
                break
            try:
                move = parse_vertex(reply, s.size, s.size)
                board.play(move)
            except (GtpError, IllegalMoveError) as error:
                log.warning("game %d: %s forfeits with move %r: %s", number, mover.name, reply, error)
                result = outcome(winner, f"{winner}+F", "illegal move")
                break
            moves.append((color, move))
            if board.game_over:
                result = self._scored(board, clients, outcome, "two passes")
                break
            try:
                clients[other].send(f"play {color_name(color)} {format_vertex(move, s.size, s.size)}")
            except CommandFailed as error:
                # The referee found the move legal; engines with other ko rules may not.
                log.warning(
                    "game %d: %s refused %s's legal move %s: %s",
                    number,
                    clients[other].name,
                    mover.name,
                    reply,
                    error.message,
                )
                result = self._scored(board, clients, outcome, "move refused by the opponent")
                break
            except EngineError as error:
                log.warning("game %d: %s forfeits: %s", number, clients[other].name, error)
                clients[other].kill()
                loser_winner = "B" if other == WHITE else "W"
                result = outcome(loser_winner, f"{loser_winner}+F", "engine failure")
                break
        sgf = SgfGame(
            x_size=s.size,
            y_size=s.size,
            komi=s.komi,
            rules=s.rules,
            moves=moves,
            player_black=black_spec.name,
            player_white=white_spec.name,
            result=result.result,
            comment=self._comment(result),
        )
        return result, sgf

    def _scored(
        self, board: Board, clients: dict[int, GtpClient], outcome: Callable[..., GameOutcome], reason: str
    ) -> GameOutcome:
        score = final_score(board)
        winner = winner_of(score)
        result = outcome(winner, result_string(score), reason, score)
        for client in clients.values():
            if not client.alive or not client.known_command("final_score"):
                continue
            try:
                answer = client.send("final_score")
            except EngineError as error:
                log.warning("%s: final_score failed: %s", client.name, error)
                continue
            result.engine_scores[client.name] = answer
            theirs = parse_engine_score(answer)
            if theirs is not None and winner_of(theirs) != winner:
                result.disagreements.append(client.name)
                log.warning(
                    "game %d: %s scores %s, the rules engine %s", result.number, client.name, answer, result.result
                )
        return result

    def _comment(self, o: GameOutcome) -> str:
        parts = [f"tengen match {self.match_id}, game {o.number}: {o.result} by {o.reason}"]
        if o.score is not None:
            parts.append(f"scored by tengen's rules engine ({self.settings.rules.to_string()}): {o.result}")
        for name, answer in o.engine_scores.items():
            verdict = "disagrees" if name in o.disagreements else "agrees"
            parts.append(f"{name}'s final_score: {answer} ({verdict})")
        return "; ".join(parts)

    # ------------------------------------------------------------------ the match

    def _report(self, players: list[PlayerInfo]) -> None:
        assert self.reporter is not None
        try:
            self.reporter.report(list(self._pending), players)
            self._pending.clear()
        except Exception as error:  # keep playing; these games are sent again with the next one
            log.error("ratings report failed (%d games pending): %s", len(self._pending), error)

    def run(self, stop: threading.Event | None = None) -> MatchSummary:
        """Plays the games in order; with `stop`, no new game starts once it is set."""
        s = self.settings
        if s.sgf_dir is not None:
            s.sgf_dir.mkdir(parents=True, exist_ok=True)
        players = [p for p in (self.a.player_info(), self.b.player_info()) if p is not None]
        outcomes: list[GameOutcome] = []
        try:
            for number in range(1, s.games + 1):
                if stop is not None and stop.is_set():
                    break
                result, sgf = self.play_game(number)
                if s.sgf_dir is not None:
                    result.sgf_path = s.sgf_dir / f"{self.match_id}-{number:03d}.sgf"
                    result.sgf_path.write_bytes(write_game(sgf))
                if self.reporter is not None:
                    self._pending.append(
                        GameReport(result.game_id, result.black, result.white, result.winner, source=s.source)
                    )
                    self._report(players)
                outcomes.append(result)
                if self.on_game is not None:
                    self.on_game(result)
        finally:
            self.close()
        return MatchSummary(self.match_id, self.a.name, self.b.name, outcomes, len(self._pending))


def _katago_rules(rules: Rules) -> str:
    """The rules as the JSON object KataGo-style engines take in kata-set-rules."""
    fields = json.loads(rules_to_json(rules))
    fields.pop("tengen")
    return json.dumps(fields, separators=(",", ":"))
