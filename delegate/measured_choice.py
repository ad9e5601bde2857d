"""cpu_when_faster by measurement: ``delegate.Interpreter`` times the model with the delegate against
TFLite's CPU kernels once the delegate is built, and runs it on whichever was faster.

The rule's estimate (compiler/cpu_choice.py) weighs the delegate's fixed costs only, so it never
catches a partition whose kernels are slower than TFLite's (a transformer's batched products, an
int8 network on a CPU device). Under background compile the build thread therefore, after building
the delegated interpreter, makes a CPU interpreter of the model (the threads the delegated one has)
and times both on the same inputs, interleaved (one invoke of each per round, so that load on the
machine weighs on both alike), and compares medians. When TFLite's CPU kernels were faster the
caller's invokes go to that CPU interpreter (``ExecutionPath.CPU_FASTER``).

The measurement is of the whole model, and every delegated partition the rule applies to gets it:
in ``interpreter.opencl.cpu_choices`` and, with a ``serialization_dir``, in its record there, so a
later start reads it (the plugin leaves the partitions on CPU without compiling them, or delegates
them) and does not measure again. It runs where the rule applies (a CPU device, ``cpu_when_faster``
auto or true) and something was delegated; ``cpu_when_faster=false`` turns it off.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import cancel
from .compiler.cpu_choice import Measured
from .plugin import DelegateState
from .plugin.choice_record import measured_partitions, record_measurement

#: the least rounds measured, and the most
MIN_ROUNDS = 3
MAX_ROUNDS = 30
#: rounds go on past MIN_ROUNDS until this much time was spent measuring
BUDGET_S = 0.4


@dataclass(frozen=True)
class Outcome:
    """What a measurement found: the figures, and the allocated CPU interpreter to run on when it was faster."""

    measured: Measured
    cpu: Any = None


def applies(state: DelegateState | None) -> bool:
    """Whether the model should be measured: the rule applies to a delegated partition that holds
    no measurement yet (a record read at Prepare may hold one)."""
    if state is None:
        return False
    candidates, measured = measured_partitions(state)
    return candidates > measured


def sample_inputs(interpreter: Any, seed: int = 0) -> list[tuple[int, np.ndarray]]:
    """Inputs for timing: floats uniform in [0, 1), other types zero (ids, masks and quantized
    values stay in range)."""
    rng = np.random.default_rng(seed)
    values = []
    for detail in interpreter.get_input_details():
        shape, dtype = tuple(detail["shape"]), np.dtype(detail["dtype"])
        value = rng.random(shape).astype(dtype) if dtype.kind == "f" else np.zeros(shape, dtype)
        values.append((detail["index"], value))
    return values


class CpuUnavailable(Exception):
    """TFLite's CPU kernels cannot run the model (a custom op only the delegate runs): nothing to compare."""


def _timed(interpreter: Any, is_cpu: bool = False) -> float:
    start = time.perf_counter()
    try:
        interpreter.invoke()
    except RuntimeError as exc:
        if is_cpu:
            raise CpuUnavailable(str(exc)) from exc
        raise  # the delegated interpreter's failure is the build's (execution fallback decides)
    return (time.perf_counter() - start) * 1e3


def compare(
    delegated: Any,
    cpu: Any,
    *,
    budget_s: float = BUDGET_S,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
) -> Measured:
    """Median milliseconds per invoke of ``delegated`` and ``cpu`` (allocated interpreters of one
    model) on the same inputs, after one untimed invoke of each; stops at a checkpoint when the
    build is cancelled (delegate/cancel.py). Raises CpuUnavailable when ``cpu`` cannot invoke, and
    the delegated interpreter's RuntimeError."""
    inputs = sample_inputs(delegated)
    for interpreter, is_cpu in ((delegated, False), (cpu, True)):
        for index, value in inputs:
            interpreter.set_tensor(index, value)
        _timed(interpreter, is_cpu)  # the first launch does the driver's one-off work
    times: tuple[list[float], list[float]] = ([], [])
    start = time.perf_counter()
    while len(times[0]) < max_rounds:
        cancel.checkpoint()
        times[0].append(_timed(delegated))
        times[1].append(_timed(cpu, True))
        if len(times[0]) >= min_rounds and time.perf_counter() - start >= budget_s:
            break
    return Measured(statistics.median(times[0]), statistics.median(times[1]), len(times[0]))


def measurer(state: DelegateState | None, make_cpu: Callable[[], Any]) -> Callable[[Any], Outcome | None]:
    """What the background build calls with the delegated interpreter it built: None where the
    measurement does not apply, else the outcome (recorded in ``state`` and its records).
    ``make_cpu`` makes the allocated CPU interpreter to compare with."""

    def measure(delegated: Any) -> Outcome | None:
        if not applies(state):
            return None
        assert state is not None
        try:
            cpu = make_cpu()
        except (RuntimeError, ValueError):
            return None  # TFLite alone cannot run the model (a custom op only the delegate runs)
        try:
            measured = compare(delegated, cpu)
        except CpuUnavailable:
            return None
        record_measurement(state, measured)
        return Outcome(measured, cpu if measured.cpu_faster else None)

    return measure
