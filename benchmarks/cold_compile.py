#!/usr/bin/env python3
"""Compile time per model: a process that has never seen the model, from creating the interpreter
to its first output, against a target per model, and the steady latency it then reaches.

Each round is a fresh process with empty caches, each in a folder of its own: the program cache
(``$XDG_CACHE_HOME``) and PoCL's kernel cache (``$POCL_CACHE_DIR``); no serialization folder.
The child imports the package, creates ``delegate.Interpreter(model, cpu_when_faster="false",
background_compile="off")`` (which compiles), allocates, invokes once on a seeded input, then
times ``--invokes`` more (their median is the steady latency). ``cold`` is creation through the
first invoke: the time to the first output, the import apart (its own column). The load average
before and after each round is printed: on a busy machine the builds take turns with other work,
and helper processes start only on idle cores (``$DELEGATE_BUILD_PROCESSES`` overrides that).

    python benchmarks/cold_compile.py [MODEL ...] [--rounds N] [--invokes N] [--option K=V]
                                      [--json FILE] [--check]

Models: the shared MobileNetV2 and the vision set's DenseNet121 where it is there (any
``.tflite`` paths otherwise). Targets (2 quiet cores): MobileNetV2 4 s, DenseNet121 15 s; a model
without one is measured only. ``--check`` exits 1 when a model's median ``cold`` misses its target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from harness import cli, paths
from harness.child import python_env, run_json

VISION_SET = Path.home() / ".cache" / "tflite-opencl-delegate" / "vision-set"
#: seconds from creating the interpreter to its first output, by model file stem
TARGETS_S = {"mobilenet_v2": 4.0, "densenet121": 15.0}
#: the phases the child times, in order (seconds; ``steady`` in milliseconds)
PHASES = ("import_s", "create_s", "allocate_s", "first_invoke_s")

_CHILD = """
import json, statistics, sys, time
start = time.perf_counter()
import numpy as np
import delegate
model, invokes, options = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
t0 = time.perf_counter()
it = delegate.Interpreter(model, cpu_when_faster="false", background_compile="off", **options)
t1 = time.perf_counter()
it.allocate_tensors()
t2 = time.perf_counter()
rng = np.random.default_rng(0)
for d in it.get_input_details():
    if np.issubdtype(d["dtype"], np.floating):
        value = rng.uniform(size=d["shape"]).astype(d["dtype"])
    elif np.dtype(d["dtype"]).itemsize >= 4:  # ids and positions (a transformer's tokens): small
        value = rng.integers(0, 64, size=d["shape"], dtype=d["dtype"])
    else:
        info = np.iinfo(d["dtype"])
        value = rng.integers(info.min, info.max, size=d["shape"], endpoint=True, dtype=d["dtype"])
    it.set_tensor(d["index"], value)
it.invoke()
t3 = time.perf_counter()
steady = []
for _ in range(invokes):
    s = time.perf_counter()
    it.invoke()
    steady.append((time.perf_counter() - s) * 1e3)
print(json.dumps({"import_s": t0 - start, "create_s": t1 - t0, "allocate_s": t2 - t1, "first_invoke_s": t3 - t2,
                  "steady_ms": statistics.median(steady) if steady else None, "path": it.path.name}))
"""


def default_models() -> list[Path]:
    """The shared MobileNetV2, and DenseNet121 from the vision set where it has been written."""
    models = [paths.shared_model("mobilenet_v2")]
    densenet = VISION_SET / "densenet121.tflite"
    return models + ([densenet] if densenet.exists() else [])


def target_s(model: Path) -> float | None:
    """The model's target (seconds to the first output), None where it has none."""
    return TARGETS_S.get(model.stem)


def load() -> str:
    """The load average over 1, 5 and 15 minutes, as one string."""
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def cold_s(run: dict) -> float:
    """Seconds from creating the interpreter to its first output."""
    return run["create_s"] + run["allocate_s"] + run["first_invoke_s"]


