#!/usr/bin/env python3
"""Where a persistent kernel's time goes, node by node, from `perf` samples.

OpenCL profiling times a launch, and a persistent kernel is one launch for the whole model. But
each of its nodes calls a function of its own, ``n0`` for the first (delegate/runtime/persistent.py),
renamed here ``p0n0`` in the first program, ``p1n0`` in the second, so a sampling profiler names
the node every sample falls in; nodes alike (a network's repeated
blocks) call the first one's function, and their samples are reported together, on that row.
This script compiles MODEL as the delegate does (``harness.contexts.compiled_context``), runs it
for ``--seconds`` in a child process under ``perf record``, and prints per node its share of the
child's samples and its CPU time per call (all worker threads together: on two busy cores about
twice its share of the wall time).
The rest of the samples are the waits between nodes (the persistent kernel's own function), the
conversion launches, the driver and Python.

    python benchmarks/persistent_profile.py MODEL [--option K=V ...] [--seconds S] [--frequency HZ]

Needs Linux `perf` and permission to sample one's own processes (kernel.perf_event_paranoid <= 2).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from harness import cli, perf
from harness.contexts import compiled_context

#: run in the child under perf: load the context, call it for the given seconds, report
_CHILD = r"""
import json, sys, time
import numpy as np
from delegate.runtime import Runtime, persistent
import dataclasses, re
functions = []
real_build = persistent.build
def build(nodes, names, units=1):  # which function each node calls (nodes alike share one)
    kernel = real_build(nodes, names, units)
    # the programs' node functions renamed n<k> -> p<program>n<k>, so that samples tell them apart
    prefix = f"p{len(functions)}"
    functions.append([prefix + f for f in kernel.functions])
    source = re.sub(r"\bn(\d+)(?=(_item)?\s*\()", prefix + r"n\1", kernel.source)
    return dataclasses.replace(kernel, source=source, functions=tuple(functions[-1]))
persistent.build = build
with Runtime.load(open(sys.argv[1], "rb").read()) as rt:
    inputs = [np.random.default_rng(0).random(s, dtype=np.float32) for s in rt.input_shapes]
    for _ in range(5):
        rt.run(inputs)
    calls, end = 0, time.perf_counter() + float(sys.argv[2])
    while time.perf_counter() < end:
        rt.run(inputs)
        calls += 1
    print(json.dumps({"calls": calls, "launches": rt.launch_names, "nodes": rt.one_by_one_names,
                      "functions": functions}))
"""
_ROW = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+\[\.\]\s+(\S+)\s*$")


def persistent_nodes(launches: list[str], nodes: list[str]) -> list[list[str]]:
    """What each persistent launch ("persistent FIRST .. LAST") runs, in order, of ``nodes``
    (``Runtime.one_by_one_names``: conversions and nodes)."""
    spans = [name.removeprefix("persistent ").split(" .. ") for name in launches if name.startswith("persistent ")]
    if not spans:
        raise SystemExit(f"the model runs no persistent kernel: {launches}")
    return [nodes[nodes.index(first) : nodes.index(last) + 1] for first, last in spans]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    cli.add_option(parser)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long the child calls the model")
    parser.add_argument("--frequency", type=int, default=2000, help="samples per second per thread")
    args = parser.parse_args(argv)
    perf.perf_binary()  # fails before anything is compiled when there is none
    with tempfile.TemporaryDirectory() as folder:
        context, data = Path(folder) / "model.ctx", Path(folder) / "perf.data"
        context.write_bytes(compiled_context(args.model, args.option))
        child = [sys.executable, "-c", _CHILD, str(context), str(args.seconds)]
        result = perf.record(child, data, args.frequency)
        report = perf.output(
            "report", "-i", str(data), "--stdio", "--no-children", "--sort", "sym", "-F", "overhead,sample,sym"
        )
    programs = persistent_nodes(result["launches"], result["nodes"])
    calls = result["calls"]
    per_function: dict[str, tuple[float, int]] = {}
    others: list[tuple[float, str]] = []
    for line in report.splitlines():
        row = _ROW.match(line)
        if row is None:
            continue
        share, samples, symbol = float(row.group(1)), int(row.group(2)), row.group(3)
        if re.fullmatch(r"p\d+n\d+", symbol):
            per_function[symbol] = (share, samples)
        else:
            others.append((share, symbol))
    nodes = sum(len(names) for names in programs)
    kernels = len(programs)
    print(f"{args.model.name}: {calls} calls in {args.seconds:g} s, {nodes} nodes in {kernels} persistent kernels")
    print(f"  {'node':44s} {'share':>7s} {'CPU us/call':>12s}")
    for p, names in enumerate(programs):
        functions = result["functions"][p]  # the child records every build's, in launch order
        for k, name in enumerate(names):
            own = f"p{p}n{k}"
            if functions[k] != own:
                print(f"  {name:44s} {'(in ' + functions[k] + ')':>20s}")  # a node alike an earlier one
                continue
            share, samples = per_function.get(own, (0.0, 0))
            alike = functions.count(own)
            label = f"{own} {name} (x{alike})" if alike > 1 else f"{own} {name}"
            print(f"  {label:44s} {share:6.2f}% {samples / args.frequency / max(calls, 1) * 1e6:12.1f}")
    total = sum(share for share, _ in per_function.values())
    print(f"  {'all nodes':44s} {total:6.2f}%")
    for share, symbol in sorted(others, reverse=True)[:5]:
        print(f"  {symbol[:44]:44s} {share:6.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
