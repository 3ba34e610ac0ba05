"""tengen.loop.layout owns every path under the data dir: the paths themselves, the candidate
names, and a check that no other module spells them again."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tengen.loop.layout import DataDir, candidate_name, candidate_samples

REPO = Path(__file__).resolve().parents[1]


def test_every_path_of_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = DataDir(tmp_path)
    expected = {
        d.models: "models", d.triton: "triton", d.candidates: "candidates",
        d.window: "trainer/window", d.checkpoint: "trainer/checkpoint.pt", d.tensorboard: "tensorboard", d.trainer_tensorboard: "tensorboard/trainer",
        d.selfplay_sgf: "sgf", d.selfplay_sgf_version(7): "sgf/v7", d.outboxes: "selfplay/outbox",
        d.outbox(2): "selfplay/outbox/2", d.gating: "gating", d.decisions: "gating/decisions.jsonl",
        d.matches: "gating/matches", d.match("candidate-000000001000"): "gating/matches/candidate-000000001000.jsonl",
        d.strength_results: "strength/results.jsonl", d.strength_sgf_version(3): "strength/sgf/v3",
        d.ratings_sqlite: "ratings.sqlite", d.ratings_token: "ratings.token", d.logs: "logs",
        d.run_state: "run.json", d.run_lock: "run.lock",
    }
    for path, relative in expected.items():
        assert path == tmp_path / relative
    # Announcements carry the candidate's absolute path to services with other working dirs.
    monkeypatch.chdir(tmp_path)
    assert DataDir("data").candidate("candidate-000000000500") == tmp_path / "data/candidates/candidate-000000000500.pt"
    # A DataDir goes wherever a path does.
    assert Path(d) == tmp_path and str(d) == str(tmp_path) and DataDir(d).root == tmp_path


def test_candidate_names_sort_by_samples_and_read_back(tmp_path: Path) -> None:
    names = [candidate_name(s) for s in (999, 20_000, 1_000_000)]
    assert names == sorted(names) == ["candidate-000000000999", "candidate-000000020000", "candidate-000001000000"]
    assert [candidate_samples(f"{n}.pt") for n in names] == [999, 20_000, 1_000_000]
    assert candidate_samples("candidate-12.json") is None and candidate_samples("model.pt") is None
    d = DataDir(tmp_path)
    assert d.candidate_files() == []  # no candidates dir yet
    d.candidates.mkdir()
    for name in ("candidate-000000020000.pt", "candidate-000000000999.pt", "candidate-000000000999.json", "x.pt"):
        (d.candidates / name).write_bytes(b"")
    assert d.candidate_files() == ["candidate-000000000999.pt", "candidate-000000020000.pt"]


def test_no_other_module_spells_a_data_dir_path() -> None:
    """The file names of the tree appear in code only in tengen/loop/layout.py (docstrings and
    comments may name them)."""
    files = r"decisions\.jsonl|results\.jsonl|checkpoint\.pt|ratings\.sqlite|ratings\.token|run\.json|run\.lock"
    joined = r"models|triton|candidates|trainer|window|tensorboard|sgf|selfplay|outbox|gating|matches|strength|logs"
    spelled = re.compile(rf'''["']({files})["']|/\s*f?["']({joined})["'/]''')
    found = []
    for root in ("tengen", "services"):
        for path in (REPO / root).rglob("*.py"):
            if path == REPO / "tengen/loop/layout.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if spelled.search(code):
                    found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not found, "data-dir paths spelled outside tengen.loop.layout:\n" + "\n".join(found)
