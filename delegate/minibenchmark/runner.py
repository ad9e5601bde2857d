"""Run each TFLiteSettings of a MinibenchmarkSettings in its own process and record the events.

The parent writes START before a run and END (with a BenchmarkResult) or ERROR (with a
BenchmarkError) after it, so a START with nothing after it means the parent itself died. A
run's outputs are compared with TFLite's CPU kernels on the same seeded inputs: the maximum
absolute error (and the same relative to the reference's largest magnitude) and, for outputs
that are probability distributions, the KL divergence of the run's from the reference's.

``mini_benchmark_error_code`` of an ERROR: 1 the process crashed (``signal`` set), 2 it ran past
the deadline, 3 a handled error (message on the worker's stderr), 4 the results were unreadable.
"""

from __future__ import annotations

import base64
import json
import os
import signal as signals
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._generated import configuration_pb2 as pb
from ..errors import SettingsError
from ..host import host_module
from ..model_check import verify_model
from ..settings.decisions import append_event, read_events, write_decision

CRASHED, TIMED_OUT, HANDLED, UNREADABLE = 1, 2, 3, 4
TOLERANCE = {"F32": 1e-4, "F32_F16": 2e-2, "F16": 2e-2}
KL_LIMIT = 1e-3
#: the arguments after the interpreter that start a run's process (tests start a worker that fails
#: on purpose, tests/minibenchmark_fault_worker.py, by replacing them)
WORKER: tuple[str, ...] = ("-m", "delegate.minibenchmark.worker")


@dataclass
class Row:
    """One settings' outcome, for the final table and --json."""

    settings: str
    ok: bool
    status: str  # "ok", "wrong results", or what went wrong
    init_ms: float | None = None
    median_ms: float | None = None
    p90_ms: float | None = None
    memory_kb: int | None = None
    max_abs_error: float | None = None
    kl_divergence: float | None = None
    precision: str = ""


@dataclass
class MinibenchmarkReport:
    rows: list[Row] = field(default_factory=list)
    events: list[pb.BenchmarkEvent] = field(default_factory=list)
    decision: pb.BestAccelerationDecision | None = None
    decision_path: Path | None = None


def default_settings_to_test() -> list[pb.TFLiteSettings]:
    """What to try when the caller names nothing: the GPU delegate with full float precision, the
    GPU delegate allowed to lose precision (half-precision storage), and TFLite's own CPU path."""
    f32 = pb.TFLiteSettings(delegate=pb.GPU)
    f32.gpu_settings.inference_priority1 = pb.GPU_PRIORITY_MAX_PRECISION
    half = pb.TFLiteSettings(delegate=pb.GPU)
    half.gpu_settings.is_precision_loss_allowed = True
    return [f32, half, pb.TFLiteSettings(delegate=pb.XNNPACK)]


def describe(settings: pb.TFLiteSettings) -> str:
    """A short label: delegate, priorities / precision-loss flag, backend."""
    if settings.HasField("delegate") and settings.delegate != pb.GPU:  # NONE, XNNPACK, or one refused (NNAPI ...)
        return pb.Delegate.Name(settings.delegate)
    gpu = settings.gpu_settings
    parts = ["GPU"]
    prios = [gpu.inference_priority1, gpu.inference_priority2, gpu.inference_priority3]
    if any(prios):
        parts.append("/".join(pb.GPUInferencePriority.Name(p).removeprefix("GPU_PRIORITY_") for p in prios))
    elif gpu.is_precision_loss_allowed:
        parts.append("precision loss")
    if gpu.force_backend:
        parts.append(pb.GPUBackend.Name(gpu.force_backend))
    return " ".join(parts)


def _now_us() -> tuple[int, int]:
    return int(time.monotonic() * 1e6), int(time.time() * 1e6)


def _event(settings: pb.TFLiteSettings, kind: int) -> pb.BenchmarkEvent:
    boot, wall = _now_us()
    return pb.BenchmarkEvent(tflite_settings=settings, event_type=kind, boottime_us=boot, wallclock_us=wall)


def _model_path(model_file: pb.ModelFile, scratch: Path) -> str:
    if model_file.filename:
        return model_file.filename
    if model_file.HasField("fd"):
        data = os.pread(model_file.fd, model_file.length, model_file.offset)
        if len(data) != model_file.length:
            raise SettingsError(f"model_file: read {len(data)} of {model_file.length} bytes from fd {model_file.fd}")
        path = scratch / "model.tflite"
        path.write_bytes(data)
        return str(path)
    raise SettingsError(
        "no model to benchmark: give the model (python -m delegate minibenchmark MODEL), or "
        "model_file { filename: ... } (or fd, offset and length) in the MinibenchmarkSettings"
    )


