"""A constant written into a runtime tensor: the first value of a WHILE's loop-carried state when
the calling graph starts it at a constant (an RNN's zero state), so that the unrolled copies of the
body (compiler/while_loop.py) read a tensor like every later trip's, instead of constants that
ops such as FULLY_CONNECTED do not take as their data. Compiler-internal: no TFLite node has its
code. One input, the constant (float32), and one output of its shape."""

from __future__ import annotations

from typing import ClassVar

from ..graph import FLOAT32, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, operation, written
from .base import EmitContext, Op, constant_tensor
from .traits import Traits

#: the compiler-internal code of the node (TFLite's codes are non-negative)
CONSTANT_VALUE = -5

_COPY = written(HEAD + "  FLT4 result = args.value.Read(X, Y, S, b);\n")


class ConstantValue(Op):
    codes = (CONSTANT_VALUE,)
    data_inputs = 0
    code_traits: ClassVar[dict[int, Traits]] = {CONSTANT_VALUE: Traits()}

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) != 1 or len(node.outputs) != 1:
            return "one constant in, one tensor out"
        value, out = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        if not value.is_constant or value.dtype != FLOAT32 or value.shape != out.shape or out.dtype != FLOAT32:
            return "the input is not a float32 constant of the output's shape"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        return operation(
            _COPY, srcs=[], tensor_objects=[constant_tensor("value", ctx.graph.tensor(node.inputs[0]), ctx)]
        )


OP = ConstantValue()
