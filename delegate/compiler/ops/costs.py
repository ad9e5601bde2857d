"""Multiply-adds of the matrix products (``Op.macs``): what cpu_choice.py weighs against TFLite's
CPU kernels."""

from __future__ import annotations

import math

from ..graph import Graph, Node


def _elements(graph: Graph, index: int) -> int:
    return math.prod(graph.tensor(index).shape)


def _output(node: Node, graph: Graph) -> int:
    return _elements(graph, node.outputs[0]) if node.outputs and node.outputs[0] >= 0 else 0


def _weights(node: Node, graph: Graph) -> tuple[int, ...]:
    return graph.tensor(node.inputs[1]).shape if len(node.inputs) > 1 and node.inputs[1] >= 0 else ()


def conv_macs(node: Node, graph: Graph) -> int:
    shape = _weights(node, graph)
    return _output(node, graph) * math.prod(shape[1:]) if len(shape) == 4 else 0  # filters [O, KH, KW, I]


def depthwise_macs(node: Node, graph: Graph) -> int:
    shape = _weights(node, graph)
    return _output(node, graph) * shape[1] * shape[2] if len(shape) == 4 else 0


def fully_connected_macs(node: Node, graph: Graph) -> int:
    shape = _weights(node, graph)
    return _output(node, graph) * shape[-1] if shape else 0  # weights [O, I]


def transpose_conv_macs(node: Node, graph: Graph) -> int:
    shape = _weights(node, graph)
    if len(shape) != 4 or len(node.inputs) <= 2:
        return 0
    return _elements(graph, node.inputs[2]) * math.prod(shape[:3])  # each input element meets O x KH x KW


def batch_matmul_macs(node: Node, graph: Graph) -> int:
    if not node.inputs or node.inputs[0] < 0:
        return 0
    lhs = graph.tensor(node.inputs[0]).shape
    if len(lhs) < 2:
        return 0
    return _output(node, graph) * (lhs[-2] if node.params.get("adj_x") else lhs[-1])
