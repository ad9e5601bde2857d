"""Fault injection for tests: real device-side failures in a running delegate.

Not for production use. ``break_launches`` makes every later launch of a delegate's compiled
partitions fail in the OpenCL driver itself (an enqueue with work dimension 0 is rejected with
CL_INVALID_WORK_DIMENSION), which is how a device or driver failure reaches the delegate.
"""

from __future__ import annotations

from typing import Any

from .callbacks import _kernels


def break_launches() -> int:
    """Make every live partition's launches fail; the number of launches broken."""
    broken = 0
    for kernel in _kernels.values():
        plan = kernel.runtime.native_plan
        for i in range(plan.launches_count):
            plan.launches[i].work_dim = 0
            broken += 1
    return broken


def live_runtimes() -> list[Any]:
    return [k.runtime for k in _kernels.values()]
