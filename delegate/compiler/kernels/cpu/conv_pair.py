"""A depthwise convolution and the 1x1 convolution that reads it, as one kernel (the
"depthwise + projection" pair of MobileNet-style blocks), for CPU-like OpenCL devices.

A work-group computes one output row. First its work-items compute the depthwise row for every
channel into local memory (items of ``DW_PIXELS`` pixels x a pair of slices, the window
unrolled, each input column multiplied into the pixels it feeds as soon as it is loaded; each
work-item takes a run of consecutive items: PoCL runs a work-group's work-items one after the
other, so the core then reads the input rows in order rather than in eight interleaved sweeps);
then, after a barrier, the 1x1 product over that row (items of ``PIXELS`` pixels x ``GROUPS``
groups of 8 output channels, FLT8 accumulators as in gemm_conv.py). The depthwise output never
goes through global memory, and the pair costs one launch instead of two.

On a CPU device a work-group runs on one core, its work-items one after the other, so the row in
local memory stays in that core's cache. On a GPU the same shape would leave most of the chip
idle (a few hundred work-groups of 8), so the compiler pairs only for CPU devices
(``CompileOptions.pair_local_bytes``). selectors/pair.py decides which pairs run as one kernel and
fills in their ``PairSpec``; ops/conv_pair.py renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import layout
from ...kernel import ENTRY, LANE_MASK, Piece, RequiredWorkGroup
from ..common.pieces import activation_code
from .depthwise_rows import slice_handles, slice_offsets, slice_pack_load
from .gemm_blocks import (
    SLICE_PARTS,
    THIRDS_GROUPS,
    THIRDS_PIXELS,
    accumulators,
    block_write,
    row_pixels,
    slice_step,
    spilled_writes,
)

#: Pixels per depthwise item, pixels and groups of 8 output channels per 1x1 item.
DW_PIXELS = 8
PIXELS = 5
GROUPS = 2
#: Pixels per 1x1 item when the output is a single group (16 channels in groups of 16): the item
#: holds one group, not a copy of it, in as many accumulators.
SINGLE_GROUP_PIXELS = 10
#: Work-items per work-group (the kernel requires it; its code shares items over GROUP_SIZE_0
#: work-items, so a persistent kernel may run a work-group as one work-item, see
#: runtime/persistent.py).
LOCAL = 8
WORK_GROUP = RequiredWorkGroup((LOCAL, 1, 1), serial=True)


def mid_row_bytes(width: int, channels: int, dw_width: int = 8) -> int:
    """Local memory of a pair kernel whose depthwise row has ``width`` pixels of ``channels``
    (float, padded to a whole number of ``depthwise_rows.dw_width`` / 4 slices: pairs, or fours)."""
    per = dw_width // 4
    return width * -(-layout.slices(channels) // per) * per * 4 * 4


@dataclass(frozen=True)
class PairSpec:
    """A pair kernel: a depthwise stage with ``kernel``, ``stride``, leading ``pad`` (undilated) and
    activation ``dw_act``, then a 1x1 convolution with activation ``act``.

    Its 1x1 items are PIXELS x GROUPS, or THIRDS_PIXELS x THIRDS_GROUPS when ``thirds``
    (``selectors/gemm.odd_thirds``), or SINGLE_GROUP_PIXELS x 1 when ``single_group`` (the output is
    one group of ``width`` channels: a second group would be a copy of the first). Its local row
    holds ``local_bytes`` (``select_pair`` admits only rows that fit). ``width``: output channels per
    1x1 group (selectors/gemm.gemm_width); ``dw``: channels per depthwise item, 8 (a pair of
    slices) or 16 (four: ``depthwise_rows.dw_width``). ``batch``: the output's batch (0: read at
    run time); 1 reads the input columns through per-row handles (``depthwise_rows.slice_handles``).
    """

    dw_act: int
    act: int
    kernel: tuple[int, int]
    stride: tuple[int, int]
    pad: tuple[int, int]
    local_bytes: int
    thirds: bool = False
    width: int = 8
    dw: int = 8
    single_group: bool = False
    batch: int = 0

    @property
    def block(self) -> tuple[int, int]:
        """Pixels and groups of a 1x1 item."""
        if self.single_group:
            return SINGLE_GROUP_PIXELS, 1
        return (THIRDS_PIXELS, THIRDS_GROUPS) if self.thirds else (PIXELS, GROUPS)


def pair_code(spec: PairSpec) -> list[Piece]:
    """The pair kernel's body. Grid (LOCAL, H * B, 1), work-group WORK_GROUP. Widths and channel
    counts are read at run time, so layers of one shape of window share one kernel source (PoCL
    compiles each distinct source: literals would make a cold start much longer).

    Objects: ``dw_weights`` / ``dw_biases`` (pack_depthwise_weights / pack_gemm_biases of the
    depthwise filters), ``weights`` / ``biases`` (pack_gemm_weights / pack_gemm_biases of the 1x1
    filters)."""
    return [*_depthwise_stage(spec), "  }\n  barrier(CLK_LOCAL_MEM_FENCE);\n", *_projection_stage(spec)]


def _depthwise_stage(spec: PairSpec) -> list[Piece]:
    """The depthwise row into local ``mid``: each work-item a run of consecutive items of
    DW_PIXELS pixels x ``dw`` channels (the item loop is left open)."""
    (_, sw), (_, pw), dw = spec.stride, spec.pad, spec.dw
    q = dw // 4
    lines: list[Piece] = [
        "\n",
        ENTRY,
        f"""  __local FLT{dw} mid[{spec.local_bytes // (4 * dw)}];
  int H = args.dst_tensor.Height();
  int W = args.dst_tensor.Width();
  int mid_slices = args.src_tensor.Slices();
  int packs = (mid_slices + {q - 1}) / {q};
  int dw_blocks = (W + {DW_PIXELS - 1}) / {DW_PIXELS};
  int Y = GLOBAL_ID_1 % H;
  int b = GLOBAL_ID_1 / H;
  int B = args.dst_tensor.Batch();
  int lid = LOCAL_ID_0;
  int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();
  int dw_items = dw_blocks * packs;
  int lanes = GROUP_SIZE_0;
  int dw_share = (dw_items + lanes - 1) / lanes;  // each work-item a run of consecutive items
  int dw_end = (lid + 1) * dw_share < dw_items ? (lid + 1) * dw_share : dw_items;
  for (int item = lid * dw_share; item < dw_end; ++item) {{
    int X0 = (item % dw_blocks) * {DW_PIXELS};  // along the row first: the same input rows in turn
    int pack = item / dw_blocks;
    int S0 = pack * {q};
    long xi = X0 * {sw} - {pw};
""",
    ]
    lines += slice_offsets(dw, "S0 + {k} < mid_slices")
    lines.append(f"    ACCUM_FLT{dw} bias = TO_ACCUM_FLT{dw}(args.dw_biases.Read(pack));\n")
    lines += [f"    ACCUM_FLT{dw} d{p} = bias;\n" for p in range(DW_PIXELS)]
    lines += _depthwise_window(spec)
    for p in range(DW_PIXELS):
        lines.append(f"    {{\n    FLT{dw} o = TO_FLT{dw}(d{p});\n")
        activation = activation_code(spec.dw_act, "o", width=dw)
        if activation:
            lines.append(f"    {activation}\n")
        lines.append(f"    if (X0 + {p} < W) mid[(X0 + {p}) * packs + pack] = o;\n    }}\n")
    return lines


def _depthwise_window(spec: PairSpec) -> list[str]:
    """The unrolled window of a depthwise item: each input column multiplied into the pixels it
    feeds as soon as it is loaded; items away from the row's ends load without checks."""
    (kh, kw), (sh, sw), (ph, _), dw = spec.kernel, spec.stride, spec.pad, spec.dw
    columns = sorted({p * sw + kx for p in range(DW_PIXELS) for kx in range(kw)})

    def window_row(checked: bool) -> list[str]:
        out = []
        for j in columns:
            value = slice_pack_load(j, dw, spec.batch)
            if checked:
                value = f"((xi + {j} >= 0 && xi + {j} < iw) ? {value} : (ACCUM_FLT{dw})(0.0f))"
            out.append(f"        {{\n        ACCUM_FLT{dw} r = {value};\n")
            for p in range(DW_PIXELS):
                kx = j - p * sw
                if 0 <= kx < kw:
                    out.append(f"        d{p} += r * k{kx};\n")
            out.append("        }\n")
        return out

    lines = []
    for ky in range(kh):
        lines.append(f"    {{\n    int yi = Y * {sh} + {ky - ph};\n    if (yi >= 0 && yi < ih) {{\n")
        lines.append("      long row = args.src_tensor.Offset(0, yi, S0, b);\n      long rb = row + xi * B;\n")
        if spec.batch == 1:
            lines += slice_handles(dw)
        for kx in range(kw):
            lines.append(
                f"      ACCUM_FLT{dw} k{kx} = "
                f"TO_ACCUM_FLT{dw}(args.dw_weights.Read((pack * {kh} + {ky}) * {kw} + {kx}));\n"
            )
        lines.append(f"      if (xi >= 0 && xi + {columns[-1]} < iw) {{\n")
        lines += window_row(False)
        lines.append("      } else {\n")
        lines += window_row(True)
        lines.append("      }\n    }\n    }\n")
    return lines


def _projection_stage(spec: PairSpec) -> list[Piece]:
    """The 1x1 product over the row in local memory, the work-items taking its items in turn.
    Slice s of pixel x is FLT4 number x * (dw / 4) * packs + s there (the padding lanes and
    missing last slices are zero)."""
    (pixels, groups), width, q = spec.block, spec.width, spec.dw // 4
    per = len(SLICE_PARTS[width])
    lines: list[Piece] = [
        f"""  int dst_slices = args.dst_tensor.Slices();
  int ngroups = (dst_slices + {per - 1}) / {per};
  int items = (ngroups + {groups - 1}) / {groups};
  __local FLT4 *mid4 = (__local FLT4 *)mid;
  for (int item = lid; item < ((W + {pixels - 1}) / {pixels}) * items; item += lanes) {{
  int g0 = (item % items) * {groups};
  int X0 = (item / items) * {pixels};
  int group_size = mid_slices * 4;
"""
    ]
    lines += accumulators(pixels, groups, width)
    lines += [f"  int o{p} = (X0 + {p} < W ? X0 + {p} : W - 1) * {q} * packs;\n" for p in range(pixels)]
    lines.append("  for (int s = 0; s < mid_slices; ++s) {\n")
    lines += slice_step("    ", pixels, groups, "w", "mid4[o{p} + s]", width=width)
    lines.append("  }\n")
    setup = f"    int at0 = args.dst_tensor.Offset(X0, Y, g0 * {per}, b);\n    int X = X0;\n"
    # a whole block leaves for the next item, not the end of the kernel
    lines += block_write(
        spec.act, pixels, groups, f"X0 + {pixels - 1} < W", setup, "B", "    X += 1;\n", width, "    continue;\n"
    )
    lines += spilled_writes(spec.act, pixels, groups, width, row_pixels(pixels))
    lines.insert(len(lines) - 1, LANE_MASK)
    lines.append("  }\n  }\n}\n")
    return lines
