"""Durability helpers shared by everything that writes state it must not lose or half-write."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator

log = logging.getLogger(__name__)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync a directory, so a rename or a new file in it survives a crash."""
    fd = os.open(Path(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_line(path: Path, obj: dict[str, Any]) -> None:
    """Append `obj` as one JSON line and fsync it; a torn last line left by a crash is ended first."""
    new = not path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(obj, sort_keys=True) + "\n").encode()
    with open(path, "ab+") as f:
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                data = b"\n" + data
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    if new:
        fsync_dir(path.parent)


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, skipping torn or foreign lines (logged)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            log.warning("skipping unreadable line %d of %s (torn by a crash?)", number, path)
            continue
        if isinstance(obj, dict):
            yield obj
