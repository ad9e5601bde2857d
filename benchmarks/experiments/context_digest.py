#!/usr/bin/env python3
"""A SHA-256 of every compiled partition of the shared models: proof that a compiler change leaves
the contexts the runtime loads byte for byte as they were.

Each model under ../shared/models (and its real/ and quant/) is prepared by the delegate with
each option set of ``OPTIONS`` (the defaults, F16, texture storage, 8-wide vectors, the gpu
kernel family) and each compile-option change of ``COMPILE_CHANGES`` (the generic convolution
kernels, which only tests and benchmarks pick, and 16-wide vectors on any CPU); the context
``compile_partition`` returns is serialized as it comes out of the compiler and hashed. One line
per partition: ``model options partition sha256``. Run it on two checkouts (same device: the
compile options depend on it) and diff the output; ``--sets`` picks option sets by label.

The partitions are not loaded (no OpenCL program is built): each compile is recorded, then made
to fail, with ``compile_fallback`` on, so the next partition compiles; ``cpu_when_faster`` is off,
so partitions TFLite's CPU kernels would run faster are compiled too. ``--dump DIR`` also writes
each partition's kernels as text (one file per kernel), to see what a digest difference is.

    PYTHONPATH=CHECKOUT python benchmarks/experiments/context_digest.py [--models NAME ...] [--also PATH ...]
        [--dump DIR] > digests.txt
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
    "gpu": {"kernel_family": "gpu"},
    "gpu_F16": {"kernel_family": "gpu", "precision": "F16"},
}
#: option sets that change CompileOptions fields no delegate option reaches (the delegate's
#: defaults otherwise): by label, field -> value
COMPILE_CHANGES: dict[str, dict[str, Any]] = {
    "plain": {"conv_kernels": "plain"},
    "blocked": {"conv_kernels": "blocked"},
    # the 16-wide matrix products, which the device policy allows only on AVX-512 CPU models
    "vector16": {"vector_width": 16},
}


def model_paths(names: list[str]) -> list[Path]:
    return [p for p in shared_models() if not names or p.stem in names]


class _Recorded(ValueError):
    """Raised after a partition's context is recorded: the delegate leaves it on CPU and goes on."""


def digests(
    path: Path, options: dict[str, str], dump: Path | None = None, changes: dict[str, Any] | None = None
) -> list[str]:
    """The SHA-256 of each partition's context, in the order the delegate compiles them, with
    CompileOptions fields ``changes`` replaced."""
    import delegate
    from delegate.context.writer import serialize_context
    from delegate.plugin.registry import REGISTRY

    found: list[str] = []
    plan = REGISTRY.plan
    original = plan.loader.compiler.compile

    def recording(*args: Any) -> Any:
        *partition, compile_options = args
        if changes:
            compile_options = dataclasses.replace(compile_options, **changes)
        try:
            context = original(*partition, compile_options)
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
            # every partition the compiler can run, even where TFLite's CPU kernels would be faster
            interpreter = delegate.Interpreter(path, **options, compile_fallback="true", cpu_when_faster="false")
            interpreter.allocate_tensors()
            del interpreter
        except Exception as exc:  # a model the delegate cannot prepare: say so, keep going
            found.append(f"failed: {type(exc).__name__}: {exc}".splitlines()[0])
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", default=[], help="model file stems (default: all)")
    parser.add_argument(
        "--also", nargs="*", type=Path, default=[], help="more .tflite files or folders of them (e.g. tests/models)"
    )
    parser.add_argument("--dump", type=Path, help="folder for the kernels' text, per model, options and partition")
    labels = [*OPTIONS, *COMPILE_CHANGES]
    parser.add_argument("--sets", nargs="*", default=labels, choices=labels, help="option sets (default: all)")
    args = parser.parse_args()
    extra = [m for p in args.also for m in (sorted(p.glob("*.tflite")) if p.is_dir() else [p])]
    for path in [*model_paths(args.models), *extra]:
        name = path.relative_to(MODELS).as_posix() if path.is_relative_to(MODELS) else path.name
        for label in args.sets:
            options, changes = OPTIONS.get(label, {}), COMPILE_CHANGES.get(label)
            dump = args.dump / name / label if args.dump else None
            for i, digest in enumerate(digests(path, options, dump, changes)):
                print(f"{name} {label} {i} {digest}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
