"""tengen.loop.record: every start of the trainer leaves a line saying what made the data dir."""
from __future__ import annotations

import json
import subprocess
from datetime import datetime
from pathlib import Path

from tengen.config import load_config
from tengen.infra.machine import describe, machine_facts
from tengen.loop.record import append_run_record, run_began, run_record, source_commit

REPO = Path(__file__).resolve().parents[1]


def test_a_record_holds_the_resolved_configuration_without_secrets() -> None:
    env = {"TENGEN_RATINGS_TOKEN": "s3cret-token-value", "TENGEN_SEARCH__FULL_VISITS": "48"}
    record = run_record(load_config("tiny", env=env), ["run", "--preset", "tiny"])
    assert record["argv"] == ["run", "--preset", "tiny"] and record["preset"] == "tiny"
    assert record["config"]["search"]["full_visits"] == 48 and record["overridden"] == [
        "ratings.token",
        "search.full_visits",
    ]
    assert record["config"]["ratings"]["token"] == "(set)" and record["config"]["ratings"]["database_url"] is None
    assert "s3cret" not in json.dumps(record)
    assert record["tengen"] == "0.1.0"
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # tests run from a checkout (CI's is a clone)
        assert record["commit"] == head.stdout.strip() and isinstance(record["dirty"], bool)


def test_records_are_appended_and_kept(tmp_path: Path) -> None:
    config = load_config("tiny", env={})
    path = append_run_record(tmp_path, run_record(config, ["run"]))
    append_run_record(tmp_path, run_record(config, ["run", "--duration", "5m"]))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert path == tmp_path / "trainer" / "runs.jsonl"
    assert [r["argv"] for r in lines] == [["run"], ["run", "--duration", "5m"]]
    # The first record's time is when the run began (the progress reports' zero).
    assert run_began(tmp_path) == datetime.fromisoformat(lines[0]["started"]).timestamp()
    assert run_began(tmp_path / "elsewhere") is None
    path.write_text("not json\n")
    assert run_began(tmp_path) is None


def test_no_commit_outside_a_checkout(tmp_path: Path) -> None:
    assert source_commit(tmp_path) == (None, None)


# Two machines as /proc/cpuinfo describes them (first processor's lines; the rest repeat them).
AVX512_BOX = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9B14
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512dq avx512_bf16 avx512_vnni
processor\t: 1
model name\t: AMD EPYC 9B14
flags\t\t: fpu sse2 avx fma avx2 avx512f avx512dq avx512_bf16 avx512_vnni
"""
AVX2_BOX = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx fma avx2\n"


def test_the_machine_facts_name_the_instruction_sets_that_set_the_net_s_speed() -> None:
    fast, slow = machine_facts(AVX512_BOX), machine_facts(AVX2_BOX)
    assert fast["cpu"] == "AMD EPYC 9B14" and fast["bf16"] is True
    assert fast["flags"] == ["avx512_bf16", "avx512_vnni", "avx512f", "avx2", "fma"]
    assert slow["cpu"] == "AMD EPYC 7B13" and slow["bf16"] is False and slow["flags"] == ["avx2", "fma"]
    assert describe(slow).endswith("no native bf16 (avx2 fma)")
    unknown = machine_facts("")
    assert unknown["cpu"] is None and unknown["flags"] is None and unknown["bf16"] is None
    assert "unknown CPU" in describe(unknown) and "instruction sets unknown" in describe(unknown)


def test_a_record_holds_this_machine() -> None:
    record = run_record(load_config("tiny", env={}), ["run"])
    assert record["machine"] == machine_facts() and record["machine"]["cores"] >= 1
