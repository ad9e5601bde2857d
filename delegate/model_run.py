"""``python -m delegate run MODEL``: the delegate vs TFLite's CPU path on one seeded input.

Any model TFLite runs: inputs are made per dtype (``input_value``), outputs compared in their
own dtype and, when quantized, as real values too (``compare_output``), one record per output.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

import numpy as np

from .api import Interpreter, current_host, host_runtime
from .compiler.claim import NO_KERNEL
from .model_check import verify_model
from .plugin import DelegateState
from .plugin.options import DelegateOptions

#: float inputs: uniform in [0, 1), the range of normalized images and of most audio features
FLOAT_RANGE = (0.0, 1.0)
#: outputs listed one by one in the text report
MAX_OUTPUTS_SHOWN = 16
#: integer inputs that are not quantized (indices, lengths, flags): uniform in [0, 4)
SMALL_INTEGERS = 4


def input_value(detail: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    """A seeded random value for the input ``detail`` (an entry of ``get_input_details()``).

    - float32 / float16: uniform in ``FLOAT_RANGE``.
    - quantized int8 / uint8 / int16 (a non-zero scale): uniform over the dtype's full range. The
      converter picks scale and zero point so that this range covers the calibration inputs, so
      these are inputs of the kind the model was made for (okay_nabu: features 0 to 26; an image
      model: its normalized pixels), where the [0, 1) of float inputs may be a handful of steps.
    - other integers (int32, int64, unquantized int8 ...): uniform in [0, ``SMALL_INTEGERS``),
      valid as indices, axes or lengths of size 4 and up; bool: True or False.
    """
    dtype = np.dtype(detail["dtype"])
    shape = tuple(int(n) for n in detail["shape"])
    if dtype.kind == "f":
        return rng.uniform(*FLOAT_RANGE, size=shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        if _scales(detail) is not None and dtype.itemsize <= 2:
            info = np.iinfo(dtype)
            return rng.integers(int(info.min), int(info.max), size=shape, endpoint=True, dtype=dtype)
        return rng.integers(0, SMALL_INTEGERS, size=shape).astype(dtype)
    raise ValueError(f"input {detail['name']} is {dtype.name}: no random inputs of this type")


def _scales(detail: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, int] | None:
    """Affine quantization of a tensor detail: (scales, zero points, axis), or None when not quantized."""
    params = detail.get("quantization_parameters") or {}
    scales = np.asarray(params.get("scales", ()), np.float64)
    if scales.size == 0:
        scale, zero_point = detail.get("quantization", (0.0, 0))
        if not scale:
            return None
        return np.array([scale]), np.array([zero_point], np.int64), 0
    if not np.any(scales):
        return None
    zero_points = np.asarray(params.get("zero_points", ()), np.int64)
    if zero_points.size != scales.size:
        zero_points = np.zeros_like(scales, np.int64)
    return scales, zero_points, int(params.get("quantized_dimension", 0))


def seeded_inputs(interpreter: Any, seed: int = 0) -> list[tuple[int, np.ndarray]]:
    """(tensor index, ``input_value``) for every input of ``interpreter``, from one generator seeded ``seed``."""
    rng = np.random.default_rng(seed)
    return [(d["index"], input_value(d, rng)) for d in interpreter.get_input_details()]


def _first_call_and_latency_ms(
    interpreter: Any, inputs: list[tuple[int, np.ndarray]], runs: int
) -> tuple[float | None, list[np.ndarray]]:
    """The outputs of the first invoke, then the median time of ``runs`` more (None for none).

    Both interpreters are fresh, get the same inputs and are compared on their first invoke:
    a stateful model (resource variables set by CALL_ONCE and ASSIGN_VARIABLE, a streaming
    model's buffers) changes its state with every invoke, so only the first call of each starts
    from the same state. The timed invokes after it serve as warm-up-free latency samples (the
    first call is the warm-up) and their outputs are not compared.
    """
    for index, value in inputs:
        interpreter.set_tensor(index, value)
    interpreter.invoke()
    outputs = [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        interpreter.invoke()
        times.append((time.perf_counter() - start) * 1e3)
    return (statistics.median(times) if times else None), outputs


def _relative(error: float, scale: float) -> float | None:
    if scale > 0:
        return error / scale
    return 0.0 if error == 0 else None  # a nonzero error against an all-zero output: no ratio


def compare_output(detail: dict[str, Any], got: np.ndarray, want: np.ndarray) -> dict[str, Any]:
    """How the delegate's output ``got`` differs from TFLite's ``want`` (output ``detail``).

    ``max_abs_error`` / ``max_abs_reference`` are real values: a quantized output is dequantized
    ((q - zero_point) * scale). Every integer or bool output is also compared in its own values:
    ``exact_matches`` of ``elements``, and ``max_abs_steps``, the largest difference in integer
    steps (for a quantized output, steps of ``quantization.scale``).
    """
    dtype = np.dtype(detail["dtype"])
    record: dict[str, Any] = {
        "name": detail["name"],
        "dtype": dtype.name,
        "shape": [int(n) for n in want.shape],
    }
    if got.shape != want.shape:
        raise RuntimeError(
            f"output {detail['name']}: the delegate's shape {list(got.shape)} differs from the CPU's {list(want.shape)}"
        )
    if dtype.kind == "f":
        a, b = got.astype(np.float64), want.astype(np.float64)
    else:
        qa, qb = got.astype(np.int64), want.astype(np.int64)
        steps = int(np.abs(qa - qb).max()) if qa.size else 0
        record.update(exact_matches=int(np.count_nonzero(qa == qb)), elements=int(qa.size), max_abs_steps=steps)
        quant = _scales(detail)
        if quant is None:
            a, b = qa.astype(np.float64), qb.astype(np.float64)
        else:
            scales, zero_points, axis = quant
            view = [1] * want.ndim
            if scales.size > 1:
                view[axis] = scales.size
            s, z = scales.reshape(view), zero_points.reshape(view)
            a, b = (qa - z) * s, (qb - z) * s
            record["quantization"] = {
                "scale": float(scales[0]) if scales.size == 1 else scales.tolist(),
                "zero_point": int(zero_points[0]) if zero_points.size == 1 else zero_points.tolist(),
                **({"axis": axis} if scales.size > 1 else {}),
            }
    error = float(np.abs(a - b).max()) if a.size else 0.0
    scale = float(np.abs(b).max()) if b.size else 0.0
    record.update(max_abs_error=error, max_abs_reference=scale, relative_error=_relative(error, scale))
    return record


def parse_input_shapes(items: list[str]) -> dict[str | int, tuple[int, ...]]:
    """``--input-shape`` values: ``NAME=1,1760`` for the input of that name, or ``1,1760`` for the
    next input in order (the first, then the second ...)."""
    shapes: dict[str | int, tuple[int, ...]] = {}
    position = 0
    for item in items:
        name, sep, dims = item.rpartition("=")
        try:
            shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
        except ValueError:
            raise ValueError(f"--input-shape {item!r}: the dims must be integers, e.g. 1,1760") from None
        if not shape or any(d <= 0 for d in shape):
            raise ValueError(f"--input-shape {item!r}: give positive dims, e.g. 1,1760")
        if sep:
            shapes[name] = shape
        else:
            shapes[position] = shape
            position += 1
    return shapes


def resize_inputs(interpreter: Any, shapes: dict[str | int, tuple[int, ...]]) -> None:
    """Resize ``interpreter``'s inputs named (or numbered) in ``shapes``; before allocate_tensors."""
    details = interpreter.get_input_details()
    by_name = {d["name"]: d for d in details}
    for key, shape in shapes.items():
        detail = details[key] if isinstance(key, int) and key < len(details) else by_name.get(key)  # type: ignore[arg-type]
        if detail is None:
            names = ", ".join(by_name) or "none"
            raise ValueError(f"--input-shape: the model has no input {key!r} (inputs: {names})")
        interpreter.resize_tensor_input(detail["index"], list(shape))


def _dynamic_inputs_hint(interpreter: Any) -> str:
    """A hint naming the inputs whose dims the model leaves open (shape_signature -1), if any."""
    open_dims = [
        f"{d['name']} {[int(n) for n in d.get('shape_signature', d['shape'])]}"
        for d in interpreter.get_input_details()
        if any(int(n) < 0 for n in d.get("shape_signature", ()))
    ]
    if not open_dims:
        return ""
    return (
        f"; the model leaves input dims open ({'; '.join(open_dims)}) and its stored shape may not run:"
        " give one with --input-shape NAME=D,D,..."
    )


def _no_kernel_hint(interpreter: Any) -> str:
    """What the delegate said of the custom ops that neither it nor the host runs, if any."""
    state = getattr(interpreter, "opencl", None)  # None: a CPU interpreter
    unresolved = [f"{name}: {why}" for name, why in (state.unsupported if state else {}).items() if NO_KERNEL in why]
    return f"; {'; '.join(unresolved)}" if unresolved else ""


def allocate(interpreter: Any, input_shapes: dict[str | int, tuple[int, ...]] | None = None) -> None:
    """Resize the inputs named in ``input_shapes``, then allocate; a failure of the delegate's
    interpreter names the custom ops nobody runs or the input dims the model leaves open."""
    if input_shapes:
        resize_inputs(interpreter, input_shapes)
    try:
        interpreter.allocate_tensors()
    except RuntimeError as exc:
        hint = _no_kernel_hint(interpreter) or ("" if input_shapes else _dynamic_inputs_hint(interpreter))
        if not hint:
            raise
        raise RuntimeError(f"{str(exc).strip() or type(exc).__name__}{hint}") from exc


def cpu_interpreter(
    model: str, input_shapes: dict[str | int, tuple[int, ...]] | None = None, num_threads: int | None = None
) -> Any:
    """The reference: the host runtime's default CPU path (XNNPACK), ``num_threads`` threads (default
    one per core), allocated."""
    verify_model(model)
    cpu = host_runtime().Interpreter(model_path=model, num_threads=num_threads or os.cpu_count())
    allocate(cpu, input_shapes)
    return cpu


def run_model(
    model: str,
    options: dict[str, str],
    runs: int,
    seed: int = 0,
    progress: bool = True,
    settings: Any = None,
    settings_type: Any = None,
    input_shapes: dict[str | int, tuple[int, ...]] | None = None,
) -> dict[str, Any]:
    """The delegate against TFLite's CPU path on ``model``; ``input_shapes`` resizes inputs first
    (``parse_input_shapes``), for models whose stored input shape is a placeholder."""
    # an option error before any progress line (the Interpreter's own arguments are not the delegate's)
    DelegateOptions.parse({k: v for k, v in options.items() if k not in ("background_compile", "num_threads")})
    if progress:  # whether it compiles shows on the live line (and in the report's cache states)
        print(f"loading {model} with the OpenCL delegate ...", file=sys.stderr)
    start = time.perf_counter()
    interpreter = Interpreter(model, settings=settings, settings_type=settings_type, **options)
    allocate(interpreter, input_shapes)
    init_ms = (time.perf_counter() - start) * 1e3
    state = interpreter.opencl or DelegateState(DelegateOptions())
    effective = interpreter.effective
    inputs = seeded_inputs(interpreter, seed)
    first_output_ms = _first_output_while_compiling(interpreter, state, inputs, start, progress)
    delegate_ms, outputs = _first_call_and_latency_ms(interpreter, inputs, runs)
    host = current_host()
    try:
        cpu = cpu_interpreter(model, input_shapes)
    except RuntimeError as exc:  # a model only the delegate runs (custom ops TFLite's CPU lacks)
        why = str(exc).strip() or type(exc).__name__
        comparison = _no_comparison(f"{host.name} {host.version}'s CPU path cannot run this model: {why}")
    else:
        comparison = _compare(cpu, inputs, outputs, runs)
    cpu_ms = comparison.pop("cpu_ms")
    return {
        "model": model,
        "host": {"name": host.name, "version": host.version, "numpy": host.numpy_version},
        "delegated_nodes": len(state.delegated_nodes),
        "total_nodes": state.total_nodes,
        "partitions": len(state.partitions),
        "partition_cache": [p.cache for p in state.partitions],
        "kernels": sum(p.kernels for p in state.partitions),
        "fused_ops": sum(p.fused_ops for p in state.partitions),
        "cpu_nodes": state.unsupported,
        "subgraphs": [
            {
                "index": r.index,
                "total_nodes": r.total_nodes,
                "delegated_nodes": len(r.delegated_nodes),
                "partitions": len(r.partitions),
                "kernels": sum(p.kernels for p in r.partitions),
            }
            for r in state.subgraphs
        ],
        **comparison,
        "init_ms": init_ms,
        "latency_ms": {"delegate": delegate_ms, "cpu": cpu_ms},
        "device": state.device,
        "precision": state.precision,
        "storage_type": state.storage_type,
        "engine": effective.engine if effective else "gpu",
        "engine_reason": effective.reason if effective else "",
        "priorities": list(effective.priorities) if effective else None,
        "compile_fallbacks": state.fallbacks,
        "cpu_choices": state.cpu_choices,
        "fallback_settings": {
            "compilation": bool(effective and effective.compile_fallback),
            "execution": bool(effective and effective.execution_fallback),
        },
        "execution_fallback": getattr(interpreter, "fallback_cause", None),
        "execution_path": interpreter.path.value if hasattr(interpreter, "path") else None,
        "cpu_faster_cause": getattr(interpreter, "cpu_faster_cause", None),
        "background_compile": state.background_compile.describe() if state.background_compile else None,
        "tflite_threads": state.tflite_threads.as_dict() if state.tflite_threads else None,
        "worker_affinity": state.worker_affinity or None,
        "first_output_ms": first_output_ms,
    }


def _compare(cpu: Any, inputs: list[tuple[int, np.ndarray]], outputs: list[np.ndarray], runs: int) -> dict[str, Any]:
    """The delegate's ``outputs`` against the CPU interpreter's on the same ``inputs``, and its latency."""
    cpu_ms, reference = _first_call_and_latency_ms(cpu, inputs, runs)
    details = cpu.get_output_details()
    compared = [compare_output(d, a, b) for d, a, b in zip(details, outputs, reference, strict=True)]
    relative = [o["relative_error"] for o in compared]
    # A random-weight classifier's softmax is one value everywhere: then the error says little
    # (single values, a wake-word score, say nothing of the kind).
    constant = any(b.size > 1 for b in reference) and all(b.size <= 1 or b.min() == b.max() for b in reference)
    return {
        "reference": None,
        # the worst over the outputs, as before there were per-output records
        "max_abs_error": max((o["max_abs_error"] for o in compared), default=0.0),
        "max_abs_reference": max((o["max_abs_reference"] for o in compared), default=0.0),
        "max_relative_error": None if None in relative else max(relative, default=0.0),
        "outputs": compared,
        "reference_constant": constant,
        "cpu_ms": cpu_ms,
    }


def _no_comparison(why: str) -> dict[str, Any]:
    """The comparison fields when there is no reference to compare with; ``reference`` says why."""
    return {
        "reference": why,
        "max_abs_error": None,
        "max_abs_reference": None,
        "max_relative_error": None,
        "outputs": [],
        "reference_constant": False,
        "cpu_ms": None,
    }


def _first_output_while_compiling(
    interpreter: Any, state: DelegateState, inputs: list[tuple[int, np.ndarray]], start: float, progress: bool
) -> float | None:
    """Under background compile, still compiling: ms from creation to a first output on TFLite's
    CPU kernels; then wait for the delegate, which the comparison is about. None otherwise."""
    report = state.background_compile
    if report is None or report.path != "compiling":
        return None
    for index, value in inputs:
        interpreter.set_tensor(index, value)
    interpreter.invoke()
    first = (time.perf_counter() - start) * 1e3
    if progress:
        print("first output on CPU; waiting for the delegate's background compile ...", file=sys.stderr)
    interpreter.wait_for_delegate()  # the build's error, when the settings allow no fallback
    return first


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def format_output(o: dict[str, Any]) -> str:
    """One output's comparison: ``StatefulPartitionedCall:0 float32 1x10: max abs error ...``."""
    shape = "x".join(str(n) for n in o["shape"]) or "scalar"
    head = f"  {o['name']} {o['dtype']} {shape}"
    real = (
        f"max abs error {o['max_abs_error']:.3g} (largest |CPU| {o['max_abs_reference']:.3g},"
        f" relative {_ratio(o['relative_error'])})"
    )
    if "exact_matches" not in o:
        return f"{head}: {real}"
    same = f"{o['exact_matches']} of {o['elements']} equal, max {o['max_abs_steps']} steps"
    q = o.get("quantization")
    if q is None:
        return f"{head}: {same}"
    if isinstance(q["scale"], float):
        quant = f"scale {q['scale']:.3g}, zero point {q['zero_point']}"
    else:
        quant = f"per-channel scales on axis {q['axis']}"
    return f"{head} ({quant}): {same}; dequantized {real}"


def format_cpu_choice(c: dict[str, Any]) -> str:
    """One partition's figures of cpu_when_faster: ``partition of 3 nodes: delegate ...``."""
    where = "stays on CPU (faster there)" if c["decision"] == "cpu" else "delegated"
    rule = "" if c["applied"] else " (cpu_when_faster off)"
    rule += " (recorded)" if c.get("source") == "record" else ""
    measured = c.get("measured")
    if measured:
        return (
            f"CPU choice: partition of {len(c['nodes'])} node(s) {where}{rule}: measured, the model took"
            f" {measured['delegate_ms']:.3f} ms per invoke with the delegate, {measured['cpu_ms']:.3f} ms on"
            f" TFLite's CPU kernels (median of {measured['rounds']} rounds)"
        )
    return (
        f"CPU choice: partition of {len(c['nodes'])} node(s) {where}{rule}: the delegate's fixed costs"
        f" {c['delegate_us']:.0f} us per invoke ({c['kernels']} kernel(s)), CPU estimate {c['cpu_us']:.1f} us"
        f" ({c['macs']:,} multiply-adds)"
    )


def _comparison_lines(r: dict[str, Any]) -> list[str]:
    """The report's lines comparing the delegate with the CPU path, or saying there is no reference."""
    if r.get("reference"):
        return [f"no reference: {r['reference']}; the delegate's outputs are not compared"]
    rel = r["max_abs_error"] / r["max_abs_reference"] if r["max_abs_reference"] else 0.0
    lines = [
        f"max abs error vs CPU: {r['max_abs_error']:.3g} (largest |CPU output| {r['max_abs_reference']:.3g},"
        f" relative {rel:.2g}); first invoke of each, same seeded inputs",
        *(format_output(o) for o in r["outputs"][:MAX_OUTPUTS_SHOWN]),
    ]
    if len(r["outputs"]) > MAX_OUTPUTS_SHOWN:
        lines.append(f"  ... {len(r['outputs']) - MAX_OUTPUTS_SHOWN} more outputs (--json lists all)")
    if r.get("execution_path") == "cpu faster":
        lines.append(
            "note: the delegate did not measure faster than TFLite's CPU kernels, so these outputs are TFLite's own;"
            " --option cpu_when_faster=false compares the delegate's"
        )
    if r.get("reference_constant"):
        lines.append(
            "note: every CPU output value is the same (for example the softmax of a random-weight"
            " classifier), so this comparison says little about accuracy; the test suite compares"
            " such models' logits"
        )
    return lines


def _device_line(r: dict[str, Any]) -> str:
    if not r["device"]:
        return "device: none (no node runs on the delegate)"
    return f"device: {r['device']} ({r['precision']}, {r['storage_type']})"


def _cpu_nodes_lines(cpu_nodes: dict[str, str]) -> list[str]:
    """Why nodes stayed on CPU: a line per reason, with the nodes it holds for (one reason often
    holds for many nodes)."""
    by_reason: dict[str, list[str]] = {}
    for name, why in cpu_nodes.items():
        by_reason.setdefault(why, []).append(name)
    lines = []
    for why, names in by_reason.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"on CPU ({len(names)} node{'s' if len(names) > 1 else ''}: {shown}): {why}")
    return lines


