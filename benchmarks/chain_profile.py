#!/usr/bin/env python3
"""Where a whole call's time goes: each kernel in the model's chain against the same kernel alone.

The model is compiled as the delegate compiles it (``harness.contexts.compiled_context``) and
loaded with profiling on. Each round, in one process:

- ``call``: one ``Runtime.run`` (host wall time: transfers, every launch, the final wait);
- ``chain``: every launch enqueued in order and waited for once, as a call does, timed per launch
  on the device, with the gap between one launch's end and the next one's start;
- ``alone``: every launch three times in a row, the last two timed: the kernel with its weights,
  input and output still in cache from the run before, on the cores that just ran it.

Per launch the minimum over rounds is kept (what the kernel costs; the machine's noise only
adds); the totals are medians over rounds. ``chain`` against ``alone`` is what running in a chain
costs a kernel: weights that were evicted since the last call, inputs written by another core,
the second worker's wake-up. ``call`` against the chain's span is the host's share.

    python benchmarks/chain_profile.py MODEL [--option K=V ...] [--runs N] [--nodes]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from harness import cli
from harness.contexts import compiled_context, random_inputs

from delegate.runtime import Runtime


@dataclass
class ChainProfile:
    """Device times in microseconds, per launch (minimum over rounds) and per round."""

    names: list[str]
    chain: list[float]
    alone: list[float]
    #: per round: wall time of a call, the chain's span (first start to last end), its summed
    #: kernel time and its summed gaps between launches
    calls: list[float] = field(default_factory=list)
    spans: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)


def _timed(queue: Any, events: list[Any]) -> list[tuple[int, int]]:
    """(start, end) in ns of each of ``events`` once ``queue`` has finished them."""
    queue.finish()
    return [(e.profile.start, e.profile.end) for e in events]


def measure(payload: bytes, rounds: int) -> ChainProfile:
    import pyopencl as cl  # tools only: the runtime itself does not import it

    with Runtime.load(payload, profiling=True) as rt:
        queue, launches = rt.queue, rt.launches()
        inputs = random_inputs(rt.input_shapes)
        for _ in range(3):
            rt.run(inputs)
        count = len(launches)
        result = ChainProfile(rt.launch_names, [float("inf")] * count, [float("inf")] * count)
        for _ in range(rounds):
            start = time.perf_counter()
            rt.run(inputs)
            result.calls.append((time.perf_counter() - start) * 1e6)
            times = _timed(queue, [cl.enqueue_nd_range_kernel(queue, *launch) for launch in launches])
            result.spans.append((times[-1][1] - times[0][0]) * 1e-3)
            result.busy.append(sum(end - begin for begin, end in times) * 1e-3)
            result.gaps.append(sum(max(0, times[i + 1][0] - times[i][1]) for i in range(count - 1)) * 1e-3)
            result.chain = [min(a, (end - begin) * 1e-3) for a, (begin, end) in zip(result.chain, times, strict=True)]
            for i, launch in enumerate(launches):
                repeated = _timed(queue, [cl.enqueue_nd_range_kernel(queue, *launch) for _ in range(3)])
                result.alone[i] = min(result.alone[i], *((end - begin) * 1e-3 for begin, end in repeated[1:]))
    return result


def report(name: str, profile: ChainProfile, nodes: bool) -> str:
    chain, alone = sum(profile.chain), sum(profile.alone)
    lines = [
        f"{name}: {len(profile.names)} launches",
        f"  call (host wall time, median)    {np.median(profile.calls):8.0f} us",
        f"  chain span (median)              {np.median(profile.spans):8.0f} us",
        f"  chain kernels (median sum)       {np.median(profile.busy):8.0f} us",
        f"  chain gaps (median sum)          {np.median(profile.gaps):8.0f} us",
        f"  chain kernels (sum of minima)    {chain:8.0f} us",
        f"  alone kernels (sum of minima)    {alone:8.0f} us  (chain / alone {chain / alone:.2f})",
    ]
    if nodes:
        lines.append(f"    {'launch':40s} {'chain':>7s} {'alone':>7s} {'ratio':>6s}")
        for label, a, b in zip(profile.names, profile.chain, profile.alone, strict=True):
            lines.append(f"    {label:40s} {a:7.0f} {b:7.0f} {a / b if b else float('nan'):6.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    cli.add_option(parser)
    parser.add_argument("--runs", type=int, default=20, help="rounds (default 20)")
    parser.add_argument("--nodes", action="store_true", help="also print every launch")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    profile = measure(compiled_context(args.model, args.option), args.runs)
    print(report(args.model.name, profile, args.nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
