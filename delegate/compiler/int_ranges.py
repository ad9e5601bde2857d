"""The values an int32 tensor can hold on the device, and when int32 arithmetic is exact there.

The device holds an int32 as the float32 of its value (docs/ops.md, "Bool and int32 tensors"), and
float32 holds every integer up to 2^24 in magnitude, not all beyond. An int32 ADD, SUB or MUL is
computed in float, so it is exact where its inputs and its result are within 2^24; TFLite's
integer kernels wrap around at int32's range, far beyond that, so within it both agree. MAXIMUM
and MINIMUM pick one of their inputs, exact whatever their size.

``value_range`` bounds a tensor from how it is made, over the whole graph (wherever each node
runs): a constant by its values; a tensor no node writes (a model or subgraph input) by 2^24,
because csrc/plugin.c refuses larger integers entering a partition; an op that only moves values
(reshapes, slices, GATHER's table) by its inputs' range; SELECT by its two choices'; a CAST from
bool by [0, 1], from int32 by its input's range; int32 arithmetic by interval arithmetic, clipped
to 2^24 (the delegate computes it only where that holds, and where TFLite computes it the value
enters a partition only within 2^24). Anything else (a CAST from float, whose result reaches
2^31) is bounded by int32's range.

``inexact_reason`` says why the delegate may not compute an arithmetic node, or None. Beside the
plain case (the result's range within 2^24) it accepts a guarded one, the way TensorFlow wraps
negative token ids, ``SELECT(LESS(ids, 0), ADD(ids, vocab), ids)``: the sum can pass 2^24 only
where ``ids`` is positive, where the SELECT takes ``ids`` itself. Such a node is exact at every
element any reader uses when each of its readers is a SELECT / SELECT_V2 choosing it under a
comparison of one of its inputs with a constant, of that input's shape, and the node's range with
that input narrowed by the comparison is within 2^24. (A graph output is not seen as a reader:
such an output read by those SELECTs alone would show its unused elements as float rounds them.)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .graph import BOOL, INT32, Activation, Builtin, Graph, Node

#: float32 holds every integer up to this magnitude exactly
EXACT_INT = 1 << 24
#: int32's range as the device holds it (INT_MAX is stored as 2^31: ops/comparison.py)
INT32_RANGE = (-(1 << 31), 1 << 31)
#: where the device holds a partition input (csrc/plugin.c refuses larger)
INPUT_RANGE = (-EXACT_INT, EXACT_INT)

Range = tuple[int, int]


def _corners(a: Range, b: Range, fn: Callable[[int, int], int]) -> Range:
    values = [fn(x, y) for x in a for y in b]
    return min(values), max(values)


#: int32 arithmetic on ranges: the result's range from the operands'
ARITHMETIC: dict[int, Callable[[Range, Range], Range]] = {
    Builtin.ADD: lambda a, b: (a[0] + b[0], a[1] + b[1]),
    Builtin.SUB: lambda a, b: (a[0] - b[1], a[1] - b[0]),
    Builtin.MUL: lambda a, b: _corners(a, b, lambda x, y: x * y),
    Builtin.MAXIMUM: lambda a, b: (max(a[0], b[0]), max(a[1], b[1])),
    Builtin.MINIMUM: lambda a, b: (min(a[0], b[0]), min(a[1], b[1])),
}
#: results that are one of the operands: exact whatever their size
PICKS = (Builtin.MAXIMUM, Builtin.MINIMUM)
#: TFLite's int32 kernels clamp to these for a fused activation and ignore the others (TANH,
#: SIGN_BIT, SIGMOID: checked in tests/test_int_arithmetic.py)
CLAMPS: dict[int, Range] = {
    Activation.RELU: (0, INT32_RANGE[1]),
    Activation.RELU6: (0, 6),
    Activation.RELU_N1_TO_1: (-1, 1),
}
#: ops that move values without changing them: the positions of the inputs whose values they move
#: (None: every input)
_MOVES: dict[int, tuple[int, ...] | None] = {
    Builtin.RESHAPE: (0,),
    Builtin.SQUEEZE: (0,),
    Builtin.EXPAND_DIMS: (0,),
    Builtin.TRANSPOSE: (0,),
    Builtin.GATHER: (0,),
    Builtin.SLICE: (0,),
    Builtin.STRIDED_SLICE: (0,),
    Builtin.TILE: (0,),
    Builtin.REVERSE_V2: (0,),
    Builtin.UNPACK: (0,),
    Builtin.SPLIT: (1,),
    Builtin.SPLIT_V: (0,),
    Builtin.CONCATENATION: None,
    Builtin.PACK: None,
}
#: a comparison ``v OP k`` as the range of v where it holds (``true``) and where not, from k
_WHERE: dict[int, tuple[Callable[[int], Range], Callable[[int], Range]]] = {
    Builtin.LESS: (lambda k: (INT32_RANGE[0], k - 1), lambda k: (k, INT32_RANGE[1])),
    Builtin.LESS_EQUAL: (lambda k: (INT32_RANGE[0], k), lambda k: (k + 1, INT32_RANGE[1])),
    Builtin.GREATER: (lambda k: (k + 1, INT32_RANGE[1]), lambda k: (INT32_RANGE[0], k)),
    Builtin.GREATER_EQUAL: (lambda k: (k, INT32_RANGE[1]), lambda k: (INT32_RANGE[0], k - 1)),
}
#: the comparison ``k OP v`` as ``v OP' k``
_MIRRORED = {
    Builtin.LESS: Builtin.GREATER,
    Builtin.LESS_EQUAL: Builtin.GREATER_EQUAL,
    Builtin.GREATER: Builtin.LESS,
    Builtin.GREATER_EQUAL: Builtin.LESS_EQUAL,
}


def inexact_constant(graph: Graph, inputs: list[int]) -> str | None:
    """Why an int32 constant among ``inputs`` cannot be stored exactly as float32, or None."""
    for i in inputs:
        t = graph.tensor(i)
        if t.dtype != INT32 or not t.is_constant:
            continue
        if t.constant is None:
            return f"int32 constant {i} is too large to check its values when the graph is prepared"
        if t.constant.size and int(abs(t.constant.astype("int64")).max()) > EXACT_INT:
            return f"int32 constant {i} holds values beyond 2^24, which float32 storage does not hold exactly"
    return None


def exact(r: Range) -> bool:
    return -EXACT_INT <= r[0] and r[1] <= EXACT_INT


def _union(ranges: list[Range]) -> Range:
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


def _clip(r: Range, to: Range) -> Range:
    low, high = max(r[0], to[0]), min(r[1], to[1])
    return (low, high) if low <= high else to  # disjoint: all of ``to``, the bound that holds anyway


def _producers(graph: Graph) -> dict[int, Node]:
    return {t: node for node in graph.nodes.values() for t in node.outputs if t >= 0}


class _Ranges:
    """``value_range`` over one graph, each tensor's range found once."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.producer = _producers(graph)
        self.found: dict[int, Range] = {}

    def of(self, tensor: int) -> Range:
        if tensor not in self.found:
            self.found[tensor] = INT32_RANGE  # a cycle (none in a TFLite graph) gets the widest
            self.found[tensor] = self._made(tensor)
        return self.found[tensor]

    def _made(self, tensor: int) -> Range:
        t = self.graph.tensor(tensor)
        if t.dtype == BOOL:
            return (0, 1)
        if t.dtype != INT32:
            return INT32_RANGE
        if t.is_constant:
            if t.constant is None or not t.constant.size:
                return INT32_RANGE if t.constant is None else (0, 0)
            values = t.constant.astype(np.int64)
            return int(values.min()), int(values.max())
        node = self.producer.get(tensor)
        if node is None:
            return INPUT_RANGE
        if node.op in ARITHMETIC:
            return _clip(self.arithmetic(node), INPUT_RANGE)
        if node.op in (Builtin.SELECT, Builtin.SELECT_V2) and len(node.inputs) == 3:
            return _union([self.of(node.inputs[1]), self.of(node.inputs[2])])
        if node.op == Builtin.CAST and node.inputs:
            source = self.graph.tensor(node.inputs[0]).dtype
            return self.of(node.inputs[0]) if source in (BOOL, INT32) else INT32_RANGE
        if node.op in _MOVES:
            positions = _MOVES[node.op]
            inputs = list(node.inputs) if positions is None else [node.inputs[p] for p in positions]
            if inputs and all(i >= 0 for i in inputs):
                return _union([self.of(i) for i in inputs])
        return INT32_RANGE

    def arithmetic(self, node: Node, narrowed: dict[int, Range] | None = None) -> Range:
        """The range of int32 arithmetic ``node``'s result, its fused clamp applied; ``narrowed``:
        ranges to take for some inputs instead of their own."""
        a, b = ((narrowed or {}).get(i) or self.of(i) for i in node.inputs[:2])
        result = ARITHMETIC[node.op](a, b)
        clamp = CLAMPS.get(node.params.get("activation", Activation.NONE))
        return _clip(result, clamp) if clamp else result


