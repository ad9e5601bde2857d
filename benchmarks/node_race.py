#!/usr/bin/env python3
"""Race two compilers' kernels node by node: ``context_race`` under ``perf``.

A whole-model race (``context_race.py``) says whether a change wins; this says where. Both trees
compile MODEL (``context_race.context_of``); a child process loads both contexts, runs each
once to learn which persistent-kernel library is whose (PoCL maps one per program), then calls
them in alternating blocks of 10 for ``--seconds`` under ``perf record``. Each node of a
persistent kernel is a function of its own (``n0`` is the first, runtime/persistent.py), so the
samples of each library and function give each side's CPU time per call of every node, measured
over the same seconds: what moves the machine moves both sides alike.

    python benchmarks/node_race.py MODEL --base TREE [--option K=V ...] [--base-option K=V ...]
                                   [--seconds S] [--frequency HZ]

``--base-option`` adds delegate options on the base side only (``--base`` may then be this tree:
a race of two settings of one compiler). Two sides that compile the same program share one
library, and there is nothing to tell apart: the script says so.

Prints per node the new tree's and the base tree's CPU time per call (all worker threads
together) and new / old; then the nodes' sum and the rest of each library (the waits between
nodes). Small nodes take few samples: read their ratios as rough. Needs Linux ``perf`` and
permission to sample one's own processes (kernel.perf_event_paranoid <= 2); the models it takes
are those whose nodes run as one persistent kernel (persistent_profile.persistent_nodes).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
from pathlib import Path

import context_race
import persistent_profile
from harness import cli, perf
from harness.paths import ROOT

#: run in the child under perf: load both contexts, find each one's persistent library, race them
_CHILD = """
import json, sys, time
import numpy as np
from delegate.runtime import Runtime

def libraries():
    return {line.split()[-1] for line in open("/proc/self/maps") if "dlg_persistent" in line}

new = Runtime.load(open(sys.argv[1], "rb").read())
inputs = [np.random.default_rng(0).random(s, dtype=np.float32) for s in new.input_shapes]
new.run(inputs)
new_libraries = libraries()
old = Runtime.load(open(sys.argv[2], "rb").read())
old.run(inputs)
old_libraries = libraries() - new_libraries
for _ in range(5):
    new.run(inputs)
    old.run(inputs)
calls, end = 0, time.perf_counter() + float(sys.argv[3])
while time.perf_counter() < end:
    for _ in range(10):
        new.run(inputs)
    for _ in range(10):
        old.run(inputs)
    calls += 10
print(json.dumps({"calls": calls, "new": sorted(new_libraries), "old": sorted(old_libraries),
                  "launches": new.launch_names, "nodes": new.one_by_one_names,
                  "old_launches": old.launch_names, "old_nodes": getattr(old, "one_by_one_names", old.node_names)}))
"""
#: a line of ``perf script -F ip,sym,dso``: address, symbol, (library path)
_SAMPLE = re.compile(r"^\s*[0-9a-f]+\s+(\S+)\s+\((\S+)\)\s*$")


def samples(script: str) -> collections.Counter[tuple[str, str]]:
    """Samples per (library path, symbol) in ``perf script -F ip,sym,dso`` output."""
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for line in script.splitlines():
        match = _SAMPLE.match(line)
        if match:
            counts[match.group(2), match.group(1)] += 1
    return counts


def table(counts: collections.Counter[tuple[str, str]], result: dict, frequency: int) -> list[str]:
    """The report: per node of the persistent kernel, each side's CPU us per call and new / old."""
    programs = persistent_profile.persistent_nodes(result["launches"], result["nodes"])
    if persistent_profile.persistent_nodes(result["old_launches"], result["old_nodes"]) != programs:
        raise SystemExit("the two trees run different nodes in their persistent kernels; compare them whole")
    if len(programs) != 1:
        raise SystemExit(f"node_race compares one persistent kernel; the model runs {len(programs)}")
    (names,) = programs
    new, old = set(result["new"]), set(result["old"])
    if not new:
        raise SystemExit("the model ran no persistent kernel; node_race compares persistent kernels")
    if not old:
        raise SystemExit("both sides compiled the same persistent kernel: nothing to race")
    calls = max(result["calls"], 1)

    def per_call(count: int) -> float:
        return count / frequency / calls * 1e6

    def side(libraries: set[str], symbol: str | None) -> int:
        return sum(n for (lib, sym), n in counts.items() if lib in libraries and (symbol is None or sym == symbol))

    lines = [f"{'node':44s} {'new us':>9s} {'old us':>9s} {'new/old':>8s}"]
    total_new = total_old = 0
    for k, name in enumerate(names):
        a, b = side(new, f"n{k}"), side(old, f"n{k}")
        total_new, total_old = total_new + a, total_old + b
        ratio = f"{a / b:8.3f}" if b else f"{'-':>8s}"
        lines.append(f"{name[:44]:44s} {per_call(a):9.1f} {per_call(b):9.1f} {ratio}")
    ratio = f"{total_new / total_old:8.3f}" if total_old else f"{'-':>8s}"
    lines.append(f"{'all nodes':44s} {per_call(total_new):9.1f} {per_call(total_old):9.1f} {ratio}")
    rest_new, rest_old = side(new, None) - total_new, side(old, None) - total_old
    lines.append(f"{'rest of the kernel (waits)':44s} {per_call(rest_new):9.1f} {per_call(rest_old):9.1f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--base", type=Path, required=True, help="the other checkout (context_race.py)")
    cli.add_option(parser)
    parser.add_argument("--base-option", action="append", default=[], help="option K=V of the base side only")
    parser.add_argument("--seconds", type=float, default=8.0, help="how long the child races the two")
    parser.add_argument("--frequency", type=int, default=4000, help="samples per second per thread")
    args = parser.parse_args(argv)
    perf.perf_binary()  # fails before anything is compiled when there is none
    with tempfile.TemporaryDirectory() as folder:
        new, old, data = Path(folder) / "new.ctx", Path(folder) / "old.ctx", Path(folder) / "perf.data"
        new.write_bytes(context_race.context_of(ROOT, args.model, args.option))
        old.write_bytes(context_race.context_of(args.base, args.model, args.option + args.base_option))
        child = [sys.executable, "-c", _CHILD, str(new), str(old), str(args.seconds)]
        result = perf.record(child, data, args.frequency, cwd=ROOT)
        script = perf.output("script", "-i", str(data), "-F", "ip,sym,dso")
    print(f"{args.model.name}: {result['calls']} calls of each side; CPU time per call")
    for line in table(samples(script), result, args.frequency):
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
