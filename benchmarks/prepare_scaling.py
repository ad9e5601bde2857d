#!/usr/bin/env python3
"""Prepare time on large graphs: the delegate against TFLite alone, side by side in one run.

Models (tests/graph_models.py): IF nested 20, 60 and 100 deep, WHILE nested likewise, elementwise
chains of 1,000, 20,000 and 100,000 ops. For each, in one process: creating the interpreter and
``allocate_tensors()`` with TFLite's builtin kernels alone, then with the delegate, first with
empty caches (serialization folder and program cache in a fresh folder: "cold"; PoCL's own kernel
cache stays as it is), then again with those caches filled ("warm"). Prints the seconds and the
ratio to TFLite's time.

    python benchmarks/prepare_scaling.py [--only if|while|chain] [--sizes 20,60]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable

from harness import paths

paths.importable()  # tests.graph_models

import delegate  # noqa: E402
from delegate.api import host_runtime  # noqa: E402
from tests import graph_models  # noqa: E402

MODELS: dict[str, tuple[Callable[[int], bytes], list[int]]] = {
    "if": (graph_models.nested_if, [20, 60, 100]),
    "while": (graph_models.nested_while, [20, 60, 100]),
    "chain": (graph_models.elementwise_chain, [1_000, 20_000, 100_000]),
}


def _prepare(model: bytes, delegates: list[object]) -> float:
    host = host_runtime()
    start = time.perf_counter()
    interpreter = host.Interpreter(
        model_content=model,
        experimental_delegates=delegates,
        experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
    )
    interpreter.allocate_tensors()
    return time.perf_counter() - start


def measure(model: bytes) -> tuple[float, float, float, int]:
    """TFLite alone, delegate cold, delegate warm (seconds), and the nodes the delegate ran."""
    alone = _prepare(model, [])
    with tempfile.TemporaryDirectory() as folder:
        options = {"serialization_dir": folder, "model_token": "prepare-scaling", "program_cache": folder}
        cold_delegate = delegate.load_delegate(**options)
        cold = _prepare(model, [cold_delegate])
        delegated = len(delegate.delegate_state(cold_delegate).delegated_nodes)
        warm = _prepare(model, [delegate.load_delegate(**options)])
    return alone, cold, warm, delegated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(MODELS))
    parser.add_argument("--sizes", help="comma-separated sizes instead of each family's defaults")
    args = parser.parse_args()
    print(f"{'model':<14} {'size':>8} {'tflite s':>9} {'cold s':>8} {'x':>8} {'warm s':>8} {'x':>8} delegated")
    for family, (build, sizes) in MODELS.items():
        if args.only and family != args.only:
            continue
        for size in [int(s) for s in args.sizes.split(",")] if args.sizes else sizes:
            alone, cold, warm, delegated = measure(build(size))
            print(
                f"{family:<14} {size:>8} {alone:>9.4f} {cold:>8.2f} {cold / alone:>8.0f} {warm:>8.2f} "
                f"{warm / alone:>8.0f} {delegated}",
                flush=True,
            )


if __name__ == "__main__":
    main()
