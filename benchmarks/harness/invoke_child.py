"""Times one interpreter in this fresh process and prints one JSON line; run by ``invoke_run``.

    python benchmarks/harness/invoke_child.py MODEL KIND RUNS OPTIONS_JSON

KIND ``delegate``: ``delegate.Interpreter`` with OPTIONS (``cpu_when_faster`` off unless given:
the delegate's own latency, also where that rule would leave a partition on CPU); KIND
``xnnpack``: the host's interpreter with its default delegates and OPTIONS' ``num_threads``
(default: one per core). Inputs are seeded per dtype as ``python -m delegate run`` feeds them.
Prints ``init_ms`` (creation through ``allocate_tensors()``), ``first_call_ms``, then
``latency_ms`` of RUNS calls after 3 untimed ones, the delegate's partition ``cache`` states and
``device``; or ``{"error": ...}`` with exit status 1.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(model: str, kind: str, runs: int, options: dict[str, str]) -> dict[str, object]:
    start = time.perf_counter()
    if kind == "xnnpack":
        from delegate.api import host_runtime

        threads = int(options.get("num_threads", os.cpu_count() or 1))
        it = host_runtime().Interpreter(model_path=model, num_threads=threads)
    else:
        import delegate

        it = delegate.Interpreter(model, **{"cpu_when_faster": "false", **options})
    it.allocate_tensors()
    init = time.perf_counter() - start
    from delegate.model_run import seeded_inputs

    for index, value in seeded_inputs(it, 0):
        it.set_tensor(index, value)
    start = time.perf_counter()
    it.invoke()
    first = time.perf_counter() - start
    for _ in range(3):
        it.invoke()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        it.invoke()
        times.append((time.perf_counter() - start) * 1e3)
    state = getattr(it, "opencl", None)
    return {
        "init_ms": init * 1e3,
        "first_call_ms": first * 1e3,
        "latency_ms": times,
        "cache": [p.cache for p in state.partitions] if state else [],
        "device": state.device if state else "",
    }


if __name__ == "__main__":
    try:
        result = main(sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]))
    except Exception as exc:  # the parent reports it as the reason the path did not run
        print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        sys.exit(1)
    print(json.dumps(result))