def format_result(r: dict[str, Any]) -> str:
    timed = {k: v for k, v in r["latency_ms"].items() if v is not None}
    # not measured faster than TFLite's CPU kernels: the interpreter runs on them (measured_choice.py)
    ours = "this interpreter (on TFLite's CPU kernels)" if r.get("execution_path") == "cpu faster" else "delegate"
    latency = "latency (median): " + (
        ", ".join(f"{'CPU' if k == 'cpu' else ours} {v:.2f} ms" for k, v in timed.items()) or "not timed (--runs 0)"
    )
    lines = [
        f"model: {r['model']}",
        f"host: {r['host']['name']} {r['host']['version']} (numpy {r['host']['numpy']})",
        f"engine: {r['engine']}"
        + (f" ({r['engine_reason']})" if r["engine_reason"] else "")
        + (f"; priorities {', '.join(r['priorities'])}" if r["priorities"] else "")
        + f"; fallback on compilation {r['fallback_settings']['compilation']},"
        f" on execution {r['fallback_settings']['execution']}",
        _device_line(r),
        f"delegated: {r['delegated_nodes']} of {r['total_nodes']} nodes in {r['partitions']} partition(s),"
        f" {r['kernels']} kernels ({r['fused_ops']} ops fused into other kernels)"
        + (f", cache {', '.join(r['partition_cache'])}" if r["partition_cache"] else ""),
        *(
            f"  subgraph {g['index']}: {g['delegated_nodes']} of {g['total_nodes']} nodes in"
            f" {g['partitions']} partition(s), {g['kernels']} kernels"
            for g in (r.get("subgraphs", []) if len(r.get("subgraphs", [])) > 1 else [])
        ),
        *_comparison_lines(r),
        f"init: {r['init_ms']:.0f} ms"
        + (
            f"; first output (on CPU, while compiling) after {r['first_output_ms']:.0f} ms"
            if r.get("first_output_ms")
            else ""
        ),
        *([r["background_compile"]] if r.get("background_compile") else []),
        *(
            [f"on TFLite's CPU kernels: {r['cpu_faster_cause']}"]
            if r.get("cpu_faster_cause")
            and "cpu faster" not in str(r.get("background_compile"))
            and r["cpu_faster_cause"] not in str(r.get("background_compile"))
            else []
        ),
        latency,
    ]
    lines.extend(format_cpu_choice(c) for c in r.get("cpu_choices", []))
    if r.get("tflite_threads"):
        t = r["tflite_threads"]
        work = "not known, it lies in subgraphs" if t["work_us"] is None else f"{t['work_us']:.1f} us per invoke"
        lines.append(
            f"TFLite's kernels: {t['threads']} thread(s) of {t['cores']} cores (the model's estimated work: {work})"
        )
    if r.get("worker_affinity"):
        lines.append(f"PoCL's worker threads: {r['worker_affinity']}")
    for fallback in r["compile_fallbacks"]:
        lines.append(f"fell back to CPU at compile time: {', '.join(fallback['nodes'])}: {fallback['cause']}")
    if r["execution_fallback"]:
        lines.append(f"fell back to CPU at run time: {r['execution_fallback']}")
    lines.extend(_cpu_nodes_lines(r["cpu_nodes"]))
    return "\n".join(lines)
