"""Convolution kernels for buffer-backed tensors, written for CPU-like OpenCL devices.

Both kernels address tensors linearly (``Offset`` / ``ReadAt``, BUFFER and IMAGE_BUFFER storage),
keep their accumulators in registers and write through the standard masked write, so
elementwise ops still fuse into them.

``gemm_conv_code``: CONV_2D and FULLY_CONNECTED as a matrix product. A work-item computes
``pixels`` output pixels (consecutive in the tensor's flat pixel order) x ``groups`` groups of 8
output channels, with one FLT8 accumulator per (group, pixel): on AVX2 that is one register each.
Weights are packed by ``pack_gemm_weights`` so that the 8 output channels of a group at one input
channel are one FLT8, and a group's weights are one contiguous run. A 1x1 / stride 1 / unpadded
convolution (and a fully connected layer) reads input pixel p for output pixel p ("flat"): no
coordinate math in the loop at all.

``depthwise_code``: DEPTHWISE_CONV_2D with depth multiplier 1 for a given window: a work-item
computes ``pixels`` consecutive output pixels of one row and slice, loading each input column the
window needs once per row. Window size, strides, dilations and padding are literals, so the
compiler unrolls the window completely.
"""

from __future__ import annotations

import numpy as np

from .. import layout

#: Default blocking of the matrix-product kernel: 4 pixels x 2 groups of 8 output channels.
GEMM_PIXELS = 4
GEMM_GROUPS = 2
#: Windows up to this many taps are unrolled in the matrix-product kernel (about 1.6x faster for
#: UNet's 3x3 layers on PoCL than the compiler's own choice).
UNROLL_MAX_TAPS = 25
#: Output pixels per work-item of the depthwise kernel.
DEPTHWISE_PIXELS = 8
#: Largest depthwise window the unrolled kernel is generated for.
DEPTHWISE_MAX_TAPS = 49


def pack_gemm_weights(filters: np.ndarray, dtype: np.dtype) -> bytes:
    """OHWI filters as FLT8 rows: (group of 8 output channels, ky, kx, input channel padded to a
    multiple of 4) -> the group's 8 output channels. Missing output channels are zero."""
    _, kh, kw, _ = filters.shape
    f = layout.pad_channels(filters.astype(np.float32), 3)
    f = layout.pad_channels(f, 0, 8)
    groups = f.shape[0] // 8
    f = f.reshape(groups, 8, kh, kw, f.shape[3])  # (g, o8, ky, kx, ci)
    return np.ascontiguousarray(f.transpose(0, 2, 3, 4, 1)).astype(dtype).tobytes()


def pack_gemm_biases(bias: bytes, dtype: np.dtype) -> bytes:
    """Per-channel biases (as laid out by layout.linear) padded to a multiple of 8 channels."""
    values = np.frombuffer(bias, dtype)
    extra = (-len(values)) % 8
    return np.concatenate([values, np.zeros(extra, dtype)]).tobytes()


