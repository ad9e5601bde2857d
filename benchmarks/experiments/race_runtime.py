#!/usr/bin/env python3
"""Race two Runtime implementations in one process: this tree's and an older commit's.

The older ``delegate/runtime/runtime.py`` (``git show REV:...``) is loaded as a module of this
package, so both share everything else (the other runtime modules, the C loop, the program
cache). Each MODEL is compiled once as the delegate does (``harness.contexts.compiled_context``);
each implementation then loads it ``--loads`` times (warm program cache), and both, loaded at
once, are called ``--calls`` times each; both in blocks (3 loads, ``--block`` calls), the two
alternating block by block, a block counting as its fastest (on a machine other processes load,
the slower ones measure those). Prints per model, for a call and for a load, the median and 10th
percentile of the blocks (ms) with new / old, and the median and quartiles of the back-to-back
pairs' own new / old.

    python benchmarks/experiments/race_runtime.py [MODEL ...] [--rev REV] [--loads N] [--calls N] [--block N] [--json]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from dataclasses import astuple
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from delegate._native import ffi
from harness.contexts import compiled_context, random_inputs
from harness.older import module_at
from harness.paths import MODELS
from harness.timing import fastest_call

from delegate.context import model
from delegate.runtime import Runtime, memory

#: the last commit before the runtime was split into modules
BEFORE_SPLIT = "e9913a9"
#: loads per block (a block counts as its fastest load)
_LOAD_BLOCK = 3
DEFAULT_MODELS = [MODELS / name for name in ("mobilenet_v2.tflite", "unet_small.tflite")]


#: names the old runtime.py imports that have moved since: (module, name) -> (module, name)
_MOVED = {("delegate.runtime.programs", "default_cache_dir"): ("delegate.cache", "default_program_dir")}


def _provide_moved_names() -> None:
    """Give the old runtime.py's imports what they name, from where it lives now."""
    for (module, name), (home, new_name) in _MOVED.items():
        target = importlib.import_module(module)
        if not hasattr(target, name):
            setattr(target, name, getattr(importlib.import_module(home), new_name))


def _fill_plane_pitch(runtime_class: Any) -> None:
    """Today's kernels step from one slice plane to the next by the shape argument's s7
    (``memory.slice_pitch``), which a runtime from before that change leaves 0: give it the
    pitch of the unpadded planes it allocates."""
    shape_arg = runtime_class._shape_arg

    def with_pitch(self: Any, t: Any) -> np.ndarray:
        arg = shape_arg(self, t)
        arg[7] = memory.slice_pitch(t if isinstance(t, model.TensorDescriptor) else t.desc)
        return arg

    runtime_class._shape_arg = with_pitch


def old_runtime(rev: str) -> Any:
    """``Runtime`` of ``delegate/runtime/runtime.py`` at ``rev``, importing its siblings from here
    (names moved since are provided where it looks for them: ``_MOVED``; the plane pitch today's
    kernels read is given to it: ``_fill_plane_pitch``)."""
    _provide_moved_names()
    module = module_at(rev, "delegate/runtime/runtime.py", "delegate.runtime._raced_runtime")
    if hasattr(module.Runtime, "_shape_arg"):  # the pre-split runtime builds shape arguments itself
        _fill_plane_pitch(module.Runtime)
    return module.Runtime


def _plan_facts(rt: Any) -> tuple:
    """What the C loop runs (the ``dlg_plan`` but its handles) and what the Runtime reports, but
    its memory (``_memory_facts``: slice planes are padded on CPU devices since the split)."""
    plan = rt._plan if isinstance(rt._plan, ffi.CData) else rt.native_plan  # the old has no native_plan
    launches = [
        (c.work_dim, tuple(c.global_size[0 : c.work_dim]), tuple(c.local_size[0 : c.work_dim]))
        for c in (plan.launches[i] for i in range(plan.launches_count))
    ]
    transfers = [
        (t.bytes, t.arg_index, t.zero_copy)
        for arr, n in ((plan.inputs, plan.inputs_count), (plan.outputs, plan.outputs_count))
        for t in (arr[i] for i in range(n))
    ]
    flush = (plan.need_flush, plan.flush_periodically, plan.flush_period, plan.keep_wrapped)
    return (
        launches,
        transfers,
        flush,
        rt.launch_names,
        rt.persistent,
        rt.input_shapes,
        rt.output_shapes,
    )


def _memory_facts(rt: Any) -> list[int]:
    """The Runtime's memory report (bytes), as a list."""
    return list(astuple(rt.memory))


def _timed_load(impl: Any, context: bytes, cache: Path) -> tuple[Any, float]:
    start = time.perf_counter()
    rt = impl.load(context, cache_dir=cache)
    return rt, time.perf_counter() - start


def _load_and_close(impl: Any, context: bytes, cache: Path) -> float:
    rt, seconds = _timed_load(impl, context, cache)
    rt.close()
    return seconds


