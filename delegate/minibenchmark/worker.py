"""One mini-benchmark run in its own process: ``python -m delegate.minibenchmark.worker``.

Reads a JSON job on stdin, reports its stage on stderr (``STAGE INITIALIZATION`` /
``STAGE INFERENCE``) so that the parent can tell where a crash happened, writes the outputs to
an .npz and prints one JSON result line. ``run(stage)`` takes what reports a stage, so that a test's
worker (tests/minibenchmark_fault_worker.py, started through ``runner.WORKER``) can crash or hang
there.
"""

from __future__ import annotations

import base64
import json
import resource
import sys
import time
from collections.abc import Callable

import numpy as np


def report_stage(name: str) -> None:
    print(f"STAGE {name}", file=sys.stderr, flush=True)


def main(stage: Callable[[str], None] = report_stage) -> int:
    job = json.loads(sys.stdin.read())
    from delegate.api import Interpreter
    from delegate.settings import configuration_pb2 as pb

    settings = pb.TFLiteSettings.FromString(base64.b64decode(job["settings"]))
    inputs = np.load(job["inputs"])
    stage("INITIALIZATION")
    init_us, interpreter = [], None
    for _ in range(job["init_runs"]):
        interpreter = None
        start = time.perf_counter()
        options = {"background_compile": "off", **job.get("options", {})}  # it benchmarks the delegate
        interpreter = Interpreter(job["model"], settings=settings, settings_type=pb.TFLiteSettings, **options)
        interpreter.allocate_tensors()
        init_us.append(int((time.perf_counter() - start) * 1e6))
    assert interpreter is not None
    stage("INFERENCE")
    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], inputs[detail["name"]])
    inference_us = []
    for _ in range(job["runs"]):
        start = time.perf_counter()
        interpreter.invoke()
        inference_us.append(int((time.perf_counter() - start) * 1e6))
    outputs = {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}
    np.savez(job["outputs"], **outputs)
    state = interpreter.opencl
    print(
        json.dumps(
            {
                "initialization_time_us": init_us,
                "inference_time_us": inference_us,
                "max_memory_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                "engine": interpreter.effective.engine if interpreter.effective else "gpu",
                "precision": state.precision if state else "F32",
                "delegated_nodes": len(state.delegated_nodes) if state else 0,
            }
        )
    )
    return 0


def run(stage: Callable[[str], None] = report_stage) -> int:
    """The process's exit status: ``main``'s, or 3 with the error on stderr."""
    try:
        return main(stage)
    except Exception as exc:
        print(f"ERROR {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 3


if __name__ == "__main__":
    sys.exit(run())
