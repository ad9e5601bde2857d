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
#: ops whose work lies in other subgraphs (a Keras LSTM's loop body), which the nodes read here do
#: not show: a model with one is not taken for a small one (a 2-layer LSTM of 128 units over 32
#: steps was estimated at 1.8 us, so the measured choice timed TFLite on one thread only; two ran
#: it in 0.8-1.2x the time of one, from one process to the next)
_HIDDEN_WORK = frozenset({"WHILE", "IF"})
#: fused recurrent ops: per output element (batch x step x unit), four gates' products over the
#: step's input and the previous output (their forget gate's weights, inputs 2 and 6: the only gate
#: an LSTM without an input gate still has)
_RECURRENT = frozenset({"UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM"})


@dataclass(frozen=True)
class TfliteThreads:
    """The choice: ``threads`` for TFLite's kernels, from the model's estimated ``work_us`` per
    invoke (None: not known, the model's work lies in subgraphs)."""

    threads: int
    work_us: float | None
    cores: int

    def as_dict(self) -> dict[str, object]:
        work = None if self.work_us is None else round(self.work_us, 2)
        return {"threads": self.threads, "work_us": work, "cores": self.cores}


def model_work_us(interpreter: Any) -> float | None:
    """The estimated work of one invoke of the host ``interpreter``'s model (no allocation needed):
    its convolutions', fully connected and fused recurrent layers' multiply-adds and every node's
    output elements (read and written once each), at cpu_choice's throughputs; None (not known)
    for a model whose nodes call subgraphs (``_HIDDEN_WORK``)."""
    shape = _shape_reader(interpreter)
    macs = elements = 0
    for op in interpreter._get_ops_details():
        if op["op_name"] in _HIDDEN_WORK:
            return None
        outputs = [math.prod(shape(i)) for i in op["outputs"] if i >= 0]
        elements += sum(outputs)
        dims = _MAC_DIMS.get(op["op_name"])
        inputs = [i for i in op["inputs"] if i >= 0]
        if dims is not None and len(inputs) > 1 and outputs:
            macs += outputs[0] * math.prod(shape(inputs[1])[dims])
        if op["op_name"] in _RECURRENT and len(op["inputs"]) > 6 and outputs:
            forget, recurrent = op["inputs"][2], op["inputs"][6]
            if forget >= 0 and recurrent >= 0:
                macs += outputs[0] * 4 * (shape(forget)[-1] + shape(recurrent)[-1])
    return macs / POCL_CPU.cpu_macs_per_us + 2 * elements / POCL_CPU.cpu_elements_per_us


def _shape_reader(interpreter: Any) -> Callable[[int], tuple[int, ...]]:
    """Tensor index -> shape, read as ``get_tensor_details`` reads it, through the wrapper both
    hosts share, but without the rest of the details: tflite-runtime 2.14 crashes reading the
    sparsity parameters of a sparse tensor (MediaPipe's pose detection has sparse weights)."""
    wrapper = interpreter._interpreter
    return lambda index: tuple(int(d) for d in wrapper.TensorSize(int(index), 0))


def tflite_threads(interpreter: Any, cores: int) -> TfliteThreads:
    """``cores`` threads for the host ``interpreter``'s model unless its estimated work is below
    PARALLEL_MIN_WORK_US (then one); ``cores`` where the work is not known."""
    work = model_work_us(interpreter)
    return TfliteThreads(cores if work is None or work >= PARALLEL_MIN_WORK_US else 1, work, cores)
