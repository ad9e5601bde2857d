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
hold their grid's values exactly.

Half also has a floor: below 6.1e-5 its values lose relative precision, and below 6e-8 they are
zero. A LOG, an RSQRT, a POW's base or a DIV's divisor turns that loss into an error without bound
(log(0) is -inf): basic-pitch's log-magnitude spectrogram, log(|x|^2 + eps) over values down to
1e-9, read NaN everywhere in half. Their inputs are stored in float32, and so are the tensors they
are computed from through ops that keep small values small (the pass-through ones, and products,
squares, roots, sums and means), up to the first op that does not. A LOG's chain also passes
matrix products: the spectrogram's smallest magnitudes are where a convolution's terms cancel, so
their error is half's rounding of the terms, and the log of a value off by 40% is off by 0.5
(basic-pitch: 5% of the log's range, before). Constants half cannot hold (an epsilon of 1e-10) are
uploaded in float32 (ops/base.py, ``fits_half``).
Everything else keeps the precision asked for; at F32 nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..context.model import CalculationsPrecision
from .graph import INT32, INT64, Builtin, Graph, Node
from .ops import traits_of

#: A gain above which an input stored in half loses more than 2^-11 * 64 = 1/32 of its range
#: at the consumer's output (worst case).
GAIN_LIMIT = 64.0


def _passes_bound(code: int) -> bool:
    """Its output carries its runtime operands' errors at most unscaled (``Traits.passes_bound``)."""
    return traits_of(code).passes_bound


def _keeps_small(code: int) -> bool:
    """Its output is small where its inputs are: a small value reaching a ``small_value_input`` is
    computed through it, and each of its runtime inputs is rounded the same way."""
    traits = traits_of(code)
    return traits.passes_bound or traits.keeps_small


def _through_products(code: int) -> bool:
    """A small value may come through it to a LOG: ``_keeps_small`` or a product of its inputs."""
    return _keeps_small(code) or traits_of(code).product


def weight_gain(node: Node, graph: Graph) -> float:
    """The largest L1 norm over the output channels of ``node``'s constant weights (0 when it has
    none, or is not a matrix product)."""
    positions = traits_of(node.op).matrix_product
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


def output_bound(node: Node) -> float | None:
    """The largest magnitude ``node``'s output can have, when its op or fused activation bounds it."""
    bound = traits_of(node.op).output_bound  # bounded whatever the input (RELU6: 6)
    if bound is not None:
        return bound
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
    elif _passes_bound(source.op):
        result = all(_bounded(i, graph, producer, seen) for i in source.inputs if i >= 0)
    else:
        result = False
    seen[tensor] = result
    return result


def sensitive_input(node: Node, graph: Graph, producer: dict[int, Node], seen: dict[int, bool]) -> int | None:
    """The data input of ``node`` whose storage rounding its output would magnify, if any: a
    matrix product with a gain above ``GAIN_LIMIT``, or one whose output is bounded (RELU6) while
    that input is not, so that a rounding relative to an unbounded magnitude meets a fixed range."""
    positions = traits_of(node.op).matrix_product
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
    # integers, and int8 / uint8 values carried in float (quant.py): exact in float32, not in half;
    # integer partition inputs too (token ids: csrc/plugin.c converts them exactly up to 2^24)
    read = {t for index in nodes for t in graph.nodes[index].inputs if t >= 0}
    pending = [t for t in producer if graph.tensor(t).dtype == INT32 or graph.tensor(t).carried is not None]
    pending += [t for t in sorted(read - producer.keys()) if graph.tensor(t).dtype in (INT32, INT64)]
    for index in nodes:
        data = sensitive_input(graph.nodes[index], graph, producer, seen)
        if data is not None:
            pending.append(data)
    wide = _with_sources(graph, producer, pending, _passes_bound)
    # Over the whole graph: a tensor this partition writes may reach a LOG in another partition
    # (through CPU nodes too), and is rounded to half here all the same.
    everywhere = {t: node for node in graph.nodes.values() for t in node.outputs}
    small, logs = [], []
    for node in graph.nodes.values():
        position = traits_of(node.op).small_value_input  # where a value rounded to zero costs most
        if position is not None and position < len(node.inputs):
            (logs if node.op == Builtin.LOG else small).append(node.inputs[position])
    return frozenset(
        wide
        | _with_sources(graph, everywhere, small, _keeps_small)
        | _with_sources(graph, everywhere, logs, _through_products)
    )


def _with_sources(
    graph: Graph, producer: dict[int, Node], tensors: list[int], through: Callable[[int], bool]
) -> set[int]:
    """``tensors`` (runtime ones) and, through producers whose op ``through`` admits, their sources."""
    pending = list(tensors)
    found: set[int] = set()
    while pending:
        tensor = pending.pop()
        if tensor < 0 or tensor in found or graph.tensor(tensor).constant is not None:
            continue
        found.add(tensor)
        source = producer.get(tensor)
        if source is not None and through(source.op):
            pending.extend(source.inputs)
    return found
