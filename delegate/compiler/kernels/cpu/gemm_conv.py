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

Over a carried int8 / uint8 input (GemmSpec.integer), the flat and rows modes multiply integer
codes with AVX512-VNNI's dot product (gemm_blocks.integer_slice_loop) and hand the writes the
same float accumulators.

Scalar arguments (rows and transposed): ``stride_h/w``, ``dilation_h/w``, ``pad_h/w``. Objects:
``weights`` (pack_gemm_weights), ``biases`` (pack_gemm_biases).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...graph import Carried
from ...kernel import Piece, PixelOps
from ...quant_step import qdq_code
from .gemm_blocks import (
    GEMM_GROUPS,
    GEMM_PIXELS,
    SLICE_PARTS,
    STEP_PIXEL,
    accumulators,
    block_write,
    column_codes,
    dot_fold,
    gemm_head,
    integer_accumulators,
    integer_slice_loop,
    integer_sums,
    lane_accumulators,
    row_pixels,
    skipped_row,
    slice_loop,
    slice_prefetches,
    slice_run,
    source_names,
    spilled_writes,
    vnni,
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
    #: output channels computed as dot products (selectors/gemm.dot_outputs; 0: none)
    dot: int = 0
    #: rows mode: read the input a lane at a time in this ``gemm_blocks.lane_step`` order ("":
    #: a FLT4 per pixel, ``slice_step``)
    order: str = ""
    #: the input is a single slice (the slice loop runs once)
    one_slice: bool = False
    #: flat mode: the input read times the runtime tensor ``gate``, channel by channel
    #: (gemm_blocks.slice_loop)
    gate: bool = False
    #: with ``gate``: the grid the product is rounded onto before the weights meet it (a carried
    #: MUL's output, compiler/quant.py); a FLT4 slice per pixel only (no ``order``)
    gate_grid: Carried | None = None
    #: 16-wide groups (a grouped convolution's 8-wide ones too): the input's grid (a carried int8 /
    #: uint8 tensor, compiler/quant.py) where the product multiplies its integers by the weights'
    #: int8 codes (``integer_slice_loop``)
    integer: Carried | None = None
    #: rows mode over integers with dilation 1 along the row, taps overlapping (KW > stride): the
    #: stride along the row, whose (``pixels`` - 1) x stride + KW input columns of a window row are
    #: converted to codes once, for all its taps (0: each tap converts its own)
    shared_columns: int = 0
    #: flat mode over FLT4 slices: hint the input slice ``gemm_blocks.PREFETCH_SLICES`` ahead of
    #: the one read (``slice_prefetches``), for inputs of more slices than that
    prefetch: bool = False
    #: a grouped convolution (input channels split into groups, each group's outputs reading its
    #: own): the input slices of one group (0: not grouped) and the blocks of ``width`` output
    #: channels each group has; a work-item's ``groups`` blocks lie in one group, whose slices
    #: are all its slice loop reads (``_input_slices``' ``gslice``, the first of them)
    group_slices: int = 0
    group_blocks: int = 0

    @property
    def grouped(self) -> bool:
        """A grouped convolution's product (``group_slices``)."""
        return self.group_slices > 0

    @property
    def per(self) -> int:
        """Slices per group."""
        return len(SLICE_PARTS[self.width])

    @property
    def names(self) -> list[str]:
        return source_names(self.sources)


def _input_slices(spec: GemmSpec) -> str:
    kh, kw = spec.kernel
    if spec.group_slices:
        count = str(spec.group_slices)
        first = f"  int gslice = (g0 / {spec.group_blocks}) * {spec.group_slices};\n"
    else:
        count, first = " + ".join(f"args.{name}.Slices()" for name in spec.names), ""
    return f"""  int src_slices = {count};
  int sstride = args.src_tensor.Offset(0, 0, 1, 0);
  int group_size = {kh * kw} * src_slices * 4;
{first}"""


def _pixel_ops(spec: GemmSpec) -> list[Piece]:
    return [PixelOps(spec.pixels, spec.groups, spec.act, spec.width)] if spec.whole_pixels else []


def _row_setup(spec: GemmSpec) -> str:
    return f"    int at0 = args.dst_tensor.Offset(X0, Y, g0 * {spec.per}, b);\n    int X = X0;\n"


def flat_code(spec: GemmSpec) -> list[Piece]:
    pixels, groups, width = spec.pixels, spec.groups, spec.width
    parts: list[Piece] = [
        gemm_head(width)
        + f"""  int npix = W * args.dst_tensor.Height() * B;
  int p0 = GLOBAL_ID_0 * {pixels};
  int g0 = GLOBAL_ID_1 * {groups};
  if (p0 >= npix || g0 >= ngroups) return;
""",
        _input_slices(spec),
    ]
    if spec.order:
        parts += lane_accumulators(pixels, groups, width)
        # the last block moved back to end on the last pixel (select_gemm gives this order only
        # where npix >= pixels), so that a block's pixels are one offset plus constants, which the
        # compiler folds into the loads (clamped offsets it kept in vector registers and extracted
        # one per load: 1.7x slower); the pixels it shares with the block before are written
        # twice, with the same values
        parts.append(f"  p0 = p0 + {pixels} <= npix ? p0 : npix - {pixels};\n  long o0 = p0;\n")
    elif spec.integer is not None:
        parts += integer_accumulators(pixels, groups, width=width)
        # the last block moved back to end on the last pixel, as the lane order's, so that every
        # block takes the whole-vector writes (a 4x4 layer's third block of 6 took the FLT4 writes);
        # the pixels it shares with the block before are written twice, with the same values
        parts.append(f"  if (npix >= {pixels}) p0 = p0 + {pixels} <= npix ? p0 : npix - {pixels};\n")
        parts += [f"  int o{p} = p0 + {p} < npix ? p0 + {p} : npix - 1;\n" for p in range(pixels)]
    else:
        parts += accumulators(pixels, groups, width, dot=spec.dot)
        parts += [f"  int o{p} = p0 + {p} < npix ? p0 + {p} : npix - 1;\n" for p in range(pixels)]
    consecutive = bool(spec.order)
    rounding = None
    if spec.gate_grid is not None:
        assert not spec.order, "a rounded gate reads FLT4 slices"
        rounding = {width: qdq_code(spec.gate_grid, width=width) for width in (4, 8, 16)}
    if spec.integer is not None:
        parts += integer_slice_loop(pixels, groups, spec.integer, gated=spec.gate, width=width, grouped=spec.grouped)
        parts += integer_sums(pixels, groups, width=width)
    else:
        parts += slice_loop(
            "  ", pixels, groups, "w", False, spec.names, spec.lanes, width, spec.dot, spec.order, consecutive,
            spec.gate, rounding, prefetch=spec.prefetch, grouped=spec.grouped,
        )  # fmt: skip
    parts += dot_fold(pixels, spec.dot)
    parts += _pixel_ops(spec)
    setup = f"    int at0 = p0 + g0 * {spec.per} * dstride;\n    int b = p0 % B;\n    int X = (p0 / B) % W;\n"
    setup += "    int Y = p0 / (B * W);\n"
    parts += block_write(spec.act, pixels, groups, f"p0 + {pixels - 1} < npix", setup, "1", STEP_PIXEL, width)
    # coordinates of the first pixel, then stepped: no division per output
    pixel_loop = f"""  int b = p0 % B; int X = (p0 / B) % W; int Y = p0 / (B * W);
  for (int p = 0; p < {pixels}; ++p) {{
    if (p0 + p >= npix) break;
"""
    parts += spilled_writes(spec.act, pixels, groups, width, pixel_loop)
    parts += [STEP_PIXEL, "  }\n}\n"]
    return parts


def _row_opening(spec: GemmSpec) -> str:
    pixels, groups = spec.pixels, spec.groups
    return (
        gemm_head(spec.width)
        + f"""  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int g0 = GLOBAL_ID_2 * {groups};
  if (gx >= ((W + {pixels - 1}) / {pixels}) * B || Y >= args.dst_tensor.Height() || g0 >= ngroups) return;
  int X0 = (gx / B) * {pixels};
  int b = gx % B;
  int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();
"""
    )


def _row_closing(spec: GemmSpec) -> list[Piece]:
    pixels, groups, width = spec.pixels, spec.groups, spec.width
    parts = _pixel_ops(spec)
    parts += block_write(
        spec.act, pixels, groups, f"X0 + {pixels - 1} < W", _row_setup(spec), "B", "    X += 1;\n", width
    )
    parts += spilled_writes(spec.act, pixels, groups, width, row_pixels(pixels))
    parts.append("  }\n}\n")
    return parts


def _integer_rows(spec: GemmSpec) -> list[Piece]:
    """``rows_code`` over integers (GemmSpec.integer): per window tap the pixels' input offsets,
    a pixel outside the input reading the real zero's codes (``integer_slice_loop``), which the
    correction cancels; a row outside the input is read that way too rather than skipped, as the
    correction counts every tap."""
    (kh, kw), pixels, groups = spec.kernel, spec.pixels, spec.groups
    assert spec.integer is not None
    parts: list[Piece] = [_row_opening(spec), _input_slices(spec)]
    width, grouped = spec.width, spec.grouped
    parts += integer_accumulators(pixels, groups, kh * kw, width)
    if spec.shared_columns:
        return parts + _shared_columns(spec) + integer_sums(pixels, groups, kh, width) + _row_closing(spec)
    parts.append(_integer_window_row(kh, pixels, groups, width))
    parts.append(f"  for (int kx = 0; kx < {kw}; ++kx) {{\n    int t = (ky * {kw} + kx) * src_slices;\n")
    for p in range(pixels):
        parts.append(
            f"    int xc{p} = (X0 + {p}) * args.stride_w + kx * args.dilation_w - args.pad_w;\n"
            f"    bool in{p} = rin && xc{p} >= 0 && xc{p} < iw;\n    int o{p} = in{p} ? row + xc{p} * B : row;\n"
        )
    # a strided 1x1 layer reads each slice once, as the flat mode does: its slices are hinted too
    parts += integer_slice_loop(
        pixels, groups, spec.integer, "    ", "t", masked=True, prefetch=kh * kw == 1, width=width, grouped=grouped
    )
    parts.append("  }\n  }\n")
    return parts + integer_sums(pixels, groups, kh, width) + _row_closing(spec)


def _integer_window_row(kh: int, pixels: int, groups: int, width: int) -> str:
    """Open the integer rows mode's loop over window rows: ``row`` is the input row's linear
    offset, ``rin`` whether it lies inside the input. The correction counts every tap, so a row
    outside adds the sums its padding would (``skipped_row``) where the window has several rows;
    a window of one row is never outside (no padding along it)."""
    opening = f"""  for (int ky = 0; ky < {kh}; ++ky) {{
  int yc = Y * args.stride_h + ky * args.dilation_h - args.pad_h;
  bool rin = yc >= 0 && yc < ih;
"""
    skip = skipped_row(pixels, groups, kh, width) if kh > 1 else ""
    return opening + skip + "  int row = args.src_tensor.Offset(0, rin ? yc : 0, 0, b);\n"


def _shared_columns(spec: GemmSpec) -> list[Piece]:
    """The window loops of ``_integer_rows`` with GemmSpec.shared_columns (the stride s): per window
    row and input slice, the codes of the work-item's (``pixels`` - 1) x s + KW input columns
    (``column_codes``), then each tap kx multiplies pixel p by column p x s + kx: a column is
    converted once instead of once per tap that reads it (KW / s times for most)."""
    (kh, kw), pixels, groups, stride = spec.kernel, spec.pixels, spec.groups, spec.shared_columns
    width, grouped = spec.width, spec.grouped
    assert spec.integer is not None
    columns = (pixels - 1) * stride + kw
    parts: list[Piece] = [_integer_window_row(kh, pixels, groups, width) + f"  int t = ky * {kw} * src_slices;\n"]
    for c in range(columns):
        parts.append(
            f"  int xc{c} = X0 * {stride} + {c} - args.pad_w;\n"
            f"  bool in{c} = rin && xc{c} >= 0 && xc{c} < iw;\n  int o{c} = in{c} ? row + xc{c} * B : row;\n"
        )
    bound, at = slice_run(grouped)
    parts.append(f"  for (int s = 0; s < {bound}; ++s) {{\n")
    parts += slice_prefetches("    ", columns, at)
    parts += column_codes("    ", columns, spec.integer, at=at)
    for kx in range(kw):
        for g in range(groups):
            parts.append(f"    {{ int{width} k = c{g}[t + {kx} * src_slices + s];\n")
            parts += [
                f"      i{g}{p} = {vnni(width)}(i{g}{p}, (int{width})(u{p * stride + kx}), k);\n" for p in range(pixels)
            ]
            parts.append("    }\n")
    parts.append("  }\n  }\n")
    return parts


def rows_code(spec: GemmSpec) -> list[Piece]:
    (kh, kw), pixels, groups, width = spec.kernel, spec.pixels, spec.groups, spec.width
    if spec.integer is not None:
        return _integer_rows(spec)
    parts: list[Piece] = [_row_opening(spec), _input_slices(spec)]
    if spec.order:
        parts += lane_accumulators(pixels, groups, width)
    else:
        parts += accumulators(pixels, groups, width, dot=spec.dot)
    window = {"names": spec.names, "lanes": spec.lanes, "transposed": False, "width": width, "dot": spec.dot,
              "order": spec.order, "one_slice": spec.one_slice, "grouped": spec.grouped}  # fmt: skip
    # Work-items whose window columns are all inside the input (most of them) skip the checks
    # and masks.
    last = f"(X0 + {pixels - 1}) * args.stride_w + {kw - 1} * args.dilation_w - args.pad_w"
    parts.append(f"  if (X0 * args.stride_w - args.pad_w >= 0 && {last} < iw) {{\n")
    parts += _row_window(pixels, groups, kh, kw, interior=True, **window)
    parts.append("  } else {\n")
    parts += _row_window(pixels, groups, kh, kw, interior=False, **window)
    parts.append("  }\n")
    return parts + dot_fold(pixels, spec.dot) + _row_closing(spec)


def transposed_code(spec: GemmSpec) -> list[Piece]:
    (kh, kw), pixels, groups, width = spec.kernel, spec.pixels, spec.groups, spec.width
    parts: list[Piece] = [_row_opening(spec), _input_slices(spec)]
    parts += accumulators(pixels, groups, width, dot=spec.dot)
    parts += _row_window(
        pixels, groups, kh, kw, spec.names, spec.lanes, transposed=True, interior=False, width=width, dot=spec.dot
    )
    return parts + dot_fold(pixels, spec.dot) + _row_closing(spec)


def phases_code(spec: GemmSpec) -> list[Piece]:
    (kh, kw), pixels, groups, width = spec.kernel, spec.pixels, spec.groups, spec.width
    parts: list[Piece] = [
        gemm_head(width)
        + f"""  int gx = GLOBAL_ID_0;
  int yi = GLOBAL_ID_1;
  int g0 = (GLOBAL_ID_2 / {kh * kw}) * {groups};
  int tap = GLOBAL_ID_2 % {kh * kw};
  int iw = args.src_tensor.Width();
  if (gx >= ((iw + {pixels - 1}) / {pixels}) * B || yi >= args.src_tensor.Height() || g0 >= ngroups) return;
  int x0 = (gx / B) * {pixels};
  int b = gx % B;
  int Y = yi * {kh} + tap / {kw};
  int X0 = x0 * {kw} + tap % {kw};
""",
        _input_slices(spec),
    ]
    parts += accumulators(pixels, groups, width, after_group="  w{g} += tap * src_slices * 4;\n", dot=spec.dot)
    parts.append("  int row = args.src_tensor.Offset(0, yi, 0, b);\n")
    parts += [f"  int o{p} = row + (x0 + {p} < iw ? x0 + {p} : iw - 1) * B;\n" for p in range(pixels)]
    parts += slice_loop("  ", pixels, groups, "w", False, spec.names, spec.lanes, width, spec.dot)
    parts += dot_fold(pixels, spec.dot)
    parts += _pixel_ops(spec)
    parts += block_write(
        spec.act, pixels, groups, f"x0 + {pixels - 1} < iw", _row_setup(spec), f"{kw} * B", f"    X += {kw};\n", width
    )
    pixel_loop = f"  for (int p = 0; p < {pixels}; ++p) {{\n    int X = X0 + p * {kw};\n    if (x0 + p >= iw) break;\n"
    parts += spilled_writes(spec.act, pixels, groups, width, pixel_loop)
    parts.append("  }\n}\n")
    return parts


def _row_window(pixels: int, groups: int, kh: int, kw: int, names: list[str], lanes: int, *, transposed: bool,
                interior: bool, width: int = 8, dot: int = 0, order: str = "",
                one_slice: bool = False, grouped: bool = False) -> list[str]:  # fmt: skip
    """The window loops of the row mode: per tap, the pixels' input offsets, then the slice loop.
    Outside ``interior``, a pixel whose input column is outside the input reads the row's first
    pixel instead, and the tap's sums are undone for it: its accumulators are kept before the slice
    loop and put back after it (``_kept_sums``). The transposed kernel and a single input slice
    (no loop to keep registers free in) multiply the inputs by a mask instead."""
    # the edge path (work-items whose window leaves the input: a row's first and last) is left to
    # the compiler, unrolled only in the interior path and the transposed kernel
    unroll = "  #pragma unroll\n" if kh * kw <= UNROLL_MAX_TAPS and (interior or transposed) else ""
    column_unroll = unroll
    if order and one_slice:
        # one slice: the taps of a row would be one block, where the compiler reuses a pixel's
        # input at the next tap (stride < kernel) and hoists loads over the accumulators' registers
        column_unroll = "  #pragma unroll 1\n"
    parts = [unroll + _window_row(kh, transposed), f"{column_unroll}  for (int kx = 0; kx < {kw}; ++kx) {{\n"]
    # lane order: 64-bit offsets, so that a lane's offset (+ 1, + 2, ...) folds into the load's
    # address; 32-bit ones are widened per load, and the registers that takes spill accumulators
    index = "long" if order else "int"
    masked = transposed or one_slice
    for p in range(pixels):
        if transposed:
            parts.append(
                f"    int tx{p} = X0 + {p} + args.pad_w - kx; int xc{p} = tx{p} / args.stride_w;\n"
                f"    bool in{p} = tx{p} >= 0 && xc{p} * args.stride_w == tx{p} && xc{p} < iw;\n"
            )
        else:
            parts.append(f"    int xc{p} = (X0 + {p}) * args.stride_w + kx * args.dilation_w - args.pad_w;\n")
            if interior:
                parts.append(f"    {index} o{p} = row + xc{p} * B;\n")
                continue
            parts.append(f"    bool in{p} = xc{p} >= 0 && xc{p} < iw;\n")
        parts.append(f"    {index} o{p} = in{p} ? row + xc{p} * B : row;\n")
        if masked:
            parts.append(f"    ACCUM_FLT m{p} = in{p} ? (ACCUM_FLT)(1.0f) : (ACCUM_FLT)(0.0f);\n")
    if not interior:
        parts.append("    if (!(" + " || ".join(f"in{p}" for p in range(pixels)) + ")) continue;\n")
    kept = _kept_sums(pixels, groups, width, dot) if not interior and not masked else []
    parts += [f"    {kind} k_{name} = {name};\n" for kind, name, _ in kept]
    if order:  # one run of weights for the work-item's groups (gemm_blocks.lane_accumulators)
        parts.append(f"    long t = w + (ky * {kw} + kx) * src_slices * {4 * groups};\n")
    for g in range(groups if not order else 0):
        parts.append(f"    int t{g} = w{g} + (ky * {kw} + kx) * src_slices * 4;\n")
    parts += slice_loop(
        "    ", pixels, groups, "t", masked and not interior, names, lanes, width, dot, order, grouped=grouped
    )
    for p in range(pixels if kept else 0):
        undo = " ".join(f"{name} = k_{name};" for _, name, pixel in kept if pixel == p)
        parts.append(f"    if (!in{p}) {{ {undo} }}\n")
    parts.append("  }\n  }\n")
    return parts


def _kept_sums(pixels: int, groups: int, width: int, dot: int) -> list[tuple[str, str, int]]:
    """Type, name and pixel of each accumulator a tap's slice loop adds to: the dot products' ``d{p}{c}``
    (selectors/gemm.dot_outputs), else ``a{g}{p}``. Kept aside outside the loop, where the
    register allocator spills them, so the loop holds as many registers as the interior path's;
    a mask multiplied into every input (the earlier edge path) held one more per pixel, which
    spilled accumulators inside the loop (benchmarks/RESULTS.md, "Edge work-items of the matrix
    product")."""
    if dot:
        return [("ACCUM_FLT4", f"d{p}{c}", p) for p in range(pixels) for c in range(dot)]
    return [(f"ACCUM_FLT{width}", f"a{g}{p}", p) for g in range(groups) for p in range(pixels)]


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
