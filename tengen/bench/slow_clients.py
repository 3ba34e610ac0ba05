"""`tengen bench slow-clients`: the loop's HTTP ports under stalled connections.

Starts a ratings service (SQLite in a temporary dir, the shipped HTTP limits) and a service's
health server (tengen.infra.health, as every stage runs it), then for each: /healthz latency with
no other client (the baseline), then `--connections` connections that each send half a request
and stall, and while they are open: /healthz latency (its ratio to the baseline), the time until a
valid request succeeds (ratings: a game report, which is refused with 503 while the stalled
clients fill the cap, then accepted), and the time until the server has closed every stalled
connection (the header deadline). Probes use a client timeout of 5 s; a probe past it counts as
failed.

With `--data-dir D` it uses the ports of the `tengen run` on D instead (its run.json): the ratings
page, where the valid request is a leaderboard read (no bench games in a real run's ratings), and
the trainer's health port; the trainer's samples before and after show whether the loop kept
training meanwhile.
"""
from __future__ import annotations

import argparse
import json
import resource
import selectors
import socket
import statistics
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tengen.infra.entrypoint import positive_int

DESCRIPTION = "the ratings and health HTTP ports with N stalled connections: /healthz latency, a valid write, closing"
PROBE_TIMEOUT_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--connections", type=positive_int, default=500,
                        help="stalled connections opened on each port (default 500)")
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="stall the ports of the `tengen run` on this data dir instead of servers of its own")


def _request(url: str, data: bytes | None = None, token: str | None = None) -> tuple[int, float]:
    """(status, seconds); status 0 when the probe failed or timed out."""
    request = urllib.request.Request(url, data=data, method="POST" if data is not None else "GET")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:
            response.read()
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError:
        status = 0
    return status, time.perf_counter() - start


def _latencies(url: str, seconds: float) -> list[float]:
    out: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        status, took = _request(url)
        out.append(took if status == 200 else float("inf"))
        time.sleep(0.05)
    return out


def _open_stalled(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT_S)
        sock.sendall(b"POST /api/games HTTP/1.1\r\nHost: x\r\nContent-Le")
        sock.setblocking(False)
        socks.append(sock)
    return socks


