"""A fault drill against a local run: SIGKILL its parts in rounds and measure what it costs.

`tengen chaos` starts `tengen run` on a data dir, waits for the first games in the window, then in
each round SIGKILLs the trainer, the broker, Triton, ratings and `tengen run` itself (the
supervisor; the drill starts a new `tengen run` on the same data dir, which stops what the dead one
left), one after the other. After each kill it measures how long until self-play moves again: new
positions counted by a worker and new games in the window. Every game id the broker holds is
recorded just before each kill (all of them were acknowledged, acks=all), and after each kill that
empties the broker's log (broker, supervisor) every id in the workers' spools
(tengen.infra.outbox): a game acknowledged between the last read and the kill is there until the
trainer commits it, and once committed it is in the window, so none goes unchecked (games still in
flight at the kill are spooled too and checked as well: the outbox keeps them alike). At the end
the drill waits for every recorded game to reach the window and counts those that never did (lost)
and the ids the window holds twice (duplicated). Before each broker kill the trainer is paused (at least
TRAINER_PAUSE_S, and on until AT_RISK_GOAL games wait), so the broker dies holding games nobody has
made durable yet. The bounds are liveness timeouts: a part that does not come back within `recovery_s` fails the drill.
"""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from tengen.config import Config
from tengen.infra.outbox import spooled_keys
from tengen.infra.process import marked_processes, stop_marked
from tengen.loop.layout import DataDir
from tengen.loop.messages import GAMES_TOPIC
from tengen.loop.progress import run_state
from tengen.run.status import scrape
from tengen.train.window import IDS, Window, WindowError

log = logging.getLogger(__name__)

TARGETS = ("trainer", "broker", "triton", "ratings", "supervisor")
TRAINER_PAUSE_S = 15.0  # before a broker kill: games pile up on the broker, acknowledged, not ingested
AT_RISK_GOAL = 5  # ... and the pause goes on until this many wait (a slow box makes fewer games per second)


class DrillError(RuntimeError):
    """The run did not recover within the bound, or exited."""


def window_ids(data_dir: Path, config: Config) -> dict[str, str]:
    """Game id -> digest of every game in the run's window, read without disturbing the trainer."""
    try:
        window = Window(DataDir(data_dir).window, max(config.game.board_sizes), c=config.trainer.window_c,
                        read_only=True)
        return window.game_ids()
    except (WindowError, OSError, ValueError):  # not there yet, or replaced while being read
        return {}


def window_duplicates(data_dir: Path) -> int:
    """Ids with more than one line in the window's id log (one line per appended game)."""
    path = DataDir(data_dir).window / IDS
    try:
        ids = [json.loads(line)[0] for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError, IndexError, TypeError):
        return 0
    return len(ids) - len(set(ids))


def acknowledged_ids(bootstrap: str, timeout_s: float = 60.0) -> set[str]:
    """Every game id in the broker's log of tengen.games (each was acknowledged with acks=all)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=2000)
    try:
        partitions = [TopicPartition(GAMES_TOPIC, p) for p in consumer.partitions_for_topic(GAMES_TOPIC) or ()]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end = consumer.end_offsets(partitions)
        ids: set[str] = set()
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in partitions) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                ids.update(r.key.decode() for r in records if r.key is not None)
        return ids
    finally:
        consumer.close()


def spooled_ids(data_dir: Path) -> set[str]:
    """Game ids in the spools of the run's self-play workers: published, not yet committed."""
    root = DataDir(data_dir).outboxes
    return set().union(*(spooled_keys(spool) for spool in root.iterdir())) if root.is_dir() else set()


def selfplay_positions(data_dir: Path) -> float:
    """Positions the run's workers have played, from their /metrics (0 while none answers)."""
    urls = run_state(data_dir).get("endpoints", {}).get("selfplay_http", [])
    return sum(scrape(f"{u}/metrics").get("tengen_selfplay_positions_total", 0.0) for u in urls)


@dataclass
class Recovery:
    round: int
    target: str
    seconds: float  # from the kill to self-play moving again