def gemm_groups(channels: int) -> int:
    return -(-channels // 8)


def _epilogue(count: int, index_setup: str, activation: str) -> list[str]:
    """Write ``count`` results held in ``outs``: ``index_setup`` sets X, Y, S, b (or continues)."""
    return [
        f"  for (int i = 0; i < {count}; ++i) {{\n",
        index_setup,
        "    FLT4 result = outs[i];\n",
        f"    {activation}\n",
        "  args.dst_tensor.Write(result, X, Y, S, b);\n}\n}\n",
    ]


def gemm_conv_code(activation: str, *, kernel: tuple[int, int], flat: bool, transposed: bool = False,
                   pixels: int = GEMM_PIXELS, groups: int = GEMM_GROUPS) -> str:  # fmt: skip
    """The matrix-product convolution; ``activation`` is the fused activation on ``result``.

    Scalar arguments: ``stride_h/w``, ``dilation_h/w``, ``pad_h/w`` (ignored when ``flat``).
    Objects: ``weights`` (FLT8 buffer, pack_gemm_weights), ``biases`` (FLT8 buffer).

    Grids: flat, (ceil(B*H*W / pixels), ceil(groups / per item), 1) over the flat pixel order;
    otherwise (ceil(W / pixels) * B, H, ceil(groups / per item)): a work-item's pixels are
    consecutive on one output row, so a window row is checked once and the pixels' input columns
    are one stride apart. ``transposed``: TRANSPOSE_CONV as a gather: output (X, Y) takes input
    ((X + pad_w - kx) / stride_w, ...) through tap (ky, kx) when the division is exact. A window
    row or tap no pixel of the work-item uses is skipped.
    """
    kh, kw = kernel
    P, G = pixels, groups
    if flat:
        L = [
            f"""
MAIN_FUNCTION($0) {{
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int npix = W * args.dst_tensor.Height() * B;
  int dst_slices = args.dst_tensor.Slices();
  int ngroups = (dst_slices + 1) / 2;
  int p0 = GLOBAL_ID_0 * {P};
  int g0 = GLOBAL_ID_1 * {G};
  if (p0 >= npix || g0 >= ngroups) return;
"""
        ]
    else:
        L = [
            f"""
MAIN_FUNCTION($0) {{
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int dst_slices = args.dst_tensor.Slices();
  int ngroups = (dst_slices + 1) / 2;
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int g0 = GLOBAL_ID_2 * {G};
  if (gx >= ((W + {P - 1}) / {P}) * B || Y >= args.dst_tensor.Height() || g0 >= ngroups) return;
  int X0 = (gx / B) * {P};
  int b = gx % B;
  int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();
"""
        ]
    L.append(
        f"""  int src_slices = args.src_tensor.Slices();
  int sstride = args.src_tensor.Offset(0, 0, 1, 0);
  int group_size = {kh * kw} * src_slices * 4;
"""
    )
    for g in range(G):
        L.append(f"  int w{g} = (g0 + {g} < ngroups ? g0 + {g} : ngroups - 1) * group_size;\n")
        L.append(f"  ACCUM_FLT8 bias{g} = TO_ACCUM_FLT8(args.biases.Read(w{g} / group_size));\n")
        for p in range(P):
            L.append(f"  ACCUM_FLT8 a{g}{p} = bias{g};\n")
    if flat:
        indent = "  "
        for p in range(P):
            L.append(f"  int o{p} = p0 + {p} < npix ? p0 + {p} : npix - 1;\n")
    else:
        indent = "    "
        unroll = "  #pragma unroll\n" if kh * kw <= UNROLL_MAX_TAPS else ""
        L.append(unroll + _window_row(kh, transposed))
        L.append(f"{unroll}  for (int kx = 0; kx < {kw}; ++kx) {{\n")
        for p in range(P):
            if transposed:
                L.append(
                    f"    int tx{p} = X0 + {p} + args.pad_w - kx; int xc{p} = tx{p} / args.stride_w;\n"
                    f"    bool in{p} = tx{p} >= 0 && xc{p} * args.stride_w == tx{p} && xc{p} < iw;\n"
                )
            else:
                L.append(
                    f"    int xc{p} = (X0 + {p}) * args.stride_w + kx * args.dilation_w - args.pad_w;\n"
                    f"    bool in{p} = xc{p} >= 0 && xc{p} < iw;\n"
                )
            L.append(
                f"    int o{p} = in{p} ? row + xc{p} * B : row;\n"
                f"    ACCUM_FLT m{p} = in{p} ? (ACCUM_FLT)(1.0f) : (ACCUM_FLT)(0.0f);\n"
            )
        L.append("    if (!(" + " || ".join(f"in{p}" for p in range(P)) + ")) continue;\n")
        for g in range(G):
            L.append(f"    int t{g} = w{g} + (ky * {kw} + kx) * src_slices * 4;\n")
    L.append(f"{indent}for (int s = 0; s < src_slices; ++s) {{\n")
    for p in range(P):
        mask = "" if flat else f" * m{p}"
        L.append(f"{indent}  ACCUM_FLT4 v{p} = TO_ACCUM_FLT4(args.src_tensor.ReadAt(o{p} + s * sstride)){mask};\n")
    wbase = "w" if flat else "t"
    for k, lane in enumerate("xyzw"):
        for g in range(G):
            L.append(f"{indent}  ACCUM_FLT8 k{g}{k} = TO_ACCUM_FLT8(args.weights.Read({wbase}{g} + {k}));\n")
        for g in range(G):
            for p in range(P):
                L.append(f"{indent}  a{g}{p} += v{p}.{lane} * k{g}{k};\n")
    for g in range(G):
        L.append(f"{indent}  {wbase}{g} += 4;\n")
    L.append(f"{indent}}}\n")
    if not flat:
        L.append("  }\n  }\n")
    L.append(f"  FLT4 outs[{2 * G * P}];\n")
    for g in range(G):
        for p in range(P):
            i = p * 2 * G + g * 2
            L.append(f"  outs[{i}] = TO_FLT4(a{g}{p}.lo); outs[{i + 1}] = TO_FLT4(a{g}{p}.hi);\n")
    if flat:  # coordinates of the first pixel, then stepped: no division per output
        L.append(
            f"""  int b = p0 % B; int X = (p0 / B) % W; int Y = p0 / (B * W);
  for (int p = 0; p < {P}; ++p) {{
    if (p0 + p >= npix) break;
"""
        )
    else:
        L.append(f"  for (int p = 0; p < {P}; ++p) {{\n    int X = X0 + p;\n    if (X >= W) break;\n")
    L.append(
        f"""    for (int j = 0; j < {2 * G}; ++j) {{
    int S = g0 * 2 + j;
    if (S >= dst_slices) continue;
    FLT4 result = outs[p * {2 * G} + j];
    {activation}
  args.dst_tensor.Write(result, X, Y, S, b);
}}
"""
    )
    if flat:
        L.append("    b += 1;\n    if (b == B) { b = 0; X += 1; if (X == W) { X = 0; Y += 1; } }\n")
    L.append("  }\n}\n")
    return "".join(L)


def _window_row(kh: int, transposed: bool) -> str:
    """Open the loop over window rows: ``row`` is the input row's linear offset (a row no pixel of
    the work-item reads is skipped)."""
    if transposed:
        return f"""  for (int ky = 0; ky < {kh}; ++ky) {{
  int ty = Y + args.pad_h - ky;
  int yc = ty / args.stride_h;
  if (ty < 0 || yc * args.stride_h != ty || yc >= ih) continue;
  int row = args.src_tensor.Offset(0, yc, 0, b);
"""
    return f"""  for (int ky = 0; ky < {kh}; ++ky) {{
  int yc = Y * args.stride_h + ky * args.dilation_h - args.pad_h;
  if (yc < 0 || yc >= ih) continue;
  int row = args.src_tensor.Offset(0, yc, 0, b);
"""


def depthwise_code(activation: str, *, kernel: tuple[int, int], stride: tuple[int, int],
                   dilation: tuple[int, int], pad: tuple[int, int], pixels: int = DEPTHWISE_PIXELS) -> str:  # fmt: skip
    """Depth multiplier 1 depthwise convolution, the window unrolled; ``weights`` as
    layout.depthwise_weights (FLT4 per slice, ky, kx), ``biases`` a linear FLT4 object."""
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = kernel, stride, dilation, pad
    P = pixels
    L = [
        f"""
MAIN_FUNCTION($0) {{
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  if (gx >= ((W + {P - 1}) / {P}) * B || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  int X0 = (gx / B) * {P};
  int b = gx % B;
  int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();
  int xi = X0 * {sw} - {pw};
  ACCUM_FLT4 bias = TO_ACCUM_FLT4(args.biases.Read(S));
"""
    ]
    for p in range(P):
        L.append(f"  ACCUM_FLT4 a{p} = bias;\n")
    columns = sorted({p * sw + kx * dw for p in range(P) for kx in range(kw)})
    for ky in range(kh):
        L.append(f"  {{\n    int yi = Y * {sh} + {ky * dh - ph};\n    if (yi >= 0 && yi < ih) {{\n")
        L.append("      int row = args.src_tensor.Offset(0, yi, S, b);\n")
        L.append("      ACCUM_FLT4 " + ", ".join(f"r{j}" for j in columns) + ";\n")
        # Work-items away from the left and right edges (most of them) load without checks.
        L.append(f"      if (xi >= 0 && xi + {columns[-1]} < iw) {{\n")
        for j in columns:
            L.append(f"        r{j} = TO_ACCUM_FLT4(args.src_tensor.ReadAt(row + (xi + {j}) * B));\n")
        L.append("      } else {\n")
        for j in columns:
            L.append(
                f"        r{j} = (xi + {j} >= 0 && xi + {j} < iw) ? "
                f"TO_ACCUM_FLT4(args.src_tensor.ReadAt(row + (xi + {j}) * B)) : (ACCUM_FLT4)(0.0f);\n"
            )
        L.append("      }\n")
        for kx in range(kw):
            L.append(f"      ACCUM_FLT4 k{kx} = TO_ACCUM_FLT4(args.weights.Read((S * {kh} + {ky}) * {kw} + {kx}));\n")
        for p in range(P):
            for kx in range(kw):
                L.append(f"      a{p} += r{p * sw + kx * dw} * k{kx};\n")
        L.append("    }\n  }\n")
    L.append(f"  FLT4 outs[{P}];\n")
    for p in range(P):
        L.append(f"  outs[{p}] = TO_FLT4(a{p});\n")
    setup = "    int X = X0 + i;\n    if (X >= W) continue;\n"
    return "".join(L + _epilogue(P, setup, activation))
