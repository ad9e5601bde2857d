"""Which runtime tensors of a half-precision partition keep float32 storage.

F16 and F32_F16 store tensors in half: each stored value is off by up to 2^-11 of itself. A
matrix product whose weights sum to a large magnitude per output (BatchNorm folded into a
depthwise filter with a tiny variance gives weights in the hundreds) multiplies that rounding by
the sum while its output stays small, so the next activation's error is no longer a rounding but a
fraction of its whole range: MediaPipe's pose landmark model loses a third of its segmentation
output's scale that way (benchmarks/RESULTS.md, "F16 storage and weight gain").

The gain of a consumer is the largest L1 norm of its weights over its output channels: the most it
can multiply an input's error by. A tensor read by a consumer whose gain is above ``GAIN_LIMIT``
is stored in float32, and so are the tensors it is a copy or a rearrangement of (pad, reshape,
concatenation, slices, resizes, pooling, additions: ops that pass their operands' errors on
unscaled), since rounding any of them reaches the consumer the same way. Int32 tensors (held as
floats: ops/comparison.py) are stored in float32 too, where every integer up to 2^24 is exact
(half stops at 2048), and so are quantized activations carried in float (quant.py), which then
hold their grid's values exactly. Everything else keeps the precision asked for; at F32 nothing changes.
"""

from __future__ import annotations

import numpy as np

from ..context.model import CalculationsPrecision
from .graph import INT32, Builtin, Graph, Node

#: A gain above which an input stored in half loses more than 2^-11 * 64 = 1/32 of its range
#: at the consumer's output (worst case).
GAIN_LIMIT = 64.0

#: consumer op -> (position of its data input, position of its weights)
_MATRIX_PRODUCTS = {
    Builtin.CONV_2D: (0, 1),
    Builtin.DEPTHWISE_CONV_2D: (0, 1),
    Builtin.FULLY_CONNECTED: (0, 1),
    Builtin.TRANSPOSE_CONV: (2, 1),
}

#: ops whose output carries their runtime operands' errors at most unscaled
_PASS_THROUGH = frozenset(
    {
        Builtin.PAD,
        Builtin.PADV2,
        Builtin.MIRROR_PAD,
        Builtin.RESHAPE,
        Builtin.SQUEEZE,
        Builtin.EXPAND_DIMS,
        Builtin.CONCATENATION,
        Builtin.SLICE,
        Builtin.STRIDED_SLICE,
        Builtin.TRANSPOSE,
        Builtin.SPACE_TO_DEPTH,
        Builtin.DEPTH_TO_SPACE,
        Builtin.RESIZE_BILINEAR,
        Builtin.RESIZE_NEAREST_NEIGHBOR,
        Builtin.MAX_POOL_2D,
        Builtin.AVERAGE_POOL_2D,
        Builtin.ADD,
        Builtin.SUB,
        Builtin.RELU,
        Builtin.RELU6,
        Builtin.RELU_N1_TO_1,
    }
)


def weight_gain(node: Node, graph: Graph) -> float:
    """The largest L1 norm over the output channels of ``node``'s constant weights (0 when it has
    none, or is not a matrix product)."""
    positions = _MATRIX_PRODUCTS.get(node.op)
    if positions is None or len(node.inputs) <= positions[1] or node.inputs[positions[1]] < 0:
        return 0.0
    weights = graph.tensor(node.inputs[positions[1]]).constant
    if weights is None or weights.size == 0:
        return 0.0
    magnitudes = np.abs(np.asarray(weights, dtype=np.float64))
    if node.op == Builtin.DEPTHWISE_CONV_2D:  # (1, kh, kw, channels): one filter per channel
        per_output = magnitudes.reshape(-1, magnitudes.shape[-1]).sum(axis=0)
    else:  # (outputs, ...) for convolutions and fully connected layers
        per_output = magnitudes.reshape(magnitudes.shape[0], -1).sum(axis=1)
    return float(per_output.max())


#: TFLite's fused activations that bound an output: RELU_N1_TO_1 (2) to 1, RELU6 (3) to 6
_BOUNDING_ACTIVATIONS = {2: 1.0, 3: 6.0}
#: ops whose output is bounded whatever their input
_BOUNDED_OPS = {Builtin.RELU6: 6.0, Builtin.RELU_N1_TO_1: 1.0, Builtin.LOGISTIC: 1.0, Builtin.TANH: 1.0}


def output_bound(node: Node) -> float | None:
    """The largest magnitude ``node``'s output can have, when its op or fused activation bounds it."""
    if node.op in _BOUNDED_OPS:
        return _BOUNDED_OPS[node.op]
    return _BOUNDING_ACTIVATIONS.get(int(node.params.get("activation", 0) or 0))


def _bounded(tensor: int, graph: Graph, producer: dict[int, Node], seen: dict[int, bool]) -> bool:
    """Whether ``tensor``'s magnitude is bounded by its producer (through pass-through ops)."""
    if tensor in seen:
        return seen[tensor]
    seen[tensor] = False  # cycles cannot occur in a TFLite graph; this only stops a bad one
    source = producer.get(tensor)
    if graph.tensor(tensor).constant is not None:
        result = True
    elif source is None:
        result = False  # a partition input: its range is the host's
    elif output_bound(source) is not None:
        result = True
    elif source.op in _PASS_THROUGH:
        result = all(_bounded(i, graph, producer, seen) for i in source.inputs if i >= 0)
    else:
        result = False
    seen[tensor] = result
    return result


def sensitive_input(node: Node, graph: Graph, producer: dict[int, Node], seen: dict[int, bool]) -> int | None:
    """The data input of ``node`` whose storage rounding its output would magnify, if any: a
    matrix product with a gain above ``GAIN_LIMIT``, or one whose output is bounded (RELU6) while
    that input is not, so that a rounding relative to an unbounded magnitude meets a fixed range."""
    positions = _MATRIX_PRODUCTS.get(node.op)
    if positions is None or len(node.inputs) <= positions[0]:
        return None
    data = node.inputs[positions[0]]
    if data < 0:
        return None
    if weight_gain(node, graph) > GAIN_LIMIT:
        return data
    if output_bound(node) is not None and not _bounded(data, graph, producer, seen):
        return data
    return None


def wide_tensors(graph: Graph, nodes: list[int], precision: CalculationsPrecision) -> frozenset[int]:
    """The runtime tensors of the partition ``nodes`` to store in float32 at ``precision``."""
    if precision == CalculationsPrecision.F32:
        return frozenset()
    producer: dict[int, Node] = {}
    for index in nodes:
        for tensor in graph.nodes[index].outputs:
            producer[tensor] = graph.nodes[index]
    seen: dict[int, bool] = {}
    # integers, and int8 / uint8 values carried in float (quant.py): exact in float32, not in half
    pending = [t for t in producer if graph.tensor(t).dtype == INT32 or graph.tensor(t).carried is not None]
    for index in nodes:
        data = sensitive_input(graph.nodes[index], graph, producer, seen)
        if data is not None:
            pending.append(data)
    wide: set[int] = set()
    while pending:
        tensor = pending.pop()
        if tensor < 0 or tensor in wide or graph.tensor(tensor).constant is not None:
            continue
        wide.add(tensor)
        source = producer.get(tensor)
        if source is not None and source.op in _PASS_THROUGH:
            pending.extend(source.inputs)
    return frozenset(wide)
