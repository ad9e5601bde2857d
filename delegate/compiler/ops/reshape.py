"""RESHAPE (any shape of the same size), and SQUEEZE and EXPAND_DIMS, which keep the row-major
order too (CAST is in comparison.py); of float32 tensors, and of the bool and int32 tensors inside
a partition (ops/comparison.py)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

import numpy as np

from .. import layout
from ..graph import BOOL, FLOAT32, INT32, Builtin, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, LANES, operation, written
from ..selectors.pointwise import select_copy
from .base import EmitContext, Op, value_tensors
from .elementwise import row_runs
from .reindex_chain import slice_kernel
from .traits import MOVES_INTEGERS, Traits

# Each output channel c at (b, Y, X) is element ((b*H + Y)*W + X)*C + c of the row-major data,
# which is the same element of the input.
_SIZES = """  int C = args.dst_tensor.Channels();
  int ic = args.src_tensor.Channels(); int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();
"""


def _source_of(channel: str) -> str:
    """The input element (x_in, y_in, c_in, b_in) holding output channel ``channel`` at (b, Y, X)."""
    return f"""  int flat = ((b * args.dst_tensor.Height() + Y) * args.dst_tensor.Width() + X) * C + {channel};
  int c_in = flat % ic; int t = flat / ic;
  int x_in = t % iw; t = t / iw;
  int y_in = t % ih; int b_in = t / ih;
"""


# The slice's first lane's input coordinates are divided out once; each next lane steps them (the
# next element in row-major order): four divisions per lane cost more than the copy itself.
_RESHAPE = (
    LANES
    + HEAD
    + _SIZES
    + _source_of("S * 4")
    + """  FLT4 result = INIT_FLT4(0.0f);
  for (int k = 0; k < 4; ++k) {
    if (S * 4 + k >= C) break;
    FLT v = dlg_component(args.src_tensor.Read(x_in, y_in, c_in / 4, b_in), c_in % 4);
    if (k == 0) result.x = v; else if (k == 1) result.y = v; else if (k == 2) result.z = v; else result.w = v;
    if (++c_in == ic) { c_in = 0; if (++x_in == iw) { x_in = 0; if (++y_in == ih) { y_in = 0; ++b_in; } } }
  }
"""
)


# The input's channel count a multiple of the output's: an output pixel's channels are a run of
# one input pixel's, so a slice's four lanes are four consecutive channels of one input pixel
# (a detection head's [H, W, anchors x values] -> [H x W, anchors, values]). One division finds
# the input pixel, and the slice is the two input slices it straddles, shifted; the lane-by-lane
# kernel's reads and steps cost 5-10x more on PoCL.
_RESHAPE_RUNS = (
    HEAD
    + """  int q = (b * args.out_h + Y) * args.out_w + X;
  int p_in = q / args.per;
  int c_in = (q - p_in * args.per) * args.out_c + S * 4;
  int x_in = p_in % args.in_w; int t = p_in / args.in_w;
  int y_in = t % args.in_h; int b_in = t / args.in_h;
  int s_in = c_in / 4;
  FLT4 lo = args.src_tensor.Read(x_in, y_in, s_in, b_in);
  FLT4 result = lo;
  int shift = c_in - s_in * 4;
  if (shift != 0) {
    // lanes past the last input slice are past this output pixel's channels (WRITE zeroes them)
    FLT4 hi = args.src_tensor.Read(x_in, y_in, min(s_in + 1, args.in_slices - 1), b_in);
    result = shift == 1 ? (FLT4)(lo.yzw, hi.x) : (shift == 2 ? (FLT4)(lo.zw, hi.xy) : (FLT4)(lo.w, hi.xyz));
  }
"""
)


class Reshape(Op):
    codes = (Builtin.RESHAPE,)
    data_inputs = 1
    #: a view of its input where the layout allows (no kernel of its own, for cpu_choice.py)
    #: a reshape of a constant (a folded mask) folds into the constant it is (shapes.py)
    code_traits: ClassVar[dict[int, Traits]] = {
        Builtin.RESHAPE: replace(MOVES_INTEGERS, own_kernel=False, folds_values=True)
    }

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.outputs) != 1:
            return f"{len(node.outputs)} outputs (one expected)"
        src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        # Moving values keeps them exact: bool and int32 tensors (ops/comparison.py) move as floats.
        # flat order is all a reshape keeps: layout.bhwc's view of higher ranks keeps it too
        problem = value_tensors(graph, [node.inputs[0], node.outputs[0]], (FLOAT32, INT32, BOOL), high_rank=True)
        if problem:
            return problem
        if src.dtype != dst.dtype:
            return "input and output types differ"
        if src.is_constant:
            return "reshape of a constant"
        if math.prod(src.shape) != math.prod(dst.shape):
            return "element counts differ"
        return None

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        return args[0].reshape(out_shape)  # row-major order kept

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        channels = [layout.bhwc(ctx.graph.tensor(i).shape)[3] for i in (node.inputs[0], node.outputs[0])]
        if all(c % 4 == 0 for c in channels):
            # an output slice's four lanes are four consecutive channels of one input pixel,
            # starting on a slice boundary: one read, its pixel found by divisions by literals
            # (by the sizes as arguments they cost twice the copy on PoCL)
            return slice_kernel(node, ctx, ((math.prod(ctx.graph.tensor(node.outputs[0]).shape), 1),))
        if channels[0] % channels[1] == 0:
            return _runs_kernel(node, ctx)
        return operation(written(_RESHAPE), srcs=["src_tensor"])


def _runs_kernel(node: Node, ctx: EmitContext) -> Kernel:
    """The _RESHAPE_RUNS kernel, the shapes literals: its divisions are by constants."""
    _, ih, iw, ic = layout.bhwc(ctx.graph.tensor(node.inputs[0]).shape)
    _, oh, ow, oc = layout.bhwc(ctx.graph.tensor(node.outputs[0]).shape)
    sizes = {"out_h": oh, "out_w": ow, "out_c": oc, "per": ic // oc, "in_w": iw, "in_h": ih}
    kernel = operation(written(_RESHAPE_RUNS), srcs=["src_tensor"], literals={**sizes, "in_slices": layout.slices(ic)})
    return row_runs(kernel, node, ctx, select_copy(node, ctx.graph, ctx.options))


class SameOrder(Reshape):
    """SQUEEZE and EXPAND_DIMS keep the row-major order: the RESHAPE kernel."""

    codes = (Builtin.SQUEEZE, Builtin.EXPAND_DIMS)
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(
        codes, replace(MOVES_INTEGERS, own_kernel=False, folds_values=True)
    )
