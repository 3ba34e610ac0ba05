"""tengen.run.cpu: a service's CPU seconds are its whole process tree's (a child that exited
included, once), a restarted service keeps what its old process used, and the selfplay workers
add up to one figure. The oracle: each process reports its own CPU time (time.process_time)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tengen.run.cpu import CpuLedger, process_table, tree_seconds

BURN = "import time, json, sys\nt = time.process_time()\nwhile time.process_time() - t < {s}: pass\n"


def _tree(tmp_path: Path, name: str) -> subprocess.Popen:
    """A parent that burns 0.3 s, runs a child burning 0.6 s to its end (reaped: the parent's
    cutime), starts one burning 0.4 s that stays alive, and writes every process_time it saw."""
    code = textwrap.dedent(f"""
        import json, subprocess, sys, time
        burn = {BURN!r}
        t = time.process_time()
        while time.process_time() - t < 0.3: pass
        done = subprocess.run([sys.executable, "-c", burn.format(s=0.6) + "print(time.process_time())"],
                              capture_output=True, text=True, check=True)
        alive = subprocess.Popen([sys.executable, "-c", burn.format(s=0.4) + "print(time.process_time(), flush=True)"
                                  + "; sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        second = float(alive.stdout.readline())
        open({str(tmp_path / name)!r}, "w").write(json.dumps([time.process_time(), float(done.stdout), second]))
        sys.stdin.read()
        alive.stdin.close()
        alive.wait()
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, text=True)


def _wait_for(path: Path) -> list[float]:
    import time

    deadline = time.monotonic() + 60
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, "the process tree did not report"
        time.sleep(0.05)
    return json.loads(path.read_text())


def test_a_service_is_its_whole_process_tree(tmp_path: Path) -> None:
    ledger = CpuLedger()
    ledger.read({})
    trees = {name: _tree(tmp_path, name) for name in ("selfplay-0", "selfplay-1", "trainer")}
    try:
        ledger.read({name: p.pid for name, p in trees.items()})  # baseline near 0: just started
        reported = {name: sum(_wait_for(tmp_path / name)) for name in trees}
        ledger.read({name: p.pid for name, p in trees.items()})
        seconds = ledger.seconds()
        assert list(seconds) in (["selfplay", "trainer"],)  # the workers as one, largest first
        # Each tree's own reports are a floor (1.3 s each); interpreter start-up is the rest.
        assert reported["selfplay-0"] + reported["selfplay-1"] - 0.2 <= seconds["selfplay"]
        assert seconds["selfplay"] <= reported["selfplay-0"] + reported["selfplay-1"] + 1.5
        assert reported["trainer"] - 0.1 <= seconds["trainer"] <= reported["trainer"] + 0.75
        table = process_table()
        assert tree_seconds(trees["trainer"].pid, table) >= reported["trainer"] - 0.1
        assert tree_seconds(-1, table) == 0.0  # a pid that is not there
        summary = ledger.summary()
        assert summary.startswith("CPU by service (") and "selfplay " in summary and "trainer " in summary

        # The trainer restarts under a new pid: what its old process used is kept.
        before = ledger.seconds()["trainer"]
        trees["trainer"].communicate("", timeout=30)
        again = _tree(tmp_path, "trainer-again")
        trees["trainer-again"] = again
        ledger.read({"trainer": again.pid})
        again_reported = sum(_wait_for(tmp_path / "trainer-again"))
        ledger.read({"trainer": again.pid})
        assert before + again_reported - 0.1 <= ledger.seconds()["trainer"] <= before + again_reported + 0.75
    finally:
        for p in trees.values():
            if p.poll() is None:
                p.communicate("", timeout=30)
