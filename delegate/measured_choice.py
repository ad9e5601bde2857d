"""cpu_when_faster by measurement: ``delegate.Interpreter`` times the model with the delegate against
TFLite's CPU kernels once the delegate is built, and runs it on whichever was faster.

The rule's estimate (compiler/cpu_choice.py) weighs the delegate's fixed costs only, so it never
catches a partition whose kernels are slower than TFLite's (a transformer's batched products, an
int8 network on a CPU device). Under background compile the build thread therefore, after building
the delegated interpreter, makes CPU interpreters of the model (with the threads the delegated one
has, and with TFLite's default of one) and times them all on the same inputs, interleaved (one
invoke of each per round, so that load on the machine weighs on all alike), and compares medians.
When TFLite's CPU kernels were faster the caller's invokes go to the fastest CPU interpreter
(``ExecutionPath.CPU_FASTER``). A later start that finds the model left on CPU by a recorded
measurement runs it, likewise, on a CPU interpreter with the threads measured fastest.

The measurement is of the whole model, and every delegated partition the rule applies to gets it:
in ``interpreter.opencl.cpu_choices`` and, with a ``serialization_dir``, in its record there, so a
later start reads it (the plugin leaves the partitions on CPU without compiling them, or delegates
them) and does not measure again. It runs where the rule applies (a CPU device, ``cpu_when_faster``
auto or true) and something was delegated; ``cpu_when_faster=false`` turns it off.
"""

from __future__ import annotations

import math
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
#: each interpreter runs back to back for about this long per round (at most MAX_BLOCK invokes),
#: and counts as the fastest of them: a tiny model's invokes alternating with another
#: interpreter's would each pay for waking its thread pool, which back-to-back invokes do not
BLOCK_MS = 1.0
MAX_BLOCK = 20


@dataclass(frozen=True)
class Outcome:
    """What a measurement found: the figures, and the allocated CPU interpreter to run on when it was faster."""

    measured: Measured
    cpu: Any = None
    #: nothing was delegated: the measurement chose TFLite's thread count only
    threads_only: bool = False

    def why(self) -> str:
        """Why invokes go to ``cpu`` (the background compile report's cause)."""
        m = self.measured
        if self.threads_only:
            return (
                f"nothing delegated, and TFLite's kernels ran the model faster on {m.cpu_threads} thread(s) "
                f"({m.cpu_ms:.3f} ms) than on the interpreter's ({m.delegate_ms:.3f} ms)"
            )
        return (
            f"measured slower than TFLite's CPU kernels ({m.delegate_ms:.3f} ms per invoke against "
            f"{m.cpu_ms:.3f} ms on {m.cpu_threads} thread(s))"
        )


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


def _timed(interpreter: Any, is_cpu: bool = False, block: int = 1) -> float:
    """The fastest of ``block`` back-to-back invokes, in milliseconds."""
    fastest = float("inf")
    for _ in range(block):
        start = time.perf_counter()
        try:
            interpreter.invoke()
        except RuntimeError as exc:
            if is_cpu:
                raise CpuUnavailable(str(exc)) from exc
            raise  # the delegated interpreter's failure is the build's (execution fallback decides)
        fastest = min(fastest, time.perf_counter() - start)
    return fastest * 1e3


def compare(
    delegated: Any,
    cpus: dict[int, Any],
    *,
    budget_s: float = BUDGET_S,
    min_rounds: int = MIN_ROUNDS,
    max_rounds: int = MAX_ROUNDS,
) -> Measured:
    """Median milliseconds per invoke of ``delegated`` and of the fastest of ``cpus`` (allocated CPU
    interpreters of one model by their thread count) on the same inputs, after two untimed invokes
    of each, each round's figure the fastest of a block of back-to-back invokes; stops at a
    checkpoint when the build is cancelled (delegate/cancel.py). Raises CpuUnavailable when a CPU
    interpreter cannot invoke, and the delegated interpreter's RuntimeError."""
    inputs = sample_inputs(delegated)
    timed = [(delegated, False), *((cpu, True) for cpu in cpus.values())]
    quickest = float("inf")
    for interpreter, is_cpu in timed:
        for index, value in inputs:
            interpreter.set_tensor(index, value)
        _timed(interpreter, is_cpu)  # the first launch does the driver's one-off work
        quickest = min(quickest, _timed(interpreter, is_cpu))
    block = max(1, min(MAX_BLOCK, math.ceil(BLOCK_MS / max(quickest, 1e-3))))
    times: list[list[float]] = [[] for _ in timed]
    start = time.perf_counter()
    while len(times[0]) < max_rounds:
        cancel.checkpoint()
        for samples, (interpreter, is_cpu) in zip(times, timed, strict=True):
            samples.append(_timed(interpreter, is_cpu, block))
        if len(times[0]) >= min_rounds and time.perf_counter() - start >= budget_s:
            break
    medians = [statistics.median(samples) for samples in times]
    cpu_ms, threads = min(zip(medians[1:], cpus, strict=True))
    return Measured(medians[0], cpu_ms, len(times[0]), threads)


