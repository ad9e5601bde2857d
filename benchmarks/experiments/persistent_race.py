#!/usr/bin/env python3
"""Race this tree's persistent kernels against an older commit's, in one process.

The older ``delegate/runtime/persistent.py`` (``git show REV:...``) is loaded as a module of this
package and builds the persistent kernels of one Runtime; another Runtime loads the same context
with today's. Each MODEL is compiled once as the delegate does (``harness.contexts.compiled_context``);
both Runtimes are loaded at once (one program cache) and called in blocks of ``--block`` calls,
the two alternating block by block, a block counting as its fastest call (on a machine other
processes load, the slower ones measure those). Prints per model the median of the blocks (ms),
the median and quartiles of the back-to-back pairs' new / old, whether the outputs are the same,
and the node functions in each build's programs.

    python benchmarks/experiments/persistent_race.py [MODEL ...] [--rev REV] [--calls N] [--block N]
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness.contexts import compiled_context, random_inputs
from harness.older import module_at
from harness.paths import MODELS
from harness.timing import fastest_call

from delegate.runtime import Runtime, persistent

DEFAULT_MODELS = [MODELS / "mobilenet_v2.tflite"]


def old_persistent(rev: str) -> ModuleType:
    """``delegate/runtime/persistent.py`` at ``rev``, importing its siblings from here."""
    return module_at(rev, "delegate/runtime/persistent.py", "delegate.runtime._raced_persistent")


def _old_build(old: ModuleType) -> Any:
    """A ``persistent.build`` that builds with ``old``, given today's NodeKernels."""

    takes_units = "units" in inspect.signature(old.build).parameters

    def build(nodes: list[Any], names: list[str], units: int = 1) -> Any:
        def value(v: Any) -> Any:
            return old.ArenaSlice(v.offset, v.size) if isinstance(v, persistent.ArenaSlice) else v

        converted = [
            old.NodeKernel(n.src, [value(v) for v in n.values], n.global_size, n.local_size, n.grid) for n in nodes
        ]
        return old.build(converted, names, units) if takes_units else old.build(converted, names)

    return build


def _functions(sources: list[str]) -> int:
    return sum(s.count("__attribute__((noinline)) void ") for s in sources)


def _load(context: bytes, cache: Path, build: Any) -> tuple[Runtime, list[str]]:
    """A Runtime of ``context`` whose persistent kernels ``build`` makes, and their sources."""
    sources: list[str] = []
    today = persistent.build

    def kept(nodes: list[Any], names: list[str], units: int = 1) -> Any:
        kernel = build(nodes, names, units)
        sources.append(kernel.source)
        return kernel

    persistent.build = kept
    try:
        return Runtime.load(context, cache_dir=cache), sources
    finally:
        persistent.build = today


def race(model: Path, old: ModuleType, calls: int, block: int) -> str:
    context = compiled_context(model, [])
    with tempfile.TemporaryDirectory() as folder:
        rts, functions = {}, {}
        for key, build in (("old", _old_build(old)), ("new", persistent.build)):
            rts[key], sources = _load(context, Path(folder), build)
            functions[key] = _functions(sources)
        try:
            inputs = random_inputs(rts["old"].input_shapes)
            outputs = {key: [np.array(o) for o in rt.run(inputs)] for key, rt in rts.items()}
            same = all(np.array_equal(a, b) for a, b in zip(outputs["old"], outputs["new"], strict=True))
            times: dict[str, list[float]] = {"old": [], "new": []}
            for b in range(max(calls // block, 2)):
                for key in ("old", "new") if b % 2 == 0 else ("new", "old"):
                    times[key].append(fastest_call(rts[key].run, block, inputs))
        finally:
            for rt in rts.values():
                rt.close()
    pairs = statistics.quantiles([n / o for n, o in zip(times["new"], times["old"], strict=True)], n=4)
    old_ms, new_ms = (statistics.median(times[k]) * 1e3 for k in ("old", "new"))
    return (
        f"{model.name}: old {old_ms:.3f} ms, new {new_ms:.3f} ms; new / old {pairs[1]:.3f} "
        f"({pairs[0]:.3f}-{pairs[2]:.3f}); same outputs: {same}; node functions {functions['old']} -> "
        f"{functions['new']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, default=DEFAULT_MODELS)
    parser.add_argument("--rev", default="HEAD", help="the commit whose persistent.py is raced")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--block", type=int, default=5)
    args = parser.parse_args(argv)
    old = old_persistent(args.rev)
    for model in args.models:
        print(race(model, old, args.calls, args.block), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
