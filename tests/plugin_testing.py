"""Fault injection for tests: real device-side failures in a running delegate.

``break_launches`` makes every later launch of a delegate's compiled partitions fail in the
OpenCL driver itself (an enqueue with work dimension 0 is rejected with
CL_INVALID_WORK_DIMENSION), which is how a device or driver failure reaches the delegate.
"""

from __future__ import annotations

from delegate.plugin import live_runtimes


def break_launches() -> int:
    """Make every live partition's launches fail; the number of launches broken."""
    broken = 0
    for runtime in live_runtimes():
        plan = runtime.native_plan  # the plan the plugin's invoke runs
        for i in range(plan.launches_count):
            plan.launches[i].work_dim = 0
            broken += 1
    return broken
