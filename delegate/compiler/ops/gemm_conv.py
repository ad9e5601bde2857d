"""The matrix-product convolution kernel: CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV, one
generator per way a work-item finds its input (gemm_blocks.py holds the parts they share).

- ``flat_code``: a 1x1 / stride 1 / unpadded convolution or a fully connected layer reads input
  pixel p for output pixel p: no coordinate math in the loop at all. Grid (ceil(B*H*W / pixels),
  ceil(groups / per item), 1) over the flat pixel order.
- ``rows_code``: any window; a work-item's pixels are consecutive on one output row, so a window
  row is checked once and the pixels' input columns are one stride apart. Grid
  (ceil(W / pixels) * B, H, ceil(groups / per item)).
- ``transposed_code``: TRANSPOSE_CONV as a gather: output (X, Y) takes input
  ((X + pad_w - kx) / stride_w, ...) through tap (ky, kx) when the division is exact; grid as
  ``rows_code``. A window row or tap no pixel of the work-item uses is skipped.
- ``phases_code``: TRANSPOSE_CONV with kernel = stride, no padding, output = input x stride:
  every output pixel takes exactly one input pixel through one tap, so each tap is a 1x1 product
  of the input. Grid (ceil(IW / pixels) * B, IH, ceil(groups / per item) * KH * KW): a work-item
  takes ``pixels`` consecutive input pixels of a row through one tap and writes outputs one
  stride apart; no masks, no skipped taps.

Scalar arguments (rows and transposed): ``stride_h/w``, ``dilation_h/w``, ``pad_h/w``. Objects:
``weights`` (pack_gemm_weights), ``biases`` (pack_gemm_biases).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..kernel import Piece, PixelOps
from .gemm_blocks import (
    GEMM_GROUPS,
    GEMM_PIXELS,
    SLICE_PARTS,
    STEP_PIXEL,
    accumulators,
    block_write,
    gemm_head,
    row_pixels,
    slice_loop,
    source_names,
    spilled_writes,
)

#: Windows up to this many taps are unrolled in the matrix-product kernel, in the interior path
#: only: unrolling the edge path too makes the program binary larger and its load slower for no
#: latency gain (benchmarks/RESULTS.md, "Matrix-product kernel").
UNROLL_MAX_TAPS = 25


@dataclass(frozen=True)
class GemmSpec:
    """What a matrix-product kernel computes, whatever its mode.

    ``act``: the fused activation (TFLite's enum); ``kernel``: the window (KH, KW); ``pixels`` x
    ``groups`` of ``width`` channels: a work-item's block. ``sources`` > 1: the input is the
    channel concatenation of ``src_tensor``, ``src_tensor_1``, ... (same batch, height and width;
    every one but the last a whole number of slices), read in place: the slice loop runs over each
    in turn. ``lanes`` < 4: the input is a single slice with that many channels (an image's first
    layer): the padding lanes are not multiplied. ``whole_pixels``: the work-item holds every
    output channel of its pixels (the grid has one group block), and the kernel offers the
    ``PixelOps`` point where an op over a pixel's channels (a softmax) can be linked in.
    """

    act: int
    kernel: tuple[int, int] = (1, 1)
    pixels: int = GEMM_PIXELS
    groups: int = GEMM_GROUPS
    width: int = 8
    sources: int = 1
    lanes: int = 4
    whole_pixels: bool = False

    @property
    def per(self) -> int:
        """Slices per group."""
        return len(SLICE_PARTS[self.width])

    @property
    def names(self) -> list[str]:
        return source_names(self.sources)


def _input_slices(spec: GemmSpec) -> str:
    kh, kw = spec.kernel
    return f"""  int src_slices = {" + ".join(f"args.{name}.Slices()" for name in spec.names)};
  int sstride = args.src_tensor.Offset(0, 0, 1, 0);
  int group_size = {kh * kw} * src_slices * 4;
"""


def _pixel_ops(spec: GemmSpec) -> list[Piece]:
    return [PixelOps(spec.pixels, spec.groups, spec.act, spec.width)] if spec.whole_pixels else []


def _row_setup(spec: GemmSpec) -> str:
    return f"    int at0 = args.dst_tensor.Offset(X0, Y, g0 * {spec.per}, b);\n    int X = X0;\n"


def flat_code(spec: GemmSpec) -> list[Piece]:
    P, G, V = spec.pixels, spec.groups, spec.width
    L: list[Piece] = [
        gemm_head(V)
        + f"""  int npix = W * args.dst_tensor.Height() * B;
  int p0 = GLOBAL_ID_0 * {P};
  int g0 = GLOBAL_ID_1 * {G};
  if (p0 >= npix || g0 >= ngroups) return;
""",
        _input_slices(spec),
    ]
    L += accumulators(P, G, V)
    L += [f"  int o{p} = p0 + {p} < npix ? p0 + {p} : npix - 1;\n" for p in range(P)]
    L += slice_loop("  ", P, G, "w", masked=False, names=spec.names, lanes=spec.lanes, width=V)
    L += _pixel_ops(spec)
    setup = f"    int at0 = p0 + g0 * {spec.per} * dstride;\n    int b = p0 % B;\n    int X = (p0 / B) % W;\n"
    setup += "    int Y = p0 / (B * W);\n"
    L += block_write(spec.act, P, G, f"p0 + {P - 1} < npix", setup, "1", STEP_PIXEL, V)
    # coordinates of the first pixel, then stepped: no division per output
    pixel_loop = f"""  int b = p0 % B; int X = (p0 / B) % W; int Y = p0 / (B * W);
  for (int p = 0; p < {P}; ++p) {{
    if (p0 + p >= npix) break;
"""
    L += spilled_writes(spec.act, P, G, V, pixel_loop)
    L += [STEP_PIXEL, "  }\n}\n"]
    return L


def _row_opening(spec: GemmSpec) -> str:
    P, G = spec.pixels, spec.groups
    return (
        gemm_head(spec.width)
        + f"""  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int g0 = GLOBAL_ID_2 * {G};
  if (gx >= ((W + {P - 1}) / {P}) * B || Y >= args.dst_tensor.Height() || g0 >= ngroups) return;
  int X0 = (gx / B) * {P};
  int b = gx % B;
  int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();
"""
    )


def _row_closing(spec: GemmSpec) -> list[Piece]:
    P, G, V = spec.pixels, spec.groups, spec.width
    L = _pixel_ops(spec)
    L += block_write(spec.act, P, G, f"X0 + {P - 1} < W", _row_setup(spec), "B", "    X += 1;\n", V)
    L += spilled_writes(spec.act, P, G, V, row_pixels(P))
    L.append("  }\n}\n")
    return L


def rows_code(spec: GemmSpec) -> list[Piece]:
    (kh, kw), P, G, V = spec.kernel, spec.pixels, spec.groups, spec.width
    L: list[Piece] = [_row_opening(spec), _input_slices(spec)]
    L += accumulators(P, G, V)
    window = {"names": spec.names, "lanes": spec.lanes, "transposed": False, "width": V}
    # Work-items whose window columns are all inside the input (most of them) skip the checks
    # and masks.
    last = f"(X0 + {P - 1}) * args.stride_w + {kw - 1} * args.dilation_w - args.pad_w"
    L.append(f"  if (X0 * args.stride_w - args.pad_w >= 0 && {last} < iw) {{\n")
    L += _row_window(P, G, kh, kw, interior=True, **window)
    L.append("  } else {\n")
    L += _row_window(P, G, kh, kw, interior=False, **window)
    L.append("  }\n")
    return L + _row_closing(spec)


def transposed_code(spec: GemmSpec) -> list[Piece]:
    (kh, kw), P, G, V = spec.kernel, spec.pixels, spec.groups, spec.width
    L: list[Piece] = [_row_opening(spec), _input_slices(spec)]
    L += accumulators(P, G, V)
    L += _row_window(P, G, kh, kw, spec.names, spec.lanes, transposed=True, interior=False, width=V)
    return L + _row_closing(spec)


def phases_code(spec: GemmSpec) -> list[Piece]:
    (kh, kw), P, G, V = spec.kernel, spec.pixels, spec.groups, spec.width
    L: list[Piece] = [
        gemm_head(V)
        + f"""  int gx = GLOBAL_ID_0;
  int yi = GLOBAL_ID_1;
  int g0 = (GLOBAL_ID_2 / {kh * kw}) * {G};
  int tap = GLOBAL_ID_2 % {kh * kw};
  int iw = args.src_tensor.Width();
  if (gx >= ((iw + {P - 1}) / {P}) * B || yi >= args.src_tensor.Height() || g0 >= ngroups) return;
  int x0 = (gx / B) * {P};
  int b = gx % B;
  int Y = yi * {kh} + tap / {kw};
  int X0 = x0 * {kw} + tap % {kw};
""",
        _input_slices(spec),
    ]
    L += accumulators(P, G, V, after_group="  w{g} += tap * src_slices * 4;\n")
    L.append("  int row = args.src_tensor.Offset(0, yi, 0, b);\n")
    L += [f"  int o{p} = row + (x0 + {p} < iw ? x0 + {p} : iw - 1) * B;\n" for p in range(P)]
    L += slice_loop("  ", P, G, "w", masked=False, names=spec.names, lanes=spec.lanes, width=V)
    L += _pixel_ops(spec)
    L += block_write(spec.act, P, G, f"x0 + {P - 1} < iw", _row_setup(spec), f"{kw} * B", f"    X += {kw};\n", V)
    pixel_loop = f"  for (int p = 0; p < {P}; ++p) {{\n    int X = X0 + p * {kw};\n    if (x0 + p >= iw) break;\n"
    L += spilled_writes(spec.act, P, G, V, pixel_loop)
    L.append("  }\n}\n")
    return L


def _row_window(P: int, G: int, kh: int, kw: int, names: list[str], lanes: int, *, transposed: bool,
                interior: bool, width: int = 8) -> list[str]:  # fmt: skip
    """The window loops of the row mode: per tap, the pixels' input offsets (with a mask for the
    columns outside the input, unless ``interior``), then the slice loop."""
    # the edge path (work-items whose window leaves the input: a row's first and last) is left to
    # the compiler, unrolled only in the interior path and the transposed kernel
    unroll = "  #pragma unroll\n" if kh * kw <= UNROLL_MAX_TAPS and (interior or transposed) else ""
    L = [unroll + _window_row(kh, transposed), f"{unroll}  for (int kx = 0; kx < {kw}; ++kx) {{\n"]
    for p in range(P):
        if transposed:
            L.append(
                f"    int tx{p} = X0 + {p} + args.pad_w - kx; int xc{p} = tx{p} / args.stride_w;\n"
                f"    bool in{p} = tx{p} >= 0 && xc{p} * args.stride_w == tx{p} && xc{p} < iw;\n"
            )
        else:
            L.append(f"    int xc{p} = (X0 + {p}) * args.stride_w + kx * args.dilation_w - args.pad_w;\n")
            if interior:
                L.append(f"    int o{p} = row + xc{p} * B;\n")
                continue
            L.append(f"    bool in{p} = xc{p} >= 0 && xc{p} < iw;\n")
        L.append(
            f"    int o{p} = in{p} ? row + xc{p} * B : row;\n"
            f"    ACCUM_FLT m{p} = in{p} ? (ACCUM_FLT)(1.0f) : (ACCUM_FLT)(0.0f);\n"
        )
    if not interior:
        L.append("    if (!(" + " || ".join(f"in{p}" for p in range(P)) + ")) continue;\n")
    for g in range(G):
        L.append(f"    int t{g} = w{g} + (ky * {kw} + kx) * src_slices * 4;\n")
    L += slice_loop("    ", P, G, "t", masked=not interior, names=names, lanes=lanes, width=width)
    L.append("  }\n  }\n")
    return L


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
