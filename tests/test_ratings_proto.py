"""The committed protobuf bindings stay in sync with proto/*.proto and the generator."""
from __future__ import annotations

from pathlib import Path

from tengen.proto import generate


def test_committed_bindings_match_a_fresh_generation() -> None:
    stale = generate.stale_files()
    assert stale == [], f"stale generated files {stale}: run python -m tengen.proto.generate"


def test_generated_modules_import_from_the_package(tmp_path: Path) -> None:
    protos = tmp_path / "proto"
    protos.mkdir()
    (protos / "b.proto").write_text('syntax = "proto3";\npackage t;\nmessage B { int32 x = 1; }\n')
    (protos / "a.proto").write_text(
        'syntax = "proto3";\npackage t;\nimport "b.proto";\n'
        "message A { B b = 1; }\nservice S { rpc Get(A) returns (B); }\n"
    )
    out = tmp_path / "out"
    written = generate.generate(out, protos, package="somepkg.proto")
    assert sorted(p.name for p in written) == generate.generated_names(protos)
    a_pb2 = (out / "a_pb2.py").read_text()
    assert "from somepkg.proto import b_pb2 as b__pb2" in a_pb2
    assert "\nimport b_pb2" not in a_pb2
    grpc_module = (out / "a_pb2_grpc.py").read_text()
    assert "from somepkg.proto import a_pb2 as a__pb2" in grpc_module
    assert "from somepkg.proto import b_pb2 as b__pb2" in grpc_module
    # Absolute imports of well-known types are left alone.
    assert generate._fix_imports("import foo_pb2 as f\n", {"bar_pb2"}, "p") == "import foo_pb2 as f\n"


def test_check_reports_a_stale_file(tmp_path: Path) -> None:
    out = tmp_path / "out"
    generate.generate(out)
    assert generate.stale_files(out) == []
    (out / "ratings_pb2.py").write_text("# edited by hand\n")
    assert generate.stale_files(out) == ["ratings_pb2.py"]
    assert generate.main(["--check", "--out-dir", str(out)]) == 1
