#!/usr/bin/env python3
"""Device time per op type of a model's delegated kernels, from OpenCL profiling events.

The model is compiled as the delegate compiles it (``harness.contexts.compiled_context``: ``python
-m delegate run`` into a temporary serialization folder, with ``--option`` passed on), the
partition is loaded with profiling on, and each node's device time is the minimum over ``--runs``
runs (the minimum is what a kernel costs; the machine's noise only adds). Times are summed per op
type (a fused node counts under its first op).

    python benchmarks/kernel_profile.py MODEL [--option K=V ...] [--runs N] [--nodes]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

from harness import cli
from harness.contexts import compiled_context, random_inputs

from delegate.runtime import Runtime


def _op_type(node_name: str) -> str:
    return node_name.split("+")[0].rstrip("0123456789_")


def profile(model: Path, options: list[str], runs: int) -> list[tuple[str, float]]:
    with Runtime.load(compiled_context(model, options), profiling=True) as rt:
        inputs = random_inputs(rt.input_shapes)
        for _ in range(3):
            rt.run_profiled(inputs)
        best: list[tuple[str, float]] = []
        for _ in range(runs):
            _, times = rt.run_profiled(inputs)
            best = times if not best else [(n, min(a, b)) for (n, a), (_, b) in zip(best, times, strict=True)]
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    cli.add_option(parser)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--nodes", action="store_true", help="also print every node")
    args = parser.parse_args(argv)
    times = profile(args.model, args.option, args.runs)
    per_type: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    for name, seconds in times:
        per_type[_op_type(name)] += seconds
        counts[_op_type(name)] += 1
    print(f"{args.model.name}: {len(times)} kernels, {sum(t for _, t in times) * 1e3:.2f} ms device time")
    for op, seconds in per_type.most_common():
        print(f"  {op:24s} {counts[op]:3d} kernels {seconds * 1e3:8.2f} ms")
    if args.nodes:
        for name, seconds in times:
            print(f"    {name:40s} {seconds * 1e6:9.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
