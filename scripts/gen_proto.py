"""Regenerate the gRPC code in cerememory/v1 from protos/cerememory/v1/cerememory.proto.

Run `python scripts/gen_proto.py` from anywhere after editing the proto; the generated
modules are committed so that installing Cerememory needs no protoc. tests/test_grpc.py
fails while they are out of date (`python scripts/gen_proto.py --check` says the same).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO = Path("protos/cerememory/v1/cerememory.proto")
GENERATED = [
    Path("cerememory/v1/cerememory_pb2.py"),
    Path("cerememory/v1/cerememory_pb2.pyi"),
    Path("cerememory/v1/cerememory_pb2_grpc.py"),
]


def protoc_command(out_dir: Path) -> list[str]:
    """The protoc run; `-I protos` makes the modules import each other as cerememory.v1.*."""
    out = str(out_dir)
    return [sys.executable, "-m", "grpc_tools.protoc", "-I", "protos",
            f"--python_out={out}", f"--grpc_python_out={out}", f"--pyi_out={out}", str(PROTO)]


def generate(out_dir: Path) -> list[Path]:
    """Write the generated modules under `out_dir` and return their paths."""
    subprocess.run(protoc_command(out_dir), cwd=ROOT, check=True)
    return [out_dir / path for path in GENERATED]


def stale_files() -> list[Path]:
    """The committed generated files that differ from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        return [path for path, new in zip(GENERATED, fresh, strict=True)
                if not (ROOT / path).is_file() or (ROOT / path).read_bytes() != new.read_bytes()]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        stale = stale_files()
        for path in stale:
            print(f"out of date: {path} (run python scripts/gen_proto.py)", file=sys.stderr)
        return 1 if stale else 0
    for path in generate(ROOT):
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
