"""What made a data dir: one line in `<data_dir>/trainer/runs.jsonl` for every start of its trainer.

The trainer writes it, the one service of every way of running (`tengen run`, compose, Kubernetes)
that keeps a volume of its own and is there from a run's beginning; the first line's time is when
the run began (tengen.loop.progress). Each start appends the time, the command line, tengen's
version and, when tengen runs from a git
checkout, its commit (and whether the tree had changes), the machine (CPU, cores, the instruction sets
that set the net's speed), and the whole resolved configuration, the
secrets left out. The file is kept when the run ends, so a data dir says what trained it, as
KataGo keeps the configs and code version of every run; a continued run adds its own line.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from tengen.config import Config
from tengen.infra.files import append_line
from tengen.infra.machine import machine_facts
from tengen.loop.layout import DataDir

SECRETS = (("ratings", "token"), ("ratings", "database_url"))
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def source_commit(where: Path = PACKAGE_DIR) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding `where`; (None, None) when it is no checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit.strip(), None if status is None else bool(status.strip())


def tengen_version() -> str | None:
    try:
        return metadata.version("tengen")
    except metadata.PackageNotFoundError:
        return None


def run_record(config: Config, argv: list[str] | None = None) -> dict[str, Any]:
    """The record of a run starting now with `config` (secrets replaced by whether they are set)."""
    settings = dataclasses.asdict(config)
    settings.pop("from_env", None)
    for section, key in SECRETS:
        settings[section][key] = "(set)" if settings[section][key] else None
    commit, dirty = source_commit()
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": list(sys.argv[1:] if argv is None else argv),
        "tengen": tengen_version(),
        "commit": commit,
        "dirty": dirty,
        "machine": machine_facts(),
        "preset": config.preset,
        "overridden": sorted(config.from_env),
        "config": settings,
    }


def append_run_record(data_dir: Path, record: dict[str, Any]) -> Path:
    """Append a run's record (run_record's) to the data dir's run records; returns their path."""
    path = DataDir(data_dir).run_records
    append_line(path, record)
    return path


def run_began(data_dir: Path) -> float | None:
    """Unix time of the data dir's first run record, or None (none yet, or unreadable)."""
    try:
        with open(DataDir(data_dir).run_records) as f:
            first = json.loads(f.readline())
        return datetime.datetime.fromisoformat(first["started"]).timestamp()
    except (OSError, ValueError, KeyError, TypeError):
        return None
