"""Nearest-neighbour upsampling by integer factors, one kernel: the op the upsampling rewrite
(compiler/upsample.py) puts in place of the RESHAPE / TILE chain TensorFlow's converter writes for
Keras 3's UpSampling2D. Compiler-internal: no TFLite node has its code.

out[b, y, x, c] = in[b, y // fy, x // fx, c]: channels keep their slices, so each output slice is
one read of the input's (integer division, exact at any size, where RESIZE_NEAREST_NEIGHBOR's
float scale is not for every factor)."""

from __future__ import annotations

from typing import ClassVar

from ..graph import Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, operation, written
from ..selectors.pointwise import select_copy
from .base import EmitContext, Op
from .elementwise import row_runs
from .traits import MOVES_INTEGERS, Traits

#: the compiler-internal code of the fused node (TFLite's codes are non-negative)
UPSAMPLE_NEAREST = -4

_CODE = HEAD + "  FLT4 result = args.src_tensor.Read(X / args.factor_x, Y / args.factor_y, S, b);\n"


class UpsampleNearest(Op):
    """Input (x,); params ``factor_y`` and ``factor_x``; output (B, H * factor_y, W * factor_x, C)."""

    codes = (UPSAMPLE_NEAREST,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        b, h, w, c = graph.tensor(node.inputs[0]).shape
        return (b, h * node.params["factor_y"], w * node.params["factor_x"], c)

    def check(self, node: Node, graph: Graph) -> str | None:
        # only the rewrite makes such a node, from a chain whose nodes were claimed
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        factors = {"factor_y": node.params["factor_y"], "factor_x": node.params["factor_x"]}
        # the factors as literals: divisions by constants (by runtime values they cost more
        # than the copy), in runs of a row as the other copies (selectors/pointwise.select_copy)
        kernel = operation(written(_CODE), srcs=["src_tensor"], literals=factors)
        return row_runs(kernel, node, ctx, select_copy(node, ctx.graph, ctx.options))


OP = UpsampleNearest()
