"""What machine a run or a benchmark ran on: the CPU's model, its cores, and the instruction sets
that decide how fast a net evaluates on it.

On a CPU the net's forward passes are most of a run's work, and their speed depends on the box:
where the CPU computes bf16 natively (AVX512-BF16, AMX) the presets' nets run in bf16, elsewhere
in fp32, several times slower per CPU-second. Two runs' figures can only be compared with the box
known, so a run's record holds these facts (tengen.loop.record).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

CPUINFO = Path("/proc/cpuinfo")
# The flags that move the net's speed, in the order of the fastest path they enable.
SPEED_FLAGS = ("amx_bf16", "avx512_bf16", "avx512_vnni", "avx512f", "avx_vnni", "avx2", "fma")


def machine_facts(cpuinfo: str | None = None) -> dict[str, Any]:
    """{"cpu": model name, "cores": logical CPUs, "flags": the SPEED_FLAGS it has, "bf16": whether
    bf16 is native}; from /proc/cpuinfo (or the text given), None where it cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text()
        except OSError:
            cpuinfo = ""
    model: str | None = None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and model is None:
            model = value.strip()
        elif key == "flags" and not flags:
            flags = set(value.split())
    have = [flag for flag in SPEED_FLAGS if flag in flags]
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "flags": have if flags else None,
        "bf16": bool({"amx_bf16", "avx512_bf16"} & flags) if flags else None,
    }


def describe(facts: dict[str, Any]) -> str:
    """One line for a log: 'AMD EPYC 9B14, 2 cores, bf16 native (avx512_bf16 avx512_vnni ...)'."""
    flags = facts.get("flags")
    if flags is None:
        speed = "instruction sets unknown"
    else:
        speed = ("bf16 native" if facts.get("bf16") else "no native bf16") + f" ({' '.join(flags) or 'none of note'})"
    return f"{facts.get('cpu') or 'unknown CPU'}, {facts.get('cores')} cores, {speed}"
