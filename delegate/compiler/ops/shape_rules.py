"""Output shape rules: the shape an op computes from its inputs and parameters (TFLite's
semantics). Ops name theirs as ``Op.implied_shape`` (shape_check.py compares it with the model's
declared shape); a rule returns None where it cannot tell."""

from __future__ import annotations

import numpy as np

from ..graph import Builtin, Graph, Node, Padding


def shape_of(graph: Graph, index: int) -> tuple[int, ...]:
    return tuple(int(d) for d in graph.tensor(index).shape)


def window(size: int, kernel: int, stride: int, dilation: int, padding: int) -> int | None:
    """TFLite's output size of a sliding window (SAME: ceil(size / stride); VALID: the full windows)."""
    if stride < 1 or dilation < 1:
        return None
    if padding == Padding.SAME:
        return -(-size // stride)
    if padding == Padding.VALID:
        return (size - (kernel - 1) * dilation - 1) // stride + 1
    return None


def convolution(node: Node, graph: Graph) -> tuple[int, ...] | None:
    b, h, w, _ = shape_of(graph, node.inputs[0])
    filters = shape_of(graph, node.inputs[1])
    p = node.params
    dh, dw = p.get("dilation_height_factor", 1) or 1, p.get("dilation_width_factor", 1) or 1
    oh = window(h, filters[1], p["stride_height"], dh, p["padding"])
    ow = window(w, filters[2], p["stride_width"], dw, p["padding"])
    if oh is None or ow is None:
        return None
    channels = filters[0] if node.op == Builtin.CONV_2D else filters[3]
    return (b, oh, ow, channels)


def pooling(node: Node, graph: Graph) -> tuple[int, ...] | None:
    b, h, w, c = shape_of(graph, node.inputs[0])
    p = node.params
    oh = window(h, p["filter_height"], p["stride_height"], 1, p["padding"])
    ow = window(w, p["filter_width"], p["stride_width"], 1, p["padding"])
    return None if oh is None or ow is None else (b, oh, ow, c)


def pad(node: Node, graph: Graph) -> tuple[int, ...] | None:
    paddings = graph.tensor(node.inputs[1]).constant
    src = shape_of(graph, node.inputs[0])
    if paddings is None or np.asarray(paddings).shape != (len(src), 2):
        return None
    return tuple(d + int(before) + int(after) for d, (before, after) in zip(src, np.asarray(paddings), strict=True))


def resize(node: Node, graph: Graph) -> tuple[int, ...] | None:
    size = graph.tensor(node.inputs[1]).constant
    b, _, _, c = shape_of(graph, node.inputs[0])
    if size is None or np.asarray(size).size != 2:
        return None
    oh, ow = (int(v) for v in np.asarray(size).ravel())
    return (b, oh, ow, c)


def concatenation(node: Node, graph: Graph) -> tuple[int, ...] | None:
    shapes = [shape_of(graph, i) for i in node.inputs if i >= 0]
    rank = len(shapes[0])
    axis = int(node.params.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank or any(len(s) != rank for s in shapes):
        return None
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return tuple(out)


def broadcast(node: Node, graph: Graph) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*(shape_of(graph, i) for i in node.inputs[:2])))
    except ValueError:
        return None


def same_as_input(node: Node, graph: Graph) -> tuple[int, ...] | None:
    return shape_of(graph, node.inputs[0])
