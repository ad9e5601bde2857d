#!/usr/bin/env python3
"""The settings' priorities against plain F32 on one model: each example settings file of
examples/settings/ that asks for the GPU, and the options ``precision=F32``, timed side by side in
one process (invokes interleaved, round by round), as ratios of the best rounds to F32's. The priorities map onto what
is fastest on the device at hand (docs/settings.md), so on PoCL, which has no fp16, MIN_LATENCY
must not be slower than F32.

    python benchmarks/settings_speed.py [--model PATH] [--rounds N] [--check] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
from harness import cli, races
from harness.paths import MODELS, ROOT

import delegate

DEFAULT_MODEL = MODELS / "unet_small.tflite"
SETTINGS = ["min_latency", "precision_loss_allowed", "f32"]
#: the ratio to F32 a settings file may reach before --check fails (timing noise on a shared machine)
MAX_RATIO = 1.15


def _interpreter(model: Path, settings: str | None) -> Any:
    common: dict[str, Any] = {"background_compile": "off"}
    if settings is None:
        return delegate.Interpreter(str(model), precision="F32", **common)
    return delegate.Interpreter(
        str(model), settings=str(ROOT / "examples" / "settings" / f"{settings}.textproto"), **common
    )


def measure(model: Path, rounds: int) -> dict[str, Any]:
    configs: dict[str, Any] = {"F32 options": _interpreter(model, None)}
    for name in SETTINGS:
        configs[name] = _interpreter(model, name)
    rng = np.random.default_rng(0)
    for interpreter in configs.values():
        interpreter.allocate_tensors()
        for detail in interpreter.get_input_details():
            interpreter.set_tensor(detail["index"], rng.random(detail["shape"], dtype=np.float32))
        interpreter.invoke()  # first launch: PoCL specialises kernels
    names = list(configs)
    rounds_s = races.blocks([configs[name].invoke for name in names], count=rounds, block=1)
    times = {name: [t * 1e3 for t in races.column(rounds_s, i)] for i, name in enumerate(names)}
    # the fastest round of each: on a machine shared with other work the median carries its load
    base = min(times["F32 options"])
    rows = {
        name: {
            "best_ms": min(t),
            "median_ms": statistics.median(t),
            "ratio_to_f32": min(t) / base,
            "precision": configs[name].opencl.options.precision.name,
            "storage_type": configs[name].opencl.options.storage_type.name,
        }
        for name, t in times.items()
    }
    return {"model": str(model), "rounds": rounds, "configs": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--check", action="store_true", help=f"fail when a settings file is over {MAX_RATIO}x F32")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.model, args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['model']}, {args.rounds} interleaved rounds")
        for name, row in result["configs"].items():
            print(
                f"  {name:24s} {row['precision']:8s} {row['storage_type']:12s} "
                f"best {row['best_ms']:8.2f} ms (median {row['median_ms']:8.2f})  x{row['ratio_to_f32']:.2f}"
            )
    slow = {n: round(r["ratio_to_f32"], 3) for n, r in result["configs"].items() if r["ratio_to_f32"] > MAX_RATIO}
    return cli.check(not slow, args.check, f"slower than F32 by more than {MAX_RATIO}x: {slow}")


if __name__ == "__main__":
    sys.exit(main())
