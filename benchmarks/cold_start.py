#!/usr/bin/env python3
"""A process that has never seen the model: time to its first output, and when invokes reach the
delegate's warm latency, with background compile (``auto``), without it (``off``), and on
TFLite's CPU path (XNNPACK), side by side.

Each start is a fresh process. Cold: empty caches, each in a folder of its own: the program cache
(``$XDG_CACHE_HOME``), PoCL's kernel cache (``$POCL_CACHE_DIR``), no serialization folder (the
default options). Warm: a later start with those folders kept. From the creation of
``delegate.Interpreter`` the child allocates, sets a seeded input, invokes, and keeps invoking for
``--seconds`` (at least until background compile switched, and 30 invokes after that), noting each
invoke's end and latency. ``back_to_warm_s``: the end of the first 15 consecutive invokes whose
median latency is within 10% of the warm ``off`` start's median (``auto``'s without ``off``).
Rounds alternate the paths.

    python benchmarks/cold_start.py [--model PATH] [--rounds N] [--seconds S] [--paths auto off xnnpack]
                                    [--json FILE] [--check]

``--check`` exits 1 when a target is missed: the cold ``auto`` start's first output within 3 s of
creating the interpreter, and ``back_to_warm_s`` within 30 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from harness import cli, paths
from harness.child import python_env, run_json

DEFAULT_MODEL = paths.shared_model("mobilenet_v2")
FIRST_OUTPUT_TARGET_S = 3.0
BACK_TO_WARM_TARGET_S = 30.0
WINDOW = 15
WARM_MARGIN = 1.10

_CHILD = """
import json, sys, time
start = time.perf_counter()
import numpy as np
import delegate
from delegate.api import host_runtime
model, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
imported = time.perf_counter()
if mode == "xnnpack":
    it = host_runtime().Interpreter(model_path=model)
else:
    it = delegate.Interpreter(model, background_compile=mode)
it.allocate_tensors()
d = it.get_input_details()[0]
it.set_tensor(d["index"], np.random.default_rng(0).uniform(size=d["shape"]).astype(np.float32))
it.invoke()
first = time.perf_counter() - imported
report = lambda: getattr(getattr(it, "opencl", None), "background_compile", None)
samples, after = [], 0
while True:
    t = time.perf_counter()
    it.invoke()
    now = time.perf_counter()
    r = report()
    on_delegate = mode != "xnnpack" and (r is None or r.path == "delegate")
    samples.append((now - imported, (now - t) * 1e3, on_delegate))
    after += on_delegate
    if now - imported >= seconds and (mode == "xnnpack" or after >= 30):
        break
r = report()
print(json.dumps({"import_s": imported - start, "first_output_s": first, "samples": samples,
                  "report": r.describe() if r else None, "switched_s": r.switched_s if r else None}))
"""


def _start(model: Path, mode: str, folder: Path, seconds: float) -> dict:
    env = python_env(XDG_CACHE_HOME=str(folder), POCL_CACHE_DIR=str(folder / "pocl"))
    env.pop("DELEGATE_BACKGROUND_COMPILE", None)  # each path sets it explicitly: this measures it
    return run_json(["-c", _CHILD, str(model), mode, str(seconds)], f"{mode} start", env)


def back_to_warm_s(samples: list[list], warm_ms: float) -> float | None:
    """The end of the first WINDOW consecutive invokes whose median latency is within WARM_MARGIN of ``warm_ms``."""
    for i in range(len(samples) - WINDOW + 1):
        window = samples[i : i + WINDOW]
        if statistics.median(s[1] for s in window) <= warm_ms * WARM_MARGIN:
            return window[-1][0]
    return None


def _summary(run: dict) -> dict:
    latencies = [s[1] for s in run["samples"]]
    return {
        "first_output_s": run["first_output_s"],
        "switched_s": run.get("switched_s"),
        "median_ms": statistics.median(latencies),
        "last_median_ms": statistics.median(latencies[-WINDOW:]),
        "invokes": len(latencies),
        "report": run.get("report"),
    }


PATHS = ("auto", "off", "xnnpack")


def measure(model: Path, rounds: int, seconds: float, paths: tuple[str, ...] = PATHS) -> dict:
    results: dict[str, list[dict]] = {}
    for _ in range(rounds):
        for mode in paths:
            with tempfile.TemporaryDirectory() as tmp:
                cold = _start(model, mode, Path(tmp), seconds)
                warm = _start(model, mode, Path(tmp), 2.0)
            results.setdefault(mode, []).append({"cold": cold, "warm": warm})
    if "off" not in results and "auto" not in results:
        raise SystemExit("--paths needs off or auto: the delegate's warm latency is the reference")
    reference = results["off"] if "off" in results else results["auto"]
    warm_ms = statistics.median(_summary(r["warm"])["median_ms"] for r in reference)
    report: dict = {"warm_delegate_median_ms": warm_ms, "paths": {}}
    for mode, runs in results.items():
        report["paths"][mode] = [
            {
                "cold": {**_summary(r["cold"]), "back_to_warm_s": back_to_warm_s(r["cold"]["samples"], warm_ms)},
                "warm": _summary(r["warm"]),
            }
            for r in runs
        ]
    return report


def _line(mode: str, start: str, s: dict) -> str:
    back = s.get("back_to_warm_s")
    return (
        f"{mode:8} {start:5} first output {s['first_output_s']:7.2f} s"
        + (f", switched {s['switched_s']:6.1f} s" if s.get("switched_s") else "")
        + (
            f", back to warm latency {back:6.1f} s"
            if back is not None
            else (", never back to warm" if start == "cold" else "")
        )
        + f"; median {s['median_ms']:.1f} ms, last {WINDOW} {s['last_median_ms']:.1f} ms ({s['invokes']} invokes)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=40.0, help="invoke at least this long after creation")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    r = measure(args.model, args.rounds, args.seconds, tuple(args.paths))
    print(f"model: {args.model.name}; {cli.cpu_name()}")
    print(f"warm delegate median latency ('off', warm start): {r['warm_delegate_median_ms']:.1f} ms")
    for mode, runs in r["paths"].items():
        for run in runs:
            print(_line(mode, "cold", run["cold"]))
            print(_line(mode, "warm", run["warm"]))
            if run["cold"]["report"]:
                print(f"         cold: {run['cold']['report']}")
    if args.json:
        args.json.write_text(json.dumps(r))
    if args.check:
        cold = [run["cold"] for run in r["paths"]["auto"]]
        first = statistics.median(c["first_output_s"] for c in cold)
        back = [c["back_to_warm_s"] for c in cold]
        if first > FIRST_OUTPUT_TARGET_S or None in back or statistics.median(back) > BACK_TO_WARM_TARGET_S:
            print(f"FAILED: first output {first:.2f} s (target {FIRST_OUTPUT_TARGET_S} s), back to warm {back}")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
