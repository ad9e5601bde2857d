#!/usr/bin/env python3
"""Slice planes padded against unpadded, in one process (runtime/memory.py, ``PLANE_PAD_LINES``).

Each MODEL is compiled once (``harness.contexts.compiled_context``) and loaded twice by this runtime:
once with ``--lines`` cache lines of padding after every slice plane that is a whole number of
4 KiB (the CPU-device default is ``memory.PLANE_PAD_LINES``), once with none. Both are checked to
give the same outputs, then called in alternating blocks of ``--block`` calls (a block counts as
its fastest call); prints per model the median of the blocks' padded / unpadded and its quartiles.

    python benchmarks/experiments/pitch_race.py MODEL ... [--lines N] [--blocks N] [--block N]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import races
from harness.contexts import compiled_context, random_inputs

from delegate.runtime import Runtime, memory


def _load(context: bytes, lines: int) -> Runtime:
    default = memory.PLANE_PAD_LINES
    memory.PLANE_PAD_LINES = lines  # read while the tensors are laid out, in Runtime.load
    try:
        return Runtime.load(context)
    finally:
        memory.PLANE_PAD_LINES = default


def race(model: Path, lines: int, blocks: int, calls: int) -> tuple[float, float, float]:
    """Median and quartiles of padded / unpadded over ``blocks`` blocks."""
    context = compiled_context(model, [])
    with _load(context, lines) as padded, _load(context, 0) as plain:
        inputs = random_inputs(padded.input_shapes)
        for got, want in zip(padded.run(inputs), plain.run(inputs), strict=True):
            if not np.allclose(got, want, rtol=1e-5, atol=1e-5):
                raise SystemExit(f"{model.name}: padded and unpadded planes give different outputs")
        rows = races.blocks([lambda: padded.run(inputs), lambda: plain.run(inputs)], blocks, calls)
    q1, median, q3 = races.quartiles(races.ratios(rows))
    return median, q1, q3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--lines", type=int, default=memory.PLANE_PAD_LINES, help="cache lines of padding")
    parser.add_argument("--blocks", type=int, default=15)
    parser.add_argument("--block", type=int, default=10)
    args = parser.parse_args(argv)
    print(f"{'model':40s} {'padded/unpadded':>16s}  quartiles")
    for model in args.models:
        median, q1, q3 = race(model, args.lines, args.blocks, args.block)
        print(f"{model.stem[:40]:40s} {median:16.3f}  {q1:.3f}-{q3:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
