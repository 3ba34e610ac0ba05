"""The whole loop on one machine: `tengen run --preset tiny` from an empty data dir to a promoted
model version and a ratings table, with the real broker, Triton, ratings on SQLite, trainer, gating,
strength and selfplay (the worker killed once on the way and restarted). Then the faults on the same
running loop, through the drill of `tengen chaos`: the broker SIGKILLed while the trainer is paused,
the trainer, Triton, ratings and `tengen run` itself SIGKILLed in turn; after each, self-play moves
again on its own, no acknowledged game is lost or duplicated, and the run that follows the killed
one stops what it left and continues. Finally a clean stop on Ctrl-C (exit 0, no process of any of
the runs left). The bounds are liveness timeouts, not speed claims. (One loop for all of it: the
suite's time budget.)"""
from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tengen.config import load_config
from tengen.infra.process import stop_marked
from tengen.run.chaos import TARGETS, Drill
from tengen.strength.measure import read_results

TENGEN = str(Path(sys.executable).with_name("tengen"))
PROMOTION_DEADLINE_S = 420  # from nothing to a promotion; about 2-4 minutes on the 2-core box
RECOVERY_S = 240  # generous: a service restart with backoff, Triton reloading its models


def _env(data_dir: Path) -> dict[str, str]:
    """The test's environment without TENGEN_ settings of the caller, plus TENGEN_DATA_DIR so that
    every process of the run carries the data dir in its environment (found again by _leftovers)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENGEN_")}
    env["TENGEN_DATA_DIR"] = str(data_dir)
    return env


def _leftovers(marker: str) -> list[str]:
    """Processes (other than this one) whose command line or environment mentions `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker.encode() in cmdline or marker.encode() in environ:
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")[:200]
            found.append(f"{entry.name}: {command}")
    return found


def _decisions(data_dir: Path) -> list[dict]:
    path = data_dir / "gating" / "decisions.jsonl"
    if not path.exists():
        return []
    decisions = []
    for line in path.read_text().splitlines():
        try:
            decisions.append(json.loads(line))
        except ValueError:
            pass  # a line being written
    return decisions


def _versions(data_dir: Path) -> list[int]:
    model_dir = data_dir / "models" / "tengen"
    return sorted(int(p.name) for p in model_dir.iterdir() if p.name.isdigit()) if model_dir.is_dir() else []


def _tail(path: Path, n: int = 6000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def _logs(data_dir: Path) -> str:
    return "\n".join(f"--- {p.name}\n{_tail(p, 2500)}" for p in sorted((data_dir / "logs").glob("*.log")))


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_tengen_run_from_nothing_to_a_promotion_and_back(tmp_path: Path, gnugo: str) -> None:
    data_dir = tmp_path / "run"
    out = tmp_path / "run1.out"
    # The strength service measures version 1 against GNU Go levels 0 and 1 at once: 2 games each.
    env = dict(_env(data_dir), TENGEN_STRENGTH__GAMES="2")
    with open(out, "wb") as sink:
        proc = subprocess.Popen([TENGEN, "run", "--preset", "tiny", "--data-dir", str(data_dir), "--duration", "15m",
                                 "--status-every", "10"], stdout=sink, stderr=subprocess.STDOUT, env=env)
    pids: dict[str, int] = {}
    killed: int | None = None  # the selfplay worker killed once games flow, to see it restarted
    # After the promotion, the faults on the same running loop, through the drill of `tengen chaos`
    # (tengen.run.chaos): the broker SIGKILLed while the trainer is paused (every game it had
    # acknowledged still reaches the window, once), the trainer, Triton, ratings and `tengen run`
    # itself SIGKILLed in turn (the next run stops what the killed one left and continues); after
    # each, self-play moves again on its own. Then Ctrl-C stops the last run.
    drill_env = dict(_env(data_dir), TENGEN_STRENGTH__GAMES="2", TENGEN_STRENGTH__GNUGO_LEVELS="0")
    report = io.StringIO()
    drill = Drill("tiny", load_config("tiny", env=drill_env), data_dir, rounds=1, recovery_s=RECOVERY_S,
                  out=report, env=drill_env, trainer_pause_s=5.0)
    try:
        deadline = time.monotonic() + PROMOTION_DEADLINE_S
        promoted: list[dict] = []
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(5)
            state_file = data_dir / "run.json"
            if state_file.exists():
                try:
                    pids.update(json.loads(state_file.read_text())["children"])
                except ValueError:
                    pass  # replaced while being read
            if killed is None and "selfplay-0" in pids and (data_dir / "trainer" / "window" / "manifest.json").exists():
                killed = pids["selfplay-0"]
                os.kill(killed, signal.SIGKILL)
            promoted = [d for d in _decisions(data_dir) if d.get("promoted")]
            if promoted and max(_versions(data_dir), default=0) >= 2 and len(read_results(data_dir)) >= 2:
                break
        assert proc.poll() is None, f"tengen run exited early:\n{_tail(out)}\n{_logs(data_dir)}"
        assert promoted, f"no promotion within {PROMOTION_DEADLINE_S} s:\n{_tail(out)}\n{_logs(data_dir)}"
        # `tengen status` on the running data dir: the services' figures and the data dir's.
        live = subprocess.run([TENGEN, "status", "--data-dir", str(data_dir), "--json"], capture_output=True,
                              text=True, env=_env(data_dir), timeout=120)
        assert live.returncode == 0, live.stderr
        figures = json.loads(live.stdout)
        assert figures["running"] and figures["preset"] == "tiny" and figures["version"] >= 2
        assert figures["games_played"] > 0 and figures["samples"] > 0 and figures["elapsed_s"] > 0
        assert figures["duration_s"] == 15 * 60  # the run's own progress in run.json, which only it knows
        assert {s["name"] for s in figures["services"]} >= {"broker", "triton", "trainer", "selfplay-0"}
        result = drill.run(proc, stop_signal=signal.SIGINT)  # ends with Ctrl-C to the last run: exit 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_marked(str(data_dir.resolve()))  # a failed test must not leave a loop running
    text = out.read_text(errors="replace")
    last = drill.run_log.read_text(errors="replace")  # the runs the drill started after killing one

    assert [r.target for r in result.recoveries] == list(TARGETS), report.getvalue()
    assert result.at_risk >= 5, "the pause left nothing for the broker to lose; nothing was tested"
    assert result.lost == 0 and result.duplicated == 0, result.summary()
    assert "the broker lost" in (data_dir / "logs" / "selfplay-0.log").read_text(errors="replace")  # and resent
    # The killed run left its services running (ratings, trainer, gating, strength, selfplay; its
    # broker and Triton got SIGTERM as it died); the next one stopped them and continued.
    assert result.left_behind and result.left_behind[0] >= 5, result.left_behind
    assert "processes left running by an earlier run" in last and "continuing from version" in last
    assert "wrote version 1" not in last

    # Every service ran, and each is gone now (no orphan holds the data dir).
    for name in ("broker", "ratings", "trainer", "gating", "strength", "selfplay-0"):
        assert name in pids, f"{name} never reported a pid: {pids}"
    for name, pid in pids.items():
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert _leftovers(str(data_dir)) == []
    assert not (data_dir / "run.json").exists()
    stopped = subprocess.run([TENGEN, "status", "--data-dir", str(data_dir)], capture_output=True, text=True,
                             env=_env(data_dir), timeout=120)
    assert stopped.returncode == 0 and "(tiny), not running" in stopped.stdout, stopped.stderr
    assert f"version {max(_versions(data_dir))} " in stopped.stdout
    # What made the data dir stays: the trainer's record of each of its starts (first run, restarts, next run).
    records = [json.loads(line) for line in (data_dir / "trainer" / "runs.jsonl").read_text().splitlines()]
    assert len(records) >= 3 and all(r["preset"] == "tiny" and r["config"]["game"]["board_sizes"] == [7]
                                     for r in records), records

    # What the first run printed: version 1 made, status lines (stdout is not a terminal); what the
    # last printed when Ctrl-C stopped it: the summary.
    assert "wrote version 1 (random b2c32 net)" in text
    assert "] games " in text and "| version " in text
    # The killed worker was restarted (the run went on to the promotion without it dying again).
    assert killed is not None and "selfplay-0 died (killed by signal 9)" in text
    assert pids["selfplay-0"] != killed
    assert "SIGINT: stopping" in last
    assert f"run stopped. Everything is in {data_dir}" in last
    assert "tengen ratings top --data-dir" in last and "tensorboard --logdir" in last
    # Where the CPU went, by service (the selfplay workers as one), and the run's share of the box.
    cpu = re.search(r"CPU by service \(([\d,]+) CPU seconds\): (.*); the run had (\d+)% of", last)
    assert cpu is not None, last
    shares = dict(re.findall(r"([a-z]+) ([\d.]+)%", cpu.group(2)))
    assert {"triton", "trainer", "selfplay", "gating", "ratings", "broker", "strength"} <= set(shares)
    assert abs(sum(float(v) for v in shares.values()) - 100.0) < 0.1 * len(shares)

    # The promotion: the decision names the version, which is in the repository.
    decision = promoted[-1]
    assert decision["wins"] + decision["losses"] <= decision["games"]
    assert decision["promoted_version"] in _versions(data_dir)
    assert max(_versions(data_dir)) >= 2

    # The ratings table, read from the data dir's store after the run.
    top = subprocess.run([TENGEN, "ratings", "top", "--data-dir", str(data_dir), "--json", "--n", "0"],
                         capture_output=True, text=True, env=_env(data_dir), timeout=120)
    assert top.returncode == 0, top.stderr
    board = json.loads(top.stdout)
    rated = [r for r in board["ratings"] if r["rated"]]
    assert len(rated) >= 2 and board["summary"]["total_games"] >= decision["games"]
    assert all(r["games"] > 0 for r in rated)
    names = {r["name"] for r in rated}
    assert {"tengen-v1", f"tengen-v{decision['promoted_version']}"} <= names, names

    # Version 1 against GNU Go, measured by the run itself: in the results file and in ratings as
    # games against the anchors.
    results = read_results(data_dir)
    assert [(r.version, r.opponent, r.games, r.board_size, r.komi) for r in results[:2]] == [
        (1, "gnugo-l0", 2, 7, 9.0), (1, "gnugo-l1", 2, 7, 9.0)]
    anchors = {r["name"]: r for r in board["ratings"] if r["kind"] == "anchor"}
    assert {"gnugo-l0", "gnugo-l1"} <= set(anchors) and anchors["gnugo-l0"]["games"] >= 2
