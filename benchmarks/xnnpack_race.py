#!/usr/bin/env python3
"""The delegate against XNNPACK in one process: each MODEL's three interpreters called in turn.

For each MODEL, ``delegate.Interpreter`` (default options but ``background_compile=off``, so
that every timed call runs the delegate) and the host's own interpreter with XNNPACK on 2 threads
and on 1 thread are created in this process and called in alternating blocks of ``--block``
``invoke()`` calls, a block counting as its fastest call, ``--blocks`` blocks each. The ratio of
a block is the delegate's over the faster XNNPACK's in the same round, so what moves the machine
between processes (where buffers land, which core a thread starts on, other load) moves both
sides alike. Prints per model the median block of each side (ms) and the median ratio, then the
geometric mean of the ratios: the figure the speed targets name.

    python benchmarks/xnnpack_race.py MODEL ... [--blocks N] [--block N] [--option K=V ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from harness import cli, races
from harness.timing import geometric_mean

import delegate
from delegate.api import host_runtime
from delegate.plugin.options import DelegateOptions


def _feed(interpreter: Any) -> None:
    rng = np.random.default_rng(0)
    for detail in interpreter.get_input_details():
        shape, dtype = tuple(detail["shape"]), np.dtype(detail["dtype"])
        value = rng.random(shape, dtype=np.float32) if dtype.kind == "f" else rng.integers(-8, 8, shape)
        interpreter.set_tensor(detail["index"], value.astype(dtype))


def race(model: Path, options: dict[str, str], blocks: int, calls: int) -> dict[str, Any]:
    host = host_runtime()
    ours = delegate.Interpreter(str(model), **{"background_compile": "off", **options})
    two = host.Interpreter(model_path=str(model), num_threads=2)
    one = host.Interpreter(model_path=str(model), num_threads=1)
    interpreters = [ours, two, one]
    for interpreter in interpreters:
        interpreter.allocate_tensors()
        _feed(interpreter)
    sides = [i.invoke for i in interpreters]
    races.blocks(sides, 1, 3)  # warm up
    rounds = races.blocks(sides, blocks, calls)
    state = ours.opencl
    return {
        "delegate_ms": statistics.median(races.column(rounds, 0)) * 1e3,
        "xnnpack_2_ms": statistics.median(races.column(rounds, 1)) * 1e3,
        "xnnpack_1_ms": statistics.median(races.column(rounds, 2)) * 1e3,
        "ratio": statistics.median(r[0] / min(r[1], r[2]) for r in rounds),
        "delegated": f"{len(state.delegated_nodes)}/{state.total_nodes}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--block", type=int, default=10, help="calls per block")
    cli.add_option(parser)
    args = parser.parse_args(argv)
    options = cli.options(args.option)
    DelegateOptions.parse({k: v for k, v in options.items() if k != "background_compile"})  # fails before any model
    print(f"{'model':42s} {'delegate':>9s} {'xnn 2t':>8s} {'xnn 1t':>8s} {'ratio':>6s}  delegated (ms)")
    ratios = []
    for model in args.models:
        r = race(model, options, args.blocks, args.block)
        ratios.append(r["ratio"])
        print(
            f"{model.stem[:42]:42s} {r['delegate_ms']:9.3f} {r['xnnpack_2_ms']:8.3f} {r['xnnpack_1_ms']:8.3f}"
            f" {r['ratio']:6.3f}  {r['delegated']}",
            flush=True,
        )
    print(f"geometric mean of delegate / XNNPACK: {geometric_mean(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
