#!/usr/bin/env python3
"""Race what two compilers make of a model, in one process: this tree's against another checkout's.

Each MODEL is compiled by both trees as the delegate compiles it (``harness.contexts.compiled_context``,
run in each tree), both contexts are loaded by this tree's runtime at once, and they are called in
alternating blocks of ``--block`` calls, a block counting as its fastest call (on a machine other
processes load, the slower ones measure those). Differences between processes (where the arenas
land, which core a worker thread starts on) move a model's time by up to 2x on PoCL; in one
process both sides meet the same. Prints per model each side's median block (ms) and the median
and quartiles of the blocks' new / old, and checks that both give the same outputs.

    python benchmarks/context_race.py MODEL ... --base TREE [--option K=V ...] [--blocks N] [--block N]
                                      [--tolerance F]

TREE is a checkout of the other commit (``git worktree add /tmp/base REV``) with the native
module built or copied in (``delegate/_native*.so``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
from harness import cli, races
from harness.contexts import compiled_context, random_inputs
from harness.paths import BENCHMARKS, ROOT

from delegate.runtime import Runtime


def context_of(tree: Path, model: Path, options: list[str]) -> bytes:
    """The context ``tree``'s compiler makes of ``model``: ``compiled_context``, whose child process
    (``python -m delegate run``) imports the ``delegate`` of ``tree`` when ``tree`` is another checkout."""
    if tree.resolve() == ROOT:
        return compiled_context(model, options)
    # this harness, run with the other tree first on PYTHONPATH and as the working folder
    code = (
        f"import sys; sys.path.insert(0, {str(BENCHMARKS)!r}); from pathlib import Path; "
        "from harness.contexts import compiled_context; "
        f"sys.stdout.buffer.write(compiled_context(Path({str(model.resolve())!r}), {options!r}))"
    )
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, check=True, capture_output=True).stdout


def race(model: Path, base: Path, options: list[str], blocks: int, calls: int,
         tolerance: float = 1e-4) -> dict[str, float]:  # fmt: skip
    new_ctx, old_ctx = context_of(ROOT, model, options), context_of(base, model, options)
    with Runtime.load(new_ctx) as new, Runtime.load(old_ctx) as old:
        inputs = random_inputs(new.input_shapes)
        for got, want in zip(new.run(inputs), old.run(inputs), strict=True):
            scale = max(float(np.abs(want).max()), 1e-6)
            error = float(np.abs(got - want).max()) / scale
            if error > tolerance:
                raise SystemExit(f"{model.name}: outputs differ by {error:.2e} of their largest value")
        sides = [lambda: new.run(inputs), lambda: old.run(inputs)]
        races.blocks(sides, 1, calls)  # warm up
        rows = races.blocks(sides, blocks, calls)
    q1, ratio, q3 = races.quartiles(races.ratios(rows))
    return {
        "new_ms": statistics.median(races.column(rows, 0)) * 1e3,
        "old_ms": statistics.median(races.column(rows, 1)) * 1e3,
        "ratio": ratio,
        "q1": q1,
        "q3": q3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--base", type=Path, required=True, help="checkout of the other commit")
    cli.add_option(parser)
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--block", type=int, default=10, help="calls per block")
    # an int8 model's outputs move by a step where one layer's rounding meets a tie differently
    parser.add_argument("--tolerance", type=float, default=1e-4, help="largest output difference, of the largest value")
    args = parser.parse_args(argv)
    print(f"{'model':45s} {'new ms':>8s} {'old ms':>8s} {'new/old':>8s}  quartiles")
    for model in args.models:
        r = race(model, args.base, args.option, args.blocks, args.block, args.tolerance)
        print(
            f"{model.stem:45s} {r['new_ms']:8.3f} {r['old_ms']:8.3f} {r['ratio']:8.3f}  {r['q1']:.3f}-{r['q3']:.3f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
