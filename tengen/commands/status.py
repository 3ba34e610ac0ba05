"""`tengen status`: one screen on a run, running or stopped.

On a data dir (`tengen run`'s): reads what its own status view reads (tengen.run.status): the
window, candidates, gating decisions, the model repository, the strength service's results
against GNU Go, and, while the run is up (its `run.json` names the services' addresses), the
trainer's and selfplay workers' /metrics (two reads five seconds apart give the rates; games/s is
the run's own, over its status interval, from run.json's progress) and the ratings leaderboard.

On a stack (`--page URL`: docker compose's http://127.0.0.1:8061, or a Kubernetes port-forward to
the ratings service): the figures the services publish on `tengen.progress`, as the ratings page
shows them (elapsed since the run began, samples and their rate, games and positions per second,
the version self-play plays and its boards), the newest version's results against GNU Go and the
top of the leaderboard, all through the ratings service's HTTP API. `--json` prints the same
figures as one JSON object.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import time
from pathlib import Path

from tengen.commands import CommandError

# Between the two reads of the workers' counters. Games finish in bursts (many at once), so games/s
# comes from the run's own status interval where run.json has it; this window gives the rest.
RATE_WINDOW_S = 5.0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("status", help="one screen on a run's data dir (running or stopped)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--data-dir", type=Path, default=None,
                       help="the run's data dir ($TENGEN_DATA_DIR, default ./tengen-data)")
    where.add_argument("--page", metavar="URL", default=None,
                       help="a compose or Kubernetes stack's ratings page, e.g. http://127.0.0.1:8061 (compose's)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.set_defaults(func=_run)


def _started(records: Path) -> tuple[str | None, float | None]:
    """The preset and start time (Unix seconds) of the trainer's newest start on the data dir (its
    run records)."""
    from tengen.infra.files import read_lines

    preset = started = None
    for record in read_lines(records):
        try:
            preset = record.get("preset")
            started = datetime.datetime.fromisoformat(record["started"]).timestamp()
        except (ValueError, KeyError, TypeError):
            continue
    return preset, started


def _run(args: argparse.Namespace) -> int:
    if args.page is not None:
        return _stack(args.page.rstrip("/"), args.json)
    from tengen.config import load_config
    from tengen.loop.layout import DataDir
    from tengen.loop.progress import read_run_progress, run_state
    from tengen.run.status import StatusReader, render_screen
    from tengen.run.supervisor import ChildState

    data_dir = args.data_dir or Path(os.environ.get("TENGEN_DATA_DIR", "tengen-data"))
    layout = DataDir(data_dir)
    if not data_dir.is_dir():
        raise CommandError(f"no data dir at {data_dir} (give the run's --data-dir)")
    preset, started = _started(layout.run_records)
    state = run_state(data_dir)
    running = bool(state) and _alive(state.get("pid"))
    endpoints = state.get("endpoints", {}) if running else {}
    config = load_config(state.get("preset") or preset or "cpu")
    reader = StatusReader(
        data_dir, config,
        trainer_metrics=f"{endpoints['trainer_http']}/metrics" if "trainer_http" in endpoints else None,
        selfplay_metrics=[f"{u}/metrics" for u in endpoints.get("selfplay_http", [])],
        ratings_url=endpoints.get("ratings_grpc"), triton_url=endpoints.get("triton_grpc"))
    try:
        status = reader.read()
        if running and reader.selfplay_metrics:
            time.sleep(RATE_WINDOW_S)
            status = reader.read()
    finally:
        reader.close()
    status.elapsed_s = time.time() - started if (running and started) else 0.0
    progress = read_run_progress(data_dir) if running else None
    if progress is not None:  # the supervisor's own figures: its duration, games/s over its interval
        status.elapsed_s = progress.elapsed_s + max(0.0, time.time() - progress.updated)
        status.duration_s = progress.duration_s
        if progress.games_per_s is not None:
            status.games_per_s = progress.games_per_s
    status.services = [ChildState(name, "up" if _alive(pid) else "down", 0, pid)
                       for name, pid in state.get("children", {}).items()] if running else []
    where = f"running (pid {state['pid']})" if running else "not running"
    if args.json:
        figures = dataclasses.asdict(status)
        figures.update(data_dir=str(data_dir), running=running, preset=config.preset)
        print(json.dumps(figures, default=str))
    else:
        print(render_screen(status, f"tengen status: {data_dir} ({config.preset}), {where}", hint=""))
    return 0


def _get_json(url: str) -> dict:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            data = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CommandError(f"cannot read {url}: {exc}") from None
    if not isinstance(data, dict):
        raise CommandError(f"{url} did not answer with a JSON object")
    return data


def _stack(page: str, as_json: bool) -> int:
    """The figures of a compose or Kubernetes stack, through its ratings service's HTTP API."""
    curve = _get_json(f"{page}/api/curve")
    board = _get_json(f"{page}/api/leaderboard?n=5")
    progress = curve.get("progress") if isinstance(curve.get("progress"), dict) else None
    matches = [m for m in curve.get("matches", []) if isinstance(m, dict) and isinstance(m.get("version"), int)]
    newest = max((m["version"] for m in matches), default=None)
    measured = sorted((m for m in matches if m["version"] == newest), key=lambda m: m.get("level") or 0)
    leaders = [r for r in board.get("ratings", []) if isinstance(r, dict)]
    if as_json:
        print(json.dumps({"page": page, "progress": progress, "gnugo": measured, "leaders": leaders}))
        return 0
    print(f"tengen status: the stack behind {page}")
    print("  progress  " + (_progress_line(progress) if progress else
                            "none published yet (the trainer and the self-play workers report every few seconds)"))
    print("  GNU Go    " + (f"v{newest}: " + ", ".join(
        f"level {m['level']} {m['wins']}-{m['losses']}" + (f"-{m['draws']}" if m.get("draws") else "")
        + f" = {m['rate']:.2f} [{m['rate_low']:.2f}, {m['rate_high']:.2f}]" for m in measured)
        if measured else "not measured yet"))
    print("  top Elo   " + (", ".join(f"{r.get('name')} {r.get('elo', 0):+.0f} ({r.get('games', 0)} games)"
                                      for r in leaders) or "none rated yet"))
    return 0


def _progress_line(p: dict) -> str:
    def figure(key: str, form: str) -> str:
        value = p.get(key)
        return "-" if not isinstance(value, (int, float)) else format(value, form)

    elapsed = p.get("elapsed_s")
    up = "-" if not isinstance(elapsed, (int, float)) else str(datetime.timedelta(seconds=int(elapsed)))
    boards = f" on {p['boards']}" if p.get("boards") else ""
    playing = "-" if p.get("version") is None else f"v{p['version']}{boards}"
    return (f"run up {up}, samples {figure('samples', ',')} ({figure('samples_per_s', '.0f')}/s), "
            f"games {figure('games', ',')} ({figure('games_per_s', '.2f')} games/s, "
            f"{figure('positions_per_s', '.1f')} positions/s by {p.get('workers', 0)} workers), "
            f"self-play plays {playing}, last loss {figure('loss', '.3f')}")


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
