"""Regenerate the protobuf/gRPC bindings of every `proto/*.proto` into `tengen/proto/`.

grpcio-tools writes `import foo_pb2 as foo__pb2` for a proto's own imports, which only works with
the output directory on sys.path; the generated modules are rewritten to import from this package
instead (`from tengen.proto import foo_pb2 as foo__pb2`).

    python -m tengen.proto.generate            # rewrite tengen/proto/*_pb2*.py
    python -m tengen.proto.generate --check    # exit 1 if the committed files are stale
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

PACKAGE = "tengen.proto"
PACKAGE_DIR = Path(__file__).resolve().parent
PROTO_DIR = PACKAGE_DIR.parents[1] / "proto"
# Per proto `x.proto`: the files protoc writes for it.
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generated_names(proto_dir: Path = PROTO_DIR) -> list[str]:
    """File names the generator produces for the protos in `proto_dir`, sorted."""
    return sorted(p.stem + s for p in proto_dir.glob("*.proto") for s in SUFFIXES)


def _fix_imports(text: str, local_modules: set[str], package: str) -> str:
    # Only the imports of our own protos; google.protobuf imports are already absolute.
    def repl(match: re.Match[str]) -> str:
        module, alias = match.group(1), match.group(2)
        if module not in local_modules:
            return match.group(0)
        return f"from {package} import {module} as {alias}"

    return re.sub(r"^import (\w+_pb2) as (\w+)$", repl, text, flags=re.MULTILINE)


def generate(
    out_dir: Path = PACKAGE_DIR, proto_dir: Path = PROTO_DIR, package: str = PACKAGE
) -> list[Path]:
    """Compile every .proto in `proto_dir` into `out_dir`; returns the files written."""
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(proto_dir.glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files in {proto_dir}")
    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{proto_dir}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *(p.name for p in protos),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {', '.join(p.name for p in protos)}")
    local_modules = {p.stem + "_pb2" for p in protos}
    written = []
    for name in generated_names(proto_dir):
        path = out_dir / name
        path.write_text(_fix_imports(path.read_text(), local_modules, package))
        written.append(path)
    return written


def stale_files(out_dir: Path = PACKAGE_DIR, proto_dir: Path = PROTO_DIR) -> list[str]:
    """Names of generated files in `out_dir` that differ from a fresh generation (or are missing)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        generate(fresh, proto_dir)
        stale = []
        for name in generated_names(proto_dir):
            committed = out_dir / name
            if not committed.exists() or committed.read_text() != (fresh / name).read_text():
                stale.append(name)
        return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1)")
    parser.add_argument("--proto-dir", type=Path, default=PROTO_DIR)
    parser.add_argument("--out-dir", type=Path, default=PACKAGE_DIR)
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files(args.out_dir, args.proto_dir)
        for name in stale:
            print(f"stale: {args.out_dir / name} (run python -m tengen.proto.generate)")
        return 1 if stale else 0
    for path in generate(args.out_dir, args.proto_dir):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
