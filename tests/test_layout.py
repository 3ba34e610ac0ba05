"""tengen.loop.layout owns every path under the data dir: the paths themselves, the candidate
names, and a check that no other module spells them again."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tengen.loop.layout import DataDir, candidate_name, candidate_samples

REPO = Path(__file__).resolve().parents[1]


def test_every_path_of_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    d = DataDir(tmp_path)
    expected = {
        d.models: "models",
        d.triton: "triton",
        d.candidates: "candidates",
        d.window: "trainer/window",
        d.checkpoint: "trainer/checkpoint.pt",
        d.tensorboard: "tensorboard",
        d.trainer_tensorboard: "tensorboard/trainer",
        d.selfplay_sgf: "sgf",
        d.selfplay_sgf_version(7): "sgf/v7",
        d.outboxes: "selfplay/outbox",
        d.outbox(2): "selfplay/outbox/2",
        d.gating: "gating",
        d.decisions: "gating/decisions.jsonl",
        d.matches: "gating/matches",
        d.match("candidate-000000001000"): "gating/matches/candidate-000000001000.jsonl",
        d.strength_results: "strength/results.jsonl",
        d.strength_sgf_version(3): "strength/sgf/v3",
        d.ratings_sqlite: "ratings.sqlite",
        d.ratings_token: "ratings.token",
        d.logs: "logs",
        d.run_state: "run.json",
        d.run_lock: "run.lock",
        d.run_records: "runs.jsonl",
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


# -- packages in layers ------------------------------------------------------------------------
# tengen's packages (and top-level modules) from the bottom up. A module may import from its own
# layer or one below, never from one above; within a layer the packages' imports form no cycle.
LAYERS: list[set[str]] = [
    {"proto", "logs", "config"},
    {"go"},
    {"nn", "search", "data"},
    {"infra"},  # adapters (Kafka, Triton, processes): they know no stage
    {"loop"},  # the contracts between the stages
    {"selfplay", "train", "gate", "strength", "ratings", "gtp"},
    {"run", "commands", "bench"},
    {"cli", "config_reference"},
]


def _imports(path: Path) -> set[str]:
    """Every tengen module a file imports, function-level imports included (.pyx read by line)."""
    import ast

    text = path.read_text()
    if path.suffix == ".pyx":
        found = re.findall(r"^\s*(?:from|c?import)\s+(tengen(?:\.\w+)+)", text, flags=re.M)
        return set(found)
    names: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {n for n in names if n.startswith("tengen.")}


def package_imports() -> dict[str, dict[str, set[str]]]:
    """package -> imported package -> the files that import it."""
    root = REPO / "tengen"
    edges: dict[str, dict[str, set[str]]] = {}
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.pyx")]):
        parts = path.relative_to(root).with_suffix("").parts
        package = parts[0]
        for name in _imports(path):
            target = name.split(".")[1]
            if target != package:
                edges.setdefault(package, {}).setdefault(target, set()).add(str(path.relative_to(REPO)))
    return edges


def test_every_package_has_a_layer() -> None:
    root = REPO / "tengen"
    packages = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    packages |= {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    placed = set().union(*LAYERS)
    assert packages == placed, f"not placed: {packages - placed}; gone: {placed - packages}"


def test_no_import_runs_up_the_layers() -> None:
    layer = {package: i for i, members in enumerate(LAYERS) for package in members}
    upward = [
        f"{package} -> {target} ({', '.join(sorted(files))})"
        for package, targets in package_imports().items()
        for target, files in targets.items()
        if layer[target] > layer[package]
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_package_cycle() -> None:
    edges = {p: set(t) for p, t in package_imports().items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            for nxt in edges.get(todo.pop(), ()):
                if nxt == goal:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    cycles = sorted(f"{a} <-> {b}" for a, targets in edges.items() for b in targets if a < b and reaches(b, a))
    assert not cycles, "packages that reach each other:\n" + "\n".join(cycles)


def test_the_layer_checks_catch_a_cycle_and_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks above fail on what they should: a fake tree with go importing selfplay."""
    fake = tmp_path / "tengen"
    for package, imports in (("go", "from tengen.selfplay.game import x\n"), ("selfplay", "import tengen.go.board\n")):
        (fake / package).mkdir(parents=True)
        (fake / package / "__init__.py").write_text("")
        (fake / package / "m.py").write_text(imports)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    edges = package_imports()
    assert edges == {"go": {"selfplay": {"tengen/go/m.py"}}, "selfplay": {"go": {"tengen/selfplay/m.py"}}}
    with pytest.raises(AssertionError, match="go -> selfplay"):
        test_no_import_runs_up_the_layers()
    with pytest.raises(AssertionError, match="go <-> selfplay"):
        test_no_package_cycle()
