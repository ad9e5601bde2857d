#!/usr/bin/env python3
"""MobileNetV2's layer shapes, and the MediaPipe models' first layers, one at a time: XNNPACK
against the delegate's kernel.

Each layer is a one-op model built here (random weights, ReLU6 fused, SAME padding), run through
tflite-runtime's default CPU path (XNNPACK, 2 threads: ``invoke()`` wall time, minimum and median
of 300 calls) and compiled by the delegate, whose kernel is timed on the device (OpenCL
profiling, the minimum of ``--runs`` runs, as ``kernel_profile.py`` does). A layer alone reads
inputs that are still in cache; in the model's chain it reads what the previous layer just wrote,
so these figures say where a kernel stands, not what the whole model costs.

    python benchmarks/layer_compare.py [--layers NAME ...] [--runs N]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import kernel_profile
import numpy as np
from harness import paths

paths.importable()  # tests.tflite_builder

from tflite.BuiltinOperator import BuiltinOperator  # noqa: E402

from delegate.api import host_runtime  # noqa: E402
from tests.tflite_builder import Op, T, build_model  # noqa: E402

RELU6 = 3


def conv(rng: np.random.Generator, size: int, cin: int, cout: int, k: int, stride: int) -> bytes:
    out = -(-size // stride)
    tensors = [
        T((1, size, size, cin)),
        T((cout, k, k, cin), rng.standard_normal((cout, k, k, cin)).astype(np.float32) * 0.1),
        T((cout,), rng.standard_normal(cout).astype(np.float32)),
        T((1, out, out, cout)),
    ]
    options = {"Padding": 0, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": RELU6}
    return build_model(tensors, [Op(BuiltinOperator.CONV_2D, [0, 1, 2], [3], ("Conv2DOptions", options))], [0], [3])


def depthwise(rng: np.random.Generator, size: int, channels: int, stride: int) -> bytes:
    out = -(-size // stride)
    tensors = [
        T((1, size, size, channels)),
        T((1, 3, 3, channels), rng.standard_normal((1, 3, 3, channels)).astype(np.float32)),
        T((channels,), rng.standard_normal(channels).astype(np.float32)),
        T((1, out, out, channels)),
    ]
    options = {"Padding": 0, "StrideW": stride, "StrideH": stride, "DepthMultiplier": 1,
               "FusedActivationFunction": RELU6}  # fmt: skip
    op = Op(BuiltinOperator.DEPTHWISE_CONV_2D, [0, 1, 2], [3], ("DepthwiseConv2DOptions", options))
    return build_model(tensors, [op], [0], [3])


#: name -> model builder: MobileNetV2's first blocks and a few later layers (names as in the model).
LAYERS: dict[str, Callable[[np.random.Generator], bytes]] = {
    "conv_2d_0": lambda r: conv(r, 224, 3, 32, 3, 2),
    "depthwise_conv_2d_1": lambda r: depthwise(r, 112, 32, 1),
    "conv_2d_2": lambda r: conv(r, 112, 32, 16, 1, 1),
    "conv_2d_3": lambda r: conv(r, 112, 16, 96, 1, 1),
    "depthwise_conv_2d_4": lambda r: depthwise(r, 112, 96, 2),
    "conv_2d_5": lambda r: conv(r, 56, 96, 24, 1, 1),
    "conv_2d_6": lambda r: conv(r, 56, 24, 144, 1, 1),
    "depthwise_conv_2d_7": lambda r: depthwise(r, 56, 144, 1),
    "conv_2d_8": lambda r: conv(r, 56, 144, 24, 1, 1),
    "depthwise_conv_2d_11": lambda r: depthwise(r, 56, 144, 2),
    "conv_2d_13": lambda r: conv(r, 28, 32, 192, 1, 1),
    "depthwise_conv_2d_14": lambda r: depthwise(r, 28, 192, 1),
    "conv_2d_43": lambda r: conv(r, 14, 96, 576, 1, 1),
    "depthwise_conv_2d_44": lambda r: depthwise(r, 14, 576, 1),
    "conv_2d_58": lambda r: conv(r, 7, 160, 960, 1, 1),
    "depthwise_conv_2d_59": lambda r: depthwise(r, 7, 960, 1),
    "conv_2d_61": lambda r: conv(r, 7, 320, 1280, 1, 1),
    # first layers over 3-channel images of the MediaPipe models (README of ../shared/models/real)
    "face_detection_conv0": lambda r: conv(r, 128, 3, 24, 5, 2),
    "pose_detection_conv0": lambda r: conv(r, 224, 3, 24, 3, 2),
    "face_landmark_conv0": lambda r: conv(r, 192, 3, 16, 3, 2),
    "hand_recrop_conv0": lambda r: conv(r, 256, 3, 8, 3, 2),
    "unet_conv0": lambda r: conv(r, 128, 3, 16, 3, 1),
}


def xnnpack_us(path: Path, calls: int = 300) -> tuple[float, float]:
    interpreter = host_runtime().Interpreter(model_path=str(path), num_threads=2)
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    interpreter.set_tensor(detail["index"], np.random.default_rng(0).random(detail["shape"], dtype=np.float32))
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        interpreter.invoke()
        times.append(time.perf_counter() - start)
    return min(times) * 1e6, float(np.median(times)) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="*", choices=sorted(LAYERS), help="default: all")
    parser.add_argument("--runs", type=int, default=30, help="profiled runs of the delegate's kernel")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'layer':22s} {'XNNPACK min':>12s} {'median':>8s} {'delegate':>9s}  (us)")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.layers or LAYERS:
            path = Path(folder) / f"{name}.tflite"
            path.write_bytes(LAYERS[name](rng))
            best, median = xnnpack_us(path)
            kernels = kernel_profile.profile(path, [], args.runs)
            ours = sum(seconds for _, seconds in kernels) * 1e6
            print(f"{name:22s} {best:12.0f} {median:8.0f} {ours:9.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
