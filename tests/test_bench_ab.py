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
         "--visits", "8", "--b", "search.full_visits=12", "--out", str(tmp_path), "--checkpoint-every", "2"],
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
        assert sorted(p.name for p in tmp_path.glob(f"{arm}-*s.pt")) == [f"{arm}-2s.pt"]  # 2 s of 4, not 4
    assert 0 <= figures["b_score"] <= 4 and figures["b_rate"] == round(figures["b_score"] / 4, 3)
    assert figures["wilson_low"] <= figures["b_rate"] <= figures["wilson_high"]


def test_each_net_searches_with_its_own_arms_settings_in_the_match(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A search method is part of how its net plays: B's trees get B's search settings, A's A's."""
    import tengen.bench.ab
    import tengen.gate.net_match
    from tengen.nn.export import export_model
    from tengen.nn.model import build_model

    export_model(build_model("b1c16"), tmp_path / "A.pt", samples_seen=0)
    export_model(build_model("b1c16"), tmp_path / "B.pt", samples_seen=0)
    built = []

    class Recording(tengen.gate.net_match.MatchRunner):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(tengen.gate.net_match, "MatchRunner", Recording)
    arms = {"A": {"TENGEN_SEARCH__CPUCT": "0.7"}, "B": {"TENGEN_SEARCH__CPUCT": "2.5"}}
    result = tengen.bench.ab._match("tiny", arms, tmp_path / "A.pt", tmp_path / "B.pt", games=2, visits=4, seed=1)
    assert result["games"] == 2
    slot = built[0]._halves[0].slots[0]
    assert [tree.cpuct for tree in slot.trees] == [2.5, 0.7]  # evaluator 0 is B's net, 1 is A's
