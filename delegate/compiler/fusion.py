"""Fusion: a chain of ops after a producer runs inside the producer's kernel.

A unary op, a binary op whose other operand is a constant or any runtime tensor, or a 1x1
depthwise convolution (a per-channel scale and shift) is linked into the kernel that produces its
input when that input has no other reader and is not a partition output, and the kernel declares
the writes of its ``result`` (kernel.WriteHook): its code runs on ``result`` in front of every
write (the schema's ``linkable`` / ``linkable_count``), saving one kernel launch and one trip
through memory. A SOFTMAX / LOG_SOFTMAX links into a matrix-product kernel that holds every
channel of its pixels (kernel.PixelOps) and has nothing linked yet: it runs on the accumulators,
before the writes (so before any op linked after it).
"""

from __future__ import annotations

from ..context import model
from .bounds import takes_another_link
from .graph import Builtin, Graph, Node
from .kernel import KernelNode
from .ops.base import EmitContext, activation_code, constant_tensor
from .ops.elementwise import BINARY, FUSED, UNARY, read_broadcast
from .ops.pixel_softmax import accepts_pixel_softmax, pixel_softmax_code

_SOFTMAX = (Builtin.SOFTMAX, Builtin.LOG_SOFTMAX)


def linkable(node: Node, graph: Graph, fused_input: int, producer: KernelNode) -> bool:
    """Can ``node`` run on the result of ``producer``, the kernel producing ``fused_input``?"""
    out = graph.tensor(node.outputs[0]).shape
    if graph.tensor(fused_input).shape != out:
        return False
    kernel = producer.kernel
    if node.op in _SOFTMAX:
        ops = kernel.pixel_ops
        return (
            bool(out) and ops is not None and not kernel.links
            and accepts_pixel_softmax(ops, out[-1], node.op == Builtin.LOG_SOFTMAX)
        )  # fmt: skip
    if not kernel.accepts_links or not takes_another_link(kernel):
        return False  # no write hooks, or a kernel as long as it should grow (bounds.py)
    if node.op in UNARY:
        return True
    if node.op in BINARY:
        return node.inputs.count(fused_input) == 1
    return _channel_affine(node, graph)


def _channel_affine(node: Node, graph: Graph) -> bool:
    """Is ``node`` a DEPTHWISE_CONV_2D of a 1x1 window, depth multiplier 1, stride 1 and constant
    weights and bias: a per-channel scale and shift (a folded batch norm, in MediaPipe's hand
    models), elementwise like a MUL and an ADD by constants?"""
    if node.op != Builtin.DEPTHWISE_CONV_2D or len(node.inputs) < 2:
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


def link(producer: KernelNode, node: Node, fused_input: int, ctx: EmitContext) -> None:
    """Run ``node`` in ``producer``'s kernel and make ``producer`` write ``node``'s output."""
    kernel = producer.kernel
    if node.op in _SOFTMAX:
        ops = kernel.pixel_ops
        assert ops is not None
        beta = float(node.params.get("beta", 1.0)) if node.op == Builtin.SOFTMAX else 1.0
        channels = ctx.graph.tensor(fused_input).shape[-1]
        kernel.pixel_code = pixel_softmax_code(ops, channels, beta, node.op == Builtin.LOG_SOFTMAX)
    else:
        kernel.linked.append(_linked_code(producer, node, fused_input, ctx, kernel.links + 1))
    producer.output_ids = list(node.outputs)
    producer.nodes.append(node.name)


def _linked_code(producer: KernelNode, node: Node, fused_input: int, ctx: EmitContext, serial: int) -> str:
    """The code of elementwise ``node`` on ``result``; its operands join the producer's arguments
    as ``link{serial}...``."""
    arguments = producer.kernel.operation.arguments
    assert arguments is not None
    lines = ["  {\n"]
    if node.op == Builtin.DEPTHWISE_CONV_2D:  # _channel_affine: result * weights + bias, per channel
        name = f"link{serial}"
        arguments.tensor_objects.append(constant_tensor(f"{name}_w", ctx.graph.tensor(node.inputs[1]), ctx))
        lines.append(read_broadcast(f"{name}_w", indent="    "))
        lines.append(f"    result = result * {name}_w_v;\n")
        if len(node.inputs) > 2 and node.inputs[2] >= 0:
            arguments.tensor_objects.append(constant_tensor(f"{name}_b", ctx.graph.tensor(node.inputs[2]), ctx))
            lines.append(read_broadcast(f"{name}_b", indent="    "))
            lines.append(f"    result = result + {name}_b_v;\n")
        lines.append("    " + activation_code(node.params.get("activation", 0)) + "\n  }\n")
        return "".join(lines)
    if node.op in UNARY:
        lines.append("    " + UNARY[Builtin(node.op)].replace("args.alpha", f"args.link{serial}_alpha") + "\n")
        if node.op == Builtin.LEAKY_RELU:
            arguments.float_values.append(
                model.FloatValue(f"link{serial}_alpha", float(node.params.get("alpha", 0.2)), True)
            )
    else:
        other = next(i for i in node.inputs if i != fused_input)
        name = f"link{serial}"
        t = ctx.graph.tensor(other)
        if t.constant is not None:
            arguments.tensor_objects.append(constant_tensor(name, t, ctx))
        else:
            producer.kernel.operation.src_tensors_names.append(name)
            producer.input_ids.append(other)
        lines.append(read_broadcast(name, indent="    ", zero_extended=other in node.params.get("zero_extended", ())))
        first, second = ("result", f"{name}_v") if node.inputs[0] == fused_input else (f"{name}_v", "result")
        expr = BINARY[Builtin(node.op)].replace("a_v", f"{name}_a").replace("b_in_v", f"{name}_b")
        lines.append(f"    FLT4 {name}_a = {first}; FLT4 {name}_b = {second};\n")
        lines.append(f"    result = {expr};\n")
        if node.op in FUSED:
            lines.append("    " + activation_code(node.params.get("activation", 0)) + "\n")
    lines.append("  }\n")
    return "".join(lines)
