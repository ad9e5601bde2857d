#!/usr/bin/env python3
"""Start-up of MobileNetV2 with the delegate: cold (nothing cached) vs warm (serialization cache).

Each start is a fresh process, as a second start of an application is. Cold: an empty
serialization folder and PoCL's own kernel cache disabled (POCL_KERNEL_CACHE=0), so every
program is compiled. Warm: the same folder, now holding the compiled partition and program
binaries. ``cpu_when_faster=false``: this measures the delegate's start, and where TFLite's CPU
kernels are measured faster the warm start would otherwise run on CPU. ``init`` is creating the
interpreter with the delegate through ``allocate_tensors()`` (as warm and cold are meant
throughout); the first invoke is reported too (PoCL specialises kernels at their first launch).
Target: warm init at least 10x faster than cold.

    python benchmarks/init_speed.py [--check] [--json] [--model PATH]
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

MIN_SPEEDUP = 10.0
DEFAULT_MODEL = paths.shared_model("mobilenet_v2")

_CHILD = """
import json, sys, time
import numpy as np
import delegate
start = time.perf_counter()
it = delegate.Interpreter(sys.argv[1], serialization_dir=sys.argv[2], model_token="mobilenet_v2",
                             cpu_when_faster="false")
it.allocate_tensors()
init = time.perf_counter() - start
d = it.get_input_details()[0]
it.set_tensor(d["index"], np.zeros(d["shape"], np.float32))
start = time.perf_counter()
it.invoke()
first = time.perf_counter() - start
print(json.dumps({"init_ms": init * 1e3, "first_invoke_ms": first * 1e3,
                  "cache": [p.cache for p in it.opencl.partitions]}))
"""


def _start(model: Path, folder: Path) -> dict:
    # No driver-side kernel cache (PoCL's, NVIDIA's): the warm start has only the serialized context.
    env = python_env(POCL_KERNEL_CACHE="0", CUDA_CACHE_DISABLE="1")
    return run_json(["-c", _CHILD, str(model), str(folder)], "the delegate's start", env)


def measure(model: Path, warm_runs: int = 5) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cold = _start(model, folder)
        warm = [_start(model, folder) for _ in range(warm_runs)]
    if cold["cache"] != ["miss"] or any(w["cache"] != ["hit"] for w in warm):
        raise SystemExit(f"expected a cache miss then hits, got {cold['cache']} then {[w['cache'] for w in warm]}")
    warm_init = statistics.median(w["init_ms"] for w in warm)
    return {
        "cold_init_ms": cold["init_ms"],
        "warm_init_ms": warm_init,
        "speedup": cold["init_ms"] / warm_init,
        "cold_first_invoke_ms": cold["first_invoke_ms"],
        "warm_first_invoke_ms": statistics.median(w["first_invoke_ms"] for w in warm),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the target is missed")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    args = parser.parse_args()
    r = measure(args.model)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"model: {args.model.name}")
        print(f"init, cold (compile everything):   {r['cold_init_ms']:8.0f} ms")
        print(f"init, warm (serialization cache):  {r['warm_init_ms']:8.0f} ms")
        print(f"speedup:                           {r['speedup']:8.1f}x (target >= {MIN_SPEEDUP:.0f}x)")
        print(
            f"first invoke, cold / warm:         {r['cold_first_invoke_ms']:8.0f} / {r['warm_first_invoke_ms']:.0f} ms"
        )
    return cli.check(r["speedup"] >= MIN_SPEEDUP, args.check, f"warm start is not {MIN_SPEEDUP:.0f}x faster than cold")


if __name__ == "__main__":
    sys.exit(main())
