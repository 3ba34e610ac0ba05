"""The ratings service end to end, in-process on free ports: gRPC and HTTP, auth, bad requests."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from ratings_db import (  # noqa: F401 (fixtures)
    PGSERVER_WARNING,
    database_url,
    pgserver_url,
    postgres_server,
    postgres_url,
    start_pgserver,
)

from tengen.proto import ratings_pb2 as pb
from tengen.proto import ratings_pb2_grpc as pb_grpc
from tengen.ratings import store as store_module
from tengen.ratings.api import RatingsApi
from tengen.ratings.book import RatingsBook
from tengen.ratings.client import RatingsClient
from tengen.ratings.config import client_token
from tengen.ratings.records import Conflict, GameReport, InvalidRequest, PlayerInfo, Unauthorized, UnknownPlayer
from tengen.ratings.server import RatingsServer
from tengen.ratings.store import RatingsStore

TOKEN = "test-token-123"
MAX_BATCH = 5
NEAR_YEAR_10000_MS = int(datetime(9999, 12, 31, 23, tzinfo=UTC).timestamp() * 1000)


@dataclass
class Service:
    server: RatingsServer
    store: RatingsStore

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.grpc_port}"

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.http_port}{path}"


@pytest.fixture
def service(database_url: str) -> Iterator[Service]:
    store = RatingsStore(database_url, max_batch=MAX_BATCH)
    server = RatingsServer(RatingsApi(RatingsBook(store), TOKEN), "127.0.0.1", 0, 0)
    server.start()
    yield Service(server, store)
    server.stop(grace=1.0)
    store.close()


def http(
    method: str, url: str, body: Any = None, token: str | None = None, raw: bytes | None = None, timeout: float = 10
) -> tuple[int, dict, bytes]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    request = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        request.add_header("Authorization", token)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def match_games() -> tuple[list[GameReport], list[PlayerInfo]]:
    games = []
    for i in range(4):  # v2 beats v1 three times in four; v3 beats v2 three times in four
        games.append(
            GameReport(
                f"v2-v1-{i}",
                "v2" if i % 2 else "v1",
                "v1" if i % 2 else "v2",
                "B" if (i % 2 or i == 0) else "W",
                "gating",
            )
        )
        games.append(GameReport(f"v3-v2-{i}", "v3", "v2", "W" if i == 3 else "B", "gating"))
    players = [PlayerInfo("v1", "model", 1000), PlayerInfo("v2", "model", 5000), PlayerInfo("v3", "model", 9000)]
    return games, players


def test_grpc_and_http_end_to_end(service: Service) -> None:
    games, players = match_games()
    with RatingsClient(service.address, token=TOKEN) as client:
        outcome = client.report_games(games[:5], players)
        assert (outcome.accepted, outcome.duplicates) == (5, 0)
        outcome = client.report_games(games[3:], [])
        assert (outcome.accepted, outcome.duplicates) == (3, 2)
        board = client.leaderboard()
        assert [r.name for r in board.ratings] == ["v3", "v2", "v1"]
        assert board.summary.total_games == 8 and board.summary.prior_draws == 2.0
        assert [r.rank for r in board.ratings] == [1, 2, 3]
        assert client.leaderboard(limit=1).ratings[0].name == "v3"
        v2 = client.player("v2")
        assert (v2.rating.games, v2.rating.training_samples, v2.rating.kind) == (8, 5000, "model")
        assert [h.opponent for h in v2.head_to_head] == ["v3", "v1"]
        versus_v1 = v2.head_to_head[1]
        assert (versus_v1.wins, versus_v1.losses, versus_v1.draws) == (3, 1, 0)
        assert 0.5 < versus_v1.expected_score < 1.0
        history = client.history()
        assert [(p.name, p.training_samples) for p in history.points] == [("v1", 1000), ("v2", 5000), ("v3", 9000)]
        # A stronger prior pulls the ratings together.
        wide = client.leaderboard(prior_draws=0.5).ratings
        narrow = client.leaderboard(prior_draws=50).ratings
        assert wide[0].elo - wide[-1].elo > narrow[0].elo - narrow[-1].elo

    status, headers, body = http("GET", service.url("/api/leaderboard?n=2"))
    assert status == 200 and headers["Content-Type"] == "application/json"
    data = json.loads(body)
    assert [r["name"] for r in data["ratings"]] == ["v3", "v2"]
    assert data["ratings"][0]["elo"] == pytest.approx(board.ratings[0].elo)
    status, _, body = http("GET", service.url("/api/player/v1"))
    assert status == 200 and json.loads(body)["rating"]["losses"] == 3
    status, _, body = http("GET", service.url("/api/history?prior_draws=4"))
    assert status == 200 and json.loads(body)["summary"]["prior_draws"] == 4.0

    status, headers, body = http("GET", service.url("/"))
    page = body.decode()
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert page.count("<svg") == 1 and page.count('<g class="version">') == 3  # Elo over training samples
    assert "training samples" in page and "v3" in page and "No games against GNU Go yet" in page

    status, _, body = http("GET", service.url("/healthz"))
    assert (status, body) == (200, b"ok\n")
    status, _, body = http("GET", service.url("/metrics"))
    metrics = body.decode()
    assert 'tengen_ratings_games_reported_total{outcome="accepted"} 8.0' in metrics
    assert 'tengen_ratings_games_reported_total{outcome="duplicate"} 2.0' in metrics
    assert "tengen_ratings_games 8.0" in metrics


def test_http_report_and_html_escaping(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    body = {
        "games": [
            {
                "game_id": "h1",
                "black": "<b>bold</b>",
                "white": "v1",
                "result": "draw",
                "played_at": "2026-01-02T03:04:05",
            },
            {"game_id": "h2", "black": "v1", "white": "<b>bold</b>", "result": "w"},
        ],
        "players": [{"name": "v1", "kind": "model", "training_samples": 10}],
    }
    # A name that is not a safe id (tengen.loop.ids) is refused, and nothing is written...
    status, _, reply = http("POST", service.url("/api/games"), body, f"Bearer {TOKEN}")
    assert status == 400 and "'<b>bold</b>' holds '<'" in json.loads(reply)["error"], reply
    assert service.store.game_count() == 0
    # ...and one that is in the database anyway (written before the rule) is escaped on the page.
    monkeypatch.setattr(store_module, "validate_batch", lambda *args: None)
    status, _, reply = http("POST", service.url("/api/games"), body, f"Bearer {TOKEN}")
    assert (status, json.loads(reply)) == (200, {"accepted": 2, "duplicates": 0})
    status, _, reply = http("POST", service.url("/api/games"), body, f"Bearer {TOKEN}")
    assert json.loads(reply) == {"accepted": 0, "duplicates": 2}
    stored = {g.game_id: g for g in service.store.games()}
    assert stored["h1"].played_at.isoformat() == "2026-01-02T03:04:05+00:00"
    assert stored["h2"].result == "W"
    page = http("GET", service.url("/"))[2].decode()
    assert "<b>bold</b>" not in page and "&lt;b&gt;bold&lt;/b&gt;" in page
    status, _, reply = http("GET", service.url("/api/player/%3Cb%3Ebold%3C%2Fb%3E"))
    assert status == 200 and json.loads(reply)["rating"]["draws"] == 1


def test_writes_need_the_token(service: Service) -> None:
    games, players = match_games()
    for token in (None, "wrong", TOKEN + "x"):
        with RatingsClient(service.address, token=token) as client, pytest.raises(Unauthorized, match="Bearer"):
            client.report_games(games, players)
    body = {"games": [{"game_id": "x", "black": "a", "white": "b", "result": "B"}]}
    for header in (None, f"Basic {TOKEN}", "Bearer wrong", f"bearer {TOKEN}", "Bearer "):
        status, headers, reply = http("POST", service.url("/api/games"), body, header)
        assert status == 401, header
        assert headers["WWW-Authenticate"].startswith("Bearer")
        assert "Bearer" in json.loads(reply)["error"]
    # The token is checked before the body is read: a bad body without a token is still a 401.
    assert http("POST", service.url("/api/games"), raw=b"{nonsense")[0] == 401
    assert service.store.game_count() == 0 and service.store.players() == []
    # Reads need no token.
    assert http("GET", service.url("/api/leaderboard"))[0] == 200
    metrics = http("GET", service.url("/metrics"))[2].decode()
    assert 'tengen_ratings_requests_total{api="report_games",outcome="unauthorized"} 9.0' in metrics


def _raw_stub(service: Service) -> tuple[grpc.Channel, pb_grpc.RatingsServiceStub]:
    channel = grpc.insecure_channel(service.address)
    return channel, pb_grpc.RatingsServiceStub(channel)


@pytest.mark.parametrize(
    "request_, code, message",
    [
        (
            pb.ReportGamesRequest(games=[pb.Game(game_id="x", black="a", white="b")]),
            "INVALID_ARGUMENT",
            "unknown result code 0",
        ),
        (
            pb.ReportGamesRequest(games=[pb.Game(game_id="x", black="a", white="b", result=9)]),
            "INVALID_ARGUMENT",
            "unknown result code 9",
        ),
        (
            pb.ReportGamesRequest(games=[pb.Game(game_id="x", black="a", white="a", result=pb.DRAW)]),
            "INVALID_ARGUMENT",
            "against itself",
        ),
        (
            pb.ReportGamesRequest(games=[pb.Game(black="a", white="b", result=pb.DRAW)]),
            "INVALID_ARGUMENT",
            "game id is missing",
        ),
        (
            pb.ReportGamesRequest(games=[pb.Game(game_id="x", white="b", result=pb.DRAW)]),
            "INVALID_ARGUMENT",
            "black player is missing",
        ),
        (
            pb.ReportGamesRequest(
                games=[
                    pb.Game(game_id=f"x{i}", black="a", white="b", result=pb.BLACK_WINS) for i in range(MAX_BATCH + 1)
                ]
            ),
            "INVALID_ARGUMENT",
            "over the maximum",
        ),
        (
            pb.ReportGamesRequest(
                games=[pb.Game(game_id="x", black="a", white="b", result=pb.DRAW)], players=[pb.PlayerInfo(name="a")]
            ),
            "INVALID_ARGUMENT",
            "unknown kind code 0",
        ),
        (
            pb.ReportGamesRequest(games=[pb.Game(game_id="stored", black="a", white="b", result=pb.WHITE_WINS)]),
            "ALREADY_EXISTS",
            "stored",
        ),
        (pb.ReportGamesRequest(), "INVALID_ARGUMENT", "empty report"),
        (
            pb.ReportGamesRequest(
                games=[pb.Game(game_id="x", black="a", white="b", result=pb.DRAW, played_at_unix_ms=2**62)]
            ),
            "INVALID_ARGUMENT",
            "not a valid time",
        ),
        (
            # Within Python's datetime, past the store's last time (the same check as over HTTP).
            pb.ReportGamesRequest(
                games=[pb.Game(game_id="x", black="a", white="b", result=pb.DRAW, played_at_unix_ms=NEAR_YEAR_10000_MS)]
            ),
            "INVALID_ARGUMENT",
            "played_at",
        ),
        (
            pb.ReportGamesRequest(
                games=[pb.Game(game_id="x", black="a", white="b", result=pb.DRAW)],
                players=[pb.PlayerInfo(name="a", kind=pb.MODEL, training_samples=-1)],
            ),
            "INVALID_ARGUMENT",
            "training samples",
        ),
    ],
    ids=[
        "unset-result",
        "unknown-result",
        "self-play",
        "no-id",
        "no-black",
        "oversized",
        "unknown-kind",
        "conflict",
        "empty",
        "bad-time",
        "far-future",
        "negative-samples",
    ],
)
def test_malformed_grpc_reports_write_nothing(
    service: Service, request_: pb.ReportGamesRequest, code: str, message: str
) -> None:
    with RatingsClient(service.address, token=TOKEN) as client:
        client.report_games([GameReport("stored", "a", "b", "B")])
    channel, stub = _raw_stub(service)
    with pytest.raises(grpc.RpcError) as failure:
        stub.ReportGames(request_, metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=10)
    channel.close()
    assert failure.value.code().name == code
    assert message in failure.value.details()
    assert [g.game_id for g in service.store.games()] == ["stored"]
    assert sorted(p.name for p in service.store.players()) == ["a", "b"]


def test_grpc_refuses_an_oversized_message_and_a_control_character_id(service: Service) -> None:
    channel, stub = _raw_stub(service)
    auth = (("authorization", f"Bearer {TOKEN}"),)
    try:
        huge = pb.ReportGamesRequest(games=[pb.Game(game_id="g", black="a", white="b", source="x" * (9 << 20))])
        with pytest.raises(grpc.RpcError) as failure:
            stub.ReportGames(huge, metadata=auth, timeout=10)
        assert failure.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        forged = pb.ReportGamesRequest(games=[pb.Game(game_id="g\nforged", black="a", white="b", result=pb.BLACK_WINS)])
        with pytest.raises(grpc.RpcError) as failure:
            stub.ReportGames(forged, metadata=auth, timeout=10)
        assert failure.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "game id 'g\\nforged' holds '\\n'" in failure.value.details()
    finally:
        channel.close()
    assert service.store.game_count() == 0


def test_bad_reads(service: Service) -> None:
    with RatingsClient(service.address, token=TOKEN) as client:
        client.report_games([GameReport("g", "a", "b", "B")])
        with pytest.raises(UnknownPlayer, match="nobody"):
            client.player("nobody")
        with pytest.raises(InvalidRequest, match="prior"):
            client.leaderboard(prior_draws=-1.0)
        with pytest.raises(InvalidRequest, match="limit"):
            client.leaderboard(limit=-3)
        with pytest.raises(Conflict, match="different"):
            client.report_games([GameReport("g", "a", "b", "W")])
    for path, status in [
        ("/api/player/nobody", 404),
        ("/api/leaderboard?prior_draws=0", 400),
        ("/api/leaderboard?prior_draws=abc", 400),
        ("/api/leaderboard?n=-1", 400),
        ("/api/nothing", 404),
    ]:
        code, _, body = http("GET", service.url(path))
        assert code == status, path
        assert json.loads(body)["error"]
    # A prior so small that the fit is singular (a won every game): a sentence, not numpy's words.
    code, _, body = http("GET", service.url("/api/leaderboard?prior_draws=1e-300"))
    error = json.loads(body)["error"]
    assert code == 400 and "cannot be computed with a prior of 1e-300" in error and "Singular" not in error


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"games": {}}', "'games' must be a list"),
        (b'{"games": [{"game_id": "x", "black": "a", "white": "b", "winner": "B"}]}', "unknown field(s) winner"),
        (b'{"games": [{"game_id": "x", "black": "a", "white": "b", "result": "B+R"}]}', "unknown result"),
        (b'{"games": [{"game_id": 7, "black": "a", "white": "b", "result": "B"}]}', "must be a string"),
        (
            b'{"games": [{"game_id": "x", "black": "a", "white": "b", "result": "B", "played_at": "yesterday"}]}',
            "ISO 8601",
        ),
        (b'{"players": [{"name": "a", "kind": "model", "training_samples": "many"}]}', "must be an integer"),
        (b'{"games": [], "extra": 1}', "unknown field(s) extra"),
    ],
)
def test_malformed_http_reports_write_nothing(service: Service, raw: bytes, message: str) -> None:
    status, _, body = http("POST", service.url("/api/games"), raw=raw, token=f"Bearer {TOKEN}")
    assert status == 400
    assert message in json.loads(body)["error"]
    assert service.store.game_count() == 0 and service.store.players() == []


def _report(samples: object = None, played_at: object = None) -> bytes:
    game: dict[str, Any] = {"game_id": "x", "black": "a", "white": "b", "result": "B"}
    if played_at is not None:
        game["played_at"] = played_at
    player: dict[str, Any] = {"name": "a", "kind": "model"}
    if samples is not None:
        player["training_samples"] = samples
    return json.dumps({"games": [game], "players": [player]}).encode()


@pytest.mark.parametrize(
    "raw, message",
    [
        # Over a BIGINT: a 500 on both stores (SQLite's OverflowError, Postgres's DataError).
        (_report(samples=2**63), "training samples"),
        (_report(samples=2**64 + 1), "training samples"),
        (_report(samples=-1), "training samples"),
        # Year 10000 in UTC; and the last year, which Postgres accepted and then failed every
        # read of the games with (a session east of UTC reads it as year 10000).
        (_report(played_at="9999-12-31T23:59:59-01:00"), "played_at"),
        (_report(played_at="9999-06-01T00:00:00+00:00"), "played_at"),
        (_report(played_at="1969-12-31T23:59:59+00:00"), "played_at"),
        # Nested 100,000 deep: json.loads's RecursionError was a 500.
        (b'{"games": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests"),
        (b"[" * 100_000, "nests"),
        (b'{"games": [' + b'{"a": ' * 17 + b"1" + b"}" * 17 + b"]}", "nests"),
    ],
    ids=[
        "samples-2^63",
        "samples-2^64",
        "samples-negative",
        "year-10000",
        "year-9999",
        "before-1970",
        "deep-100000",
        "deep-unclosed",
        "deep-18",
    ],
)
def test_out_of_range_http_reports_are_400_and_the_store_still_reads(
    service: Service, raw: bytes, message: str
) -> None:
    status, _, body = http("POST", service.url("/api/games"), raw=raw, token=f"Bearer {TOKEN}")
    assert status == 400, body
    assert message in json.loads(body)["error"]
    assert list(service.store.games()) == [] and service.store.players() == []
    # The extremes within the bounds are stored, read back, and drawn on the page.
    status, _, body = http(
        "POST", service.url("/api/games"), raw=_report(2**63 - 1, "9998-12-31T23:59:59+00:00"), token=f"Bearer {TOKEN}"
    )
    assert (status, json.loads(body)) == (200, {"accepted": 1, "duplicates": 0})
    [game] = service.store.games()
    assert game.played_at == datetime(9998, 12, 31, 23, 59, 59, tzinfo=UTC)
    assert service.store.player("a").training_samples == 2**63 - 1
    for path in ("/", "/api/history", "/api/player/a"):
        assert http("GET", service.url(path))[0] == 200, path


def _read_to_eof(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (the socket's timeout fails
    the test if it never does)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_stalled_http_clients_cannot_stop_the_service(tmp_path: Path) -> None:
    """Past the connection cap /healthz is answered and writes get 503 with Retry-After; the
    stalled clients are cut off at their deadline, a stalled body with 408, and a valid write then
    goes through."""
    workers, timeout = 8, 2.0
    store = RatingsStore(f"sqlite:///{tmp_path / 'ratings.sqlite'}")
    server = RatingsServer(
        RatingsApi(RatingsBook(store), TOKEN), "127.0.0.1", 0, 0, http_timeout=timeout, http_workers=workers
    )
    server.start()
    service = Service(server, store)
    stalled: list[socket.socket] = []
    body = {"games": [{"game_id": "g1", "black": "a", "white": "b", "result": "B"}]}
    try:
        for i in range(50):  # half a request each: half the headers, or the headers and half the body
            sock = socket.create_connection(("127.0.0.1", server.http_port), timeout=60)
            if i % 2:
                sock.sendall(
                    b"POST /api/games HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
                    + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
                    + b'{"games": ['
                )
            else:
                sock.sendall(b"POST /api/games HTTP/1.1\r\nHost: x\r\nContent-Le")
            stalled.append(sock)
        time.sleep(0.3)  # let the accept loop take them all
        # While they hold every worker (a client timeout of seconds, well inside the deadline):
        status, _, reply = http("GET", service.url("/healthz"), timeout=5)
        assert (status, reply) == (200, b"ok\n")
        status, headers, reply = http("POST", service.url("/api/games"), body, f"Bearer {TOKEN}", timeout=5)
        assert status == 503 and headers["Retry-After"] == "5" and b"too many connections" in reply
        # The server closes every stalled connection at its deadline: a stalled body after a 408 from
        # a worker, or a 503 past the cap; stalled headers with nothing to answer.
        answers = []
        for i, sock in enumerate(stalled):
            data = _read_to_eof(sock)
            if i % 2:
                answers.append(data[:12])
            else:
                assert data == b"", data
        assert set(answers) == {b"HTTP/1.1 408", b"HTTP/1.1 503"}, answers
        assert store.game_count() == 0
        status, _, reply = http("POST", service.url("/api/games"), body, f"Bearer {TOKEN}", timeout=5)
        assert (status, json.loads(reply)) == (200, {"accepted": 1, "duplicates": 0})
    finally:
        for sock in stalled:
            sock.close()
        server.stop(grace=1.0)
        store.close()


def test_a_trickling_client_is_cut_off_at_its_deadline(tmp_path: Path) -> None:
    """A byte of the headers every 0.2 s is never silent for the 1 s timeout, yet the connection
    is closed once the deadline has passed (an idle timeout alone would keep it forever)."""
    store = RatingsStore(f"sqlite:///{tmp_path / 'ratings.sqlite'}")
    server = RatingsServer(RatingsApi(RatingsBook(store), TOKEN), "127.0.0.1", 0, 0, http_timeout=1.0)
    server.start()
    try:
        with socket.create_connection(("127.0.0.1", server.http_port), timeout=30) as sock:
            request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000
            sent = 0
            try:
                for sent, byte in enumerate(request, start=1):
                    sock.sendall(bytes([byte]))
                    time.sleep(0.2)
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert sent < len(request), "the server kept reading a request that never ended"
            assert _read_to_eof(sock) == b""
    finally:
        server.stop(grace=1.0)
        store.close()


def test_entry_point_help_token_file_and_sigterm(tmp_path: Path) -> None:
    python = sys.executable
    root = Path(__file__).resolve().parents[1]
    help_text = subprocess.run(
        [python, "-m", "services.ratings", "--help"], capture_output=True, text=True, check=True, cwd=root
    ).stdout
    for flag in ("--data-dir", "--database-url", "--grpc-port", "--http-port", "--token", "TENGEN_RATINGS_TOKEN"):
        assert flag in help_text
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENGEN_")}
    env["TENGEN_RATINGS__HTTP_PORT"] = "0"
    process = subprocess.Popen(
        [python, "-m", "services.ratings", "--data-dir", str(tmp_path), "--grpc-port", "0", "--host", "127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=root,
        env=env,
    )
    try:
        ready = ""
        deadline = time.monotonic() + 30
        while "ratings service ready" not in ready and time.monotonic() < deadline:
            ready = process.stdout.readline()
            assert ready or process.poll() is None, "service exited early"
        ports = dict(part.split("=") for part in ready.split()[-2:])
        # No token configured: the service made the data dir's token file, which clients use.
        token = client_token(None, tmp_path)
        assert token and (tmp_path / "ratings.token").stat().st_mode & 0o077 == 0
        with RatingsClient(f"127.0.0.1:{ports['grpc']}", token=token) as client:
            assert client.report_games([GameReport("g", "a", "b", "B")]).accepted == 1
        assert (tmp_path / "ratings.sqlite").exists()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
        assert "received SIGTERM" in process.stdout.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.filterwarnings(PGSERVER_WARNING)
def test_service_survives_a_database_restart(tmp_path: Path) -> None:
    """Postgres goes away and comes back: health says so, and a report sent meanwhile is retried
    by the client (idempotent) and lands once the database is back."""
    pg_dir = tmp_path / "pg"
    database = start_pgserver(pg_dir)
    store = RatingsStore(pgserver_url(database))
    server = RatingsServer(RatingsApi(RatingsBook(store), TOKEN), "127.0.0.1", 0, 0)
    server.start()
    service = Service(server, store)
    try:
        with RatingsClient(service.address, token=TOKEN, retries=8, backoff=0.2) as client:
            client.report_games([GameReport("before", "a", "b", "B")])
            database.cleanup()
            status, _, body = http("GET", service.url("/healthz"))
            assert status == 503 and b"database" in body
            status, _, body = http("GET", service.url("/api/leaderboard"))
            assert status == 503 and "retry later" in json.loads(body)["error"]

            outcome: list = []
            reporter = threading.Thread(
                target=lambda: outcome.append(client.report_games([GameReport("during", "a", "b", "W")]))
            )
            reporter.start()
            time.sleep(0.5)
            database = start_pgserver(pg_dir)  # same data dir and socket: the same database
            reporter.join(timeout=30)
            assert outcome and outcome[0].accepted == 1
            assert http("GET", service.url("/healthz"))[0] == 200
            assert [g.game_id for g in store.games()] == ["before", "during"]
        metrics = http("GET", service.url("/metrics"))[2].decode()
        assert 'tengen_ratings_requests_total{api="report_games",outcome="unavailable"}' in metrics
    finally:
        server.stop(grace=1.0)
        store.close()
        database.cleanup()
