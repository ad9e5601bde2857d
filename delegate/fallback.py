"""Execution fallback (``allow_automatic_fallback_on_execution_error``): when an invoke fails on the
device, the same inputs run through TFLite's CPU kernels, the outputs are put where the caller
reads them, and every later invoke stays on the CPU."""

from __future__ import annotations

import warnings
from typing import Any


class FallbackInterpreter:
    """Wraps a delegated host Interpreter; everything but ``invoke`` goes straight to it."""

    def __init__(self, interpreter: Any, make_cpu: Any) -> None:
        self._interpreter = interpreter
        self._make_cpu = make_cpu
        self._cpu: Any = None
        #: why the model runs on CPU now (None while it runs on the GPU path)
        self.fallback_cause: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._interpreter, name)

    def invoke(self) -> None:
        if self._cpu is None:
            try:
                self._interpreter.invoke()
                return
            except RuntimeError as exc:
                self.fallback_cause = str(exc).strip() or "the delegate's invoke failed"
                warnings.warn(
                    f"tflite-opencl-delegate: invoke failed on the device ({self.fallback_cause}); "
                    "running on CPU from now on",
                    stacklevel=2,
                )
                self._cpu = self._make_cpu()
        self._run_on_cpu()

    def _run_on_cpu(self) -> None:
        gpu, cpu = self._interpreter, self._cpu
        for detail in gpu.get_input_details():
            value = gpu.get_tensor(detail["index"])
            cpu_detail = next(d for d in cpu.get_input_details() if d["name"] == detail["name"])
            if tuple(cpu_detail["shape"]) != value.shape:
                cpu.resize_tensor_input(cpu_detail["index"], value.shape)
                cpu.allocate_tensors()
            cpu.set_tensor(cpu_detail["index"], value)
        cpu.invoke()
        for detail in gpu.get_output_details():
            cpu_detail = next(d for d in cpu.get_output_details() if d["name"] == detail["name"])
            gpu.set_tensor(detail["index"], cpu.get_tensor(cpu_detail["index"]))
