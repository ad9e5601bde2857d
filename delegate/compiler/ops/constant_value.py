"""A constant written into a runtime tensor, for an unrolled WHILE (compiler/while_loop.py): the
first value of its loop-carried state when the calling graph starts it at a constant (an RNN's zero
state), so that the body's copies read a tensor like every later trip's, instead of constants that
ops such as FULLY_CONNECTED do not take as their data; and a WHILE output the unrolling leaves
constant (the final counters), which TFLite may read. Compiler-internal: no TFLite node has its
code. One input, the constant (float32, or int32 within 2^24, or bool: the float storage holds
them exactly), and one output of its shape and type."""

from __future__ import annotations

from typing import ClassVar

from ..graph import BOOL, FLOAT32, INT32, Graph, Node
from ..int_ranges import inexact_constant
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
        if not value.is_constant or value.dtype not in (FLOAT32, INT32, BOOL):
            return "the input is not a float32, int32 or bool constant"
        if value.shape != out.shape or value.dtype != out.dtype:
            return "the input is not of the output's shape and type"
        return inexact_constant(graph, [node.inputs[0]])

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        return operation(
            _COPY, srcs=[], tensor_objects=[constant_tensor("value", ctx.graph.tensor(node.inputs[0]), ctx)]
        )


OP = ConstantValue()
