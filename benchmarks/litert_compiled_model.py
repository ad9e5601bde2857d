#!/usr/bin/env python3
"""LiteRT's CompiledModel on this delegate's GPU accelerator, on LiteRT's CPU, and the Interpreter path.

For each MODEL (default: the shared float models), three runners are created in this process:

- ``accel``: ``CompiledModel`` with ``HardwareAccelerator.GPU`` (GPU | CPU when ``--cpu-fallback``)
  in ``delegate.litert_environment(**options)``: the delegate as LiteRT's GPU accelerator;
- ``cpu``: ``CompiledModel`` with ``HardwareAccelerator.CPU`` (LiteRT's XNNPACK) in a plain
  environment;
- ``interp``: ``delegate.Interpreter(model, background_compile=off, cpu_when_faster=false,
  **options)``, the external-delegate path in the TFLite host's Interpreter, with the
  accelerator's defaults so both delegate the same nodes.

A call is ``run_by_index`` on input and output TensorBuffers written once (host memory: the
outputs are in place when it returns), or ``invoke()``. The runners are called in alternating
blocks of ``--block`` calls, a block counting as its fastest call, ``--blocks`` blocks each;
printed per model: the median block of each (ms) and the median ratios accel / interp and
accel / cpu in the same round. ``--json`` prints one JSON object per model instead.

    python benchmarks/litert_compiled_model.py [MODEL ...] [--blocks N] [--block N]
        [--option K=V ...] [--cpu-fallback] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from race_runtime import fastest_call  # noqa: E402

import delegate  # noqa: E402
from delegate import litert  # noqa: E402

MODELS = ROOT.parent / "shared" / "models"
DEFAULT_MODELS = ["elementwise_mix", "mobilenet_v2", "mobilenet_v2_fp16", "small_cnn", "unet_small"]


def _value(shape: tuple[int, ...], dtype: np.dtype, rng: np.random.Generator) -> np.ndarray:
    if dtype.kind == "f":
        return rng.random(shape, dtype=np.float32).astype(dtype)
    return rng.integers(-8, 8, shape).astype(dtype)


def compiled_call(model: Any) -> Any:
    """run_by_index on TensorBuffers written once with seeded inputs."""
    rng = np.random.default_rng(0)
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    for buffer in ins:
        details = buffer.get_tensor_details()
        buffer.write(_value(tuple(details["shape"]), np.dtype(details["dtype"]), rng))
    return lambda: model.run_by_index(0, ins, outs)


def interpreter_call(interpreter: Any) -> Any:
    rng = np.random.default_rng(0)
    interpreter.allocate_tensors()
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], _value(tuple(detail["shape"]), np.dtype(detail["dtype"]), rng))
    return interpreter.invoke


def race(model: Path, env: Any, options: dict[str, str], blocks: int, block: int, fallback: bool) -> dict[str, Any]:
    from ai_edge_litert.compiled_model import CompiledModel
    from ai_edge_litert.environment import Environment
    from ai_edge_litert.hardware_accelerator import HardwareAccelerator as HA

    accel_hw = HA.GPU | HA.CPU if fallback else HA.GPU
    accel = CompiledModel.from_file(str(model), hardware_accel=accel_hw, environment=env)
    cpu = CompiledModel.from_file(str(model), hardware_accel=HA.CPU, environment=Environment.create())
    # the accelerator's defaults (cpu_when_faster off), so both paths delegate the same nodes
    interp = delegate.Interpreter(str(model), **{**litert.DEFAULTS, "background_compile": "off", **options})
    calls = [compiled_call(accel), compiled_call(cpu), interpreter_call(interp)]
    for call in calls:
        fastest_call(call, 3)  # warm up
    rounds = [[fastest_call(call, block) for call in calls] for _ in range(blocks)]
    return {
        "model": model.stem,
        "accel_ms": statistics.median(r[0] for r in rounds) * 1e3,
        "cpu_ms": statistics.median(r[1] for r in rounds) * 1e3,
        "interp_ms": statistics.median(r[2] for r in rounds) * 1e3,
        "accel_over_interp": statistics.median(r[0] / r[2] for r in rounds),
        "accel_over_cpu": statistics.median(r[0] / r[1] for r in rounds),
        "fully_accelerated": accel.is_fully_accelerated(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--block", type=int, default=5, help="calls per block")
    parser.add_argument("--option", action="append", default=[], help="delegate option K=V (repeatable)")
    parser.add_argument("--cpu-fallback", action="store_true", help="GPU | CPU for the accelerator's model")
    parser.add_argument("--json", action="store_true", help="one JSON object per model")
    args = parser.parse_args(argv)
    if args.blocks < 1 or args.block < 1:
        parser.error("--blocks and --block must be at least 1")
    models = args.models or [MODELS / f"{name}.tflite" for name in DEFAULT_MODELS]
    options = dict(o.split("=", 1) for o in args.option)
    env = delegate.litert_environment(**options)  # validates the options before any model
    if not args.json:
        print(f"{'model':24s} {'accel':>9s} {'interp':>9s} {'cpu':>9s} {'a/interp':>9s} {'a/cpu':>7s}  (median ms)")
    for model in models:
        r = race(model, env, options, args.blocks, args.block, args.cpu_fallback)
        if args.json:
            print(json.dumps(r), flush=True)
        else:
            print(
                f"{r['model'][:24]:24s} {r['accel_ms']:9.3f} {r['interp_ms']:9.3f} {r['cpu_ms']:9.3f}"
                f" {r['accel_over_interp']:9.3f} {r['accel_over_cpu']:7.3f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
