"""The ops of bool tensors: comparisons, LOGICAL_AND / OR / NOT, SELECT / SELECT_V2, and CAST
between float32, int32 and bool.

Every tensor on the device is float storage (FLT4), and so are these: a bool is 0.0 (false) or
1.0 (true), an int32 the float of its value. That is exact for bools in every precision and for
the int32 values these ops can make in F32 (docs/ops.md, "Bool and int32 tensors"): an int32
tensor inside a partition comes from a CAST of a float (an integer the float holds exactly, or
INT_MAX / INT_MIN where TFLite saturates), a SELECT of such values, a constant, whose values are
checked to be exact, or a partition input, which csrc/plugin.c converts only when it is exact.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .. import layout
from ..graph import BOOL, FLOAT32, INT32, Builtin, Graph, Node
from ..int_ranges import inexact_constant
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, LANES, operation, written
from .base import DTYPE_NAMES, EmitContext, Link, Op, operands, value_tensors
from .elementwise import read_broadcast
from .traits import Quantization, Traits

#: OpenCL's comparison of FLT4 ``a_v`` and ``b_in_v`` for each op (IEEE: NaN compares false but for
#: !=, as in TFLite's kernels; the build uses no fast-math option)
COMPARE = {
    Builtin.EQUAL: "==",
    Builtin.NOT_EQUAL: "!=",
    Builtin.GREATER: ">",
    Builtin.GREATER_EQUAL: ">=",
    Builtin.LESS: "<",
    Builtin.LESS_EQUAL: "<=",
}
#: on 0.0 / 1.0 operands: AND is the smaller, OR the larger (ternaries: PoCL calls min/max)
LOGICAL = {
    Builtin.LOGICAL_AND: "a_v < b_in_v ? a_v : b_in_v",
    Builtin.LOGICAL_OR: "a_v > b_in_v ? a_v : b_in_v",
}
_TRUE, _FALSE = "INIT_FLT4(1.0f)", "INIT_FLT4(0.0f)"


def _shape(graph: Graph, index: int) -> tuple[int, ...]:
    return graph.tensor(index).shape


def broadcast_problem(graph: Graph, inputs: list[int], output: int) -> str | None:
    """None when every input broadcasts to the output as TFLite broadcasts (dimensions aligned
    from the right, size 1 or the output's), else why not."""
    out_shape = _shape(graph, output)
    out = layout.bhwc(out_shape)
    for i in inputs:
        shape = _shape(graph, i)
        if len(shape) > len(out_shape):
            return f"input {i} has a higher rank than the output"
        if any(d not in (1, o) for d, o in zip(layout.bhwc(shape), out, strict=True)):
            return f"input {i} of shape {shape} does not broadcast to the output"
    return None


def _io(node: Node, graph: Graph, inputs: int, in_types: tuple[int, ...], out_types: tuple[int, ...]) -> str | None:
    """The node's arity, its tensors' dtypes, ranks and shapes; int32 constants exact."""
    if len(node.inputs) != inputs or any(i < 0 for i in node.inputs) or len(node.outputs) != 1:
        return f"{len(node.inputs)} inputs and {len(node.outputs)} outputs ({inputs} and 1 expected)"
    problem = value_tensors(graph, list(node.inputs), in_types) or value_tensors(graph, list(node.outputs), out_types)
    if problem:
        return problem
    if all(graph.tensor(i).is_constant for i in node.inputs):
        return "every input is a constant"
    return inexact_constant(graph, list(node.inputs))


def _same_dtype(graph: Graph, inputs: list[int]) -> str | None:
    types = sorted(DTYPE_NAMES[graph.tensor(i).dtype] for i in set(inputs))
    return None if len(set(types)) == 1 else f"operands of different types ({', '.join(dict.fromkeys(types))})"


class Compare(Op):
    """EQUAL, NOT_EQUAL, GREATER, GREATER_EQUAL, LESS, LESS_EQUAL: two float32 or int32 inputs
    (EQUAL and NOT_EQUAL also bool) broadcast to a bool output."""

    codes = tuple(COMPARE)
    data_inputs = 2

    def check(self, node: Node, graph: Graph) -> str | None:
        kinds = (FLOAT32, INT32, BOOL) if node.op in (Builtin.EQUAL, Builtin.NOT_EQUAL) else (FLOAT32, INT32)
        return (
            _io(node, graph, 2, kinds, (BOOL,))
            or _same_dtype(graph, list(node.inputs))
            or broadcast_problem(graph, list(node.inputs), node.outputs[0])
        )

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        srcs, objects = operands(["a", "b_in"], list(node.inputs), ctx)
        relation = COMPARE[Builtin(node.op)]
        code = (
            HEAD
            + read_broadcast("a")
            + read_broadcast("b_in")
            + f"  FLT4 result = a_v {relation} b_in_v ? {_TRUE} : {_FALSE};\n"
        )
        return operation(written(code), srcs=srcs, tensor_objects=objects)


class Logical(Op):
    """LOGICAL_AND and LOGICAL_OR of two bool inputs with broadcasting, LOGICAL_NOT of one."""

    codes = (*LOGICAL, Builtin.LOGICAL_NOT)
    data_inputs = 2

    def check(self, node: Node, graph: Graph) -> str | None:
        if node.op == Builtin.LOGICAL_NOT:
            problem = _io(node, graph, 1, (BOOL,), (BOOL,))
            if problem is None and _shape(graph, node.inputs[0]) != _shape(graph, node.outputs[0]):
                return "input and output shapes differ"
            return problem
        return _io(node, graph, 2, (BOOL,), (BOOL,)) or broadcast_problem(graph, list(node.inputs), node.outputs[0])

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        if node.op == Builtin.LOGICAL_NOT:
            code = HEAD + f"  FLT4 result = {_TRUE} - args.src_tensor.Read(X, Y, S, b);\n"
            return operation(written(code), srcs=["src_tensor"])
        srcs, objects = operands(["a", "b_in"], list(node.inputs), ctx)
        code = HEAD + read_broadcast("a") + read_broadcast("b_in") + f"  FLT4 result = {LOGICAL[Builtin(node.op)]};\n"
        return operation(written(code), srcs=srcs, tensor_objects=objects)


#: SELECT (v1) with a rank-1 condition picks along the first dimension of x: the coordinate that
#: dimension maps to in BHWC (layout.bhwc) for x of rank 2, 3 and 4
_FIRST_DIM = {2: "X", 3: "Y", 4: "b"}


def _rank_one_select(graph: Graph, node: Node) -> bool:
    cond, x = _shape(graph, node.inputs[0]), _shape(graph, node.inputs[1])
    return node.op == Builtin.SELECT and len(cond) == 1 and len(x) > 1


class Select(Op):
    """SELECT_V2 (condition, x and y broadcast to the output) and SELECT (x, y and the output of
    one shape; the condition of that shape, a scalar, or of rank 1 picking along x's first
    dimension), with x and y float32, int32 or bool."""

    codes = (Builtin.SELECT, Builtin.SELECT_V2)
    data_inputs = 3
    #: TFLite's int8 / uint8 SELECT copies the integers of x and y, whatever their quantization
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(
        codes, Traits(quantization=Quantization.KEEPS_INTEGERS, folds_values=True)
    )

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        """The picked values (a constant mask, shapes.py): SELECT_V2 broadcasts its three inputs;
        SELECT's rank-1 condition picks along x's first dimension."""
        cond, x, y = args
        if node.op == Builtin.SELECT and cond.ndim == 1 and x.ndim > 1:
            cond = cond.reshape((-1,) + (1,) * (x.ndim - 1))
        elif node.op == Builtin.SELECT and cond.ndim and (cond.shape != x.shape or x.shape != y.shape):
            return None  # SELECT does not broadcast
        result = np.where(cond.astype(bool), x, y)
        return result if tuple(result.shape) == tuple(out_shape) else None

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = _io(node, graph, 3, (FLOAT32, INT32, BOOL), (FLOAT32, INT32, BOOL))
        if problem:
            return problem
        cond, x, y = node.inputs
        out = node.outputs[0]
        if graph.tensor(cond).dtype != BOOL:
            return "the condition is not bool"
        if _same_dtype(graph, [x, y, out]):
            return "x, y and the output are not of one type"
        if node.op == Builtin.SELECT_V2:
            return broadcast_problem(graph, [cond, x, y], out)
        if not _shape(graph, x) == _shape(graph, y) == _shape(graph, out):
            return "x, y and the output differ in shape (SELECT does not broadcast them)"
        c, xs = _shape(graph, cond), _shape(graph, x)
        if c == xs or len(c) == 0 or (len(c) == 1 and xs and c[0] == xs[0]):
            return None
        return f"condition of shape {c} is neither x's shape {xs}, a scalar, nor x's first dimension"

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        srcs, objects = operands(["cond", "x_in", "y_in"], list(node.inputs), ctx)
        if _rank_one_select(ctx.graph, node):
            index = _FIRST_DIM[len(_shape(ctx.graph, node.inputs[1]))]
            read_cond = f"  FLT4 cond_v = (FLT4)(dlg_component(args.cond.Read(0, 0, {index} / 4, 0), {index} % 4));\n"
            head = LANES + HEAD
        else:
            read_cond, head = read_broadcast("cond"), HEAD
        code = (
            head
            + read_cond
            + read_broadcast("x_in")
            + read_broadcast("y_in")
            + f"  FLT4 result = cond_v != {_FALSE} ? x_in_v : y_in_v;\n"
        )
        return operation(written(code), srcs=srcs, tensor_objects=objects)

    def links(self, node: Node, graph: Graph, fused_input: int) -> bool:
        """SELECT_V2 with the producer's result as x or y (not both, not the condition), of float
        values: attention's mask picking scores or a fill runs in the scores' kernel."""
        _, x, y = node.inputs
        out = graph.tensor(node.outputs[0])
        return (
            node.op == Builtin.SELECT_V2 and node.inputs.count(fused_input) == 1 and fused_input in (x, y)
            and out.dtype == FLOAT32 and out.carried is None
        )  # fmt: skip

    def link(self, node: Node, fused_input: int, link: Link) -> str:
        cond, x, y = node.inputs
        other = y if fused_input == x else x
        cond_name, other_name = link.add_operand("cond", cond), link.add_operand("other", other)
        picked = ("result", f"{other_name}_v") if fused_input == x else (f"{other_name}_v", "result")
        return (
            read_broadcast(cond_name, indent="    ")
            + read_broadcast(other_name, indent="    ")
            + f"    result = {cond_name}_v != {_FALSE} ? {picked[0]} : {picked[1]};\n"
        )


#: float -> int32 as TFLite's CAST does it: toward zero, saturating at INT_MIN / INT_MAX, NaN to
#: INT_MAX (what its kernel gives, checked in tests/test_logic_ops.py). INT_MAX is stored as
#: 2^31, the float32 it converts to, so every later use of it (a CAST back, a comparison) agrees.
_TO_INT32 = """  FLT4 whole = trunc(result);
  whole = result >= INIT_FLT4(2147483648.0f) ? INIT_FLT4(2147483648.0f) : whole;
  whole = result < INIT_FLT4(-2147483648.0f) ? INIT_FLT4(-2147483648.0f) : whole;
  result = result != result ? INIT_FLT4(2147483648.0f) : whole;
"""
_TO_BOOL = f"  result = result != {_FALSE} ? {_TRUE} : {_FALSE};\n"


class Cast(Op):
    """CAST between float32, int32 and bool (a bool as 0 / 1, a number to bool as != 0)."""

    codes = (Builtin.CAST,)
    data_inputs = 1

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        return args[0].reshape(out_shape)  # integer to integer: shape arithmetic keeps the values

    def check(self, node: Node, graph: Graph) -> str | None:
        kinds = (FLOAT32, INT32, BOOL)
        problem = _io(node, graph, 1, kinds, kinds)
        if problem is None and _shape(graph, node.inputs[0]) != _shape(graph, node.outputs[0]):
            return "input and output shapes differ"
        return problem

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        src, dst = ctx.graph.tensor(node.inputs[0]).dtype, ctx.graph.tensor(node.outputs[0]).dtype
        convert = ""
        if dst == BOOL and src != BOOL:
            convert = _TO_BOOL
        elif dst == INT32 and src == FLOAT32:
            convert = _TO_INT32
        code = HEAD + "  FLT4 result = args.src_tensor.Read(X, Y, S, b);\n" + convert
        return operation(written(code), srcs=["src_tensor"])
