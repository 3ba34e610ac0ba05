"""Regions that SIGKILLed processes leave in /dev/shm are removed when a Triton starts
(tengen.infra.shm.remove_orphaned_regions), and nothing that a live process may use is touched."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tengen.infra import shm
from tengen.infra.shm import ORPHAN_AGE_S, STUB_REGION_PREFIX, remove_orphaned_regions


def _region(directory: Path, name: str, age_s: float = 0.0) -> Path:
    path = directory / name
    path.write_bytes(b"\0" * 4096)
    if age_s:
        then = time.time() - age_s
        os.utime(path, (then, then))
    return path


def test_orphaned_regions_go_and_live_ones_stay(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(shm, "_triton_alive", lambda: False)
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid that no process has now
    client_dead = _region(tmp_path, f"tengen-{dead.pid}-0")
    client_live = _region(tmp_path, f"tengen-{os.getpid()}-0")
    stub_old = _region(tmp_path, f"{STUB_REGION_PREFIX}0001-old", age_s=ORPHAN_AGE_S + 30)
    stub_new = _region(tmp_path, f"{STUB_REGION_PREFIX}0002-new")  # as a stub makes it
    other = _region(tmp_path, "PostgreSQL.1234", age_s=ORPHAN_AGE_S + 30)
    assert sorted(remove_orphaned_regions(tmp_path)) == sorted([client_dead.name, stub_old.name])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (client_live, stub_new, other))


def test_stub_regions_stay_while_a_triton_runs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(shm, "_triton_alive", lambda: True)
    stub_old = _region(tmp_path, f"{STUB_REGION_PREFIX}0001-old", age_s=ORPHAN_AGE_S + 30)
    assert remove_orphaned_regions(tmp_path) == [] and stub_old.exists()


def test_a_running_stub_is_seen() -> None:
    """_triton_alive finds a process by its command line (here one named like a stub)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "triton_python_backend_stub"])
    try:
        deadline = time.monotonic() + 10
        while not shm._triton_alive():
            assert time.monotonic() < deadline, "a process named like a stub was not seen"
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
