"""Elementwise ops: ADD, SUB, MUL with TFLite broadcasting and constant operands; unary activations."""

from __future__ import annotations

from ...context import model
from .. import layout
from ..graph import Activation, Builtin, Graph, Node
from .base import HEAD, EmitContext, activation_check, activation_code, operation, runtime_io

_BINARY = {Builtin.ADD: "+", Builtin.SUB: "-", Builtin.MUL: "*"}


def _read_broadcast(name: str) -> str:
    """Read operand ``name`` at the output's coordinates, dimensions of size 1 broadcast."""
    return f"""  FLT4 {name}_v = args.{name}.Read(args.{name}.Width() == 1 ? 0 : X, args.{name}.Height() == 1 ? 0 : Y,
                            args.{name}.Slices() == 1 ? 0 : S, args.{name}.Batch() == 1 ? 0 : b);
  if (args.{name}.Channels() == 1) {name}_v = (FLT4)({name}_v.x);
"""


class Binary:
    codes = tuple(_BINARY)
    data_inputs = 2

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if len(node.inputs) != 2:
            return "binary op without two inputs"
        out = layout.bhwc(graph.tensor(node.outputs[0]).shape)
        for i in node.inputs:
            t = graph.tensor(i)
            if len(t.shape) > len(graph.tensor(node.outputs[0]).shape):
                return f"input {i} has a higher rank than the output"
            shape = layout.bhwc(t.shape)
            if any(d not in (1, o) for d, o in zip(shape, out, strict=True)):
                return f"input {i} of shape {t.shape} does not broadcast to the output"
        if all(graph.tensor(i).is_constant for i in node.inputs):
            return "both inputs are constants"
        return activation_check(node.params.get("activation", 0))

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        g = ctx.graph
        names, srcs, objects = ["a", "b_in"], [], []
        for name, index in zip(names, node.inputs, strict=True):
            t = g.tensor(index)
            if t.constant is not None:
                desc = layout.tensor_descriptor(t.shape, ctx.precision)
                desc.data = layout.buffer_layout(t.constant, t.shape, ctx.dtype)
                objects.append(model.TensorDescriptorMapValue(name, desc))
            else:
                srcs.append(name)
        code = (
            HEAD
            + _read_broadcast("a")
            + _read_broadcast("b_in")
            + f"  FLT4 result = a_v {_BINARY[Builtin(node.op)]} b_in_v;\n  {{activation}}\n"
            + "  args.dst_tensor.Write(result, X, Y, S, b);\n}\n"
        )
        code = code.replace("{activation}", activation_code(node.params.get("activation", 0)))
        op = operation(code, srcs=srcs, tensor_objects=objects)
        return op


_UNARY = {
    Builtin.LOGISTIC: Activation.SIGMOID,
    Builtin.RELU: Activation.RELU,
    Builtin.RELU6: Activation.RELU6,
    Builtin.RELU_N1_TO_1: Activation.RELU_N1_TO_1,
    Builtin.TANH: Activation.TANH,
}


class Unary:
    codes = tuple(_UNARY)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if len(node.inputs) != 1 or graph.tensor(node.inputs[0]).is_constant:
            return "unary op on a constant"
        if graph.tensor(node.inputs[0]).shape != graph.tensor(node.outputs[0]).shape:
            return "input and output shapes differ"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        code = (
            HEAD
            + "  FLT4 result = args.src_tensor.Read(X, Y, S, b);\n  "
            + activation_code(_UNARY[Builtin(node.op)])
            + "\n  args.dst_tensor.Write(result, X, Y, S, b);\n}\n"
        )
        return operation(code, srcs=["src_tensor"])
