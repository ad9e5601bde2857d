"""BATCH_MATMUL: batched matrix products, either operand a constant or a runtime tensor."""

from __future__ import annotations

from typing import ClassVar

from .. import layout
from ..graph import Builtin, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, LANES, operation, written
from . import costs
from .base import EmitContext, Op, operands, runtime_io
from .traits import Traits


class BatchMatMul(Op):
    """BATCH_MATMUL: [..., M, K] x [..., K, N] (either side transposed by adj_x / adj_y), batch dims
    broadcast; either operand may be a constant. One output lane at a time."""

    codes = (Builtin.BATCH_MATMUL,)
    data_inputs = 2
    code_traits: ClassVar[dict[int, Traits]] = {Builtin.BATCH_MATMUL: Traits(product=True, hybrid_weights=(1, 0))}

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
        adj_x, adj_y = bool(node.params.get("adj_x")), bool(node.params.get("adj_y"))
        yl, bl = "args.lhs.Height() == 1 ? 0 : Y", "args.lhs.Batch() == 1 ? 0 : b"
        yr, br = "args.rhs.Height() == 1 ? 0 : Y", "args.rhs.Batch() == 1 ? 0 : b"
        lhs = (
            f"dlg_component(args.lhs.Read(kk, {yl}, X / 4, {bl}), X % 4)"
            if adj_x
            else f"dlg_component(args.lhs.Read(X, {yl}, kk / 4, {bl}), kk % 4)"
        )
        rhs = (
            f"dlg_component(args.rhs.Read(n, {yr}, kk / 4, {br}), kk % 4)"
            if adj_y
            else f"dlg_component(args.rhs.Read(kk, {yr}, n / 4, {br}), n % 4)"
        )
        depth = "args.lhs.Width()" if adj_x else "args.lhs.Channels()"
        code = (
            LANES
            + HEAD
            + f"""  FLT4 result = INIT_FLT4(0.0f);
  for (int k = 0; k < 4; ++k) {{
    int n = S * 4 + k;
    if (n >= args.dst_tensor.Channels()) break;
    float acc = 0.0f;
    for (int kk = 0; kk < {depth}; ++kk) {{
      acc += (float){lhs} * (float){rhs};
    }}
    result = dlg_set(result, k, (FLT)acc);
  }}
"""
        )
        return operation(written(code), srcs=srcs, tensor_objects=objects)
