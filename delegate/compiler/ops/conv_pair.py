"""A depthwise convolution and the 1x1 convolution that reads it, as one kernel (the
"depthwise + projection" pair of MobileNet-style blocks), for CPU-like OpenCL devices.

A work-group computes one output row. First its work-items compute the depthwise row for every
channel into local memory (items of ``DW_PIXELS`` pixels x a pair of slices, the window
unrolled, each input column multiplied into the pixels it feeds as soon as it is loaded; each
work-item takes a run of consecutive items: PoCL runs a work-group's work-items one after the
other, so the core then reads the input rows in order rather than in eight interleaved sweeps,
2.5-22% faster pairs); then,
after a barrier, the 1x1 product over that row (items of ``PIXELS`` pixels x ``GROUPS`` groups
of 8 output channels, FLT8 accumulators as in ``conv_fast.gemm_conv_code``). The depthwise
output never goes through global memory, and the pair costs one launch instead of two.

On a CPU device a work-group runs on one core, its work-items one after the other, so the row in
local memory stays in that core's cache. On a GPU the same shape would leave most of the chip
idle (a few hundred work-groups of 8), so the compiler pairs only for CPU devices
(``CompileOptions.pair_local_bytes``).
"""

from __future__ import annotations

from ...context import model
from .. import layout
from ..graph import Builtin, Node
from .base import WRITE, WRITE_AT, EmitContext, activation_code, buffer_object, operation
from .conv import _bias, _conv_window, _use_gemm
from .conv_fast import (
    SLICE_PARTS,
    THIRDS_GROUPS,
    THIRDS_PIXELS,
    _gemm_fast_epilogue,
    gemm_groups,
    gemm_width,
    odd_thirds,
    pack_depthwise_weights,
    pack_gemm_biases,
    pack_gemm_weights,
    slice_offsets,
    slice_pack_load,
    slice_step,
    spill_slices,
)

#: Pixels per depthwise item, pixels and groups of 8 output channels per 1x1 item.
DW_PIXELS = 8
PIXELS = 5
GROUPS = 2
#: Pixels per 1x1 item when the output is a single group (16 channels in groups of 16): the item
#: holds one group, not a copy of it, in as many accumulators. MobileNetV2 ran 1% faster than
#: with the copy; 6, 8, 10 and 12 pixels were level (races of whole calls, session 12).
SINGLE_GROUP_PIXELS = 10
#: Work-items per work-group (the kernel requires it; its code shares items over GROUP_SIZE_0
#: work-items, so a persistent kernel may run a work-group as one work-item, see
#: runtime/persistent.py).
LOCAL = 8
#: Largest depthwise window the pair kernel is generated for.
MAX_TAPS = 25
#: Smallest output height x batch and width paired: below them the pair was slower than the two
#: kernels on PoCL (MobileNetV2's 7x7 blocks: 7 work-groups for the cores, 5-pixel blocks over
#: 7-pixel rows).
MIN_ROWS = 14
MIN_WIDTH = 14
#: Local memory the plugin lets a pair kernel hold on a CPU device: about one core's L1 data
#: cache (MobileNetV2's largest row, 56 pixels x 144 channels, takes 31.5 KiB).
PAIR_LOCAL_BYTES = 32 * 1024