def value_range(graph: Graph, tensor: int) -> Range:
    """The smallest and largest value int32 (or bool) ``tensor`` can hold on the device."""
    return _Ranges(graph).of(tensor)


def _guarding_input(graph: Graph, node: Node, select: Node) -> tuple[int, Range] | None:
    """The input of ``node`` that ``select``'s comparison narrows where it picks ``node``'s
    output, and its range there; None when ``select`` is no such guard."""
    out = node.outputs[0]
    if select.op not in (Builtin.SELECT, Builtin.SELECT_V2) or len(select.inputs) != 3:
        return None
    cond, x, y = select.inputs
    if cond == out or (x == out) == (y == out):
        return None
    compare = _producers(graph).get(cond)
    if compare is None or compare.op not in _WHERE or len(compare.inputs) != 2:
        return None
    v, k = compare.inputs
    op = Builtin(compare.op)
    if graph.tensor(v).is_constant:
        v, k, op = k, v, _MIRRORED[op]
    constant = graph.tensor(k).constant
    if v not in node.inputs[:2] or constant is None or constant.size != 1 or graph.tensor(v).dtype != INT32:
        return None
    shape = graph.tensor(out).shape
    if not graph.tensor(v).shape == graph.tensor(cond).shape == shape == graph.tensor(select.outputs[0]).shape:
        return None  # element i of the condition must speak of element i of the output
    holds, fails = _WHERE[op]
    k_value = int(constant.reshape(-1)[0])
    return v, (holds(k_value) if x == out else fails(k_value))


