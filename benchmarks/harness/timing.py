"""Medians, fastest calls, percentiles and geometric means of wall-clock samples."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any


def median_s(fn: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``repeats`` calls of ``fn``."""
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def interleaved_medians_s(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """Median seconds of each of ``fns``, run in turn within every repeat, so that a change in the
    machine's speed during the measurement hits all of them alike."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, samples, strict=True):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [statistics.median(out) for out in samples]


def fastest_call(call: Callable[..., object], calls: int, *args: Any) -> float:
    """Seconds of the fastest of ``calls`` calls of ``call(*args)``: on a machine other processes
    load, the slower calls measure them rather than what is called."""
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        call(*args)
        best = min(best, time.perf_counter() - start)
    return best


def median(values: list[float]) -> float:
    """The median, NaN for no values (a path that did not run)."""
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], fraction: float) -> float:
    """The sample at ``fraction`` (0..1) of the sorted values, NaN for none."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def geometric_mean(ratios: Iterable[float]) -> float:
    """The geometric mean: the average of ratios, where 2x and 0.5x cancel."""
    return math.exp(statistics.fmean(map(math.log, ratios)))
