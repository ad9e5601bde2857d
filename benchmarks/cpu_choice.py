#!/usr/bin/env python3
"""The constants of the rule cpu_when_faster (delegate/compiler/cpu_choice.py), measured here, and
the rule's estimate against measured latencies of whole models, side by side in one run.

1. The delegate's fixed costs: chains of N small FULLY_CONNECTED layers (16 -> 16, ReLU; they
   compute next to nothing), N = 1 .. 32, through the delegate (cpu_when_faster=false): the median
   invoke time is fitted as invoke_us + kernel_us x N.
2. TFLite's CPU kernels (the host's default path, XNNPACK, one thread per core): a 3x3
   convolution at two sizes (8x8x16 -> 16 and 56x56x64 -> 64) gives a cost per node and the
   multiply-adds per microsecond, an ADD of two inputs at two sizes (1x8x8x16, 1x112x112x32) a
   cost per node and the tensor elements (inputs and output) per microsecond; the constants take
   the larger cost per node (layers split over the threads pay it; the chains' tiny layers, run
   on one thread, pay less, shown for information).
3. With ``--models``: each model's partitions as the rule sees them (figures from
   ``interpreter.opencl.cpu_choices``, the rule off so that the delegate runs them) next to the
   measured median latency of the delegate and of the CPU path.

    python benchmarks/cpu_choice.py [--runs 300] [--models M.tflite ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
from harness import paths
from harness.timing import median_s

paths.importable()  # tests.tflite_builder

import delegate  # noqa: E402
from delegate.api import host_runtime  # noqa: E402
from delegate.compiler.graph import Builtin  # noqa: E402
from delegate.model_run import input_value  # noqa: E402
from tests.tflite_builder import Op, T, build_model  # noqa: E402

RELU = ("FullyConnectedOptions", {"FusedActivationFunction": 1})
CHAIN_LENGTHS = (1, 2, 4, 8, 16, 32)


def fc_chain(layers: int, width: int = 16, seed: int = 0) -> bytes:
    """``layers`` FULLY_CONNECTED layers width -> width (ReLU), batch 1."""
    rng = np.random.default_rng(seed)
    tensors, ops = [T((1, width))], []
    for _ in range(layers):
        w = rng.uniform(-0.5, 0.5, (width, width)).astype(np.float32)
        b = rng.uniform(-0.5, 0.5, (width,)).astype(np.float32)
        src = len(tensors) - 1
        tensors += [T(w.shape, w), T(b.shape, b), T((1, width))]
        ops.append(Op(Builtin.FULLY_CONNECTED, [src, src + 1, src + 2], [src + 3], RELU))
    return build_model(tensors, ops, [0], [len(tensors) - 1])


def conv3x3(size: int = 56, channels: int = 64, seed: int = 0) -> tuple[bytes, int]:
    """A 3x3 SAME convolution and its multiply-adds."""
    rng = np.random.default_rng(seed)
    w = rng.uniform(-0.1, 0.1, (channels, 3, 3, channels)).astype(np.float32)
    b = np.zeros(channels, np.float32)
    tensors = [T((1, size, size, channels)), T(w.shape, w), T(b.shape, b), T((1, size, size, channels))]
    options = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})
    model = build_model(tensors, [Op(Builtin.CONV_2D, [0, 1, 2], [3], options)], [0], [3])
    return model, size * size * channels * channels * 9


def add(shape: tuple[int, ...] = (1, 112, 112, 32)) -> tuple[bytes, int]:
    """An ADD of two runtime inputs and the elements it touches (both inputs and the output)."""
    tensors = [T(shape), T(shape), T(shape)]
    return build_model(tensors, [Op(Builtin.ADD, [0, 1], [2])], [0, 1], [2]), 3 * int(np.prod(shape))


def _median_us(interpreter: Any, runs: int) -> float:
    interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], input_value(d, rng))
    for _ in range(5):
        interpreter.invoke()
    return median_s(interpreter.invoke, runs) * 1e6


def delegate_us(model: bytes, runs: int) -> tuple[float, Any]:
    d = delegate.load_delegate(cpu_when_faster="false")
    interpreter = host_runtime().Interpreter(model_content=model, experimental_delegates=[d])
    return _median_us(interpreter, runs), delegate.delegate_state(d)


def cpu_us(model: bytes, runs: int) -> float:
    return _median_us(host_runtime().Interpreter(model_content=model, num_threads=os.cpu_count()), runs)


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(intercept), float(slope)


def calibrate(runs: int) -> dict[str, Any]:
    chains = {n: (delegate_us(fc_chain(n), runs)[0], cpu_us(fc_chain(n), runs)) for n in CHAIN_LENGTHS}
    invoke, kernel = _fit(list(chains), [d for d, _ in chains.values()])
    _, chain_node = _fit(list(chains), [c for _, c in chains.values()])
    convs = [conv3x3(8, 16), conv3x3(56, 64)]
    adds = [add((1, 8, 8, 16)), add((1, 112, 112, 32))]
    conv_us = [cpu_us(m, runs) for m, _ in convs]
    add_us = [cpu_us(m, runs) for m, _ in adds]
    conv_node, us_per_mac = _fit([w for _, w in convs], conv_us)
    add_node, us_per_element = _fit([w for _, w in adds], add_us)
    return {
        "chains": {n: {"delegate_us": d, "cpu_us": c} for n, (d, c) in chains.items()},
        "invoke_us": invoke,
        "kernel_us": kernel,
        "cpu_chain_node_us": chain_node,
        "cpu_conv_us": dict(zip(("small", "large"), conv_us, strict=True)),
        "cpu_add_us": dict(zip(("small", "large"), add_us, strict=True)),
        "cpu_node_us": max(conv_node, add_node),
        "cpu_macs_per_us": 1 / us_per_mac,
        "cpu_elements_per_us": 1 / us_per_element,
    }


def validate(path: str, runs: int) -> dict[str, Any]:
    model = Path(path).read_bytes()
    measured, state = delegate_us(model, runs)
    choices = state.cpu_choices
    return {
        "model": Path(path).name,
        "partitions": len(choices),
        "delegate_fixed_us": sum(c["delegate_us"] for c in choices),
        "cpu_estimate_us": sum(c["cpu_us"] for c in choices),
        "would_stay_on_cpu": sum(1 for c in choices if c["delegate_us"] > c["cpu_us"]),
        "delegate_us": measured,
        "cpu_us": cpu_us(model, runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--models", nargs="*", default=[])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = {
        "calibration": calibrate(args.runs),
        "models": [validate(m, max(args.runs // 10, 20)) for m in args.models],
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    c = result["calibration"]
    print("chain  delegate_us  cpu_us")
    for n, row in c["chains"].items():
        print(f"{n:5d}  {row['delegate_us']:11.1f}  {row['cpu_us']:6.2f}")
    print(f"delegate: {c['invoke_us']:.1f} us per invoke + {c['kernel_us']:.2f} us per kernel")
    print(f"CPU: {c['cpu_node_us']:.2f} us per node (tiny layers of the chains: {c['cpu_chain_node_us']:.3f} us)")
    print(f"CPU conv 3x3 {c['cpu_conv_us']} us: {c['cpu_macs_per_us']:.0f} multiply-adds per us")
    print(f"CPU add {c['cpu_add_us']} us: {c['cpu_elements_per_us']:.0f} elements per us")
    if result["models"]:
        print("model | partitions | delegate fixed us | CPU estimate us | stay on CPU | delegate us | CPU us")
        for m in result["models"]:
            print(
                f"{m['model']} | {m['partitions']} | {m['delegate_fixed_us']:.0f} | {m['cpu_estimate_us']:.1f} |"
                f" {m['would_stay_on_cpu']} | {m['delegate_us']:.1f} | {m['cpu_us']:.1f}"
            )


if __name__ == "__main__":
    main()
