"""The ratings service's two front ends over one RatingsApi: gRPC (grpcio) and HTTP (stdlib).

HTTP routes:
    GET  /                    HTML: the win rate against GNU Go over training samples and time, the
                              match table, gating's decisions, Elo and the leaderboard (tengen.ratings.page)
    GET  /api/curve           ?prior_draws=X          JSON: the page's figures and sections (its refresh)
    GET  /api/leaderboard     ?n=N&prior_draws=X      JSON
    GET  /api/player/NAME     ?prior_draws=X          JSON (NAME percent-encoded)
    GET  /api/history         ?prior_draws=X          JSON
    GET  /games               versions with games to watch (tengen.ratings.games: the games dir)
    GET  /games/vN            version N's sampled self-play games, gating matches and games against GNU Go
    GET  /games/selfplay/vN/ID        ?move=K   a self-play game as a board at move K; ID.sgf: the SGF
    GET  /games/gating/CANDIDATE/I    ?move=K   game I of a gating match; I.sgf: the SGF
    GET  /games/strength/vN/NAME      ?move=K   a game of version N against GNU Go; NAME.sgf: the SGF
    POST /api/games           JSON {"games": [...], "players": [...]}, needs the bearer token
    GET  /healthz             200 "ok" when the database answers, else 503
    GET  /metrics             Prometheus text format

The HTTP server (tengen.infra.http_server) serves at most `http_workers` connections at once; a
request's headers, or its body, not received within `http_timeout` seconds (however slowly the
bytes trickle) close the connection, a stalled body with 408; past the cap /healthz is still
answered and everything else gets 503 with Retry-After. A POST body is at most MAX_BODY bytes
(413 before it is read; 411 without Content-Length), nested at most MAX_JSON_DEPTH deep.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from datetime import UTC, datetime
from http import HTTPStatus
from itertools import accumulate
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import grpc
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from tengen.infra.http_server import GuardedHandler, GuardedHTTPServer
from tengen.proto import ratings_pb2 as pb
from tengen.proto import ratings_pb2_grpc as pb_grpc
from tengen.ratings import wire
from tengen.ratings.api import DatabaseUnavailable, RatingsApi
from tengen.ratings.book import to_json
from tengen.ratings.config import prior_draws as parse_prior_draws
from tengen.ratings.games import GameLibrary
from tengen.ratings.games_page import serve_games
from tengen.ratings.page import REFRESH_S, page_json, render_page
from tengen.ratings.records import (
    Conflict,
    GameReport,
    InvalidRequest,
    PlayerInfo,
    RatingsError,
    Unauthorized,
    UnknownPlayer,
    parse_result,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
MAX_BODY = 8 * 1024 * 1024  # bytes of one POST /api/games
MAX_JSON_DEPTH = 16  # nested arrays/objects in a POST body (a report needs 3)
HTTP_TIMEOUT_S = 10.0  # a request's headers, or its body, must have arrived within this
HTTP_WORKERS = 64  # connections served at once
# gRPC: grpcio reads a call's request in its C core, so a stalled client holds no worker; calls past
# GRPC_MAX_RPCS (running or queued) are refused with RESOURCE_EXHAUSTED, a message is at most
# MAX_BODY, and a client that pings without calls or idles for 5 minutes is disconnected.
GRPC_WORKERS = 8
GRPC_MAX_RPCS = 64
GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_BODY),
    ("grpc.max_concurrent_streams", 32),
    ("grpc.keepalive_permit_without_calls", 0),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 60_000),
    ("grpc.http2.max_ping_strikes", 2),
    ("grpc.max_connection_idle_ms", 300_000),
]
_GRPC_CODES: dict[type[RatingsError], grpc.StatusCode] = {
    InvalidRequest: grpc.StatusCode.INVALID_ARGUMENT,
    Conflict: grpc.StatusCode.ALREADY_EXISTS,
    UnknownPlayer: grpc.StatusCode.NOT_FOUND,
    Unauthorized: grpc.StatusCode.UNAUTHENTICATED,
}
_HTTP_CODES: dict[type[RatingsError], HTTPStatus] = {
    InvalidRequest: HTTPStatus.BAD_REQUEST,
    Conflict: HTTPStatus.CONFLICT,
    UnknownPlayer: HTTPStatus.NOT_FOUND,
    Unauthorized: HTTPStatus.UNAUTHORIZED,
}


def _code(error: RatingsError, table: dict[type[RatingsError], T]) -> T:
    return next(code for kind, code in table.items() if isinstance(error, kind))


# -- gRPC ---------------------------------------------------------------------------------------


def _prior(options: pb.FitOptions) -> float | None:
    return options.prior_draws if options.HasField("prior_draws") else None


class RatingsServicer(pb_grpc.RatingsServiceServicer):
    def __init__(self, api: RatingsApi) -> None:
        self.api = api

    def _run(self, context: grpc.ServicerContext, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except RatingsError as error:
            context.abort(_code(error, _GRPC_CODES), str(error))
        except DatabaseUnavailable as error:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(error))
        except Exception:
            log.exception("ratings request failed")
            context.abort(grpc.StatusCode.INTERNAL, "internal error; see the ratings service log")

    def ReportGames(self, request: pb.ReportGamesRequest, context: grpc.ServicerContext) -> pb.ReportGamesResponse:
        metadata = {key: value for key, value in context.invocation_metadata()}
        outcome = self._run(
            context,
            lambda: self.api.report(
                metadata.get("authorization"),
                lambda: (
                    [wire.game_from_pb(g) for g in request.games],
                    [wire.player_from_pb(p) for p in request.players],
                ),
            ),
        )
        return pb.ReportGamesResponse(accepted=outcome.accepted, duplicates=outcome.duplicates)

    def Leaderboard(self, request: pb.LeaderboardRequest, context: grpc.ServicerContext) -> pb.LeaderboardResponse:
        board = self._run(context, lambda: self.api.leaderboard(request.limit, _prior(request.options)))
        return wire.leaderboard_to_pb(board)

    def Player(self, request: pb.PlayerRequest, context: grpc.ServicerContext) -> pb.PlayerResponse:
        report = self._run(context, lambda: self.api.player(request.name, _prior(request.options)))
        return wire.player_report_to_pb(report)

    def History(self, request: pb.HistoryRequest, context: grpc.ServicerContext) -> pb.HistoryResponse:
        history = self._run(context, lambda: self.api.history(_prior(request.options)))
        return wire.history_to_pb(history)


# -- HTTP JSON ------------------------------------------------------------------------------------

_GAME_FIELDS = {"game_id", "black", "white", "result", "source", "played_at"}
_PLAYER_FIELDS = {"name", "kind", "training_samples"}


def _text(entry: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = entry.get(key, default)
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}: {key!r} must be a string")
    return value


def _fields(entry: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise InvalidRequest(f"{where} must be a JSON object")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return entry


def _played_at(value: Any, where: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"{where}: 'played_at' must be an ISO 8601 string")
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(f"{where}: 'played_at' {value!r} is not ISO 8601") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def games_from_json(body: dict[str, Any]) -> list[GameReport]:
    entries = body.get("games", [])
    if not isinstance(entries, list):
        raise InvalidRequest("'games' must be a list")
    games = []
    for i, entry in enumerate(entries, 1):
        where = f"games[{i}]"
        entry = _fields(entry, _GAME_FIELDS, where)
        games.append(
            GameReport(
                _text(entry, "game_id", where, ""),
                _text(entry, "black", where, ""),
                _text(entry, "white", where, ""),
                parse_result(_text(entry, "result", where, "")),
                _text(entry, "source", where, ""),
                _played_at(entry.get("played_at"), where),
            )
        )
    return games


def players_from_json(body: dict[str, Any]) -> list[PlayerInfo]:
    entries = body.get("players", [])
    if not isinstance(entries, list):
        raise InvalidRequest("'players' must be a list")
    players = []
    for i, entry in enumerate(entries, 1):
        where = f"players[{i}]"
        entry = _fields(entry, _PLAYER_FIELDS, where)
        samples = entry.get("training_samples")
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int)):
            raise InvalidRequest(f"{where}: 'training_samples' must be an integer")
        players.append(PlayerInfo(_text(entry, "name", where, ""), _text(entry, "kind", where, "engine"), samples))
    return players


# A string to its closing quote, or to the end when unterminated: the optional quote never makes
# the match backtrack, so the scan stays linear whatever the body.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"?', re.S)
# bytes.translate: opening brackets to +1, closing ones to -1 (as signed bytes), the rest deleted.
_DEPTH_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in `raw` (brackets inside strings aside), found without
    parsing: json.loads recurses once per level and fails deep inside its C code on a document of
    100,000 opening brackets."""
    steps = _JSON_STRING.sub(b"", raw).translate(_DEPTH_STEPS, _NOT_BRACKETS)
    return max(accumulate(memoryview(steps).cast("b")), default=0)


