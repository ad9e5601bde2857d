"""Execution fallback (``allow_automatic_fallback_on_execution_error``): when an invoke fails on the
device, the same inputs run through TFLite's CPU kernels, the outputs are put where the caller
reads them, and every later invoke stays on the CPU.

The state (whether the delegate failed, the CPU interpreter, the cause) is the interpreter's
(``DelegatedInterpreter``, delegate/interpreter.py: its ``FELL_BACK`` path); this module holds
the steps: the cause and warning of a failure, and an invoke on the CPU interpreter in place of
the delegated one.
"""

from __future__ import annotations

from typing import Any

from ._warnings import warn


def cause_of(error: BaseException) -> str:
    """Why the delegate's invoke failed, in one line."""
    return str(error).strip() or "the delegate's invoke failed"


def warn_falling_back(cause: str) -> None:
    """The one warning of a fallback, attributed to the caller's line."""
    warn(f"tflite-opencl-delegate: invoke failed on the device ({cause}); running on CPU from now on")


def run_on_cpu(delegated: Any, cpu: Any) -> None:
    """One invoke of the model on ``cpu`` (a host Interpreter without the delegate, allocated) in
    place of ``delegated``: the inputs set on ``delegated`` are copied across (by name; a resized
    input resizes ``cpu``), and the outputs are put back into ``delegated``'s tensors, where the
    caller reads them."""
    for detail in delegated.get_input_details():
        value = delegated.get_tensor(detail["index"])
        cpu_detail = next(d for d in cpu.get_input_details() if d["name"] == detail["name"])
        if tuple(cpu_detail["shape"]) != value.shape:
            cpu.resize_tensor_input(cpu_detail["index"], value.shape)
            cpu.allocate_tensors()
        cpu.set_tensor(cpu_detail["index"], value)
    cpu.invoke()
    for detail in delegated.get_output_details():
        cpu_detail = next(d for d in cpu.get_output_details() if d["name"] == detail["name"])
        delegated.set_tensor(detail["index"], cpu.get_tensor(cpu_detail["index"]))