def _watch_closed(socks: list[socket.socket], started: float, limit_s: float, out: dict[str, float]) -> None:
    """Records when the server has closed the last of `socks` (seconds after `started`)."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ, sock)
    open_count = len(socks)
    while open_count and time.perf_counter() - started < limit_s:
        for key, _ in selector.select(timeout=0.2):
            try:
                data = key.data.recv(65536)
            except OSError:
                data = b""
            if not data:
                selector.unregister(key.data)
                open_count -= 1
    out["still_open"] = open_count
    out["all_closed_s"] = time.perf_counter() - started if not open_count else float("inf")


def _port_figures(name: str, healthz: str, port: int, n: int, seconds: float,
                  write: tuple[str, bytes, str] | None) -> dict[str, Any]:
    baseline = _latencies(healthz, min(2.0, seconds / 4))
    started = time.perf_counter()
    socks = _open_stalled(port, n)
    opened_s = time.perf_counter() - started
    closed: dict[str, float] = {}
    watcher = threading.Thread(target=_watch_closed, args=(socks, started, max(seconds, 60.0), closed))
    watcher.start()
    figures: dict[str, Any] = {}
    try:
        under = _latencies(healthz, min(3.0, seconds / 2))
        if write is not None:
            url, body, token = write
            refused = 0
            while True:
                status, _ = _request(url, body or None, token)
                if status == 200 or time.perf_counter() - started > max(seconds, 60.0):
                    break
                refused += status == 503
                time.sleep(0.2)
            figures["request_ok_after_s"] = round(time.perf_counter() - started, 2) if status == 200 else None
            figures["requests_refused_503"] = refused
        watcher.join()
    finally:
        for sock in socks:
            sock.close()
    base_p50 = statistics.median(baseline)
    under_p50 = statistics.median(under)
    figures.update({
        "stalled": n,
        "opened_in_s": round(opened_s, 2),
        "healthz_p50_ms_alone": round(base_p50 * 1000, 2),
        "healthz_p50_ms_stalled": round(under_p50 * 1000, 2),
        "healthz_max_ms_stalled": round(max(under) * 1000, 2) if max(under) < float("inf") else None,
        "healthz_failed_stalled": sum(t == float("inf") for t in under),
        "healthz_ratio": round(under_p50 / base_p50, 2),
        "stalled_all_closed_s": round(closed["all_closed_s"], 2) if not closed["still_open"] else None,
        "stalled_still_open": int(closed["still_open"]),
    })
    print(f"{name}: {n} stalled connections; /healthz p50 {figures['healthz_p50_ms_stalled']} ms "
          f"(alone {figures['healthz_p50_ms_alone']} ms, ratio {figures['healthz_ratio']}), "
          f"max {figures['healthz_max_ms_stalled']} ms, {figures['healthz_failed_stalled']} failed; "
          f"every stalled connection closed by the server after {figures['stalled_all_closed_s']} s"
          + (f"; a valid request answered after {figures['request_ok_after_s']} s "
             f"({figures['requests_refused_503']} refused with 503 before)" if write else ""), flush=True)
    return figures


def run(args: argparse.Namespace) -> dict:
    from prometheus_client import CollectorRegistry

    from tengen.infra.health import HealthServer
    from tengen.ratings.api import RatingsApi
    from tengen.ratings.book import RatingsBook
    from tengen.ratings.server import HTTP_TIMEOUT_S, HTTP_WORKERS, RatingsServer
    from tengen.ratings.store import RatingsStore

    # Each stalled connection is two descriptors in this process (client and server side).
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.connections + 256)), hard))
    if args.data_dir is not None:
        return _live_run(args)
    token = "bench-token"
    with tempfile.TemporaryDirectory(prefix="tengen-bench-") as tmp:
        store = RatingsStore(f"sqlite:///{Path(tmp) / 'bench.sqlite'}")
        ratings = RatingsServer(RatingsApi(RatingsBook(store), token), "127.0.0.1", 0, 0)
        ratings.start()
        health = HealthServer(0, CollectorRegistry(), lambda: (True, "bench"), name="bench", host="127.0.0.1")
        try:
            base = f"http://127.0.0.1:{ratings.http_port}"
            game = json.dumps({"games": [{"game_id": "bench-1", "black": "a", "white": "b", "result": "B"}]})
            figures = {
                "http_timeout_s": HTTP_TIMEOUT_S,
                "ratings_workers": HTTP_WORKERS,
                "ratings": _port_figures("ratings", f"{base}/healthz", ratings.http_port, args.connections,
                                         args.seconds, (f"{base}/api/games", game.encode(), token)),
                "health": _port_figures("health", f"http://127.0.0.1:{health.port}/healthz", health.port,
                                        args.connections, args.seconds, None),
                "games_stored": store.game_count(),
            }
        finally:
            health.close()
            ratings.stop(grace=1.0)
            store.close()
    return figures


def _live_run(args: argparse.Namespace) -> dict:
    from urllib.parse import urlsplit

    from tengen.loop.progress import run_state
    from tengen.run.status import scrape

    endpoints = run_state(args.data_dir).get("endpoints", {})
    if "ratings_http" not in endpoints or "trainer_http" not in endpoints:
        raise SystemExit(f"no running `tengen run` on {args.data_dir} (no run.json with its addresses)")
    ratings, trainer = endpoints["ratings_http"], endpoints["trainer_http"]

    def samples() -> int | None:
        value = scrape(f"{trainer}/metrics").get("tengen_trainer_samples")  # a counter: whole samples
        return None if value is None else int(value)

    before = samples()
    figures: dict[str, Any] = {
        "ratings": _port_figures("ratings", f"{ratings}/healthz", int(urlsplit(ratings).port or 80),
                                 args.connections, args.seconds, (f"{ratings}/api/leaderboard?n=1", b"", "")),
        "trainer_health": _port_figures("trainer", f"{trainer}/healthz", int(urlsplit(trainer).port or 80),
                                        args.connections, args.seconds, None),
    }
    after = samples()
    figures["trainer_samples_before_after"] = [before, after]
    print(f"the trainer trained {before} -> {after} samples meanwhile", flush=True)
    return figures
