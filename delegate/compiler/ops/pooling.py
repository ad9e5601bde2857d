"""AVERAGE_POOL_2D and MAX_POOL_2D (MEAN is a reduction: reduce.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from ..graph import Builtin, Graph, Node
from ..kernel import LANE_MASK, WRITE, WRITE_AT, Kernel, Piece
from ..kernels.common.pieces import HEAD, activation_code, operation, written
from ..kernels.common.row_blocks import row_block_head, window_row_loads
from ..selectors.pointwise import select_pool
from ..selectors.spec import KernelSpec, Variant
from ..window import same_padding
from . import shape_rules
from .base import EmitContext, Op, activation_check, runtime_io
from .conv_render import launched
from .traits import MOVES_INTEGERS, Traits

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
"""
)


class Pool2D(Op):
    codes = (Builtin.AVERAGE_POOL_2D, Builtin.MAX_POOL_2D)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = {
        # TFLite's integer average pooling rounds its sums with the zero point in (quant_step.qdq_code)
        Builtin.AVERAGE_POOL_2D: replace(MOVES_INTEGERS, rounds_with_zero_point=True),
        Builtin.MAX_POOL_2D: MOVES_INTEGERS,
    }

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.pooling(node, graph)

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if len(graph.tensor(node.inputs[0]).shape) != 4:
            return "pooling needs a 4-D input"
        return activation_check(node.params["activation"])

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g, p = ctx.graph, node.params
        src, dst = g.tensor(node.inputs[0]).shape, g.tensor(node.outputs[0]).shape
        kh, kw = p["filter_height"], p["filter_width"]
        # a zero PAD merged into a VALID max pooling (pad_merge.py): its leading rows and columns
        top, _, left, _ = p.get("merged_pad", (0, 0, 0, 0))
        ints = {
            "kernel_h": kh,
            "kernel_w": kw,
            "stride_h": p["stride_height"],
            "stride_w": p["stride_width"],
            "pad_h": same_padding(src[1], dst[1], kh, p["stride_height"], 1, p["padding"]) + top,
            "pad_w": same_padding(src[2], dst[2], kw, p["stride_width"], 1, p["padding"]) + left,
        }
        if node.op == Builtin.MAX_POOL_2D:
            init, update, finish = "(ACCUM_FLT4)(-INFINITY)", "acc = v > acc ? v : acc;", "acc"
        else:
            init = "INIT_ACCUM_FLT4(0.0f)"
            update, finish = "acc += v;", "acc / (ACCUM_FLT)(count > 0 ? count : 1)"
        code = _POOL.replace("{init}", init).replace("{update}", update).replace("{finish}", finish)
        spec = select_pool(node, ctx.graph, ctx.options)
        if spec.variant is Variant.POOL_ROWS:
            return _pool_rows(node, ctx, ints, spec)
        # The window as constants, so the compiler can unroll it.
        code = code.replace("{activation}", activation_code(p["activation"]))
        return operation(written(code), srcs=["src_tensor"], literals=ints)


def pool_rows_code(maximum: bool, act: int, *, kernel: tuple[int, int], stride: tuple[int, int],
                   pad: tuple[int, int], pixels: int) -> list[Piece]:  # fmt: skip
    """MAX_POOL_2D (``maximum``) or AVERAGE_POOL_2D over buffer-backed tensors, the window unrolled.

    A work-item computes ``pixels`` consecutive output pixels of one row for one slice, loading each
    input column the window needs once per row; work-items away from the left and right edges load
    without checks. Padding never counts: a maximum ignores it and an average divides by the
    number of input elements inside the window, as TFLite's kernels do. Grid:
    (ceil(W / pixels) * B, H, slices).
    """
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    columns = sorted({p * sw + kx for p in range(pixels) for kx in range(kw)})
    outside = "(ACCUM_FLT4)(-INFINITY)" if maximum else "INIT_ACCUM_FLT4(0.0f)"

    def load(j: int) -> str:
        return f"TO_ACCUM_FLT4(args.src_tensor.ReadAt(row + (xi + {j}) * B))"

    parts: list[Piece] = [row_block_head(pixels, sw, pw, "S", "GLOBAL_ID_2")]
    if not maximum:
        parts.append("  int rows = 0;  // window rows inside the input\n")
    for p in range(pixels):
        parts.append(f"  ACCUM_FLT4 a{p} = {outside};\n")
    for ky in range(kh):
        parts.append(f"  {{\n    int yi = Y * {sh} + {ky - ph};\n    if (yi >= 0 && yi < ih) {{\n")
        if not maximum:
            parts.append("      rows += 1;\n")
        parts.append("      int row = args.src_tensor.Offset(0, yi, S, b);\n")
        parts += window_row_loads(columns, load, "ACCUM_FLT4", outside)
        for p in range(pixels):
            for kx in range(kw):
                r = f"r{p * sw + kx}"
                parts.append(f"      a{p} = {r} > a{p} ? {r} : a{p};\n" if maximum else f"      a{p} += {r};\n")
        parts.append("    }\n  }\n")
    for p in range(pixels):
        if maximum:
            parts.append(f"  FLT4 o{p} = TO_FLT4(a{p});\n")
        else:
            # input columns inside the window of pixel p, times the rows inside it
            parts.append(
                f"  int lo{p} = xi + {p * sw}; int hi{p} = lo{p} + {kw};\n"
                f"  lo{p} = lo{p} < 0 ? 0 : lo{p}; hi{p} = hi{p} > iw ? iw : hi{p};\n"
                f"  int n{p} = rows * (hi{p} - lo{p});\n"
                f"  FLT4 o{p} = TO_FLT4(a{p} / (ACCUM_FLT)(n{p} > 0 ? n{p} : 1));\n"
            )
        activation = activation_code(act, f"o{p}")
        if activation:
            parts.append(f"  {activation}\n")
    parts.append(f"  if (X0 + {pixels - 1} < W) {{\n    int at0 = args.dst_tensor.Offset(X0, Y, S, b);\n")
    for p in range(pixels):
        parts += [f"  {{\n    int X = X0 + {p};\n    int at = at0 + {p} * B;\n    FLT4 result = o{p};\n", WRITE_AT]
    parts.append("    return;\n  }\n")
    parts.append(f"  FLT4 outs[{pixels}];\n")
    parts.append("".join(f"  outs[{p}] = o{p};\n" for p in range(pixels)))
    parts.append(
        f"""  for (int i = 0; i < {pixels}; ++i) {{
    int X = X0 + i;
    if (X >= W) break;
    FLT4 result = outs[i];
"""
    )
    parts += [LANE_MASK, WRITE, "}\n"]
    return parts


def _pool_rows(node: Node, ctx: EmitContext, ints: dict[str, int], spec: KernelSpec) -> Kernel:
    assert spec.rows is not None
    code = pool_rows_code(
        node.op == Builtin.MAX_POOL_2D,
        node.params["activation"],
        kernel=(ints["kernel_h"], ints["kernel_w"]),
        stride=(ints["stride_h"], ints["stride_w"]),
        pad=(ints["pad_h"], ints["pad_w"]),
        pixels=spec.rows,
    )
    return launched(operation(code, srcs=["src_tensor"]), spec)
