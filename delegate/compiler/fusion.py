"""Fusion: a chain of ops after a producer runs inside the producer's kernel.

A unary op, or a binary op whose other operand is a constant or any runtime tensor, is linked
into the kernel that produces its input when that input has no other reader and is not a
partition output: its code runs on the producer's ``result`` before the write (the schema's
``linkable`` / ``linkable_count``), saving one kernel launch and one trip through memory.
A SOFTMAX / LOG_SOFTMAX links into a matrix-product kernel that holds every channel of its
pixels and has nothing linked yet: it runs on the accumulators, before the write (so before any
op linked after it).
"""

from __future__ import annotations

from ..context import model
from . import kernel_names
from .graph import Builtin, Graph, Node
from .ops.base import WRITE, WRITE_AT, EmitContext, activation_code, constant_tensor
from .ops.conv_fast import accepts_pixel_softmax, pixel_softmax_code
from .ops.elementwise import _BINARY, _FUSED, _UNARY, Binary, Unary, read_broadcast

_SOFTMAX = (Builtin.SOFTMAX, Builtin.LOG_SOFTMAX)


def linkable(node: Node, graph: Graph, fused_input: int, producer: model.CLNode) -> bool:
    """Can ``node`` run on the result of ``producer``, the kernel producing ``fused_input``?"""
    out = graph.tensor(node.outputs[0]).shape
    if graph.tensor(fused_input).shape != out:
        return False
    if node.op in _SOFTMAX:
        op = producer.gpu_op
        return (
            bool(out) and op is not None and op.code is not None and not op.linkable_count
            and accepts_pixel_softmax(op.code, out[-1], node.op == Builtin.LOG_SOFTMAX)
        )  # fmt: skip
    if node.op in Unary.codes:
        return True
    if node.op in Binary.codes:
        return node.inputs.count(fused_input) == 1
    return False


def link(producer: model.CLNode, node: Node, fused_input: int, ctx: EmitContext, serial: int) -> None:
    """Append ``node``'s code to ``producer``'s kernel and make ``producer`` write ``node``'s output."""
    op = producer.gpu_op
    assert op is not None and op.code is not None and op.arguments is not None
    if node.op in _SOFTMAX:
        beta = float(node.params.get("beta", 1.0)) if node.op == Builtin.SOFTMAX else 1.0
        channels = ctx.graph.tensor(fused_input).shape[-1]
        op.code = pixel_softmax_code(op.code, channels, beta, node.op == Builtin.LOG_SOFTMAX)
        _adopt(producer, node)
        return
    lines = ["  {\n"]
    if node.op in Unary.codes:
        lines.append("    " + _UNARY[Builtin(node.op)].replace("args.alpha", f"args.link{serial}_alpha") + "\n")
        if node.op == Builtin.LEAKY_RELU:
            op.arguments.float_values.append(
                model.FloatValue(f"link{serial}_alpha", float(node.params.get("alpha", 0.2)), True)
            )
    else:
        other = next(i for i in node.inputs if i != fused_input)
        name = f"link{serial}"
        t = ctx.graph.tensor(other)
        if t.constant is not None:
            op.arguments.tensor_objects.append(constant_tensor(name, t, ctx))
        else:
            op.src_tensors_names.append(name)
            producer.input_ids.append(other)
        lines.append(read_broadcast(name, indent="    "))
        first, second = ("result", f"{name}_v") if node.inputs[0] == fused_input else (f"{name}_v", "result")
        expr = _BINARY[Builtin(node.op)].replace("a_v", "LINK_A").replace("b_in_v", "LINK_B")
        lines.append(
            f"    FLT4 LINK_A = {first}; FLT4 LINK_B = {second};\n".replace("LINK_A", f"{name}_a").replace(
                "LINK_B", f"{name}_b"
            )
        )
        lines.append(f"    result = {expr.replace('LINK_A', f'{name}_a').replace('LINK_B', f'{name}_b')};\n")
        if node.op in _FUSED:
            lines.append("    " + activation_code(node.params.get("activation", 0)) + "\n")
    lines.append("  }\n")
    op.code = op.code.replace(WRITE, "".join(lines) + WRITE).replace(WRITE_AT, "".join(lines) + WRITE_AT)
    _adopt(producer, node)


def _adopt(producer: model.CLNode, node: Node) -> None:
    """``producer`` now also runs ``node`` and writes its output."""
    assert producer.gpu_op is not None
    producer.gpu_op.linkable_count += 1
    producer.output_ids = list(node.outputs)
    producer.name = kernel_names.joined([producer.name, node.name])
