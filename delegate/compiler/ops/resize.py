"""RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR."""

from __future__ import annotations

from ..graph import Builtin, Graph, Node
from ..kernel import Kernel
from .base import HEAD, EmitContext, Op, operation, runtime_io, written
from .reindex import data_check, gather_code, rank_of


class ResizeNearest(Op):
    codes = (Builtin.RESIZE_NEAREST_NEIGHBOR,)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = data_check(node, graph)
        if problem:
            return problem
        return None if rank_of(graph, node.inputs[0]) == 4 else "needs a 4-D input"

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g = ctx.graph
        _, ih, iw, _ = g.tensor(node.inputs[0]).shape
        _, oh, ow, _ = g.tensor(node.outputs[0]).shape
        align, half = bool(node.params.get("align_corners")), bool(node.params.get("half_pixel_centers"))

        def scale(i: int, o: int) -> float:
            return (i - 1) / (o - 1) if align and o > 1 else i / o

        def coord(o: str, axis: str, size: str) -> str:
            v = f"((float){o} + {0.5 if half else 0.0}f) * args.scale_{axis}"
            picked = f"(int)round({v})" if align else f"(int)floor({v})"
            clamped = f"min({picked}, args.src_tensor.{size}() - 1)"
            return f"max({clamped}, 0)"

        exprs = ["b", coord("Y", "y", "Height"), coord("X", "x", "Width"), "c"]
        return operation(
            gather_code(exprs), srcs=["src_tensor"], floats={"scale_y": scale(ih, oh), "scale_x": scale(iw, ow)}
        )


class ResizeBilinear(Op):
    codes = (Builtin.RESIZE_BILINEAR,)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph, data_inputs=1)
        if problem:
            return problem
        if len(graph.tensor(node.inputs[0]).shape) != 4:
            return "RESIZE_BILINEAR needs a 4-D input"
        if node.params.get("align_corners") and node.params.get("half_pixel_centers"):
            return "align_corners together with half_pixel_centers"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g = ctx.graph
        _, ih, iw, _ = g.tensor(node.inputs[0]).shape
        _, oh, ow, _ = g.tensor(node.outputs[0]).shape
        align = bool(node.params.get("align_corners"))

        def scale(i: int, o: int) -> float:
            return (i - 1) / (o - 1) if align and o > 1 else i / o

        code = (
            HEAD
            + """  float fy = args.half_pixel ? ((float)Y + 0.5f) * args.scale_y - 0.5f : (float)Y * args.scale_y;
  float fx = args.half_pixel ? ((float)X + 0.5f) * args.scale_x - 0.5f : (float)X * args.scale_x;
  int ih = args.src_tensor.Height(); int iw = args.src_tensor.Width();
  // floor and ceil without the built-ins (calls on some CPU drivers): truncate, then step down
  int y0 = (int)fy; y0 -= (float)y0 > fy; int x0 = (int)fx; x0 -= (float)x0 > fx;
  int y1 = y0 + ((float)y0 < fy); int x1 = x0 + ((float)x0 < fx);
  y0 = y0 < 0 ? 0 : y0; x0 = x0 < 0 ? 0 : x0;
  y1 = y1 > ih - 1 ? ih - 1 : y1; x1 = x1 > iw - 1 ? iw - 1 : x1;
  float dy = fy - (float)y0; float dx = fx - (float)x0;
  float4 top = convert_float4(args.src_tensor.Read(x0, y0, S, b)) * (1.0f - dx)
             + convert_float4(args.src_tensor.Read(x1, y0, S, b)) * dx;
  float4 bottom = convert_float4(args.src_tensor.Read(x0, y1, S, b)) * (1.0f - dx)
                + convert_float4(args.src_tensor.Read(x1, y1, S, b)) * dx;
  FLT4 result = TO_FLT4(top * (1.0f - dy) + bottom * dy);
"""
        )
        ints = {"half_pixel": int(bool(node.params.get("half_pixel_centers")))}
        floats = {"scale_y": scale(ih, oh), "scale_x": scale(iw, ow)}
        return operation(written(code), srcs=["src_tensor"], ints=ints, floats=floats)
