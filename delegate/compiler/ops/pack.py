"""PACK and UNPACK: tensors stacked along a new axis, and a tensor taken apart along one (the
outputs of recurrent layers and litert-torch's stacks, when they are data, not shapes: PACK of
constants is folded, compiler/shapes.py).

Both re-index in the runtime's 4-D view (layout.bhwc): the packed tensor has one dim more than
each piece, so a piece's dim i is the packed tensor's i + 1 before the axis and i after it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..graph import Builtin, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import LANE_LOOP, input_lane, operation, written
from .base import EmitContext, Op, float_tensors, operands, runtime_io
from .reindex import OUT, gather_code, rank_of
from .traits import MOVES_INTEGERS, Traits

#: the most pieces one kernel reads (as CONCATENATION)
MAX_PIECES = 16


def piece_coordinates(piece_rank: int, axis: int) -> tuple[list[str], int]:
    """For a piece of rank ``piece_rank`` packed at ``axis``: the piece's 4-D coordinates as
    expressions of the packed tensor's (OUT), and the packed tensor's 4-D dim along the axis."""
    along = 4 - (piece_rank + 1) + axis
    exprs = ["0"] * 4
    for j in range(4 - (piece_rank + 1), 4):
        if j != along:
            exprs[j + 1 if j < along else j] = OUT[j]
    return exprs, along


def _axis(node: Node, packed_rank: int) -> int:
    axis = int(node.params.get("axis", 0))
    return axis + packed_rank if axis < 0 else axis


def _check_ranks(piece_rank: int, packed_rank: int, axis: int) -> str | None:
    if packed_rank != piece_rank + 1 or packed_rank > 4:
        return f"pieces of rank {piece_rank} and a packed tensor of rank {packed_rank} (at most 4)"
    if not 0 <= axis < packed_rank:
        return f"axis {axis} is outside the packed tensor's rank {packed_rank}"
    return None


class Pack(Op):
    codes = (Builtin.PACK,)
    data_inputs = MAX_PIECES
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        return np.stack(args, axis=int(node.params.get("axis", 0)))

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if not 1 <= len(node.inputs) <= MAX_PIECES:
            return f"{len(node.inputs)} inputs (1 to {MAX_PIECES} supported)"
        if all(graph.tensor(i).is_constant for i in node.inputs):
            return "all inputs are constants"
        shapes = {graph.tensor(i).shape for i in node.inputs}
        if len(shapes) != 1:
            return "inputs of different shapes"
        packed = rank_of(graph, node.outputs[0])
        return _check_ranks(rank_of(graph, node.inputs[0]), packed, _axis(node, packed))

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        packed = rank_of(ctx.graph, node.outputs[0])
        exprs, along = piece_coordinates(packed - 1, _axis(node, packed))
        names = [f"src_{k}" for k in range(len(node.inputs))]
        srcs, objects = operands(names, list(node.inputs), ctx)
        reads = "".join(
            f"    {'if' if n == 0 else 'else if'} ({OUT[along]} == {n}) v = dlg_component("
            f"args.{name}.Read(xi, yi, ci / 4, bi), ci % 4);\n"
            for n, name in enumerate(names)
        )
        code = (
            LANE_LOOP
            + "    float v = 0.0f;\n"
            + input_lane(exprs)
            + reads
            + "    result = dlg_set(result, k, v);\n  }\n"
        )
        return operation(written(code), srcs=srcs, tensor_objects=objects)


class Unpack(Op):
    codes = (Builtin.UNPACK,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)
    per_output = True

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = float_tensors(node, graph, [node.inputs[0], *node.outputs])
        if problem:
            return problem
        if graph.tensor(node.inputs[0]).is_constant:
            return "the input is a constant"
        packed = rank_of(graph, node.inputs[0])
        axis = _axis(node, packed)
        problem = _check_ranks(packed - 1, packed, axis)
        if problem:
            return problem
        if len(node.outputs) != graph.tensor(node.inputs[0]).shape[axis]:
            return f"{len(node.outputs)} outputs for a dim of {graph.tensor(node.inputs[0]).shape[axis]}"
        return None

    def emit_many(self, node: Node, ctx: EmitContext) -> list[tuple[Kernel, int]]:
        packed = rank_of(ctx.graph, node.inputs[0])
        piece, along = piece_coordinates(packed - 1, _axis(node, packed))
        # the packed tensor's coordinates from a piece's: the inverse of piece_coordinates
        exprs = ["0"] * 4
        for piece_dim, packed_coordinate in enumerate(piece):
            if packed_coordinate != "0":
                exprs[OUT.index(packed_coordinate)] = OUT[piece_dim]
        exprs[along] = "args.index"
        code = gather_code(exprs)
        return [
            (operation(code, srcs=["src_tensor"], ints={"index": n}), output) for n, output in enumerate(node.outputs)
        ]


OP = (Pack(), Unpack())