def _summary(samples: dict[str, list[float]]) -> dict[str, Any]:
    """Median and 10th percentile of each, in ms, new / old of both, and the median and quartiles
    of the pairs' own new / old (a pair ran back to back, under the same load from elsewhere)."""
    out: dict[str, Any] = {}
    for stat, pick in (("median", statistics.median), ("p10", lambda v: statistics.quantiles(v, n=10)[0])):
        old_ms, new_ms = (pick(samples[k]) * 1e3 for k in ("old", "new"))
        out[stat] = {"old": round(old_ms, 3), "new": round(new_ms, 3), "new_over_old": round(new_ms / old_ms, 4)}
    paired = statistics.quantiles([n / o for n, o in zip(samples["new"], samples["old"], strict=True)], n=4)
    out["paired"] = {"median": round(paired[1], 4), "iqr": [round(paired[0], 4), round(paired[2], 4)]}
    return out


def race(model: Path, old: Any, loads: int, calls: int, block: int) -> dict[str, Any]:
    """``loads`` warm loads of each, then both loaded at once, ``calls`` calls of each; both in
    blocks (``_LOAD_BLOCK`` loads, ``block`` calls), the two alternating block by block (ABBA);
    a block counts as its fastest."""
    context = compiled_context(model, [])
    impls = {"old": old, "new": Runtime}
    load_s: dict[str, list[float]] = {k: [] for k in impls}
    run_s: dict[str, list[float]] = {k: [] for k in impls}
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder)
        facts = {}
        memory_bytes = {}
        files = []
        for key, impl in impls.items():  # fill the program cache: every timed load is warm
            rt = _timed_load(impl, context, cache)[0]
            facts[key] = _plan_facts(rt)
            memory_bytes[key] = _memory_facts(rt)
            rt.close()
            files.append(sorted(p.name for p in cache.rglob("*") if p.is_file()))
        for r in range(max(loads // _LOAD_BLOCK, 2)):
            for key in ("old", "new") if r % 2 == 0 else ("new", "old"):
                load_s[key].append(min(_load_and_close(impls[key], context, cache) for _ in range(_LOAD_BLOCK)))
        rts = {key: _timed_load(impl, context, cache)[0] for key, impl in impls.items()}
        try:
            inputs = random_inputs(rts["old"].input_shapes)
            # the first launches specialise kernels (PoCL)
            outputs = {key: [np.array(o) for o in rt.run(inputs)] for key, rt in rts.items()}
            for b in range(max(calls // block, 2)):
                for key in ("old", "new") if b % 2 == 0 else ("new", "old"):
                    run_s[key].append(fastest_call(rts[key].run, block, inputs))
        finally:
            for rt in rts.values():
                rt.close()
    return {
        "model": model.name,
        "loads": loads,
        "calls": calls,
        "block": block,
        # whether the C loop runs the same (today's runs the conversions inside the persistent
        # kernels: fewer launches) and the new load built no program the old had not
        "same_plan": facts["old"] == facts["new"],
        "launches": {key: len(fact[0]) for key, fact in facts.items()},
        "same_programs": files[0] == files[1],
        "same_outputs": all(
            np.array_equal(a, b, equal_nan=True) for a, b in zip(outputs["old"], outputs["new"], strict=True)
        ),
        "memory_bytes": memory_bytes,
        "load": _summary(load_s),
        "run": _summary(run_s),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, default=DEFAULT_MODELS)
    parser.add_argument("--rev", default=BEFORE_SPLIT, help="the commit whose runtime.py races this tree's")
    parser.add_argument("--loads", type=int, default=30, help=f"warm loads of each, in blocks of {_LOAD_BLOCK}")
    parser.add_argument("--calls", type=int, default=600, help="calls of each")
    parser.add_argument("--block", type=int, default=10, help="calls per block (a block counts as its fastest)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    old = old_runtime(args.rev)
    results = [race(model, old, args.loads, args.calls, args.block) for model in args.models]
    if args.json:
        print(json.dumps(results, indent=1))
        return 0
    for r in results:
        for what in ("run", "load"):
            f = r[what]
            line = "  ".join(
                f"{stat} old {f[stat]['old']:8.3f} new {f[stat]['new']:8.3f} ({f[stat]['new_over_old']:.4f})"
                for stat in ("median", "p10")
            )
            paired = f"paired {f['paired']['median']:.4f} (IQR {f['paired']['iqr'][0]:.4f}-{f['paired']['iqr'][1]:.4f})"
            print(f"{r['model']:20} {what:4} ms  {line}  {paired}")
        print(
            f"{r['model']:20} same plan: {r['same_plan']}, same programs: {r['same_programs']}, "
            f"same outputs: {r['same_outputs']}; memory bytes old {r['memory_bytes']['old']} "
            f"new {r['memory_bytes']['new']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
