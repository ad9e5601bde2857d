"""DEPTHWISE_CONV_2D with depth multiplier 1 for buffer-backed tensors, the window unrolled.

A work-item computes ``pixels`` consecutive output pixels of one row for a pair of slices (FLT8),
loading each input column the window needs once per row. Window size, strides, dilations and
padding are literals, so the compiler unrolls the window completely. A work-item whose pixels lie
wholly inside the output writes them at linear indices (``WRITE_AT``); edge blocks take the
masked write (``WRITE``): elementwise ops link in front of both, or run on the FLT8 pixels
before either (kernel.WideOps).
"""

from __future__ import annotations

import numpy as np

from ... import layout
from ...kernel import LANE_MASK, WRITE_AT_WIDE, WRITE_WIDE, Piece, WideOps
from ..common.pieces import activation_code
from ..common.row_blocks import row_block_head, window_row_loads

#: Output pixels per work-item of the depthwise kernel.
DEPTHWISE_PIXELS = 8


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


def slice_pack_load(j: int, width: int) -> str:
    """Input column ``xi + j`` of the window row starting at ``rb`` (``row + xi * B``) for slices
    S0 .. S0 + ``width`` / 4 - 1 (a pair: FLT8, or four: FLT16) as one vector, slice k at
    ``off{k}`` (``slice_offsets``). The column is a constant step from ``rb``, which the
    compiler folds into the load's address."""
    at = f"rb + {j} * B"
    parts = ", ".join(
        f"TO_ACCUM_FLT4(args.src_tensor.ReadAt({at}{f' + off{k}' if k else ''}))" for k in range(width // 4)
    )
    return f"(ACCUM_FLT{width})({parts})"


def depthwise_code(act: int, *, kernel: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
                   pad: tuple[int, int], pixels: int = DEPTHWISE_PIXELS) -> list[Piece]:  # fmt: skip
    """Depth multiplier 1 depthwise convolution over a pair of slices, the window unrolled.

    A work-item computes ``pixels`` consecutive output pixels of one row for slices S and S + 1 in
    FLT8 accumulators (one AVX register each, rather than one slice in FLT4).
    ``weights``: pack_depthwise_weights; ``biases``: FLT8 per pair (pack_gemm_biases). Grid:
    (ceil(W / pixels) * B, H, ceil(slices / 2)).
    """
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = kernel, stride, dilation, pad
    parts: list[Piece] = [
        row_block_head(pixels, sw, pw, "S0", "GLOBAL_ID_2 * 2") + "  bool pair = S0 + 1 < args.dst_tensor.Slices();\n"
    ]
    parts += slice_offsets(8, "pair")
    parts.append("  ACCUM_FLT8 bias = TO_ACCUM_FLT8(args.biases.Read(S0 / 2));\n")
    for p in range(pixels):
        parts.append(f"  ACCUM_FLT8 a{p} = bias;\n")
    columns = sorted({p * sw + kx * dw for p in range(pixels) for kx in range(kw)})

    for ky in range(kh):
        parts.append(f"  {{\n    int yi = Y * {sh} + {ky * dh - ph};\n    if (yi >= 0 && yi < ih) {{\n")
        parts.append("      long row = args.src_tensor.Offset(0, yi, S0, b);\n      long rb = row + xi * B;\n")
        parts += window_row_loads(columns, lambda j: slice_pack_load(j, 8), "ACCUM_FLT8", "(ACCUM_FLT8)(0.0f)")
        for kx in range(kw):
            parts.append(
                f"      ACCUM_FLT8 k{kx} = TO_ACCUM_FLT8(args.weights.Read((S0 / 2 * {kh} + {ky}) * {kw} + {kx}));\n"
            )
        for p in range(pixels):
            for kx in range(kw):
                parts.append(f"      a{p} += r{p * sw + kx * dw} * k{kx};\n")
        parts.append("    }\n  }\n")
    for p in range(pixels):
        parts.append(f"  FLT8 o{p} = TO_FLT8(a{p});\n")
        activation = activation_code(act, f"o{p}", width=8)
        if activation:
            parts.append(f"  {activation}\n")
        parts.append(WideOps(f"o{p}", 8))
    # A whole row of pixels inside the tensor: written at linear indices, straight from the registers.
    parts.append(
        f"  if (X0 + {pixels - 1} < W) {{\n    int at0 = args.dst_tensor.Offset(X0, Y, S0, b);\n"
        "    int dstride = args.dst_tensor.Offset(0, 0, 1, 0);\n"
    )
    for p in range(pixels):
        parts += [
            f"  {{\n    int X = X0 + {p};\n    int S = S0;\n    int at = at0 + {p} * B;\n    FLT4 result = o{p}.lo;\n"
        ]
        parts.append(WRITE_AT_WIDE)
        parts.append(
            f"  if (pair) {{\n    int X = X0 + {p};\n    int S = S0 + 1;\n    int at = at0 + {p} * B + dstride;\n"
            f"    FLT4 result = o{p}.hi;\n"
        )
        parts.append(WRITE_AT_WIDE)
    parts.append("    return;\n  }\n")
    parts.append(f"  FLT4 outs[{2 * pixels}];\n")
    for p in range(pixels):
        parts.append(f"  outs[{2 * p}] = o{p}.lo; outs[{2 * p + 1}] = o{p}.hi;\n")
    parts.append(
        f"""  for (int i = 0; i < {2 * pixels}; ++i) {{
    int X = X0 + i / 2;
    if (X >= W) break;
    if (i % 2 == 1 && !pair) continue;
    int S = S0 + i % 2;
    FLT4 result = outs[i];
"""
    )
    parts += [LANE_MASK, WRITE_WIDE, "}\n"]
    return parts
