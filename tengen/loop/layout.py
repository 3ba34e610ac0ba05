"""Every path under a run's data dir, owned here and nowhere else.

```
<data_dir>/
  models/<model>/<version>/model.pt   the Triton model repository (tengen.infra.triton.repository)
  triton/                             a local Triton's working tree and log (LocalTriton)
  candidates/candidate-<samples>.pt   the trainer's exports, gating's input (tengen.loop.messages)
  trainer/window/                     the growing window (tengen.train.window)
  trainer/checkpoint.pt               the learner's state
  trainer/runs.jsonl                  what made the data dir: one line per start of the trainer
                                      (tengen.loop.record); the first is when the run began
  tensorboard/trainer/                the trainer's TensorBoard events
  sgf/v<N>/<game id>.sgf              self-play games by the version that played them
  selfplay/outbox/<worker>/           each worker's published games not yet committed
  gating/decisions.jsonl              one line per decided candidate (tengen.loop.ledger)
  gating/matches/<candidate>.jsonl    each match's games
  strength/results.jsonl              games against GNU Go while the loop runs (tengen.strength.measure)
  strength/sgf/v<N>/                  their SGFs
  ratings.sqlite, ratings.token       the ratings store without Postgres, and its write token
  logs/, run.json, run.lock           `tengen run`'s logs, state and lock
  first-stage/                        left by a tengen before the curriculum moved into the loop:
                                      its launcher's small-board first stage (never read now)
```
The ratings service's "games dir" is a data dir too (or the part of one it mounts): it reads the
self-play SGFs and gating's files at these same places.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

_CANDIDATE_FILE = re.compile(r"^candidate-(\d+)\.pt$")


def candidate_name(samples: int) -> str:
    """A candidate's name; names sort by training progress."""
    return f"candidate-{samples:012d}"


def candidate_samples(file_name: str) -> int | None:
    """The training samples in a candidate file's name, or None for any other file."""
    match = _CANDIDATE_FILE.match(file_name)
    return int(match.group(1)) if match else None


class DataDir:
    """A run's data dir: each path under it as a property or method (the tree above)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"DataDir({str(self.root)!r})"

    def __str__(self) -> str:
        return str(self.root)

    def __fspath__(self) -> str:  # a DataDir goes wherever a path to the data dir does
        return os.fspath(self.root)

    # -- serving
    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def triton(self) -> Path:
        return self.root / "triton"

    # -- training
    @property
    def candidates(self) -> Path:
        return self.root / "candidates"

    def candidate(self, name: str) -> Path:
        """An absolute path: it travels in announcements to services with other working dirs."""
        return self.candidates.resolve() / f"{name}.pt"

    def candidate_files(self) -> list[str]:
        """The candidates' file names, oldest first ([] before the first one)."""
        try:
            return sorted(p.name for p in self.candidates.iterdir() if candidate_samples(p.name) is not None)
        except OSError:
            return []

    @property
    def window(self) -> Path:
        return self.root / "trainer" / "window"

    @property
    def checkpoint(self) -> Path:
        return self.root / "trainer" / "checkpoint.pt"

    def retired_checkpoint(self, arch: str) -> Path:
        """The checkpoint of a net a bigger architecture took over from."""
        return self.root / "trainer" / f"checkpoint-{arch}.pt"

    @property
    def init_model(self) -> Path:
        """The export a new run starts from (`tengen run --init-model`): its version 1 and the
        trainer's first weights. Read only while the data dir has no version and no checkpoint."""
        return self.root / "trainer" / "init-model.pt"

    @property
    def first_stage(self) -> Path:
        """Where a tengen before the curriculum moved into the loop (game.first_board_*) played its
        launcher's first stage, a data dir of its own; `tengen run` says what to do with one."""
        return self.root / "first-stage"

    @property
    def tensorboard(self) -> Path:
        return self.root / "tensorboard"

    @property
    def trainer_tensorboard(self) -> Path:
        return self.tensorboard / "trainer"

    # -- self-play
    @property
    def selfplay_sgf(self) -> Path:
        return self.root / "sgf"

    def selfplay_sgf_version(self, version: int) -> Path:
        return self.selfplay_sgf / f"v{version}"

    @property
    def outboxes(self) -> Path:
        return self.root / "selfplay" / "outbox"

    def outbox(self, worker: str | int) -> Path:
        return self.outboxes / str(worker)

    # -- gating
    @property
    def gating(self) -> Path:
        return self.root / "gating"

    @property
    def decisions(self) -> Path:
        return self.gating / "decisions.jsonl"

    @property
    def matches(self) -> Path:
        return self.gating / "matches"

    def match(self, candidate: str) -> Path:
        return self.matches / f"{candidate}.jsonl"

    # -- strength
    @property
    def strength_results(self) -> Path:
        return self.root / "strength" / "results.jsonl"

    @property
    def strength_sgf(self) -> Path:
        return self.root / "strength" / "sgf"

    def strength_sgf_version(self, version: int) -> Path:
        return self.strength_sgf / f"v{version}"

    # -- ratings
    @property
    def ratings_sqlite(self) -> Path:
        return self.root / "ratings.sqlite"

    @property
    def ratings_token(self) -> Path:
        return self.root / "ratings.token"

    # -- tengen run
    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def run_state(self) -> Path:
        return self.root / "run.json"

    @property
    def run_lock(self) -> Path:
        return self.root / "run.lock"

    @property
    def run_records(self) -> Path:
        """One line per start of the trainer (tengen.loop.record)."""
        return self.root / "trainer" / "runs.jsonl"
