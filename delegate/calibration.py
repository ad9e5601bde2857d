"""The measured costs of running on a platform: data, no code that measures or decides.

The rule ``cpu_when_faster`` (compiler/cpu_choice.py) weighs the delegate's fixed costs against
TFLite's CPU kernels with these constants; the runtime's platforms (runtime/platforms/) say which
calibration belongs to their devices. Both read it here, below them, so the compiler and the
runtime still meet only in the context file (docs/architecture.md).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Calibration:
    """The constants of the estimate, measured by benchmarks/cpu_choice.py."""

    #: the delegate's cost of one invoke of a partition, and of each kernel in it, computing nothing
    invoke_us: float
    kernel_us: float
    #: TFLite's CPU kernels: cost per node, multiply-adds and tensor elements per microsecond
    cpu_node_us: float
    cpu_macs_per_us: float
    cpu_elements_per_us: float


#: AMD EPYC (Zen 4), 2 cores, PoCL 3 and ai-edge-litert's XNNPACK with 2 threads, measured by
#: benchmarks/cpu_choice.py (RESULTS.md, "CPU choice"): the delegate's fixed costs at the low end
#: of what was measured, the CPU's throughputs at the low end too (a larger CPU estimate), so that
#: errors leave a partition on the delegate.
POCL_CPU = Calibration(
    invoke_us=40.0, kernel_us=1.0, cpu_node_us=1.0, cpu_macs_per_us=40_000.0, cpu_elements_per_us=15_000.0
)

#: the costs weighed on a platform that measured none of its own (where the rule is off unless a
#: caller asks for it): the only ones measured; the measured choice (delegate/measured_choice.py)
#: corrects what they get wrong
UNMEASURED = POCL_CPU
