"""Elementwise fusion: a chain of elementwise ops after a producer runs inside the producer's kernel.

A unary op, or a binary op whose other operand is a constant or any runtime tensor, is linked
into the kernel that produces its input when that input has no other reader and is not a
partition output: its code runs on the producer's ``result`` before the write (the schema's
``linkable`` / ``linkable_count``), saving one kernel launch and one trip through memory.
"""

from __future__ import annotations

from ..context import model
from .graph import Builtin, Graph, Node
from .ops.base import WRITE, WRITE_AT, EmitContext, activation_code, constant_tensor
from .ops.conv_fast import pixel_softmax_code
from .ops.elementwise import _BINARY, _FUSED, _UNARY, Binary, Unary, read_broadcast


def linkable(node: Node, graph: Graph, fused_input: int) -> bool:
    """Can ``node`` run on the result of the kernel producing ``fused_input``?"""
    out = graph.tensor(node.outputs[0]).shape
    if graph.tensor(fused_input).shape != out:
        return False
    if node.op in Unary.codes:
        return True
    if node.op in Binary.codes:
        return node.inputs.count(fused_input) == 1
    return False


def link(producer: model.CLNode, node: Node, fused_input: int, ctx: EmitContext, serial: int) -> None:
    """Append ``node``'s code to ``producer``'s kernel and make ``producer`` write ``node``'s output."""
    op = producer.gpu_op
    assert op is not None and op.code is not None and op.arguments is not None
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
    op.linkable_count += 1
    producer.output_ids = list(node.outputs)
    producer.name = f"{producer.name}+{node.name}"


def link_softmax(producer: model.CLNode, node: Node, graph: Graph) -> bool:
    """Run SOFTMAX / LOG_SOFTMAX ``node`` inside ``producer``, a matrix-product kernel that holds
    every channel of its pixels and has nothing linked yet (linked ops run after the softmax, in
    the write). True when linked."""
    op = producer.gpu_op
    if node.op not in (Builtin.SOFTMAX, Builtin.LOG_SOFTMAX) or op is None or op.code is None:
        return False
    src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
    if op.linkable_count or src.shape != dst.shape or not src.shape:
        return False
    beta = float(node.params.get("beta", 1.0)) if node.op == Builtin.SOFTMAX else 1.0
    code = pixel_softmax_code(op.code, src.shape[-1], beta, node.op == Builtin.LOG_SOFTMAX)
    if code is None:
        return False
    op.code = code
    op.linkable_count += 1
    producer.output_ids = list(node.outputs)
    producer.name = f"{producer.name}+{node.name}"
    return True
