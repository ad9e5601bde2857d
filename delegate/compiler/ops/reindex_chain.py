"""A chain of RESHAPE / TRANSPOSE / SQUEEZE / EXPAND_DIMS nodes as one copy kernel: the op the
re-index chain rewrite (compiler/reindex_chains.py) puts in place of such a chain (attention's
head split, RESHAPE (1, N, H * D) -> (1, N, H, D) then TRANSPOSE (0, 2, 1, 3), and its merge).
Compiler-internal: no TFLite node has its code.

Every such chain moves element f of its output's row-major order from element g(f) of its
input's, where g reads f as digits of mixed radix ``axes`` (size, input stride; fastest first)
and sums digit x stride: the chain permutes the axes of a finer split of the input (``axes_of``
finds them, exactly, from the composed index map). Where the fastest axis has stride 1 and every
run of 4 output channels starting on a slice boundary maps onto 4 input channels starting on one
(``slice_moves``), an output slice is one read; where its four lanes are one channel of four
input pixels (``pixel_step``: a head transposed, K^T), four reads whose coordinates are found once;
else lane by lane. The digits are divisions by literals (the compiler turns them into
multiplications), done once per slice but on the lane-by-lane path."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from .. import layout
from ..graph import BOOL, FLOAT32, INT32, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, LANES, operation, written
from ..selectors.pointwise import select_copy
from .base import EmitContext, Op, value_tensors
from .elementwise import row_runs
from .traits import MOVES_INTEGERS, Traits

#: the compiler-internal code of the fused node (TFLite's codes are non-negative)
REINDEX_CHAIN = -7

Axes = tuple[tuple[int, int], ...]


def axes_of(index: np.ndarray) -> Axes | None:
    """The mixed-radix axes (size, input stride), fastest first, of the flat index map ``index``
    (output element f reads input element ``index[f]``), or None where no axes give it exactly.
    Greedy from the fastest axis, each as long as the map steps evenly, then checked whole."""
    flat = np.asarray(index, np.int64).reshape(-1)
    total, block, axes = flat.size, 1, []
    if total == 0 or flat[0] != 0:
        return None
    while block < total:
        stride = int(flat[block])
        picks = flat[::block][: total // block]
        even = picks == np.arange(picks.size, dtype=np.int64) * stride
        size = int(np.argmin(even)) if not even.all() else picks.size
        while size > 1 and (total // block) % size:
            size -= 1
        if size < 2:
            return None
        axes.append((size, stride))
        block *= size
    if not np.array_equal(source_index(tuple(axes), total), flat):
        return None
    return tuple(axes)


def source_index(axes: Axes, total: int) -> np.ndarray:
    """The flat index map of ``axes`` over ``total`` elements."""
    f = np.arange(total, dtype=np.int64)
    out, block = np.zeros(total, np.int64), 1
    for size, stride in axes:
        out += (f // block) % size * stride
        block *= size
    return out


def slice_moves(axes: Axes, src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Each output slice is one whole input slice: both channel counts multiples of 4, the fastest
    axis of stride 1 and a multiple of 4 long, every other stride a multiple of 4."""
    channels = (layout.bhwc(src)[3], layout.bhwc(dst)[3])
    fastest, *others = axes
    return (
        all(c % 4 == 0 for c in channels)
        and fastest[1] == 1
        and fastest[0] % 4 == 0
        and all(stride % 4 == 0 for _, stride in others)
    )


def _source_flat(axes: Axes, var: str) -> str:
    """The input's flat index read by output element ``var``: its digits times their strides."""
    terms, block = [], 1
    for position, (size, stride) in enumerate(axes):
        digit = var if block == 1 else f"({var} / {block})"
        if position < len(axes) - 1:
            digit = f"({digit} % {size})"
        terms.append(digit if stride == 1 else f"{digit} * {stride}")
        block *= size
    return " + ".join(terms)


def _input_lane(shape: tuple[int, ...], var: str, indent: str) -> str:
    """Declarations of the input's 4-D lane (bi, yi, xi, ci) holding its flat element ``var``."""
    _, h, w, c = layout.bhwc(shape)
    lines = [f"int ci = {var} % {c};", f"int t = {var} / {c};"]
    lines += [f"int xi = t % {w};", f"t = t / {w};"] if w > 1 else ["int xi = 0;"]
    lines += [f"int yi = t % {h};", f"int bi = t / {h};"] if h > 1 else ["int yi = 0;", "int bi = t;"]
    return "".join(f"{indent}{line}\n" for line in lines)


def _output_flat(shape: tuple[int, ...]) -> str:
    _, h, w, c = layout.bhwc(shape)
    return f"((b * {h} + Y) * {w} + X) * {c} + S * 4"


