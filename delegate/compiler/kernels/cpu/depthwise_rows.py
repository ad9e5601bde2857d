"""DEPTHWISE_CONV_2D with depth multiplier 1 for buffer-backed tensors, the window unrolled.

A work-item computes consecutive output pixels of one row (``depthwise_pixels``) for a pack of
slices (a pair in FLT8, or four in FLT16 on 16-wide devices: ``dw_width``), loading each input
column the window needs once per row and multiplying it into the pixels it feeds at once. Window
size, strides, dilations and padding are literals, so the compiler unrolls the window completely.
A work-item whose pixels lie wholly inside the output writes them at linear indices
(``WRITE_AT``); edge blocks take the masked write (``WRITE``): elementwise ops link in front of
both, or run on the wide pixels before either (kernel.WideOps).
"""

from __future__ import annotations

import numpy as np

from ... import layout
from ...kernel import LANE_MASK, WRITE_AT_WIDE, WRITE_WIDE, Piece, WideOps
from ..common.pieces import activation_code
from ..common.row_blocks import row_block_head, streamed_row_loads

#: Most output pixels per work-item of the depthwise kernel (depthwise_pixels), and fewest.
DEPTHWISE_PIXELS = 8
MIN_PIXELS = 4
#: Most output pixels per work-item of a stride-1 window: its pixels share all but kw - 1 of their
#: input columns, and a work-item's fixed work (its call, 4 slice offsets, the window's weights,
#: the edge tests) is spread over more of them. Blocks of 10 measured 0.68-0.91x the time of
#: blocks of 5 or 8 on 3x3 layers over rows of 10 to 80 pixels (16 to 384 channels), and less on
#: 5x5 ones too; at stride 2, where a pixel loads two columns of its own, 1.05x on rows of 40.
UNIT_STRIDE_PIXELS = 10


