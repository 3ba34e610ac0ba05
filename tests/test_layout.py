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
        d.init_model: "trainer/init-model.pt",
        d.retired_checkpoint("b4c48"): "trainer/checkpoint-b4c48.pt",
        d.strength_results: "strength/results.jsonl",
        d.strength_sgf_version(3): "strength/sgf/v3",
        d.ratings_sqlite: "ratings.sqlite",
        d.ratings_token: "ratings.token",
        d.logs: "logs",
        d.run_state: "run.json",
        d.run_lock: "run.lock",
        d.run_records: "trainer/runs.jsonl",
        d.first_stage: "first-stage",
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
    {"proto", "logs", "config", "stats"},
    {"go"},
    {"nn", "search", "data"},
    {"infra"},  # adapters (Kafka, Triton, processes): they know no stage
    {"loop"},  # the contracts between the stages
    {"selfplay", "train", "gate", "strength", "ratings", "gtp"},
    {"run", "commands", "bench"},
    {"cli", "config_reference"},
]


def _imports(path: Path) -> set[str]:
    """Every tengen module a file imports, function-level imports included (.pyx and .pxd read by
    line, cimports too)."""
    import ast

    text = path.read_text()
    if path.suffix in (".pyx", ".pxd"):
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
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.pyx"), *root.rglob("*.pxd")]):
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


# -- compiled modules --------------------------------------------------------------------------
def compiled_modules() -> list[str]:
    """setup.py's MODULES, the Cython extensions it builds (read, not run: running it builds)."""
    import ast

    for node in ast.parse((REPO / "setup.py").read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["MODULES"]:
            return list(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no MODULES list")


def test_every_pyx_is_a_compiled_module() -> None:
    """setup.py's MODULES names every .pyx under tengen/, and nothing else."""
    pyx = {".".join(path.relative_to(REPO).with_suffix("").parts) for path in (REPO / "tengen").rglob("*.pyx")}
    modules = compiled_modules()
    assert len(modules) == len(set(modules)) and set(modules) == pyx, (
        f"not in setup.py's MODULES: {sorted(pyx - set(modules))}; no such .pyx: {sorted(set(modules) - pyx)}"
    )


# -- module size -------------------------------------------------------------------------------
MAX_MODULE_LINES = 900  # a longer module is split by concern


def test_no_module_is_over_the_line_limit() -> None:
    """Every module under tengen/ and services/ (.py, .pyx and .pxd) has at most MAX_MODULE_LINES lines."""
    long = [
        f"{path.relative_to(REPO)}: {lines} lines"
        for root in ("tengen", "services")
        for suffix in ("*.py", "*.pyx", "*.pxd")
        for path in sorted((REPO / root).rglob(suffix))
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by concern):\n" + "\n".join(long)


def test_the_line_limit_names_a_long_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above fails on what it should: a fake tree with one .pyx a line too long."""
    (tmp_path / "tengen" / "search").mkdir(parents=True)
    (tmp_path / "services").mkdir()
    (tmp_path / "tengen" / "search" / "tree.pyx").write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    (tmp_path / "services" / "ok.py").write_text("x = 1\n" * MAX_MODULE_LINES)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    with pytest.raises(AssertionError, match=rf"tengen/search/tree.pyx: {MAX_MODULE_LINES + 1} lines"):
        test_no_module_is_over_the_line_limit()
