"""AVERAGE_POOL_2D and MAX_POOL_2D (MEAN is a reduction: shape.py)."""

from __future__ import annotations

from ...context import model
from ..graph import Builtin, Graph, Node
from .base import HEAD, EmitContext, activation_check, activation_code, operation, runtime_io, same_padding

_POOL = (
    HEAD
    + """  ACCUM_FLT4 acc = {init};
  int count = 0;
  for (int ky = 0; ky < args.kernel_h; ++ky) {
    int yc = Y * args.stride_h + ky - args.pad_h;
    if (yc < 0 || yc >= args.src_tensor.Height()) continue;
    for (int kx = 0; kx < args.kernel_w; ++kx) {
      int xc = X * args.stride_w + kx - args.pad_w;
      if (xc < 0 || xc >= args.src_tensor.Width()) continue;
      ACCUM_FLT4 v = TO_ACCUM_FLT4(args.src_tensor.Read(xc, yc, S, b));
      {update}
      count += 1;
    }
  }
  FLT4 result = TO_FLT4({finish});
  {activation}
  args.dst_tensor.Write(result, X, Y, S, b);
}
"""
)


class Pool2D:
    codes = (Builtin.AVERAGE_POOL_2D, Builtin.MAX_POOL_2D)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if len(graph.tensor(node.inputs[0]).shape) != 4:
            return "pooling needs a 4-D input"
        return activation_check(node.params["activation"])

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        g, p = ctx.graph, node.params
        src, dst = g.tensor(node.inputs[0]).shape, g.tensor(node.outputs[0]).shape
        kh, kw = p["filter_height"], p["filter_width"]
        ints = {
            "kernel_h": kh,
            "kernel_w": kw,
            "stride_h": p["stride_height"],
            "stride_w": p["stride_width"],
            "pad_h": same_padding(src[1], dst[1], kh, p["stride_height"], 1, p["padding"]),
            "pad_w": same_padding(src[2], dst[2], kw, p["stride_width"], 1, p["padding"]),
        }
        if node.op == Builtin.MAX_POOL_2D:
            init, update, finish = "(ACCUM_FLT4)(-INFINITY)", "acc = v > acc ? v : acc;", "acc"
        else:
            init = "INIT_ACCUM_FLT4(0.0f)"
            update, finish = "acc += v;", "acc / (ACCUM_FLT)(count > 0 ? count : 1)"
        code = _POOL.replace("{init}", init).replace("{update}", update).replace("{finish}", finish)
        return operation(code.replace("{activation}", activation_code(p["activation"])), srcs=["src_tensor"], ints=ints)