def report_from_json(raw: bytes) -> tuple[list[GameReport], list[PlayerInfo]]:
    """The games and players of a POST /api/games body; InvalidRequest when malformed."""
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise InvalidRequest(f"body nests arrays and objects over {MAX_JSON_DEPTH} deep")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise InvalidRequest(f"body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise InvalidRequest("body must be a JSON object with 'games' and/or 'players'")
    _fields(body, {"games", "players"}, "body")
    return games_from_json(body), players_from_json(body)


def _make_handler(api: RatingsApi, timeout: float, games: GameLibrary | None = None,
                  refresh_s: float = REFRESH_S) -> type[GuardedHandler]:
    games_root = games.root if games is not None else None

    class Handler(GuardedHandler):
        server_version = "tengen-ratings"
        header_timeout = timeout
        body_timeout = timeout

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http %s: " + format, self.address_string(), *args)

        def _send(self, status: int, body: bytes, content_type: str, extra: Sequence[tuple[str, str]] = ()) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in extra:
                self.send_header(key, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, value: Any, extra: Sequence[tuple[str, str]] = ()) -> None:
            body = json.dumps(value, indent=1, allow_nan=False).encode() + b"\n"
            self._send(status, body, "application/json", extra)

        def _error(self, error: RatingsError) -> None:
            status = _code(error, _HTTP_CODES)
            extra = [("WWW-Authenticate", 'Bearer realm="tengen-ratings"')] if isinstance(error, Unauthorized) else []
            self._json(status, {"error": str(error), "status": status.phrase}, extra)

        def _query_prior(self, query: dict[str, list[str]]) -> float | None:
            if "prior_draws" not in query:
                return None
            try:
                return parse_prior_draws(query["prior_draws"][-1])
            except (ValueError, argparse.ArgumentTypeError) as error:
                raise InvalidRequest(f"prior_draws: {error}") from None

        def _handle(self, route: Callable[[], None]) -> None:
            try:
                route()
            except RatingsError as error:
                self._error(error)
            except DatabaseUnavailable as error:
                self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": str(error), "status": "Service Unavailable"})
            except TimeoutError:
                # The client stopped reading the answer: nothing more can go to it.
                log.debug("ratings HTTP client %s timed out", self.address_string())
                self.close_connection = True
            except Exception:
                log.exception("ratings HTTP request %s %s failed", self.command, self.path)
                self._json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error; see the ratings service log"})

        def do_GET(self) -> None:
            self._handle(self._get)

        def do_POST(self) -> None:
            self._handle(self._post)

        def _get(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            path = url.path
            if path == "/healthz":
                try:
                    api.book.store.ping()
                except Exception as error:  # any database failure means "not healthy"
                    self._send(HTTPStatus.SERVICE_UNAVAILABLE, f"database: {error}\n".encode(), "text/plain")
                    return
                self._send(HTTPStatus.OK, b"ok\n", "text/plain")
            elif path == "/metrics":
                self._send(HTTPStatus.OK, generate_latest(api.metrics.registry), CONTENT_TYPE_LATEST)
            elif path == "/api/leaderboard":
                raw = query.get("n", ["0"])[-1]
                if not raw.isdigit():
                    raise InvalidRequest(f"n must be a non-negative integer, got {raw!r}")
                self._json(HTTPStatus.OK, to_json(api.leaderboard(int(raw), self._query_prior(query))))
            elif path.startswith("/api/player/") and len(path) > len("/api/player/"):
                name = unquote(path[len("/api/player/") :])
                self._json(HTTPStatus.OK, to_json(api.player(name, self._query_prior(query))))
            elif path == "/api/history":
                self._json(HTTPStatus.OK, to_json(api.history(self._query_prior(query))))
            elif path == "/api/curve":
                self._json(HTTPStatus.OK, page_json(api.page(games_root, self._query_prior(query))),
                           [("Cache-Control", "no-store")])
            elif path == "/":
                page = render_page(api.page(games_root, self._query_prior(query)), refresh_s)
                self._send(HTTPStatus.OK, page.encode(), "text/html; charset=utf-8")
            elif games is not None and (path == "/games" or path.startswith("/games/")):
                status, body, content_type, extra = serve_games(games, path, query)
                self._send(status, body, content_type, extra)
            else:
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no route {path}", "status": "Not Found"})

        def _post(self) -> None:
            # Answers sent before the body is read close the connection: the body cannot stay on it.
            if urlsplit(self.path).path != "/api/games":
                self.close_connection = True
                self._json(HTTPStatus.NOT_FOUND, {"error": f"no route POST {self.path}", "status": "Not Found"})
                return
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self.close_connection = True
                self._json(HTTPStatus.LENGTH_REQUIRED, {"error": "Content-Length is required"})
                return
            if int(length) > MAX_BODY:
                self.close_connection = True
                self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": f"body over {MAX_BODY} bytes"})
                return
            try:
                raw = self.read_body(int(length))
            except TimeoutError:
                self.close_connection = True
                self._json(HTTPStatus.REQUEST_TIMEOUT, {"error": f"body not received within {timeout:g} s"})
                return
            if len(raw) < int(length):  # the client closed before sending it all
                self.close_connection = True
                return
            outcome = api.report(self.headers.get("Authorization"), lambda: report_from_json(raw))
            self._json(HTTPStatus.OK, {"accepted": outcome.accepted, "duplicates": outcome.duplicates})

    return Handler


class RatingsServer:
    """gRPC and HTTP servers over one API; ports 0 pick free ports (see grpc_port / http_port)."""

    def __init__(
        self,
        api: RatingsApi,
        host: str = "0.0.0.0",
        grpc_port: int = 50061,
        http_port: int = 8061,
        http_timeout: float = HTTP_TIMEOUT_S,
        http_workers: int = HTTP_WORKERS,
        games_dir: str | os.PathLike[str] | None = None,
        page_refresh_s: float = REFRESH_S,
    ) -> None:
        """`games_dir`: the data dir whose self-play SGFs, gating matches and games against GNU Go
        the /games pages show, and whose gating decisions and run.json the page reads (None: no
        games pages); `page_refresh_s`: how often an open page fetches its figures again."""
        self.api = api
        self.games = GameLibrary(games_dir) if games_dir is not None else None
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=GRPC_WORKERS, thread_name_prefix="ratings-grpc"),
            maximum_concurrent_rpcs=GRPC_MAX_RPCS, options=GRPC_OPTIONS,
        )
        pb_grpc.add_RatingsServiceServicer_to_server(RatingsServicer(api), self._grpc)
        address = f"[::]:{grpc_port}" if host in ("0.0.0.0", "::") else f"{host}:{grpc_port}"
        self.grpc_port = self._grpc.add_insecure_port(address)
        if self.grpc_port == 0:
            raise OSError(f"cannot listen for gRPC on {address}")
        self._http = GuardedHTTPServer((host, http_port), _make_handler(api, http_timeout, self.games, page_refresh_s),
                                       max_connections=http_workers)
        self.http_port = self._http.server_address[1]
        # A short poll interval makes shutdown() return promptly.
        self._http_thread = threading.Thread(
            target=self._http.serve_forever, args=(0.05,), name="ratings-http", daemon=True
        )

    def start(self) -> None:
        self._grpc.start()
        self._http_thread.start()
        log.info("ratings service: gRPC on port %d, HTTP on port %d", self.grpc_port, self.http_port)

    def stop(self, grace: float = 5.0) -> None:
        """Finish in-flight requests (up to `grace` seconds), then close both servers."""
        done = self._grpc.stop(grace)
        self._http.shutdown()
        self._http.server_close()
        done.wait(grace + 1.0)
