"""Threads for the nodes TFLite runs beside the delegate on a CPU device (``delegate.Interpreter``'s
default ``num_threads``).

On a CPU OpenCL device (PoCL) the delegate's kernels run on every core; TFLite's own default is
one thread, which leaves the other cores idle for the nodes the delegate leaves to TFLite (those
``cpu_when_faster`` keeps there because XNNPACK on all cores is faster, unsupported ones). More
threads help unless the model is so small that waking them costs more than the work they share:
microWakeWord's streaming model (55 nodes, a few microseconds of work) ran 1.2-2x slower on two
threads than on one, the quantized small CNNs (27 us of estimated work) 1.6-2.2x faster
(benchmarks/RESULTS.md, "TFLite's threads beside a CPU device"). The work is estimated as
``cpu_choice`` estimates it, from the model's nodes as the host reads them (before any delegate).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .calibration import POCL_CPU

#: Estimated work per invoke (us, cpu_choice's throughputs) below which TFLite keeps one thread
PARALLEL_MIN_WORK_US = 10.0
#: op -> the dims of its filter (input 1) one output element multiplies over
_MAC_DIMS = {"CONV_2D": slice(1, None), "DEPTHWISE_CONV_2D": slice(1, 3), "FULLY_CONNECTED": slice(-1, None)}


@dataclass(frozen=True)
class TfliteThreads:
    """The choice: ``threads`` for TFLite's kernels, from the model's estimated ``work_us`` per invoke."""

    threads: int
    work_us: float
    cores: int

    def as_dict(self) -> dict[str, object]:
        return {"threads": self.threads, "work_us": round(self.work_us, 2), "cores": self.cores}


def model_work_us(interpreter: Any) -> float:
    """The estimated work of one invoke of the host ``interpreter``'s model (no allocation needed):
    its convolutions' and fully connected layers' multiply-adds and every node's output elements
    (read and written once each), at cpu_choice's throughputs."""
    shape = _shape_reader(interpreter)
    macs = elements = 0
    for op in interpreter._get_ops_details():
        outputs = [math.prod(shape(i)) for i in op["outputs"] if i >= 0]
        elements += sum(outputs)
        dims = _MAC_DIMS.get(op["op_name"])
        inputs = [i for i in op["inputs"] if i >= 0]
        if dims is not None and len(inputs) > 1 and outputs:
            macs += outputs[0] * math.prod(shape(inputs[1])[dims])
    return macs / POCL_CPU.cpu_macs_per_us + 2 * elements / POCL_CPU.cpu_elements_per_us


def _shape_reader(interpreter: Any) -> Callable[[int], tuple[int, ...]]:
    """Tensor index -> shape, read as ``get_tensor_details`` reads it, through the wrapper both
    hosts share, but without the rest of the details: tflite-runtime 2.14 crashes reading the
    sparsity parameters of a sparse tensor (MediaPipe's pose detection has sparse weights)."""
    wrapper = interpreter._interpreter
    return lambda index: tuple(int(d) for d in wrapper.TensorSize(int(index), 0))


def tflite_threads(interpreter: Any, cores: int) -> TfliteThreads:
    """``cores`` threads for the host ``interpreter``'s model unless its estimated work is below
    PARALLEL_MIN_WORK_US (then one)."""
    work = model_work_us(interpreter)
    return TfliteThreads(cores if work >= PARALLEL_MIN_WORK_US else 1, work, cores)
