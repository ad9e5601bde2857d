"""BATCH_MATMUL: batched matrix products, either operand a constant or a runtime tensor."""

from __future__ import annotations

from typing import ClassVar

from .. import layout
from ..graph import Builtin, Graph, Node
from ..kernel import Kernel
from ..kernels.common.batch_matmul import block_code, rows_code, slice_rows_code
from ..kernels.common.pieces import operation
from ..selectors.batch_matmul import select_batch_matmul
from ..selectors.spec import Variant
from . import costs
from .base import EmitContext, Op, operands, runtime_io
from .conv_render import launched
from .traits import Quantization, Traits


class BatchMatMul(Op):
    """BATCH_MATMUL: [..., M, K] x [..., K, N] (either side transposed by adj_x / adj_y), batch dims
    broadcast; either operand may be a constant. Its kernel is selectors/batch_matmul.py's choice."""

    codes = (Builtin.BATCH_MATMUL,)
    data_inputs = 2
    #: TFLite's int8 kernel accumulates integers exactly and rounds the real product once: carried in float
    code_traits: ClassVar[dict[int, Traits]] = {
        Builtin.BATCH_MATMUL: Traits(quantization=Quantization.REQUANTIZES, product=True, hybrid_weights=(1, 0))
    }

    def macs(self, node: Node, graph: Graph) -> int:
        return costs.batch_matmul_macs(node, graph)

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        lhs, rhs = graph.tensor(node.inputs[0]), graph.tensor(node.inputs[1])
        if min(len(lhs.shape), len(rhs.shape)) < 2:
            return "operands of rank < 2"
        if lhs.is_constant and rhs.is_constant:
            return "both operands are constants"
        out = layout.bhwc(graph.tensor(node.outputs[0]).shape)
        for t in (lhs, rhs):
            if any(d not in (1, o) for d, o in zip(layout.bhwc(t.shape)[:2], out[:2], strict=True)):
                return "batch dimensions do not broadcast"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        srcs, objects = operands(["lhs", "rhs"], list(node.inputs), ctx)
        spec = select_batch_matmul(node, ctx.graph, ctx.options)
        if spec.variant is Variant.BATCH_BLOCK:
            return launched(operation(block_code(), srcs=srcs, tensor_objects=objects), spec)
        adj_y = bool(node.params.get("adj_y"))
        assert spec.rows is not None
        code = rows_code(spec.rows, adj_y) if spec.variant is Variant.BATCH_ROWS else slice_rows_code(adj_y)
        return launched(operation(code, srcs=srcs, tensor_objects=objects), spec)
