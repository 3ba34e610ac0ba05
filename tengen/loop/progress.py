"""`run.json`: what a live `tengen run` tells the processes beside it, and its one reader.

`tengen run` (tengen.run.local) rewrites the file at every status line: its pid, preset, the
services' endpoints and pids, and `progress`, the figures of that status line (elapsed of the
duration, samples trained, self-play games and games/s). The ratings page reads the progress from
here because the supervisor is the only process that knows the run's duration and self-play's
rates; a ratings service without the file (compose, Kubernetes, no run up) shows what its own
store knows instead.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tengen.loop.layout import DataDir


def run_state(data_dir: Path) -> dict:
    """`run.json` of a live run: its endpoints and child pids ({} while there is none)."""
    try:
        state = json.loads(DataDir(data_dir).run_state.read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


@dataclass(frozen=True)
class RunProgress:
    """A run's figures at one status line (None: not known yet, e.g. no worker answered)."""

    updated: float  # Unix time of these figures
    elapsed_s: float
    duration_s: float | None  # None: the run goes on until stopped
    samples: int | None  # trained so far
    games_played: int | None  # by this run's self-play workers
    games_per_s: float | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> RunProgress | None:
        """The progress in `data`, or None when it is missing or malformed (a foreign writer)."""
        if not isinstance(data, dict):
            return None

        def number(key: str, kind: type = float, required: bool = False) -> Any:
            value = data.get(key)
            if value is None and not required:
                return None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(key)
            return kind(value)

        try:
            return cls(number("updated", required=True), number("elapsed_s", required=True), number("duration_s"),
                       number("samples", int), number("games_played", int), number("games_per_s"))
        except ValueError:
            return None


def read_progress(data_dir: Path) -> RunProgress | None:
    """The progress a live run last wrote into the data dir's run.json, or None."""
    return RunProgress.from_json(run_state(data_dir).get("progress"))
