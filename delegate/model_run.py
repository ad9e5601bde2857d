"""``python -m delegate run MODEL``: the delegate vs TFLite's CPU path on one seeded input."""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from .api import Interpreter, host_runtime
from .plugin import DelegateState
from .plugin.options import DelegateOptions


def _inputs(interpreter: Any, seed: int) -> list[tuple[int, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for d in interpreter.get_input_details():
        if d["dtype"] != np.float32:
            raise ValueError(f"input {d['name']} is {d['dtype'].__name__}; only float32 models are supported")
        out.append((d["index"], rng.random(tuple(d["shape"]), dtype=np.float32)))
    return out


def _latency_ms(interpreter: Any, inputs: list[tuple[int, np.ndarray]], runs: int) -> tuple[float, list]:
    for index, value in inputs:
        interpreter.set_tensor(index, value)
    interpreter.invoke()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        interpreter.invoke()
        times.append((time.perf_counter() - start) * 1e3)
    outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    return statistics.median(times), outputs


def run_model(
    model: str,
    options: dict[str, str],
    runs: int,
    seed: int = 0,
    progress: bool = True,
    settings: Any = None,
    settings_type: Any = None,
) -> dict[str, Any]:
    host = host_runtime()
    if progress:
        print(f"loading {model} with the OpenCL delegate (a first start compiles kernels) ...", file=sys.stderr)
    start = time.perf_counter()
    interpreter = Interpreter(model, settings=settings, settings_type=settings_type, **options)
    interpreter.allocate_tensors()
    init_ms = (time.perf_counter() - start) * 1e3
    state = interpreter.opencl or DelegateState(DelegateOptions())
    effective = interpreter.effective
    inputs = _inputs(interpreter, seed)
    delegate_ms, outputs = _latency_ms(interpreter, inputs, runs)
    cpu = host.Interpreter(model_path=model, num_threads=os.cpu_count())
    cpu.allocate_tensors()
    cpu_ms, reference = _latency_ms(cpu, inputs, runs)
    error = max((float(np.abs(a - b).max()) for a, b in zip(outputs, reference, strict=True)), default=0.0)
    scale = max((float(np.abs(b).max()) for b in reference), default=0.0)
    # A random-weight classifier's softmax is one value everywhere: then the error says little.
    constant = bool(reference) and all(b.size == 0 or float(np.ptp(b)) == 0.0 for b in reference)
    return {
        "model": model,
        "delegated_nodes": len(state.delegated_nodes),
        "total_nodes": state.total_nodes,
        "partitions": len(state.partitions),
        "partition_cache": [p.cache for p in state.partitions],
        "kernels": sum(p.kernels for p in state.partitions),
        "fused_ops": sum(p.fused_ops for p in state.partitions),
        "cpu_nodes": state.unsupported,
        "max_abs_error": error,
        "max_abs_reference": scale,
        "reference_constant": constant,
        "init_ms": init_ms,
        "latency_ms": {"delegate": delegate_ms, "cpu": cpu_ms},
        "device": state.device,
        "precision": state.precision,
        "storage_type": state.storage_type,
        "engine": effective.engine if effective else "gpu",
        "engine_reason": effective.reason if effective else "",
        "priorities": list(effective.priorities) if effective else None,
        "compile_fallbacks": state.fallbacks,
        "fallback_settings": {
            "compilation": bool(effective and effective.compile_fallback),
            "execution": bool(effective and effective.execution_fallback),
        },
        "execution_fallback": getattr(interpreter, "fallback_cause", None),
    }


def format_result(r: dict[str, Any]) -> str:
    rel = r["max_abs_error"] / r["max_abs_reference"] if r["max_abs_reference"] else 0.0
    lines = [
        f"model: {r['model']}",
        f"engine: {r['engine']}"
        + (f" ({r['engine_reason']})" if r["engine_reason"] else "")
        + (f"; priorities {', '.join(r['priorities'])}" if r["priorities"] else "")
        + f"; fallback on compilation {r['fallback_settings']['compilation']},"
        f" on execution {r['fallback_settings']['execution']}",
        f"device: {r['device'] or '-'} ({r['precision'] or '-'}, {r['storage_type'] or '-'})",
        f"delegated: {r['delegated_nodes']} of {r['total_nodes']} nodes in {r['partitions']} partition(s),"
        f" {r['kernels']} kernels ({r['fused_ops']} ops fused into other kernels)"
        + (f", cache {', '.join(r['partition_cache'])}" if r["partition_cache"] else ""),
        f"max abs error vs CPU: {r['max_abs_error']:.3g} (largest |CPU output| {r['max_abs_reference']:.3g},"
        f" relative {rel:.2g})",
        *(
            [
                "note: every CPU output value is the same (for example the softmax of a random-weight"
                " classifier), so this comparison says little about accuracy; the test suite compares"
                " such models' logits"
            ]
            if r.get("reference_constant")
            else []
        ),
        f"init: {r['init_ms']:.0f} ms",
        f"latency (median): delegate {r['latency_ms']['delegate']:.2f} ms, CPU {r['latency_ms']['cpu']:.2f} ms",
    ]
    for fallback in r["compile_fallbacks"]:
        lines.append(f"fell back to CPU at compile time: {', '.join(fallback['nodes'])}: {fallback['cause']}")
    if r["execution_fallback"]:
        lines.append(f"fell back to CPU at run time: {r['execution_fallback']}")
    if r["cpu_nodes"]:
        shown = list(r["cpu_nodes"].items())[:8]
        lines.append(
            "on CPU: "
            + "; ".join(f"{name}: {why}" for name, why in shown)
            + (f"; ... {len(r['cpu_nodes']) - 8} more" if len(r["cpu_nodes"]) > 8 else "")
        )
    return "\n".join(lines)
