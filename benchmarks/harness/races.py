"""Side-by-side races: two or more configurations called in alternating blocks in one process.

Between processes a model's time moves by up to 2x on PoCL (where the arenas land, which core a
worker thread starts on, other load); within one process, blocks that alternate meet the same
machine, so their ratios hold where the absolute figures do not.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from .timing import fastest_call


def blocks(sides: Sequence[Callable[[], object]], count: int, block: int, *, abba: bool = False) -> list[list[float]]:
    """``count`` rounds; in each every side runs a block of ``block`` calls, counted as its fastest
    (seconds). ``abba`` reverses the order every other round, so that neither side always runs
    right after the other."""
    rows = []
    for r in range(count):
        order = list(range(len(sides)))
        if abba and r % 2:
            order.reverse()
        row = [0.0] * len(sides)
        for i in order:
            row[i] = fastest_call(sides[i], block)
        rows.append(row)
    return rows


def column(rows: list[list[float]], side: int) -> list[float]:
    """One side's block times."""
    return [row[side] for row in rows]


def ratios(rows: list[list[float]], side: int = 0, other: int = 1) -> list[float]:
    """Per round, ``side``'s block over ``other``'s: the two ran back to back, under the same load."""
    return [row[side] / row[other] for row in rows]


def quartiles(values: list[float]) -> tuple[float, float, float]:
    """First quartile, median and third quartile (one value: that value three times)."""
    if len(values) < 2:
        return (values[0],) * 3
    q1, q2, q3 = statistics.quantiles(values, n=4)
    return q1, q2, q3