#: makes an allocated CPU interpreter of the model: (threads, [(input index, shape)]) -> interpreter
CpuMaker = Callable[[int, list[tuple[int, tuple[int, ...]]]], Any]


def measurer(
    state: DelegateState | None, make_cpu: CpuMaker, threads: tuple[int, ...]
) -> Callable[[Any], Outcome | None]:
    """What is called with the delegated interpreter, once built and allocated: None where the
    measurement does not apply, else the outcome (recorded in ``state`` and its records).
    ``make_cpu`` makes an allocated CPU interpreter with the threads and input shapes given; each
    of ``threads`` is measured (TFLite's default of one, and the delegated interpreter's)."""

    def measure(delegated: Any) -> Outcome | None:
        shapes = [(int(d["index"]), tuple(int(n) for n in d["shape"])) for d in delegated.get_input_details()]

        def make(n: int) -> Any:
            return make_cpu(n, shapes)

        recorded = recorded_cpu_faster(state)
        if recorded is not None:  # every partition left on CPU by a recorded measurement
            return _with_cpu(recorded, make)
        if not applies(state):
            if state is None or not state.cpu_rule_applies or state.delegated_nodes or len(set(threads)) < 2:
                return None
            return _fewer_threads(delegated, make, min(threads))
        assert state is not None
        try:
            cpus = {n: make(n) for n in dict.fromkeys(threads)}
        except (RuntimeError, ValueError):
            return None  # TFLite alone cannot run the model (a custom op only the delegate runs)
        try:
            measured = compare(delegated, cpus)
        except CpuUnavailable:
            return None
        record_measurement(state, measured)
        return Outcome(measured, cpus[measured.cpu_threads] if measured.cpu_faster else None)

    return measure


def _fewer_threads(interpreter: Any, make_cpu: Callable[[int], Any], threads: int) -> Outcome | None:
    """Nothing delegated: ``interpreter`` (TFLite's kernels on the device's cores) against TFLite
    on ``threads``; the outcome when fewer threads were faster (tiny models: waking threads costs
    more than the work they share), else None. Kept in no record: no partition holds it."""
    try:
        cpus = {threads: make_cpu(threads)}
        measured = compare(interpreter, cpus)
    except (CpuUnavailable, RuntimeError, ValueError):
        return None
    return Outcome(measured, cpus[threads], threads_only=True) if measured.cpu_faster else None


def _with_cpu(measured: Measured, make_cpu: Callable[[int], Any]) -> Outcome | None:
    try:
        return Outcome(measured, make_cpu(measured.cpu_threads))
    except (RuntimeError, ValueError):
        return None


def recorded_cpu_faster(state: DelegateState | None) -> Measured | None:
    """The recorded measurement that left this model on CPU: where the rule applies to partitions,
    each holds one and each is on CPU by it, and nothing was delegated (then a CPU interpreter with
    the threads measured fastest runs the model, not the delegated one with the device's)."""
    if state is None or state.delegated_nodes:
        return None
    choices = [c for c in state.cpu_choices if c["applied"]]
    found = {tuple(sorted(c["measured"].items())) for c in choices if c.get("measured") and c["decision"] == "cpu"}
    if not choices or len(found) != 1 or any(not c.get("measured") for c in choices):
        return None
    return Measured.from_record(dict(next(iter(found))))