def slice_kernel(node: Node, ctx: EmitContext, axes: Axes) -> Kernel:
    """The kernel moving whole slices (``slice_moves``), in runs of a row as the other copies
    (selectors/pointwise.select_copy); a plain RESHAPE's too (ops/reshape.py: ``axes`` one)."""
    src, dst = (ctx.graph.tensor(i).shape for i in (node.inputs[0], node.outputs[0]))
    body = (
        HEAD
        + f"  int f = {_output_flat(dst)};\n"
        + f"  int g = {_source_flat(axes, 'f')};\n"
        + _input_lane(src, "g", "  ")
        + "  FLT4 result = args.src_tensor.Read(xi, yi, ci / 4, bi);\n"
    )
    kernel = operation(written(body), srcs=["src_tensor"])
    return row_runs(kernel, node, ctx, select_copy(node, ctx.graph, ctx.options))


def pixel_step(axes: Axes, src: tuple[int, ...], dst: tuple[int, ...]) -> int | None:
    """How many input pixels apart an output slice's four lanes are, where they are one channel
    of four input pixels (the fastest axis steps whole input pixels, and a slice's lanes lie in
    one run of it: the run whole output pixels long, or both multiples of 4; a head transposed,
    attention's K^T, any number of tokens); else None."""
    (size, stride), channels, out = axes[0], layout.bhwc(src)[3], layout.bhwc(dst)[3]
    if stride % channels or not (size % out == 0 or (size % 4 == 0 and out % 4 == 0)):
        return None
    return stride // channels


def _pixels_kernel(node: Node, ctx: EmitContext, axes: Axes, step: int) -> Kernel:
    """Four reads of one input slice at four pixels ``step`` apart, their coordinates found once
    per slice, and one lane of each (which lane: the same for all four)."""
    src, dst = (ctx.graph.tensor(i).shape for i in (node.inputs[0], node.outputs[0]))
    _, h, w, c = layout.bhwc(src)
    out = layout.bhwc(dst)[3]
    body = HEAD + f"  int f = {_output_flat(dst)};\n  int g = {_source_flat(axes, 'f')};\n"
    body += f"  int ci = g % {c}; int p = g / {c};\n"
    for k in range(4):
        # a lane past the output's channels reads lane 0's pixel (its own may be past the input)
        pk = f"(p + {k * step})" if out % 4 == 0 else f"(S * 4 + {k} < {out} ? p + {k * step} : p)"
        x = f"{pk} % {w}" if w > 1 else "0"
        pixels = f"{pk} / {w}" if w > 1 else pk
        y, b = (f"{pixels} % {h}", f"{pixels} / {h}") if h > 1 else ("0", pixels)
        body += f"  FLT4 v{k} = args.src_tensor.Read({x}, {y}, ci / 4, {b});\n"
    lanes = [f"(FLT4)(v0.{n}, v1.{n}, v2.{n}, v3.{n})" for n in "xyzw"]
    picked = f"lane == 0 ? {lanes[0]} : (lane == 1 ? {lanes[1]} : (lane == 2 ? {lanes[2]} : {lanes[3]}))"
    body += f"  int lane = ci % 4;\n  FLT4 result = {picked};\n"
    kernel = operation(written(body), srcs=["src_tensor"])
    return row_runs(kernel, node, ctx, select_copy(node, ctx.graph, ctx.options))


class ReindexChain(Op):
    """Input (x,); param ``axes`` (size, input stride), fastest first; the output's shape is the
    chain's last tensor's."""

    codes = (REINDEX_CHAIN,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = value_tensors(graph, [node.inputs[0], node.outputs[0]], (FLOAT32, INT32, BOOL), high_rank=True)
        if problem:
            return problem
        total = math.prod(graph.tensor(node.outputs[0]).shape)
        if math.prod(size for size, _ in node.params["axes"]) != total:
            return "the axes do not cover the output"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        axes: Axes = tuple((int(size), int(stride)) for size, stride in node.params["axes"])
        src, dst = (ctx.graph.tensor(i).shape for i in (node.inputs[0], node.outputs[0]))
        if slice_moves(axes, src, dst):
            return slice_kernel(node, ctx, axes)
        step = pixel_step(axes, src, dst)
        if step is not None:
            return _pixels_kernel(node, ctx, axes, step)
        channels = layout.bhwc(dst)[3]
        body = (
            LANES
            + HEAD
            + f"  int f0 = {_output_flat(dst)};\n"
            + "  FLT4 result = INIT_FLT4(0.0f);\n"
            + f"  for (int k = 0; k < 4 && S * 4 + k < {channels}; ++k) {{\n"
            + "    int f = f0 + k;\n"
            + f"    int g = {_source_flat(axes, 'f')};\n"
            + _input_lane(src, "g", "    ")
            + "    result = dlg_set(result, k, dlg_component(args.src_tensor.Read(xi, yi, ci / 4, bi), ci % 4));\n"
            + "  }\n"
        )
        return operation(written(body), srcs=["src_tensor"])


OP = ReindexChain()
