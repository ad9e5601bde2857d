"""PAD / PADV2 (constant padding) and MIRROR_PAD (reflected or symmetric)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..graph import Builtin, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, LANES, operation, written
from . import shape_rules
from .base import EmitContext, Op, runtime_io
from .reindex import OUT, SIZE, constant_values, data_check, gather_code, rank_of
from .traits import MOVES_INTEGERS, Traits


class Pad(Op):
    codes = (Builtin.PAD, Builtin.PADV2)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.pad(node, graph)

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph, constant_inputs=(1, 2), data_inputs=1)
        if problem:
            return problem
        paddings = graph.tensor(node.inputs[1]).constant
        if paddings is None or np.asarray(paddings).shape != (len(graph.tensor(node.inputs[0]).shape), 2):
            return "paddings must be a constant [rank, 2] tensor"
        if (np.asarray(paddings) < 0).any():
            return "negative paddings"
        if node.op == Builtin.PADV2 and len(node.inputs) > 2:
            value = graph.tensor(node.inputs[2]).constant
            if value is None or np.asarray(value).size != 1:
                return "PADV2 needs a constant scalar pad value"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g = ctx.graph
        rank = len(g.tensor(node.inputs[0]).shape)
        pads = np.zeros((4, 2), int)
        pads[4 - rank :] = np.asarray(g.tensor(node.inputs[1]).constant).reshape(rank, 2)
        value = 0.0
        if node.op == Builtin.PADV2 and len(node.inputs) > 2:
            value = float(np.asarray(g.tensor(node.inputs[2]).constant).reshape(-1)[0])
        if pads[3, 0] % 4 == 0:  # whole slices before the channels: one read per output slice
            return _slice_aligned(pads, value)
        code = (
            LANES
            + HEAD
            + """  FLT4 result = (FLT4)((FLT)(args.value));
  int xi = X - args.pad_x; int yi = Y - args.pad_y; int bi = b - args.pad_b;
  if (xi >= 0 && xi < args.src_tensor.Width() && yi >= 0 && yi < args.src_tensor.Height()
      && bi >= 0 && bi < args.src_tensor.Batch()) {
    for (int k = 0; k < 4; ++k) {
      int ci = S * 4 + k - args.pad_c;
      if (ci >= 0 && ci < args.src_tensor.Channels())
        result = dlg_set(result, k, dlg_component(args.src_tensor.Read(xi, yi, ci / 4, bi), ci % 4));
    }
  }
"""
        )
        ints = {"pad_b": pads[0, 0], "pad_y": pads[1, 0], "pad_x": pads[2, 0], "pad_c": pads[3, 0]}
        return operation(written(code), srcs=["src_tensor"], ints=ints, floats={"value": value})


def _slice_aligned(pads: np.ndarray, value: float) -> Kernel:
    """PAD whose leading channel padding is whole slices (none, as in MediaPipe's channel pads for
    residual sums, or a multiple of 4): output slice S is input slice S - pad_s, one read, with
    the lanes past the input's channels set to the pad value."""
    code = (
        LANES
        + HEAD
        + """  FLT4 result = (FLT4)((FLT)(args.value));
  int xi = X - args.pad_x; int yi = Y - args.pad_y; int bi = b - args.pad_b; int si = S - args.pad_s;
  if (xi >= 0 && xi < args.src_tensor.Width() && yi >= 0 && yi < args.src_tensor.Height()
      && bi >= 0 && bi < args.src_tensor.Batch() && si >= 0 && si < args.src_tensor.Slices()) {
    FLT4 v = args.src_tensor.Read(xi, yi, si, bi);
    int left = args.src_tensor.Channels() - si * 4;
    result = left >= 4 ? v : (FLT4)(v.x, left > 1 ? v.y : result.y, left > 2 ? v.z : result.z, result.w);
  }
"""
    )
    ints = {"pad_b": pads[0, 0], "pad_y": pads[1, 0], "pad_x": pads[2, 0], "pad_s": pads[3, 0] // 4}
    return operation(written(code), srcs=["src_tensor"], ints=ints, floats={"value": value})


class MirrorPad(Op):
    codes = (Builtin.MIRROR_PAD,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.pad(node, graph)

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = data_check(node, graph, constants=(1,))
        if problem:
            return problem
        if node.params.get("mode") not in (1, 2):
            return "unknown mirror padding mode"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        rank = rank_of(ctx.graph, node.inputs[0])
        pads = np.zeros((4, 2), int)
        pads[4 - rank :] = constant_values(ctx.graph, node, 1).reshape(rank, 2)  # type: ignore[union-attr]
        reflect = node.params.get("mode") == 1  # REFLECT: edge not repeated; SYMMETRIC: repeated
        exprs, ints = [], {}
        for j, (o, size) in enumerate(zip(OUT, SIZE, strict=True)):
            ints[f"pad{j}"] = int(pads[j, 0])
            i, n = f"({o} - args.pad{j})", f"args.src_tensor.{size}()"
            low = f"-{i}" if reflect else f"-{i} - 1"
            high = f"2 * {n} - 2 - {i}" if reflect else f"2 * {n} - 1 - {i}"
            exprs.append(f"{i} < 0 ? {low} : ({i} >= {n} ? {high} : {i})")
        return operation(gather_code(exprs), srcs=["src_tensor"], ints=ints)
