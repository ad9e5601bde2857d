"""cpu_when_faster by measurement: ``delegate.Interpreter`` times the model with the delegate against
TFLite's CPU kernels once the delegate is built, and runs it on whichever was faster (the delegate
only where it was ``cpu_choice.DELEGATE_LEAD`` faster: within that the measurement cannot tell).

The rule's estimate (compiler/cpu_choice.py) weighs the delegate's fixed costs only, so it never
catches a partition whose kernels are slower than TFLite's (a transformer's batched products, an
int8 network on a CPU device). Under background compile the build thread therefore, after building
the delegated interpreter, makes CPU interpreters of the model (with the threads the delegated one
has, and with TFLite's default of one) and times them all on the same inputs, interleaved (one
invoke of each per round, so that load on the machine weighs on all alike), and compares medians.
When TFLite's CPU kernels were faster (``Measured.cpu_faster``) the caller's invokes go to the
fastest CPU interpreter (``ExecutionPath.CPU_FASTER``). A later start that finds the model left on CPU by a recorded
measurement runs it, likewise, on a CPU interpreter with the threads measured fastest.

A model with one delegated partition the rule applies to is measured whole, and the partition
gets that measurement. With two to MAX_ALONE of them each is measured alone: an interpreter
delegating that partition only (the others on TFLite's CPU kernels; a delegate with a
plugin Selection, loading the contexts the build compiled, none compiled again) is timed in the
same rounds as the whole model delegated and the CPU interpreters; a partition stays delegated
when the model ran faster with it alone delegated than on TFLite's CPU kernels alone. The model
then runs with the partitions kept: the whole delegated interpreter (all kept), the one that
measured the partition (one kept), one more built from the compiled contexts (several), or the
fastest CPU interpreter (none). Each partition's measurement is in ``interpreter.opencl.cpu_choices``
and, with a ``serialization_dir``, in its record there, so a later start reads it (the plugin leaves
the partitions measured slower on CPU without compiling them, and delegates the others) and does not
measure again; ``interpreter.opencl.measured`` holds the whole model's. It runs where the rule
applies (a CPU device, ``cpu_when_faster`` auto or true) and something was delegated;
``cpu_when_faster=false`` turns it off.
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
from .plugin.choice_record import (
    leave_on_cpu,
    measured_candidates,
    measured_partitions,
    record_measurement,
    record_partition_measurements,
)
from .plugin.report import PartitionId

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
#: the most delegated partitions measured one by one (a model with more is measured whole): each costs
#: an interpreter and its share of every round
MAX_ALONE = 6
#: the rounds' budget grows by this per partition measured alone
PARTITION_BUDGET_S = 0.2


@dataclass(frozen=True)
class Outcome:
    """What a measurement found: the figures, and the allocated CPU interpreter to run on when it was faster."""

    measured: Measured
    cpu: Any = None
    #: nothing was delegated: the measurement chose TFLite's thread count only
    threads_only: bool = False
    #: an allocated interpreter delegating only the partitions measured faster, to run instead of the built one
    delegated: Any = None
    #: partitions measured alone (0: the whole model was measured)
    alone: int = 0

    def why(self) -> str:
        """Why invokes go to ``cpu`` (the background compile report's cause)."""
        m = self.measured
        if self.alone:
            return (
                f"each of its {self.alone} delegated partitions measured alone no faster than TFLite's CPU kernels "
                f"({m.cpu_ms:.3f} ms per invoke on {m.cpu_threads} thread(s))"
            )
        if self.threads_only:
            return (
                f"nothing delegated, and TFLite's kernels ran the model faster on {m.cpu_threads} thread(s) "
                f"({m.cpu_ms:.3f} ms) than on the interpreter's ({m.delegate_ms:.3f} ms)"
            )
        return (
            f"{m.comparison()} ({m.delegate_ms:.3f} ms per invoke against "
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
    medians, rounds = _medians([delegated], cpus, budget_s, min_rounds, max_rounds)
    cpu_ms, threads = min(zip(medians[1:], cpus, strict=True))
    return Measured(medians[0], cpu_ms, rounds, threads)


def compare_alone(
    delegated: Any, alone: dict[PartitionId, Any], cpus: dict[int, Any], *, budget_s: float
) -> tuple[Measured, dict[PartitionId, Measured]]:
    """As ``compare``, with interpreters each delegating one partition (``alone``) timed in the same
    rounds: the whole model's figures, and each partition's (``Measured.alone``), all against the
    fastest of ``cpus``."""
    medians, rounds = _medians([delegated, *alone.values()], cpus, budget_s, MIN_ROUNDS, MAX_ROUNDS)
    cpu_ms, threads = min(zip(medians[1 + len(alone) :], cpus, strict=True))
    each = {key: Measured(ms, cpu_ms, rounds, threads, alone=True) for key, ms in zip(alone, medians[1:], strict=False)}
    return Measured(medians[0], cpu_ms, rounds, threads), each


def _medians(
    delegated: list[Any], cpus: dict[int, Any], budget_s: float, min_rounds: int, max_rounds: int
) -> tuple[list[float], int]:
    """The median milliseconds of each of ``delegated`` then of ``cpus``, and the rounds timed."""
    inputs = sample_inputs(delegated[0])
    timed = [*((d, False) for d in delegated), *((cpu, True) for cpu in cpus.values())]
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
    return [statistics.median(samples) for samples in times], len(times[0])


Shapes = list[tuple[int, tuple[int, ...]]]
#: makes an allocated CPU interpreter of the model: (threads, [(input index, shape)]) -> interpreter
CpuMaker = Callable[[int, Shapes], Any]
#: makes an allocated interpreter of the model delegating only the partitions given (its threads
#: the delegated interpreter's), from the contexts compiled for ``state``: (state, partitions, shapes)
SelectionMaker = Callable[[DelegateState, frozenset[PartitionId], Shapes], Any]


def measurer(
    state: DelegateState | None,
    make_cpu: CpuMaker,
    threads: tuple[int, ...],
    make_selected: SelectionMaker | None = None,
) -> Callable[[Any], Outcome | None]:
    """What is called with the delegated interpreter, once built and allocated: None where the
    measurement does not apply, else the outcome (recorded in ``state`` and its records).
    ``make_cpu`` makes an allocated CPU interpreter with the threads and input shapes given; each
    of ``threads`` is measured (TFLite's default of one, and the delegated interpreter's).
    ``make_selected`` (None: the model is measured whole) makes the interpreters delegating some
    partitions only."""

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
        partitions = measured_candidates(state)
        if make_selected is not None and 2 <= len(partitions) <= MAX_ALONE:
            return _each_alone(state, delegated, partitions, cpus, lambda keep: make_selected(state, keep, shapes))
        try:
            measured = compare(delegated, cpus)
        except CpuUnavailable:
            return None
        record_measurement(state, measured)
        return Outcome(measured, cpus[measured.cpu_threads] if measured.cpu_faster else None)

    return measure


def _each_alone(
    state: DelegateState,
    delegated: Any,
    partitions: list[PartitionId],
    cpus: dict[int, Any],
    make_selected: Callable[[frozenset[PartitionId]], Any],
) -> Outcome | None:
    """Measure each of ``partitions`` alone delegated (module docstring), record each one's
    measurement and run the model with those that made it faster."""
    try:
        alone = {key: make_selected(frozenset({key})) for key in partitions}
    except (RuntimeError, ValueError):
        return None
    try:
        whole, each = compare_alone(delegated, alone, cpus, budget_s=BUDGET_S + PARTITION_BUDGET_S * len(alone))
    except CpuUnavailable:
        return None
    record_partition_measurements(state, whole, each)
    kept = frozenset(key for key, measured in each.items() if not measured.cpu_faster)
    if kept == frozenset(partitions):
        return Outcome(whole, alone=len(each))
    if not kept:
        return Outcome(whole, cpus[whole.cpu_threads], alone=len(each))
    if len(kept) == 1:
        (key,) = kept
        selected = alone[key]  # invoked by the measurement: warmed up
    else:
        selected = make_selected(kept)
        for index, value in sample_inputs(selected):  # the driver's first-launch work, here
            selected.set_tensor(index, value)
        selected.invoke()
    leave_on_cpu(state, set(partitions) - kept)
    return Outcome(whole, delegated=selected, alone=len(each))


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
    if not choices or any(not c.get("measured") or c["decision"] != "cpu" for c in choices):
        return None
    # measured whole, every partition holds the same figures; measured alone, each its own, against
    # the same CPU interpreter: the one the delegate came closest to says it
    found = [Measured.from_record(c["measured"]) for c in choices]
    if len({(m.cpu_threads, m.alone) for m in found}) != 1 or (not found[0].alone and len(set(found)) != 1):
        return None
    return min(found, key=lambda m: m.delegate_ms)