def depthwise_pixels(width: int, stride: int = 1) -> int:
    """Output pixels per work-item for an output row of ``width`` pixels and a window of
    horizontal ``stride``: the count from DEPTHWISE_PIXELS (UNIT_STRIDE_PIXELS at stride 1) down
    to MIN_PIXELS whose blocks overhang the row least (the largest of equals). A block past the
    row's end computes pixels it drops and takes the masked write: on 4-pixel rows, blocks of 4
    halved the time of blocks of 8 (EfficientNet's last stage)."""
    most = UNIT_STRIDE_PIXELS if stride == 1 else DEPTHWISE_PIXELS
    return min(range(most, MIN_PIXELS - 1, -1), key=lambda p: -(-width // p) * p)


def dw_width(channels: int, vector_width: int) -> int:
    """Channels per depthwise work-item (this kernel's, and a pair kernel's items): 16 (four
    slices, FLT16) when the device wants 16-wide vectors and there are more than 8 channels, else
    8 (a pair of slices)."""
    return 16 if vector_width >= 16 and channels > 8 else 8


def pack_depthwise_weights(filters: np.ndarray, dtype: np.dtype, width: int = 8) -> bytes:
    """[1, KH, KW, C] filters as FLT8 per (pair of slices, ky, kx): the pair's two FLT4 side by
    side; a missing last slice is zero. ``width`` 16: FLT16 per four slices."""
    _, kh, kw, _ = filters.shape
    f = layout.pad_channels(filters[0].astype(np.float32), 2, width).reshape(kh, kw, -1, width // 4, 4)
    return np.ascontiguousarray(f.transpose(2, 0, 1, 3, 4)).astype(dtype).tobytes()


def slice_offsets(width: int, present: str) -> list[str]:
    """Declare ``off1`` .. for ``slice_pack_load``: slice k of the pack is ``off{k}`` indices
    after slice S0 when ``present`` (formatted with ``k``) holds, else 0 (a missing last slice
    read again, its weights zero). Offsets here and the rows' (``long row``, ``long xi``) are
    64-bit: with 32-bit ones the compiler widened every column's index by itself and spilled
    them (a depthwise + 1x1 pair's window: 170 stack accesses per row of taps, 22 after)."""
    return [
        f"    long off{k} = {present.format(k=k)} ? {k} * args.src_tensor.Offset(0, 0, 1, 0) : 0;\n"
        for k in range(1, width // 4)
    ]


def slice_pack_load(j: int, width: int, batch: int = 0) -> str:
    """Input column ``xi + j`` of the window row starting at ``rb`` (``row + xi * B``) for slices
    S0 .. S0 + ``width`` / 4 - 1 (a pair: FLT8, or four: FLT16) as one vector, slice k at
    ``off{k}`` (``slice_offsets``). ``batch`` 1 (the batch known to be 1): the column is read
    through the row's handles ``h{k}`` (``slice_handles``) at the literal step j, a displacement
    of the load's address; otherwise (0: the batch read at run time) at ``rb + j * B``."""
    if batch == 1:
        reads = [f"args.src_tensor.ReadFrom(h{k}, {j})" for k in range(width // 4)]
    else:
        at = f"rb + {j} * B"
        reads = [f"args.src_tensor.ReadAt({at}{f' + off{k}' if k else ''})" for k in range(width // 4)]
    return f"(ACCUM_FLT{width})({', '.join(f'TO_ACCUM_FLT4({r})' for r in reads)})"


def slice_handles(width: int) -> list[str]:
    """Declare the handles ``h{k}`` on the window row's first column (``rb``) in slice k of the
    pack, for ``slice_pack_load`` at batch 1."""
    return [
        f"      args.src_tensor.Handle() h{k} = args.src_tensor.HandleAt(rb{f' + off{k}' if k else ''});\n"
        for k in range(width // 4)
    ]


#: The FLT4 parts of a pack of ``width`` channels, slice by slice.
PACK_PARTS = {8: ("lo", "hi"), 16: ("s0123", "s4567", "s89ab", "scdef")}


def depthwise_code(act: int, *, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
                   pad: tuple[int, int], pixels: int = DEPTHWISE_PIXELS, width: int = 8,
                   batch: int = 0) -> list[Piece]:  # fmt: skip
    """Depth multiplier 1 depthwise convolution over a pack of slices, the window unrolled.

    A work-item computes ``pixels`` consecutive output pixels of one row for slices S0 ..
    S0 + ``width`` / 4 - 1 in FLT``width`` accumulators (a pair in FLT8: one AVX register; four in
    FLT16: one AVX-512 register). ``weights``: pack_depthwise_weights of the same ``width``;
    ``biases``: one FLT``width`` per pack (pack_gemm_biases). Grid:
    (ceil(W / pixels) * B, H, ceil(slices / (width / 4))). ``batch``: the output's batch when
    the compiler knows it (0: read at run time); 1 puts the input columns at constant steps.
    """
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = kernel, stride, dilation, pad
    q, vt, parts_of = width // 4, f"ACCUM_FLT{width}", PACK_PARTS[width]
    parts: list[Piece] = [row_block_head(pixels, sw, pw, "S0", f"GLOBAL_ID_2 * {q}")]
    parts += [f"  bool has{k} = S0 + {k} < args.dst_tensor.Slices();\n" for k in range(1, q)]
    parts += slice_offsets(width, "has{k}")
    parts.append(f"  {vt} bias = TO_{vt}(args.biases.Read(S0 / {q}));\n")
    for p in range(pixels):
        parts.append(f"  {vt} a{p} = bias;\n")
    columns = sorted({p * sw + kx * dw for p in range(pixels) for kx in range(kw)})

    for ky in range(kh):
        parts.append(f"  {{\n    int yi = Y * {sh} + {ky * dh - ph};\n    if (yi >= 0 && yi < ih) {{\n")
        parts.append("      long row = args.src_tensor.Offset(0, yi, S0, b);\n      long rb = row + xi * B;\n")
        if batch == 1:
            parts += slice_handles(width)
        for kx in range(kw):
            parts.append(f"      {vt} k{kx} = TO_{vt}(args.weights.Read((S0 / {q} * {kh} + {ky}) * {kw} + {kx}));\n")
        taps = {
            j: [(p, (j - p * sw) // dw) for p in range(pixels) if j - p * sw in range(0, kw * dw, dw)] for j in columns
        }
        parts += streamed_row_loads(columns, lambda j: slice_pack_load(j, width, batch), vt, taps)
        parts.append("    }\n  }\n")
    for p in range(pixels):
        parts.append(f"  FLT{width} o{p} = TO_FLT{width}(a{p});\n")
        activation = activation_code(act, f"o{p}", width=width)
        if activation:
            parts.append(f"  {activation}\n")
        parts.append(WideOps(f"o{p}", width))
    # A whole row of pixels inside the tensor: written at linear indices, straight from the registers.
    parts.append(
        f"  if (X0 + {pixels - 1} < W) {{\n    int at0 = args.dst_tensor.Offset(X0, Y, S0, b);\n"
        "    int dstride = args.dst_tensor.Offset(0, 0, 1, 0);\n"
    )
    for p in range(pixels):
        for k, part in enumerate(parts_of):
            guard = f"if (has{k}) " if k else ""
            parts.append(
                f"  {guard}{{\n    int X = X0 + {p};\n    int S = S0 + {k};\n"
                f"    int at = at0 + {p} * B + {k} * dstride;\n    FLT4 result = o{p}.{part};\n"
            )
            parts.append(WRITE_AT_WIDE)
    parts.append("    return;\n  }\n")
    parts.append(f"  FLT4 outs[{q * pixels}];\n")
    for p in range(pixels):
        parts.append("  " + " ".join(f"outs[{q * p + k}] = o{p}.{part};" for k, part in enumerate(parts_of)) + "\n")
    parts.append(
        f"""  for (int i = 0; i < {q * pixels}; ++i) {{
    int X = X0 + i / {q};
    if (X >= W) break;
    int S = S0 + i % {q};
    if (S >= args.dst_tensor.Slices()) continue;
    FLT4 result = outs[i];
"""
    )
    parts += [LANE_MASK, WRITE_WIDE, "}\n"]
    return parts
