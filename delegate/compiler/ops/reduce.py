"""The reductions SUM, MEAN, REDUCE_MAX, REDUCE_MIN and REDUCE_PROD over any constant axes."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..graph import Builtin, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, LANE_LOOP, input_lane, operation, written
from ..options import KernelFamily
from .base import EmitContext, Op
from .reindex import OUT, SIZE, constant_values, data_check, rank_of, surviving
from .traits import Quantization, Traits

#: independent partial sums of a plane sum (``_plane_sum``): one chain of dependent vector adds
#: per sum, so that adds of consecutive pixels overlap instead of waiting on each other
PLANE_SUMS = 4

_REDUCE = {
    Builtin.SUM: ("0.0f", "acc += v;"),
    Builtin.MEAN: ("0.0f", "acc += v;"),
    Builtin.REDUCE_MAX: ("-INFINITY", "acc = v > acc ? v : acc;"),
    Builtin.REDUCE_MIN: ("INFINITY", "acc = v < acc ? v : acc;"),
    Builtin.REDUCE_PROD: ("1.0f", "acc *= v;"),
}


class Reduce(Op):
    codes = tuple(_REDUCE)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = {
        Builtin.MEAN: Traits(quantization=Quantization.REQUANTIZES, keeps_small=True),
        Builtin.SUM: Traits(keeps_small=True),
        Builtin.REDUCE_MAX: Traits(quantization=Quantization.KEEPS_INTEGERS),
        Builtin.REDUCE_MIN: Traits(quantization=Quantization.KEEPS_INTEGERS),
    }

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        if node.op != Builtin.REDUCE_PROD:  # the one reduction in shape arithmetic (Keras' Tensordot)
            return None
        axes = tuple(int(a) % args[0].ndim for a in args[1].reshape(-1))
        return np.prod(args[0], axis=axes, keepdims=bool(node.params.get("keep_dims", False)))

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = data_check(node, graph, constants=(1,))
        if problem:
            return problem
        rank = rank_of(graph, node.inputs[0])
        if rank == 0:
            return "a scalar input"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g = ctx.graph
        rank = rank_of(g, node.inputs[0])
        pad = 4 - rank
        axes = {int(a) % rank for a in constant_values(g, node, 1)}  # type: ignore[union-attr]
        keep = bool(node.params.get("keep_dims"))
        feed = (
            {pad + d: OUT[pad + d] for d in range(rank)} if keep else surviving(rank, rank_of(g, node.outputs[0]), axes)
        )
        reduced = {pad + a for a in axes}
        init, update = _REDUCE[Builtin(node.op)]
        loops, exprs = [], []
        for j, size in enumerate(SIZE):
            if j in reduced:
                loops.append(f"    for (int r{j} = 0; r{j} < args.src_tensor.{size}(); ++r{j})\n")
                exprs.append(f"r{j}")
            else:
                exprs.append(feed.get(j, "0"))
        count = " * ".join(f"args.src_tensor.{SIZE[j]}()" for j in sorted(reduced)) or "1"
        finish = f"acc / (float)({count})" if node.op == Builtin.MEAN else "acc"
        summed = node.op in (Builtin.SUM, Builtin.MEAN) and reduced == {1, 2} and exprs[3] == OUT[3]
        if summed and ctx.linear_storage and ctx.options.kernel_family is not KernelFamily.GPU:
            return operation(written(_plane_sum(exprs[0], finish)), srcs=["src_tensor"])
        if exprs[3] == OUT[3]:
            # The output's channel is the input's: reduce whole slices (float4 lanes at once), as a
            # global average pool does; 4x fewer reads than lane by lane and vector arithmetic.
            code = (
                HEAD
                + f"  float4 acc = (float4)({init});\n"
                + "".join(loops).replace("    for", "  for")
                + "  {\n"
                + input_lane(exprs[:3], "      ")
                + "      float4 v = convert_float4(args.src_tensor.Read(xi, yi, S, bi));\n"
                + f"      {update}\n  }}\n"
                + f"  FLT4 result = TO_FLT4({finish});\n"
            )
            return operation(written(code), srcs=["src_tensor"])
        code = (
            LANE_LOOP
            + f"    float acc = {init};\n"
            + "".join(loops)
            + "    {\n"
            + input_lane(exprs, "      ")
            + "      float v = (float)dlg_component(args.src_tensor.Read(xi, yi, ci / 4, bi), ci % 4);\n"
            + f"      {update}\n    }}\n"
            + f"    result = dlg_set(result, k, (FLT)({finish}));\n  }}\n"
        )
        return operation(written(code), srcs=["src_tensor"])


def _plane_sum(batch: str, finish: str) -> str:
    """A slice summed over a batch's whole H x W plane (a global average pool, squeeze-excite's
    MEAN) on buffer storage: each of its rows is consecutive FLT4s (one batch apart), summed into
    PLANE_SUMS partial sums in turn. One sum would make every add wait for the one before."""
    sums = range(PLANE_SUMS)
    return (
        HEAD
        + f"  int bi = {batch};\n"
        + "  int ih = args.src_tensor.Height(), iw = args.src_tensor.Width(), step = args.src_tensor.Batch();\n"
        + "".join(f"  float4 acc{k} = (float4)(0.0f);\n" for k in sums)
        + "  for (int yi = 0; yi < ih; ++yi) {\n"
        + "    int at = args.src_tensor.Offset(0, yi, S, bi);\n"
        + "    int xi = 0;\n"
        + f"    for (; xi + {PLANE_SUMS - 1} < iw; xi += {PLANE_SUMS}, at += {PLANE_SUMS} * step) {{\n"
        + "".join(f"      acc{k} += convert_float4(args.src_tensor.ReadAt(at + {k} * step));\n" for k in sums)
        + "    }\n"
        + "    for (; xi < iw; ++xi, at += step) acc0 += convert_float4(args.src_tensor.ReadAt(at));\n"
        + "  }\n"
        + f"  float4 acc = {' + '.join(f'acc{k}' for k in sums)};\n"
        + f"  FLT4 result = TO_FLT4({finish});\n"
    )
