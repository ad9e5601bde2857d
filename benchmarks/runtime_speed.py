#!/usr/bin/env python3
"""Runtime figures, side by side in one run, on the default device (PoCL without a GPU).

1. Host time per launched node: the C enqueue loop vs the same launches (same kernels, bound
   arguments and geometry) enqueued from Python with pyopencl. Target: 5x lower. On
   PoCL the driver's own clEnqueueNDRangeKernel is most of either figure, which caps the ratio;
   this is reported, not asserted.
2. Memory: device bytes for tensors vs the lower bound (largest sum of simultaneously live
   tensors) on the MobileNetV2-sized synthetic context. Target: within 10%.
3. For information: end-to-end run time of that context (plain, unoptimised kernels).

    python benchmarks/runtime_speed.py [--check] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import pyopencl as cl
from harness import cli, paths

paths.importable()  # tests.runtime_helpers

from delegate import Runtime  # noqa: E402
from delegate.context.synthetic import synthetic_mobilenet  # noqa: E402
from tests.runtime_helpers import chain  # noqa: E402

MAX_MEMORY_OVERHEAD = 1.10


def _per_launch_us(fn: object, launches: int, queue: cl.CommandQueue, repeats: int = 7) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - start)
        queue.finish()
    return statistics.median(samples) / launches * 1e6


def launch_overhead(nodes: int = 200, rounds: int = 5) -> dict[str, float]:
    """Host microseconds per launch, C loop vs pyopencl, for the same kernels and geometry."""
    with Runtime.load(chain(nodes, c=4), cache_dir=False) as rt:
        rt.run([np.ones(rt.input_shapes[0], np.float32)])  # warm up (PoCL specialises at first launch)
        launches = rt.launches()
        queue = rt.queue
        count = rounds * len(launches)

        def python_enqueue() -> None:
            for _ in range(rounds):
                for kernel, global_size, local_size in launches:
                    cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size)

        c_us = _per_launch_us(lambda: rt.enqueue_launches_only(rounds), count, queue)
        py_us = _per_launch_us(python_enqueue, count, queue)
    return {"c_loop_us": c_us, "pyopencl_enqueue_us": py_us, "ratio": py_us / c_us}


def mobilenet() -> dict[str, float]:
    with Runtime.load(synthetic_mobilenet(), profiling=False) as rt:
        report = rt.memory
        x = np.random.default_rng(0).random(rt.input_shapes[0], dtype=np.float32)
        rt.run([x])
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            rt.run([x])
            samples.append(time.perf_counter() - start)
        return {
            "tensor_bytes": report.tensor_bytes,
            "lower_bound_bytes": report.lower_bound_bytes,
            "unshared_bytes": report.unshared_bytes,
            "memory_ratio": report.tensor_bytes / report.lower_bound_bytes,
            "run_ms": statistics.median(samples) * 1e3,
            "nodes": len(rt.node_names),
            "device": rt.device_info.name,
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when the memory target is missed")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    r = {"launch": launch_overhead(), "mobilenet": mobilenet()}
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        lo, mb = r["launch"], r["mobilenet"]
        print(f"device: {mb['device']}")
        print(f"host time per launch, C loop:          {lo['c_loop_us']:7.2f} us")
        print(f"host time per launch, pyopencl loop:   {lo['pyopencl_enqueue_us']:7.2f} us ({lo['ratio']:.1f}x)")
        print(
            f"MobileNetV2-sized context: {mb['nodes']} nodes, tensors {mb['tensor_bytes']} bytes, "
            f"lower bound {mb['lower_bound_bytes']}, unshared {mb['unshared_bytes']} "
            f"(ratio {mb['memory_ratio']:.3f}, target <= {MAX_MEMORY_OVERHEAD})"
        )
        print(f"MobileNetV2-sized context run: {mb['run_ms']:.1f} ms (plain kernels)")
    return cli.check(r["mobilenet"]["memory_ratio"] <= MAX_MEMORY_OVERHEAD, args.check, "memory target missed")


if __name__ == "__main__":
    sys.exit(main())
