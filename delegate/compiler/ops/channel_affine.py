"""A DEPTHWISE_CONV_2D that is a per-channel scale and shift (a folded batch norm, in MediaPipe's
hand models): elementwise like a MUL and an ADD by constants, so it links into its producer's
kernel (fusion.py) like one."""

from __future__ import annotations

from ..graph import Graph, Node
from ..kernels.common.pieces import activation_code
from .base import Link
from .elementwise import constant_shape, read_broadcast


def is_channel_affine(node: Node, graph: Graph) -> bool:
    """A 1x1 window, depth multiplier 1, stride 1, constant weights and bias, no merged PAD."""
    if len(node.inputs) < 2:
        return False
    src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
    filters = graph.tensor(node.inputs[1])
    bias = node.inputs[2] if len(node.inputs) > 2 else -1
    return (
        len(filters.shape) == 4 and filters.shape[:3] == (1, 1, 1) and filters.constant is not None
        and src.shape == dst.shape and filters.shape[3] == dst.shape[-1]
        and (bias < 0 or graph.tensor(bias).constant is not None)
        and node.params.get("stride_height", 1) == node.params.get("stride_width", 1) == 1
        and "merged_pad" not in node.params
    )  # fmt: skip


def channel_affine_code(node: Node, link: Link) -> str:
    """``result * weights + bias``, per channel, then the fused activation."""
    weights = link.add_operand("w", node.inputs[1])
    graph = link.ctx.graph
    lines = [read_broadcast(weights, "    ", constant=constant_shape(graph, node.inputs[1]))]
    lines.append(f"    result = result * {weights}_v;\n")
    if len(node.inputs) > 2 and node.inputs[2] >= 0:
        bias = link.add_operand("b", node.inputs[2])
        lines += [read_broadcast(bias, "    ", constant=constant_shape(graph, node.inputs[2]))]
        lines.append(f"    result = result + {bias}_v;\n")
    lines.append("    " + activation_code(node.params.get("activation", 0)) + "\n")
    return "".join(lines)
