"""`tengen bench ab`: both arms run under their own settings, their nets play, and the figures add up."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_bench_ab_runs_both_arms_and_their_match(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tengen.cli", "bench", "ab", "--preset", "tiny", "--seconds", "4", "--games", "4",
         "--visits", "8", "--b", "search.full_visits=12", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "ab" and figures["games"] == 4
    assert figures["arms"]["B"]["settings"] == {"TENGEN_SEARCH__FULL_VISITS": 12}
    assert figures["arms"]["A"]["settings"] == {}
    for arm in ("A", "B"):
        assert figures["arms"][arm]["games"] >= 1 and figures["arms"][arm]["cpu_s"] >= 4
        assert (tmp_path / f"{arm}.pt").is_file()
    assert 0 <= figures["b_score"] <= 4 and figures["b_rate"] == round(figures["b_score"] / 4, 3)
    assert figures["wilson_low"] <= figures["b_rate"] <= figures["wilson_high"]
