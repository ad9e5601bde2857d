#!/usr/bin/env python3
"""One model through ai-edge-litert's ``CompiledModel`` on its GPU accelerator, timed; a child of compare.py.

On Linux LiteRT's GPU accelerator is WebGPU (Dawn) over Vulkan; on a machine without a GPU it runs on
Mesa's software Vulkan driver (lavapipe, shown as "llvmpipe"). Needs, in the Python running this:
ai-edge-litert 2.x and numpy; on the system: libvulkan.so.1 and a Vulkan ICD that Dawn accepts. Debian
bookworm's Mesa 22 lavapipe lacks features Dawn requires; Mesa 25's ``mesa-vulkan-drivers`` from
bookworm-backports works.

Measures, all wall time in ms:

- ``init_ms``: importing ai_edge_litert, creating the compiled model (GPU accelerator only, no CPU
  fallback) and its input and output buffers.
- ``first_call_ms``: the first run (WebGPU compiles its shaders here: tens of seconds on lavapipe).
- ``latency_ms``: each of the ``--runs`` calls after it.

A call is ``run_by_index`` plus reading the outputs back to host memory (so the GPU work is finished);
the inputs, seeded random float32 (or the tensor's own dtype) in [0, 1), are written once before it.

The model must be fully accelerated on the GPU (``is_fully_accelerated()``): nothing may silently run on
the CPU. stdout gets exactly one JSON line (LiteRT's own log, which it writes to both stdout and stderr,
goes to stderr)::

    {"init_ms", "first_call_ms", "latency_ms", "accelerator", "fully_accelerated", "vulkan_device"}

or, with exit code 3 when the GPU accelerator is not usable, ``{"unavailable": "<reason>"}``.

    python benchmarks/litert_gpu.py MODEL [--runs N]
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import json
import os
import re
import sys
import threading
import time
from typing import IO, NoReturn

import numpy as np

UNAVAILABLE = 3
ADAPTER = re.compile(r"Selected adapter: (.+)")
# LiteRT's error lines (and Dawn's warnings) that say why the GPU accelerator failed; the vendor
# compiler plugins and the NPU registry fail on every run here and are not the reason.
ERROR = re.compile(r"^(ERROR:|E\d{4} |Warning: vk).*")
BENIGN = ("compiler_plugin", "npu_registry")


class NativeOutput:
    """Sends file descriptors 1 and 2 through a pipe that is echoed to stderr and kept for parsing."""

    def __init__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.json_out: IO[str] = os.fdopen(os.dup(1), "w")
        self._stderr = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._chunks: list[bytes] = []
        self._pump = threading.Thread(target=self._copy, args=(read_end,), daemon=True)
        self._pump.start()
        self._log: str | None = None
        atexit.register(self.close)  # an unexpected traceback still reaches stderr

    def _copy(self, read_end: int) -> None:
        while chunk := os.read(read_end, 1 << 16):
            self._chunks.append(chunk)
            os.write(self._stderr, chunk)
        os.close(read_end)

    def close(self) -> str:
        """Points 1 and 2 at stderr again (the pipe's last writers), waits for the pump; the log."""
        if self._log is not None:
            return self._log
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self._stderr, 1)
        os.dup2(self._stderr, 2)
        self._pump.join(timeout=10)
        self._log = b"".join(self._chunks).decode(errors="replace")
        return self._log


def unavailable(out: NativeOutput, reason: str, error: BaseException | None = None) -> NoReturn:
    log = out.close()
    lines = [m.group(0).strip() for m in map(ERROR.match, log.splitlines()) if m]
    lines = [line for line in lines if not any(b in line for b in BENIGN)]
    if "No adapters found" in log or "VK_ERROR_INCOMPATIBLE_DRIVER" in log:
        reason += (
            ": WebGPU found no usable Vulkan device (no Vulkan ICD, or a driver lacking features Dawn needs;"
            " Mesa >= 25 lavapipe works, e.g. mesa-vulkan-drivers from bookworm-backports)"
        )
    if error is not None:
        reason += f": {type(error).__name__}: {' '.join(str(error).split())}"
    if lines:
        reason += " | " + " | ".join(dict.fromkeys(lines))
    print(json.dumps({"unavailable": reason}), file=out.json_out, flush=True)
    sys.exit(UNAVAILABLE)


def random_input(rng: np.random.Generator, shape: list[int], dtype: str) -> np.ndarray:
    if np.issubdtype(np.dtype(dtype), np.floating):
        return rng.random(shape, dtype=np.float32).astype(dtype)
    return rng.integers(0, 2, size=shape).astype(dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--runs", type=int, default=10, help="timed calls after the first (default 10)")
    args = parser.parse_args()
    out = NativeOutput()
    if not os.path.isfile(args.model):
        unavailable(out, f"no model file {args.model}")
    try:
        ctypes.CDLL("libvulkan.so.1")
    except OSError as error:
        unavailable(out, "no Vulkan loader (libvulkan.so.1; Debian: apt-get install libvulkan1)", error)

    start = time.perf_counter()
    try:
        from ai_edge_litert.compiled_model import CompiledModel
        from ai_edge_litert.hardware_accelerator import HardwareAccelerator
    except ImportError as error:
        unavailable(out, "ai_edge_litert is not importable in this Python", error)
    try:
        model = CompiledModel.from_file(args.model, hardware_accel=HardwareAccelerator.GPU)
        fully_accelerated = model.is_fully_accelerated()
        signature = model.get_signature_by_index(0)["key"]
        inputs, outputs = model.create_input_buffers(0), model.create_output_buffers(0)
    except RuntimeError as error:
        unavailable(out, "LiteRT refused the GPU accelerator", error)
    init = time.perf_counter() - start
    if not fully_accelerated:
        unavailable(out, "not fully accelerated: some ops of the model would run on the CPU")

    rng = np.random.default_rng(0)
    details = model.get_input_tensor_details(signature)
    for buffer, name in zip(inputs, model.get_signature_list()[signature]["inputs"], strict=True):
        buffer.write(random_input(rng, details[name]["shape"], details[name]["dtype"]))
    reads = [(buffer, buffer.get_tensor_details()) for buffer in outputs]

    def call() -> float:
        begin = time.perf_counter()
        model.run_by_index(0, inputs, outputs)
        for buffer, detail in reads:
            buffer.read(int(np.prod(detail["shape"])), detail["dtype"])
        return (time.perf_counter() - begin) * 1e3

    try:
        first = call()
        latency = [call() for _ in range(args.runs)]
    except RuntimeError as error:
        unavailable(out, "running on the GPU accelerator failed", error)
    log = out.close()
    adapter = ADAPTER.search(log)
    registered = re.search(r"RegisterAccelerator: .*name=(GPU[^\n]*)", log)
    result = {
        "init_ms": init * 1e3,
        "first_call_ms": first,
        "latency_ms": latency,
        "accelerator": registered.group(1).strip() if registered else "GPU (requested)",
        "fully_accelerated": fully_accelerated,
        "vulkan_device": adapter.group(1).strip() if adapter else None,
    }
    print(json.dumps(result), file=out.json_out, flush=True)


if __name__ == "__main__":
    main()