def mid_row_bytes(width: int, channels: int, dw_width: int = 8) -> int:
    """Local memory of a pair kernel whose depthwise row has ``width`` pixels of ``channels``
    (float, padded to a whole number of ``dw_width`` / 4 slices: pairs, or fours)."""
    per = dw_width // 4
    return width * -(-layout.slices(channels) // per) * per * 4 * 4


def dw_width(channels: int, vector_width: int) -> int:
    """Channels per depthwise item of a pair kernel: 16 (four slices, FLT16) when the device
    wants 16-wide vectors and there are more than 8 channels, else 8 (a pair of slices)."""
    return 16 if vector_width >= 16 and channels > 8 else 8


def pair_code(*, dw_act: int, act: int, kernel: tuple[int, int], stride: tuple[int, int], pad: tuple[int, int],
              local_bytes: int, thirds: bool = False, width: int = 8, dw: int = 8,
              single_group: bool = False) -> str:  # fmt: skip
    """The kernel for a depthwise stage with ``kernel``, ``stride``, leading ``pad`` (undilated)
    and activation ``dw_act``, then a 1x1 convolution with activation ``act`` whose items are
    PIXELS x GROUPS, or THIRDS_PIXELS x THIRDS_GROUPS when ``thirds`` (``conv_fast.odd_thirds``); its local
    row holds ``local_bytes`` (``pairs`` admits only rows that fit). Grid (LOCAL, H * B, 1), work-group
    (LOCAL, 1, 1). Widths and channel counts are read at run time, so layers of one shape of
    window share one kernel source (PoCL compiles each distinct source, twice on a cold start:
    MobileNetV2's 13 pairs as literals made its cold start 2.3x longer).

    Objects: ``dw_weights`` / ``dw_biases`` (pack_depthwise_weights / pack_gemm_biases of the
    depthwise filters), ``weights`` / ``biases`` (pack_gemm_weights / pack_gemm_biases of the 1x1
    filters, ``width`` output channels per group: conv_fast.gemm_width). ``dw``: channels per
    depthwise item, 8 (a pair of slices) or 16 (four: ``dw_width``). ``single_group``: the output is
    one group of ``width`` channels, so an item is SINGLE_GROUP_PIXELS pixels x 1 group (a second
    group would be a copy of the first: 16-channel projections in groups of 16)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    P, G = (THIRDS_PIXELS, THIRDS_GROUPS) if thirds else (PIXELS, GROUPS)
    if single_group:
        P, G = SINGLE_GROUP_PIXELS, 1
    q = dw // 4
    parts = SLICE_PARTS[width]
    per = len(parts)
    L = [
        f"""
__attribute__((reqd_work_group_size({LOCAL}, 1, 1))) MAIN_FUNCTION($0) {{
  /* WORK_GROUP_SERIAL: the work-group's items are shared among GROUP_SIZE_0 work-items */
  __local FLT{dw} mid[{local_bytes // (4 * dw)}];
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
    int xi = X0 * {sw} - {pw};
"""
    ]
    L += slice_offsets(dw, "S0 + {k} < mid_slices")
    L.append(f"    ACCUM_FLT{dw} bias = TO_ACCUM_FLT{dw}(args.dw_biases.Read(pack));\n")
    for p in range(DW_PIXELS):
        L.append(f"    ACCUM_FLT{dw} d{p} = bias;\n")
    columns = sorted({p * sw + kx for p in range(DW_PIXELS) for kx in range(kw)})

    def window_row(checked: bool) -> list[str]:
        out = []
        for j in columns:
            value = slice_pack_load(j, dw)
            if checked:
                value = f"((xi + {j} >= 0 && xi + {j} < iw) ? {value} : (ACCUM_FLT{dw})(0.0f))"
            out.append(f"        {{\n        ACCUM_FLT{dw} r = {value};\n")
            for p in range(DW_PIXELS):
                kx = j - p * sw
                if 0 <= kx < kw:
                    out.append(f"        d{p} += r * k{kx};\n")
            out.append("        }\n")
        return out

    for ky in range(kh):
        L.append(f"    {{\n    int yi = Y * {sh} + {ky - ph};\n    if (yi >= 0 && yi < ih) {{\n")
        L.append("      int row = args.src_tensor.Offset(0, yi, S0, b);\n")
        for kx in range(kw):
            L.append(
                f"      ACCUM_FLT{dw} k{kx} = "
                f"TO_ACCUM_FLT{dw}(args.dw_weights.Read((pack * {kh} + {ky}) * {kw} + {kx}));\n"
            )
        L.append(f"      if (xi >= 0 && xi + {columns[-1]} < iw) {{\n")
        L += window_row(False)
        L.append("      } else {\n")
        L += window_row(True)
        L.append("      }\n    }\n    }\n")
    for p in range(DW_PIXELS):
        L.append(f"    {{\n    FLT{dw} o = TO_FLT{dw}(d{p});\n")
        activation = activation_code(dw_act, "o", width=dw)
        if activation:
            L.append(f"    {activation}\n")
        L.append(f"    if (X0 + {p} < W) mid[(X0 + {p}) * packs + pack] = o;\n    }}\n")
    L.append("  }\n  barrier(CLK_LOCAL_MEM_FENCE);\n")
    # The 1x1 product over the row in local memory: slice s of pixel x is FLT4 number
    # x * {q} * packs + s there (the padding lanes and missing last slices are zero).
    L.append(
        f"""  int dst_slices = args.dst_tensor.Slices();
  int ngroups = (dst_slices + {per - 1}) / {per};
  int items = (ngroups + {G - 1}) / {G};
  __local FLT4 *mid4 = (__local FLT4 *)mid;
  for (int item = lid; item < ((W + {P - 1}) / {P}) * items; item += lanes) {{
  int g0 = (item % items) * {G};
  int X0 = (item / items) * {P};
  int group_size = mid_slices * 4;
"""
    )
    for g in range(G):
        L.append(f"  int w{g} = (g0 + {g} < ngroups ? g0 + {g} : ngroups - 1) * group_size;\n")
        L.append(f"  ACCUM_FLT{width} bias{g} = TO_ACCUM_FLT{width}(args.biases.Read(w{g} / group_size));\n")
        for p in range(P):
            L.append(f"  ACCUM_FLT{width} a{g}{p} = bias{g};\n")
    for p in range(P):
        L.append(f"  int o{p} = (X0 + {p} < W ? X0 + {p} : W - 1) * {q} * packs;\n")
    L.append("  for (int s = 0; s < mid_slices; ++s) {\n")
    L += slice_step("    ", P, G, "w", "mid4[o{p} + s]", width=width)
    L.append("  }\n")
    setup = f"    int at0 = args.dst_tensor.Offset(X0, Y, g0 * {per}, b);\n    int X = X0;\n"
    epilogue = _gemm_fast_epilogue(act, P, G, f"X0 + {P - 1} < W", setup, "B", "    X += 1;\n", width)
    assert epilogue[-1] == "    return;\n  }\n"
    L += [*epilogue[:-1], "    continue;\n  }\n"]  # the next item, not the end of the kernel
    L.append(f"  FLT4 outs[{per * G * P}];\n")
    for g in range(G):
        for p in range(P):
            i = p * per * G + g * per
            L.append(spill_slices(f"a{g}{p}", i, parts))
    L.append(
        f"""  for (int p = 0; p < {P}; ++p) {{
    int X = X0 + p;
    if (X >= W) break;
    for (int j = 0; j < {per * G}; ++j) {{
    int S = g0 * {per} + j;
    if (S >= dst_slices) continue;
    FLT4 result = outs[p * {per * G} + j];
    {activation_code(act)}
"""
        + WRITE
        + "  }\n  }\n}\n"
    )
    code = "".join(L)
    assert code.count(WRITE) == 1 and WRITE_AT in code  # where fusion links ops after the pair
    return code


def pairs(dw: Node, conv: Node, ctx: EmitContext, local_bytes: int) -> bool:
    """Can DEPTHWISE_CONV_2D ``dw`` and CONV_2D ``conv``, whose input is ``dw``'s output (and its
    only reader: the caller checks), run as one kernel holding at most ``local_bytes`` of local
    memory? Yes for a depth multiplier 1, undilated depthwise convolution of up to MAX_TAPS taps
    and strides 1 or 2, followed by a 1x1, stride 1 convolution over all its channels, on buffer
    storage, with at least MIN_ROWS rows and MIN_WIDTH columns of output."""
    if dw.op != Builtin.DEPTHWISE_CONV_2D or conv.op != Builtin.CONV_2D or not _use_gemm(ctx):
        return False
    if conv.inputs[0] != dw.outputs[0] or dw.outputs[0] in conv.inputs[1:]:
        return False
    if len(conv.outputs) != 1 or len(dw.outputs) != 1:
        return False
    src, mid, dw_filters, ints = _conv_window(dw, ctx)
    _, kh, kw, _ = dw_filters.shape
    if mid.shape[3] != src.shape[3] or kh * kw > MAX_TAPS or ints["dilation_h"] != 1 or ints["dilation_w"] != 1:
        return False
    if ints["stride_h"] not in (1, 2) or ints["stride_w"] not in (1, 2):
        return False
    _, dst, filters, conv_ints = _conv_window(conv, ctx)
    if filters.shape[1:] != (1, 1, mid.shape[3]) or conv_ints["stride_h"] != 1 or conv_ints["stride_w"] != 1:
        return False
    b, h, w, _ = dst.shape
    row_bytes = mid_row_bytes(w, mid.shape[3], dw_width(mid.shape[3], ctx.vector_width))
    return b * h >= MIN_ROWS and w >= MIN_WIDTH and row_bytes <= local_bytes


def pair_operation(dw: Node, conv: Node, ctx: EmitContext, local_bytes: int) -> model.GPUOperation:
    """The kernel of a pair ``pairs`` accepted (with the same ``local_bytes``)."""
    g = ctx.graph
    _, mid, dw_filters, ints = _conv_window(dw, ctx)
    _, dst, filters, _ = _conv_window(conv, ctx)
    b, h, _, c = dst.shape
    width = gemm_width(c, ctx.vector_width)
    groups = gemm_groups(c, width)
    dw_vector = dw_width(mid.shape[3], ctx.vector_width)
    code = pair_code(
        dw_act=dw.params["activation"], act=conv.params["activation"], local_bytes=local_bytes,
        kernel=(ints["kernel_h"], ints["kernel_w"]),
        stride=(ints["stride_h"], ints["stride_w"]), pad=(ints["pad_h"], ints["pad_w"]),
        thirds=odd_thirds(groups), width=width, dw=dw_vector, single_group=groups == 1,
    )  # fmt: skip
    dw_biases = pack_gemm_biases(_bias(dw, g, mid.shape[3], ctx), ctx.dtype, dw_vector)
    dw_weights = pack_depthwise_weights(dw_filters, ctx.dtype, dw_vector)
    op = operation(
        code,
        srcs=["src_tensor"],
        buffer_objects=[
            buffer_object("dw_weights", dw_weights, ctx.dtype, element_size=dw_vector),
            buffer_object("dw_biases", dw_biases, ctx.dtype, element_size=dw_vector),
            buffer_object("weights", pack_gemm_weights(filters, ctx.dtype, width), ctx.dtype, element_size=width),
            buffer_object(
                "biases", pack_gemm_biases(_bias(conv, g, c, ctx), ctx.dtype, width), ctx.dtype, element_size=width
            ),
        ],
    )
    op.tensor_to_grid = model.TensorToGrid.CUSTOM
    op.grid_size = model.Int3(LOCAL, h * b, 1)
    op.work_group_size = model.Int3(LOCAL, 1, 1)
    return op
