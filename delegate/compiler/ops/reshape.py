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
from .base import EmitContext, Op, value_tensors
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

# Both channel counts multiples of 4: an output slice's four lanes are four consecutive channels of
# one input pixel, starting on a slice boundary, so the slice is one read.
_RESHAPE_SLICES = (
    HEAD + _SIZES + _source_of("S * 4") + "  FLT4 result = args.src_tensor.Read(x_in, y_in, c_in / 4, b_in);\n"
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
        whole_slices = all(c % 4 == 0 for c in channels)
        return operation(written(_RESHAPE_SLICES if whole_slices else _RESHAPE), srcs=["src_tensor"])


class SameOrder(Reshape):
    """SQUEEZE and EXPAND_DIMS keep the row-major order: the RESHAPE kernel."""

    codes = (Builtin.SQUEEZE, Builtin.EXPAND_DIMS)
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(
        codes, replace(MOVES_INTEGERS, own_kernel=False, folds_values=True)
    )