def inexact_reason(graph: Graph, node: Node) -> str | None:
    """Why int32 arithmetic ``node`` may give other values on the device than TFLite gives, or None."""
    if node.op in PICKS:
        return None
    ranges = _Ranges(graph)
    result = ranges.arithmetic(node)
    if exact(result):
        return None
    readers = [n for n in graph.nodes.values() if node.outputs[0] in n.inputs]
    guards = [g for g in (_guarding_input(graph, node, r) for r in readers) if g is not None]
    if readers and len(guards) == len(readers):
        if all(exact(ranges.arithmetic(node, {v: _clip(ranges.of(v), where)})) for v, where in guards):
            return None
    return (
        f"its int32 result may reach {result[0] if result[0] < -EXACT_INT else result[1]}, beyond the 2^24 "
        "up to which the device's float32 holds integers exactly"
    )


def exact_only_where_guarded(graph: Graph, node: Node) -> bool:
    """Is int32 arithmetic ``node`` computed only because its guarding SELECTs use just its exact
    elements (``inexact_reason``)? Then its result must not leave the partition: a model output or
    a CPU reader would see the rounded elements."""
    if node.op not in ARITHMETIC or graph.tensor(node.outputs[0]).dtype != INT32:
        return False
    return not exact(_Ranges(graph).arithmetic(node))
