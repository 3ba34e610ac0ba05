"""Where a run's CPU goes: each service's CPU seconds, read from /proc (Linux).

A service's figure is its whole process tree: every live process under the service's pid counts
its own user and system time plus what its reaped children used (cutime, cstime), so a
grandchild that exited is still counted, once. A service restarted under a new pid keeps what its
old process had used at the last reading (at most one reading interval of it is lost) and counts
the new one from its start. The box's own
busy time (/proc/stat) says how much of the machine the run had: on a shared box the rest went
to someone else.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children), None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return int(fields[1]), (utime + stime + cutime + cstime) / TICKS


def process_table() -> dict[int, tuple[int, float]]:
    """{pid: (parent pid, CPU seconds)} of every process now."""
    table = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = stat
    return table


def tree_seconds(root: int, table: Mapping[int, tuple[int, float]]) -> float:
    """CPU seconds of `root` and every live process below it."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root] if root in table else []
    while todo:
        pid = todo.pop()
        total += table[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def box_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, summed over its cores."""
    values = [int(v) for v in (PROC / "stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle and iowait
    return (sum(values) - idle) / TICKS, sum(values) / TICKS


@dataclass
class CpuLedger:
    """Each service's CPU seconds since the ledger began, updated at every `read`."""

    banked: dict[str, float] = field(default_factory=dict)  # what processes no longer running had used
    current: dict[str, tuple[int, float, float]] = field(default_factory=dict)  # name: (pid, at start, now)
    box_start: tuple[float, float] = field(default_factory=box_seconds)
    box_now: tuple[float, float] = (0.0, 0.0)

    def read(self, pids: Mapping[str, int]) -> None:
        table = process_table()
        for name, pid in pids.items():
            seen = self.current.get(name)
            now = tree_seconds(pid, table)
            if seen is None:  # the first reading: the ledger begins here
                self.current[name] = (pid, now, now)
            elif seen[0] != pid:  # restarted: keep what the old process used; the new one counts from 0
                self.banked[name] = self.banked.get(name, 0.0) + seen[2] - seen[1]
                self.current[name] = (pid, 0.0, now)
            else:
                self.current[name] = (pid, seen[1], now)
        self.box_now = box_seconds()

    def seconds(self) -> dict[str, float]:
        """{service: CPU seconds}, largest first; the selfplay workers (selfplay-0, -1, ...) as one."""
        used: dict[str, float] = {}
        for name, (_, start, now) in self.current.items():
            service = re.sub(r"-\d+$", "", name)
            used[service] = used.get(service, 0.0) + self.banked.get(name, 0.0) + now - start
        return dict(sorted(used.items(), key=lambda item: -item[1]))

    def summary(self) -> str:
        """One line: each service's share of the run's CPU, and the run's share of the box."""
        used = self.seconds()
        total = sum(used.values())
        busy, wall = (self.box_now[0] - self.box_start[0]), (self.box_now[1] - self.box_start[1])
        if total <= 0 or wall <= 0:
            return "CPU by service: not measured yet"
        shares = ", ".join(f"{name} {100 * s / total:.1f}%" for name, s in used.items())
        return (f"CPU by service ({total:,.0f} CPU seconds): {shares}; the run had {100 * total / wall:.0f}% of "
                f"this machine's {os.cpu_count()} cores, everything else {100 * max(0.0, busy - total) / wall:.0f}%")

    def to_json(self) -> dict[str, float]:
        return {name: round(s, 1) for name, s in self.seconds().items()}
