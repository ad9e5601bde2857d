#!/usr/bin/env python3
"""A SHA-256 of every compiled partition of the shared models: proof that a compiler change leaves
the contexts the runtime loads byte for byte as they were.

Each model under ../shared/models (and its real/ and quant/) is prepared by the delegate with
each option set of ``OPTIONS`` (the defaults, F16, texture storage, 8-wide vectors); the context
``compile_partition`` returns is serialized as it comes out of the compiler and hashed. One line
per partition: ``model options partition sha256``. Run it on two checkouts (same device: the
compile options depend on it) and diff the output.

The partitions are not loaded (no OpenCL program is built): each compile is recorded, then made
to fail, with ``compile_fallback`` on, so the next partition compiles. ``--dump DIR`` also writes
each partition's kernels as text (one file per kernel), to see what a digest difference is.

    PYTHONPATH=CHECKOUT python benchmarks/experiments/context_digest.py [--models NAME ...] [--dump DIR] > digests.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness.paths import MODELS, shared_models

#: option sets compiled: the defaults, F16, and the texture storage and 8-wide vector paths
OPTIONS: dict[str, dict[str, str]] = {
    "default": {},
    "F16": {"precision": "F16"},
    "texture": {"storage_type": "TEXTURE_2D"},
    "vector8": {"vector_width": "8"},
}


def model_paths(names: list[str]) -> list[Path]:
    return [p for p in shared_models() if not names or p.stem in names]


class _Recorded(ValueError):
    """Raised after a partition's context is recorded: the delegate leaves it on CPU and goes on."""


def digests(path: Path, options: dict[str, str], dump: Path | None = None) -> list[str]:
    """The SHA-256 of each partition's context, in the order the delegate compiles them."""
    import delegate
    from delegate.context.writer import serialize_context
    from delegate.plugin.registry import REGISTRY

    found: list[str] = []
    plan = REGISTRY.plan
    original = plan.loader.compiler.compile

    def recording(*args: Any, **kwargs: Any) -> Any:
        try:
            context = original(*args, **kwargs)
        except Exception as exc:
            found.append(f"failed: {type(exc).__name__}: {exc}".splitlines()[0])
            raise
        found.append(hashlib.sha256(serialize_context(context, check_schedule=False)).hexdigest())
        if dump is not None:
            folder = dump / f"{len(found) - 1}"
            folder.mkdir(parents=True, exist_ok=True)
            for i, node in enumerate(context.nodes):
                (folder / f"{i:03d}_{node.name.replace('/', '_')[:80]}.cl").write_text(node.gpu_op.code or "")
        raise _Recorded("recorded")

    compiler = dataclasses.replace(plan.loader.compiler, compile=recording)
    with REGISTRY.using(dataclasses.replace(plan, loader=dataclasses.replace(plan.loader, compiler=compiler))):
        try:
            interpreter = delegate.Interpreter(path, **options, compile_fallback="true")
            interpreter.allocate_tensors()
            del interpreter
        except Exception as exc:  # a model the delegate cannot prepare: say so, keep going
            found.append(f"failed: {type(exc).__name__}: {exc}".splitlines()[0])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[], help="model file stems (default: all)")
    parser.add_argument("--dump", type=Path, help="folder for the kernels' text, per model, options and partition")
    args = parser.parse_args()
    for path in model_paths(args.models):
        name = path.relative_to(MODELS).as_posix()
        for label, options in OPTIONS.items():
            dump = args.dump / name / label if args.dump else None
            for i, digest in enumerate(digests(path, options, dump)):
                print(f"{name} {label} {i} {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
