"""Output shapes a node's inputs and parameters imply, checked against the ones the model declares.

A delegated partition runs on the shapes the model file declares: TFLite computes a node's output
shape in the node's own prepare, which a delegated node never runs. A model whose declared shape
disagrees with what the op computes (a corrupt or hand-edited file) would make a kernel read or
write the wrong region, a wrong answer with no error. For the ops below the shape the op computes
is known from its inputs and parameters (TFLite's semantics); a node whose declared output differs
stays on CPU, where TFLite computes the right shape, with the reason. Ops not listed here are left
to their own checks (ops/*.py) or have no shape of their own to get wrong.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .graph import Builtin, Graph, Node, Padding
from .ops.elementwise import BINARY, UNARY


def _shape(graph: Graph, index: int) -> tuple[int, ...]:
    return tuple(int(d) for d in graph.tensor(index).shape)


def _window(size: int, kernel: int, stride: int, dilation: int, padding: int) -> int | None:
    """TFLite's output size of a sliding window (SAME: ceil(size / stride); VALID: the full windows)."""
    if stride < 1 or dilation < 1:
        return None
    if padding == Padding.SAME:
        return -(-size // stride)
    if padding == Padding.VALID:
        return (size - (kernel - 1) * dilation - 1) // stride + 1
    return None


def _convolution(node: Node, graph: Graph) -> tuple[int, ...] | None:
    b, h, w, _ = _shape(graph, node.inputs[0])
    filters = _shape(graph, node.inputs[1])
    p = node.params
    dh, dw = p.get("dilation_height_factor", 1) or 1, p.get("dilation_width_factor", 1) or 1
    oh = _window(h, filters[1], p["stride_height"], dh, p["padding"])
    ow = _window(w, filters[2], p["stride_width"], dw, p["padding"])
    if oh is None or ow is None:
        return None
    channels = filters[0] if node.op == Builtin.CONV_2D else filters[3]
    return (b, oh, ow, channels)


def _pooling(node: Node, graph: Graph) -> tuple[int, ...] | None:
    b, h, w, c = _shape(graph, node.inputs[0])
    p = node.params
    oh = _window(h, p["filter_height"], p["stride_height"], 1, p["padding"])
    ow = _window(w, p["filter_width"], p["stride_width"], 1, p["padding"])
    return None if oh is None or ow is None else (b, oh, ow, c)


def _pad(node: Node, graph: Graph) -> tuple[int, ...] | None:
    paddings = graph.tensor(node.inputs[1]).constant
    src = _shape(graph, node.inputs[0])
    if paddings is None or np.asarray(paddings).shape != (len(src), 2):
        return None
    return tuple(d + int(before) + int(after) for d, (before, after) in zip(src, np.asarray(paddings), strict=True))


def _resize(node: Node, graph: Graph) -> tuple[int, ...] | None:
    size = graph.tensor(node.inputs[1]).constant
    b, _, _, c = _shape(graph, node.inputs[0])
    if size is None or np.asarray(size).size != 2:
        return None
    oh, ow = (int(v) for v in np.asarray(size).ravel())
    return (b, oh, ow, c)


def _concatenation(node: Node, graph: Graph) -> tuple[int, ...] | None:
    shapes = [_shape(graph, i) for i in node.inputs if i >= 0]
    rank = len(shapes[0])
    axis = int(node.params.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or any(len(s) != rank for s in shapes):
        return None
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


def _broadcast(node: Node, graph: Graph) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*(_shape(graph, i) for i in node.inputs[:2])))
    except ValueError:
        return None


def _same_as_input(node: Node, graph: Graph) -> tuple[int, ...] | None:
    return _shape(graph, node.inputs[0])


_IMPLIED: dict[int, Callable[[Node, Graph], tuple[int, ...] | None]] = {
    Builtin.CONV_2D: _convolution,
    Builtin.DEPTHWISE_CONV_2D: _convolution,
    Builtin.MAX_POOL_2D: _pooling,
    Builtin.AVERAGE_POOL_2D: _pooling,
    Builtin.PAD: _pad,
    Builtin.PADV2: _pad,
    Builtin.MIRROR_PAD: _pad,
    Builtin.RESIZE_BILINEAR: _resize,
    Builtin.RESIZE_NEAREST_NEIGHBOR: _resize,
    Builtin.CONCATENATION: _concatenation,
    **{code: _broadcast for code in BINARY},
    **{code: _same_as_input for code in UNARY},
}


def declared_shape_problem(node: Node, graph: Graph) -> str | None:
    """Why ``node``'s declared output shape cannot be trusted (it differs from what its op computes
    from its inputs), or None when it matches or the op is not one this module knows."""
    implied_by = _IMPLIED.get(node.op)
    if implied_by is None or len(node.outputs) != 1 or node.outputs[0] < 0:
        return None
    try:
        implied = implied_by(node, graph)
    except (KeyError, ValueError, IndexError, TypeError):
        return None  # parameters the op's own check reports
    declared = _shape(graph, node.outputs[0])
    if implied is None or implied == declared:
        return None
    return (
        f"the model declares output shape {list(declared)}, but the op computes {list(implied)} from its inputs "
        "(a corrupt or edited model file?)"
    )