def _metrics(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> tuple[float, float, float | None]:
    """(max abs error, max abs error / largest |reference|, KL divergence or None)."""
    error, scale, kl = 0.0, 0.0, None
    for name, ref in reference.items():
        got = outputs[name].astype(np.float64)
        ref64 = ref.astype(np.float64)
        error = max(error, float(np.abs(got - ref64).max()))
        scale = max(scale, float(np.abs(ref64).max()))
        if ref64.size and (ref64 >= 0).all() and np.allclose(ref64.sum(axis=-1), 1.0, atol=1e-3):
            p, q = np.clip(ref64, 1e-12, None), np.clip(got, 1e-12, None)
            value = max(float(np.max(np.sum(p * np.log(p / q), axis=-1))), 0.0)
            kl = value if kl is None else max(kl, value)
    return error, (error / scale if scale else error), kl


def run_minibenchmark(
    settings: pb.MinibenchmarkSettings,
    *,
    runs: int = 5,
    init_runs: int = 2,
    timeout_s: float = 600.0,
    options: dict[str, str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> MinibenchmarkReport:
    """Benchmark every ``settings_to_test`` and write the events and the decision (if storage is set)."""
    if not settings.settings_to_test:
        raise SettingsError(
            "MinibenchmarkSettings.settings_to_test is empty: add the TFLiteSettings to try "
            "(default_settings_to_test() gives GPU F32, GPU with precision loss allowed, and XNNPACK)"
        )
    storage = settings.storage_paths.storage_file_path or None
    report = MinibenchmarkReport()
    if storage:
        close_dangling_starts(storage)
    with tempfile.TemporaryDirectory(prefix="delegate-minibenchmark-") as tmp:
        scratch = Path(tmp)
        model = _model_path(settings.model_file, scratch)
        verify_model(model)  # before the reference interpreter, so a bad file is a ModelFormatError
        host = host_module()[1]
        cpu = host.Interpreter(model_path=model)
        cpu.allocate_tensors()
        rng = np.random.default_rng(0)
        inputs = {}
        for detail in cpu.get_input_details():
            if detail["dtype"] != np.float32:
                raise SettingsError(f"input {detail['name']} is not float32")
            inputs[detail["name"]] = rng.random(tuple(detail["shape"]), dtype=np.float32)
            cpu.set_tensor(detail["index"], inputs[detail["name"]])
        cpu.invoke()
        reference = {d["name"]: cpu.get_tensor(d["index"]) for d in cpu.get_output_details()}
        np.savez(scratch / "inputs.npz", **inputs)
        total = len(settings.settings_to_test)
        for number, tfl in enumerate(settings.settings_to_test):
            label = describe(tfl)
            if progress:
                progress(number, total, label)
            start_event = _event(tfl, pb.START)
            report.events.append(start_event)
            if storage:
                append_event(storage, start_event)
            event, row = _run_one(
                tfl, label, model, scratch, number, runs, init_runs, timeout_s, options or {}, reference
            )
            report.events.append(event)
            report.rows.append(row)
            if storage:
                append_event(storage, event)
        if progress:
            progress(total, total, "done")
    ok_events = [e for e in report.events if e.event_type == pb.END and e.result.ok]
    decision = pb.BestAccelerationDecision(number_of_source_events=len(report.events))
    if ok_events:
        best = min(ok_events, key=lambda e: statistics.median(e.result.inference_time_us))
        decision.min_latency_event.CopyFrom(best)
        decision.min_inference_time_us = int(statistics.median(best.result.inference_time_us))
    report.decision = decision
    if storage:
        all_events, _ = read_events(storage)
        decision.number_of_source_events = len(all_events)
        report.decision_path = write_decision(storage, decision)
    return report


def close_dangling_starts(storage: str | os.PathLike[str]) -> int:
    """Record an ERROR for every START that nothing followed: the process recording it died
    (a crash or a kill of the benchmarking process itself). The number recorded."""
    events, _ = read_events(storage)
    dangling: list[pb.BenchmarkEvent] = []
    for event in events:
        if event.event_type == pb.START:
            dangling.append(event)
        elif event.event_type in (pb.END, pb.ERROR) and dangling:
            same = [e for e in dangling if e.tflite_settings == event.tflite_settings]
            dangling.remove(same[0] if same else dangling[0])
    for start in dangling:
        append_event(storage, _error(start.tflite_settings, pb.UNKNOWN, CRASHED, exit_code=0, signal=0))
    return len(dangling)


def _run_one(
    tfl: pb.TFLiteSettings,
    label: str,
    model: str,
    scratch: Path,
    number: int,
    runs: int,
    init_runs: int,
    timeout_s: float,
    options: dict[str, str],
    reference: dict[str, np.ndarray],
) -> tuple[Any, Row]:
    outputs_path = scratch / f"outputs{number}.npz"
    job = {
        "model": model,
        "settings": base64.b64encode(tfl.SerializeToString()).decode(),
        "inputs": str(scratch / "inputs.npz"),
        "outputs": str(outputs_path),
        "runs": runs,
        "init_runs": init_runs,
        "options": options,
    }
    command = [sys.executable, *WORKER]
    stage, stderr = pb.INITIALIZATION, ""
    try:
        done = subprocess.run(command, input=json.dumps(job), capture_output=True, text=True, timeout=timeout_s)
        stderr, code = done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        stage = pb.INFERENCE if "STAGE INFERENCE" in stderr else pb.INITIALIZATION
        return _error(tfl, stage, TIMED_OUT, exit_code=0, signal=int(signals.SIGKILL)), Row(
            label, False, f"timed out after {timeout_s:.0f} s ({pb.BenchmarkStage.Name(stage).lower()})"
        )
    if "STAGE INFERENCE" in stderr:
        stage = pb.INFERENCE
    if code != 0:
        if code < 0:
            name = signals.Signals(-code).name
            return _error(tfl, stage, CRASHED, exit_code=0, signal=-code), Row(
                label, False, f"crashed ({name}) during {pb.BenchmarkStage.Name(stage).lower()}"
            )
        message = next((line[6:] for line in reversed(stderr.splitlines()) if line.startswith("ERROR ")), "")
        event = _error(tfl, stage, HANDLED, exit_code=code, signal=0)
        event.error.error_code.add(source=tfl.delegate or pb.GPU, tflite_error=1)
        return event, Row(label, False, f"error during {pb.BenchmarkStage.Name(stage).lower()}: {message}"[:160])
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
        with np.load(outputs_path) as data:
            outputs = {name: data[name] for name in data.files}
        error, relative, kl = _metrics(outputs, reference)
    except (ValueError, IndexError, KeyError, OSError) as exc:
        return _error(tfl, pb.INFERENCE, UNREADABLE, exit_code=0, signal=0), Row(label, False, f"unreadable: {exc}")
    precision = result["precision"] if result["engine"] == "gpu" else "F32"
    ok = relative <= TOLERANCE.get(precision, 1e-4) and (kl is None or kl <= KL_LIMIT)
    bench = pb.BenchmarkResult(
        initialization_time_us=result["initialization_time_us"],
        inference_time_us=result["inference_time_us"],
        max_memory_kb=int(result["max_memory_kb"]),
        ok=ok,
    )
    bench.metrics.add(name="max_abs_error", values=[error])
    bench.metrics.add(name="relative_error", values=[relative])
    if kl is not None:
        bench.metrics.add(name="kl_divergence", values=[kl])
    event = _event(tfl, pb.END)
    event.result.CopyFrom(bench)
    times = sorted(result["inference_time_us"])
    row = Row(
        label,
        ok,
        "ok" if ok else "wrong results",
        init_ms=statistics.median(result["initialization_time_us"]) / 1e3,
        median_ms=statistics.median(times) / 1e3,
        p90_ms=times[min(len(times) - 1, round(0.9 * (len(times) - 1)))] / 1e3,
        memory_kb=int(result["max_memory_kb"]),
        max_abs_error=error,
        kl_divergence=kl,
        precision=precision,
    )
    return event, row


def _error(tfl: pb.TFLiteSettings, stage: int, code: int, *, exit_code: int, signal: int) -> pb.BenchmarkEvent:
    event = _event(tfl, pb.ERROR)
    event.error.stage = stage
    event.error.exit_code = exit_code
    event.error.signal = signal
    event.error.mini_benchmark_error_code = code
    return event