def _start(model: Path, invokes: int, options: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = python_env(XDG_CACHE_HOME=tmp, POCL_CACHE_DIR=str(Path(tmp) / "pocl"))
        before = load()
        args = ["-c", _CHILD, str(model), str(invokes), json.dumps(options)]
        run = run_json(args, f"cold start of {model.name}", env)
    return {**run, "cold_s": cold_s(run), "load_before": before, "load_after": load()}


def summary(model: Path, runs: list[dict]) -> dict:
    """A model's rounds: the median of each phase, of ``cold_s`` and of the steady latency, and
    the target's verdict (``met`` None without a target)."""
    target = target_s(model)
    cold = statistics.median(r["cold_s"] for r in runs)
    steady = [r["steady_ms"] for r in runs if r["steady_ms"] is not None]
    return {
        "model": paths.model_name(model),
        **{phase: statistics.median(r[phase] for r in runs) for phase in PHASES},
        "cold_s": cold,
        "cold_range_s": [min(r["cold_s"] for r in runs), max(r["cold_s"] for r in runs)],
        "steady_ms": statistics.median(steady) if steady else None,
        "target_s": target,
        "ratio": cold / target if target else None,
        "met": None if target is None else cold <= target,
        "runs": runs,
    }


def table(results: list[dict]) -> list[str]:
    """The report's lines: a row per model (medians), the ratio to its target."""
    lines = [
        f"{'model':24} {'import':>7} {'create':>7} {'alloc':>7} {'first':>7} {'cold':>7} {'range':>13} "
        f"{'steady':>8} {'target':>7} {'ratio':>6}",
        f"{'':24} {'s':>7} {'s':>7} {'s':>7} {'s':>7} {'s':>7} {'s':>13} {'ms':>8} {'s':>7}",
    ]
    for r in results:
        low, high = r["cold_range_s"]
        steady = f"{r['steady_ms']:8.2f}" if r["steady_ms"] is not None else f"{'-':>8}"
        target = f"{r['target_s']:7.1f}" if r["target_s"] else f"{'-':>7}"
        ratio = f"{r['ratio']:6.2f}" if r["ratio"] else f"{'-':>6}"
        lines.append(
            f"{r['model']:24} {r['import_s']:7.2f} {r['create_s']:7.2f} {r['allocate_s']:7.2f} "
            f"{r['first_invoke_s']:7.2f} {r['cold_s']:7.2f} {f'{low:.2f}-{high:.2f}':>13} {steady} {target} {ratio}"
        )
    return lines


def missed(results: list[dict]) -> list[str]:
    """The models over their target, as ``name (cold s > target s)``."""
    return [f"{r['model']} ({r['cold_s']:.2f} s > {r['target_s']:.1f} s)" for r in results if r["met"] is False]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path, help="default: MobileNetV2, DenseNet121 where present")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per model (default 3)")
    parser.add_argument("--invokes", type=int, default=20, help="timed invokes after the first (default 20)")
    cli.add_option(parser)
    parser.add_argument("--json", type=Path, help="write every round here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a model misses its target")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.invokes < 0:
        raise SystemExit("--rounds must be at least 1 and --invokes at least 0")
    models = args.models or default_models()
    options = cli.options(args.option)
    print(f"{cli.machine()}; load average {load()}")
    runs: dict[Path, list[dict]] = {m: [] for m in models}
    for _ in range(args.rounds):  # models alternate, so a change in the machine's load hits each alike
        for model in models:
            run = _start(model, args.invokes, options)
            runs[model].append(run)
            print(
                f"  {paths.model_name(model)}: cold {run['cold_s']:.2f} s, steady {run['steady_ms'] or 0:.2f} ms "
                f"({run['path']}; load {run['load_before']} -> {run['load_after']})",
                flush=True,
            )
    results = [summary(model, runs[model]) for model in models]
    print("\n".join(table(results)))
    print("cold: creating the interpreter through the first invoke (empty caches); medians of "
          f"{args.rounds} round(s); load average now {load()}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"machine": cli.machine(), "results": results}, indent=2))
    late = missed(results)
    return cli.check(not late, args.check, f"over the target: {', '.join(late)}")


if __name__ == "__main__":
    sys.exit(main())