@dataclass
class DrillResult:
    recoveries: list[Recovery] = field(default_factory=list)
    acknowledged: int = 0
    at_risk: int = 0  # acknowledged and not in the window when a broker was killed: what it could have lost
    lost: int = 0
    duplicated: int = 0
    left_behind: list[int] = field(default_factory=list)  # processes each killed `tengen run` left running

    def summary(self) -> dict:
        by_target: dict[str, list[float]] = {}
        for r in self.recoveries:
            by_target.setdefault(r.target, []).append(round(r.seconds, 1))
        return {"recovery_s": by_target, "max_recovery_s": max((r.seconds for r in self.recoveries), default=0.0),
                "acknowledged": self.acknowledged, "at_risk": self.at_risk, "lost": self.lost,
                "duplicated": self.duplicated}


class Drill:
    """One drill: `run()` returns what it measured; the run it started is stopped in every case."""

    def __init__(
        self,
        preset: str,
        config: Config,
        data_dir: Path,
        rounds: int,
        *,
        targets: tuple[str, ...] = TARGETS,
        recovery_s: float = 240.0,
        out: TextIO = sys.stdout,
        env: dict[str, str] | None = None,
        trainer_pause_s: float = TRAINER_PAUSE_S,
    ) -> None:
        unknown = set(targets) - set(TARGETS)
        if unknown or not targets:
            raise ValueError(f"targets must be among {', '.join(TARGETS)}; got {', '.join(targets) or 'none'}")
        self.preset, self.config, self.data_dir, self.rounds = preset, config, data_dir, rounds
        self.targets, self.recovery_s, self.out = targets, recovery_s, out
        self.trainer_pause_s = trainer_pause_s
        self.env = env if env is not None else dict(os.environ)
        self.run_log = data_dir / "chaos-run.out"
        self.proc: subprocess.Popen | None = None
        self.acknowledged: set[str] = set()
        self.at_risk: set[str] = set()  # acknowledged games not yet in the window when a broker died
        self.left_behind: list[int] = []  # processes a SIGKILLed `tengen run` left running, per kill

    def run(self, running: subprocess.Popen | None = None, stop_signal: int = signal.SIGTERM) -> DrillResult:
        """The drill on `running` (a `tengen run` on this data dir) or on a run it starts; the run
        (the last one, after supervisor kills) is stopped with `stop_signal` at the end and must
        exit 0."""
        result = DrillResult()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        try:
            if running is None:
                self._start_run()
            else:
                self.proc = running
            self._wait(lambda: len(window_ids(self.data_dir, self.config)) >= 5, "the first games in the window")
            for n in range(1, self.rounds + 1):
                for target in self.targets:
                    seconds = self._kill_and_recover(target)
                    result.recoveries.append(Recovery(n, target, seconds))
                    self._say(f"round {n}: {target} SIGKILLed, self-play moving again after {seconds:.1f} s")
            self._note_acknowledged()
            try:
                self._wait(
                    lambda: self.acknowledged <= set(window_ids(self.data_dir, self.config)),
                    f"the {len(self.acknowledged)} acknowledged games to reach the window",
                )
            except DrillError as err:
                self._say(str(err))
            ids = set(window_ids(self.data_dir, self.config))
            result.acknowledged, result.lost = len(self.acknowledged), len(self.acknowledged - ids)
            result.duplicated = window_duplicates(self.data_dir)
            result.at_risk, result.left_behind = len(self.at_risk), self.left_behind
            self._stop_run(stop_signal)
            return result
        finally:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            stop_marked(str(self.data_dir.resolve()))  # nothing of the drill's runs is left behind

    # -- the steps -------------------------------------------------------------------------------

    def _kill_and_recover(self, target: str) -> float:
        self._note_acknowledged()
        positions, games = selfplay_positions(self.data_dir), len(window_ids(self.data_dir, self.config))
        start = time.monotonic()
        if target == "broker":
            # The case: the trainer behind (paused), so the broker holds acknowledged games
            # nobody has made durable yet when it dies.
            trainer = run_state(self.data_dir)["children"]["trainer"]
            os.kill(trainer, signal.SIGSTOP)
            try:
                self.at_risk |= self._pile_up()
                broker = run_state(self.data_dir)["children"]["broker"]
                positions = selfplay_positions(self.data_dir)  # self-play went on during the pause
                start = time.monotonic()
                os.kill(broker, signal.SIGKILL)
                # Acknowledged since _pile_up's last read of the broker: spooled, as the trainer
                # (still paused) committed nothing.
                self.at_risk |= self._note_spooled()
            finally:
                os.kill(trainer, signal.SIGCONT)
            self._wait(
                lambda: run_state(self.data_dir).get("children", {}).get("broker") not in (None, broker),
                "the broker to be restarted",
            )
        elif target == "supervisor":
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
            self.left_behind.append(len(marked_processes(str(self.data_dir.resolve()))))
            self._start_run()  # the next run finds the dead one's children and stops them first
            self._note_spooled()  # acknowledged by the dead run's broker since the last read
            positions = 0.0  # the new run's workers count from zero
        else:
            pid = run_state(self.data_dir)["children"][target]
            os.kill(pid, signal.SIGKILL)
            self._wait(
                lambda: run_state(self.data_dir).get("children", {}).get(target) not in (None, pid),
                f"{target} to be restarted",
            )
        self._wait(
            lambda: (
                selfplay_positions(self.data_dir) > positions and len(window_ids(self.data_dir, self.config)) > games
            ),
            f"the loop to move after {target}",
        )
        return time.monotonic() - start

    def _pile_up(self) -> set[str]:
        """With the trainer paused: wait at least trainer_pause_s and until AT_RISK_GOAL acknowledged
        games are not in the window (bounded by recovery_s); returns the ids of those that wait."""
        start = time.monotonic()
        while True:
            time.sleep(1.0)
            self._note_acknowledged()
            waiting = self.acknowledged - set(window_ids(self.data_dir, self.config))
            elapsed = time.monotonic() - start
            if (elapsed >= self.trainer_pause_s and len(waiting) >= AT_RISK_GOAL) or elapsed >= self.recovery_s:
                return waiting

    def _note_acknowledged(self) -> None:
        bootstrap = run_state(self.data_dir).get("endpoints", {}).get("kafka")
        if bootstrap:
            try:
                self.acknowledged |= acknowledged_ids(bootstrap)
            except Exception as err:  # the broker restarting: its log is empty anyway
                log.warning("chaos: could not read the broker's games: %r", err)

    def _note_spooled(self) -> set[str]:
        """Adds the workers' spooled ids to the acknowledged; returns those not in the window."""
        spooled = spooled_ids(self.data_dir)
        self.acknowledged |= spooled
        return spooled - set(window_ids(self.data_dir, self.config))

    def _start_run(self) -> None:
        DataDir(self.data_dir).run_state.unlink(missing_ok=True)  # a SIGKILLed run leaves its state behind
        cmd = [
            sys.executable,
            "-m",
            "tengen.cli",
            "run",
            "--preset",
            self.preset,
            "--data-dir",
            str(self.data_dir),
            "--plain",
            "--status-every",
            "10",
        ]
        with open(self.run_log, "ab") as sink:
            self.proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=self.env)
        self._wait(lambda: bool(run_state(self.data_dir).get("children")), "tengen run to start its services")

    def _stop_run(self, stop_signal: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(stop_signal)
            code = self.proc.wait(timeout=300)
            if code != 0:
                raise DrillError(
                    f"tengen run exited with {code} on {signal.Signals(stop_signal).name} (see {self.run_log})"
                )

    def _wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.recovery_s
        while not condition():
            if self.proc is not None and self.proc.poll() is not None:
                raise DrillError(f"tengen run exited ({self.proc.returncode}) waiting for {what}; see {self.run_log}")
            if time.monotonic() > deadline:
                raise DrillError(f"no recovery within {self.recovery_s:.0f} s: waiting for {what}; see {self.run_log}")
            time.sleep(0.5)

    def _say(self, text: str) -> None:
        print(f"chaos: {text}", file=self.out, flush=True)
