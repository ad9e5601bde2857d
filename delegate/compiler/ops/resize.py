"""RESIZE_NEAREST_NEIGHBOR and RESIZE_BILINEAR."""

from __future__ import annotations

from typing import ClassVar

from ...context import model
from .. import layout
from ..graph import Builtin, Graph, Node
from ..kernel import WRITE_AT, Kernel
from ..kernels.common.pieces import HEAD, operation, written
from . import shape_rules
from .base import EmitContext, Op, runtime_io
from .reindex import data_check, gather_code, rank_of
from .traits import MOVES_INTEGERS, Traits


class ResizeNearest(Op):
    codes = (Builtin.RESIZE_NEAREST_NEIGHBOR,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.resize(node, graph)

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
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.resize(node, graph)

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

        ints = {"half_pixel": int(bool(node.params.get("half_pixel_centers")))}
        floats = {"scale_y": scale(ih, oh), "scale_x": scale(iw, ow)}
        if ctx.linear_storage:
            return _bilinear_slices(g.tensor(node.outputs[0]).shape, ints, floats)
        code = HEAD + _BILINEAR_COORDINATES + _bilinear_blend("args.src_tensor.Read({x}, {y}, S, b)")
        return operation(written(code), srcs=["src_tensor"], ints=ints, floats=floats)


#: Source coordinates of output pixel (X, Y) with TFLite's semantics: ``fy`` / ``fx``, the rows and
#: columns either side (``y0`` / ``y1``, ``x0`` / ``x1``, clamped) and the weights ``dy`` / ``dx``.
_BILINEAR_COORDINATES = """
  float fy = args.half_pixel ? ((float)Y + 0.5f) * args.scale_y - 0.5f : (float)Y * args.scale_y;
  float fx = args.half_pixel ? ((float)X + 0.5f) * args.scale_x - 0.5f : (float)X * args.scale_x;
  int ih = args.src_tensor.Height(); int iw = args.src_tensor.Width();
  // floor and ceil without the built-ins (calls on some CPU drivers): truncate, then step down
  int y0 = (int)fy; y0 -= (float)y0 > fy; int x0 = (int)fx; x0 -= (float)x0 > fx;
  int y1 = y0 + ((float)y0 < fy); int x1 = x0 + ((float)x0 < fx);
  y0 = y0 < 0 ? 0 : y0; x0 = x0 < 0 ? 0 : x0;
  y1 = y1 > ih - 1 ? ih - 1 : y1; x1 = x1 > iw - 1 ? iw - 1 : x1;
  float dy = fy - (float)y0; float dx = fx - (float)x0;
"""


def _bilinear_blend(read: str) -> str:
    """``result``, the blend of the four source pixels ``read`` (formatted with ``x`` and ``y``) gives."""
    r = {(x, y): f"convert_float4({read.format(x=x, y=y)})" for x in ("x0", "x1") for y in ("y0", "y1")}
    return f"""  float4 top = {r["x0", "y0"]} * (1.0f - dx) + {r["x1", "y0"]} * dx;
  float4 bottom = {r["x0", "y1"]} * (1.0f - dx) + {r["x1", "y1"]} * dx;
  FLT4 result = TO_FLT4(top * (1.0f - dy) + bottom * dy);
"""


#: Slices a work-item of the buffer kernel blends, one after another.
BILINEAR_SLICES = 8


def _bilinear_slices(dst: tuple[int, ...], ints: dict[str, int], floats: dict[str, float]) -> Kernel:
    """RESIZE_BILINEAR over buffer-backed tensors: a work-item takes one output pixel and up to
    BILINEAR_SLICES of its slices, so the coordinates and the four source offsets are worked out
    once for them all (per slice, a FLT4 output needed as much index arithmetic as blending).
    Grid (W * B, H, ceil(slices / BILINEAR_SLICES))."""
    code = f"""
MAIN_FUNCTION($0) {{
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S0 = GLOBAL_ID_2 * {BILINEAR_SLICES};
  int B = args.dst_tensor.Batch();
  int dst_slices = args.dst_tensor.Slices();
  if (gx >= args.dst_tensor.Width() * B || Y >= args.dst_tensor.Height() || S0 >= dst_slices) return;
  int X = gx, b = 0;
  if (B != 1) {{ X = gx / B; b = gx % B; }}
{_BILINEAR_COORDINATES}  int sstride = args.src_tensor.Offset(0, 0, 1, 0);
  int dstride = args.dst_tensor.Offset(0, 0, 1, 0);
  int ox0y0 = args.src_tensor.Offset(x0, y0, S0, b); int ox1y0 = args.src_tensor.Offset(x1, y0, S0, b);
  int ox0y1 = args.src_tensor.Offset(x0, y1, S0, b); int ox1y1 = args.src_tensor.Offset(x1, y1, S0, b);
  int at0 = args.dst_tensor.Offset(X, Y, S0, b);
  int S1 = S0 + {BILINEAR_SLICES} < dst_slices ? S0 + {BILINEAR_SLICES} : dst_slices;
  for (int S = S0; S < S1; ++S) {{
    int d = (S - S0) * sstride;
    int at = at0 + (S - S0) * dstride;
{_bilinear_blend("args.src_tensor.ReadAt(o{x}{y} + d)")}"""
    kernel = operation([code, WRITE_AT, "}\n"], srcs=["src_tensor"], ints=ints, floats=floats)
    b, h, w, c = layout.bhwc(dst)
    op = kernel.operation
    op.tensor_to_grid = model.TensorToGrid.CUSTOM
    op.grid_size = model.Int3(w * b, h, -(-layout.slices(c) // BILINEAR_SLICES))
    return kernel
