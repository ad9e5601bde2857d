"""Convolution kernels for buffer-backed tensors, written for CPU-like OpenCL devices.

Both kernels address tensors linearly (``Offset`` / ``ReadAt`` / ``WriteAt``, BUFFER and
IMAGE_BUFFER storage) and keep their accumulators in registers. A work-item whose block lies
wholly inside the output writes it at linear indices straight from the accumulators (the fused
activation applied to each FLT8); edge blocks take the standard masked write. Both paths end in
the marker writes (``WRITE_AT`` / ``WRITE``) that elementwise fusion links code in front of.

``gemm_conv_code``: CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV as a matrix product. A
work-item computes ``pixels`` output pixels x ``groups`` groups of 8 output channels, with one
FLT8 accumulator per (group, pixel): on AVX2 that is one register each. Weights are packed by
``pack_gemm_weights`` so that the 8 output channels of a group at one input channel are one FLT8,
and a group's weights are one contiguous run. A 1x1 / stride 1 / unpadded convolution (and a
fully connected layer) reads input pixel p for output pixel p ("flat"): no coordinate math in the
loop at all. The input may be a channel concatenation read in place (``sources``).

``depthwise_code``: DEPTHWISE_CONV_2D with depth multiplier 1 for a given window: a work-item
computes ``pixels`` consecutive output pixels of one row for a pair of slices (FLT8), loading
each input column the window needs once per row. Window size, strides, dilations and padding are
literals, so the compiler unrolls the window completely.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from .. import layout
from .base import WRITE, WRITE_AT, activation_code

#: Default blocking of the matrix-product kernel: 6 (or 5, see gemm_pixels) pixels x 2 groups of 8
#: output channels, 12 FLT8 accumulators. Session 9 measured 5x2 fastest or level on every
#: MobileNetV2 and UNet layer against 3x2, 4x2, 4x3, 2x4, 6x2 and 8x1 (10-20% ahead of 4x2 on the
#: 3x3 ones), but then a lane's FMAs went group by group and blocks of 6x2 or 4x3 spilled an
#: accumulator; pixel by pixel (slice_step) they fit AVX2's 16 registers, and 6x2 ran MobileNetV2
#: and UNet-small 1-1.5% faster than 5x2 (races of whole calls, session 11).
GEMM_PIXELS = 6
#: The other pixel count ``gemm_pixels`` may pick.
GEMM_PIXELS_ALT = 5
GEMM_GROUPS = 2
#: Windows up to this many taps are unrolled in the matrix-product kernel (about 1.6x faster for
#: UNet's 3x3 layers on PoCL than the compiler's own choice), in the interior path only: unrolling
#: the edge path too made UNet-small's persistent program binary 736 instead of 477 KB, its warm
#: load 3.6 ms longer (PoCL parses the binary's bitcode), for 0-2% of latency (session 12).
UNROLL_MAX_TAPS = 25
#: Output pixels per work-item of the depthwise kernel.
DEPTHWISE_PIXELS = 8
#: Largest depthwise window the unrolled kernel is generated for.
DEPTHWISE_MAX_TAPS = 49


def pack_gemm_weights(filters: np.ndarray, dtype: np.dtype, width: int = 8) -> bytes:
    """OHWI filters as FLT8 (``width`` 16: FLT16) rows: (group of ``width`` output channels, ky,
    kx, input channel padded to a multiple of 4) -> the group's output channels. Missing output
    channels are zero."""
    _, kh, kw, _ = filters.shape
    f = layout.pad_channels(filters.astype(np.float32), 3)
    f = layout.pad_channels(f, 0, width)
    groups = f.shape[0] // width
    f = f.reshape(groups, width, kh, kw, f.shape[3])  # (g, o, ky, kx, ci)
    return np.ascontiguousarray(f.transpose(0, 2, 3, 4, 1)).astype(dtype).tobytes()


def pack_gemm_biases(bias: bytes, dtype: np.dtype, width: int = 8) -> bytes:
    """Per-channel biases (as laid out by layout.linear) padded to a multiple of ``width`` channels."""
    values = np.frombuffer(bias, dtype)
    extra = (-len(values)) % width
    return np.concatenate([values, np.zeros(extra, dtype)]).tobytes()


def gemm_pixels(pixels: int) -> int:
    """Pixels per work-item for a row (or flat run) of ``pixels``: GEMM_PIXELS, unless its last
    block pads more than 2% over what GEMM_PIXELS_ALT's would (49 pixels: 9 x 6 = 54 slots
    against 10 x 5 = 50), or 1 for rows shorter than a block."""
    if pixels < GEMM_PIXELS_ALT:
        return 1
    if pixels < GEMM_PIXELS:
        return GEMM_PIXELS_ALT
    slots, alt_slots = (-(-pixels // p) * p for p in (GEMM_PIXELS, GEMM_PIXELS_ALT))
    return GEMM_PIXELS_ALT if slots > 1.02 * alt_slots else GEMM_PIXELS


def gemm_groups(channels: int, width: int = 8) -> int:
    return -(-channels // width)


def gemm_width(channels: int, vector_width: int) -> int:
    """Output channels per group of a matrix-product kernel writing ``channels``: 16 when the
    device wants 16-wide vectors (``EmitContext.vector_width``) and there are more than 8 channels,
    else 8. Padding costs less than half-width vectors: MobileNetV2's 24-channel layers as groups
    of 16 (a third of the lanes padding) ran the model 2.5% faster than as 3 groups of 8 (a race
    of whole calls, session 12)."""
    if vector_width < 16:
        return 8
    return 16 if channels > 8 else 8


#: Components of an accumulator of ``width`` channels, one FLT4 (slice) each, in order.
SLICE_PARTS = {8: ("lo", "hi"), 16: ("s0123", "s4567", "s89ab", "scdef")}


def spill_slices(accumulator: str, first: int, parts: tuple[str, ...]) -> str:
    """Copy ``accumulator``'s slices (``parts``) into ``outs[first]``, ``outs[first + 1]``, ..."""
    return "  " + " ".join(f"outs[{first + h}] = TO_FLT4({accumulator}.{part});" for h, part in enumerate(parts)) + "\n"


#: Items of an output that ``odd_thirds`` picks: pixels x groups of 8 channels.
THIRDS_PIXELS, THIRDS_GROUPS = 4, 3


def odd_thirds(groups: int) -> bool:
    """Does an output of ``groups`` groups of 8 channels take items of THIRDS_PIXELS (4) pixels x
    THIRDS_GROUPS (3) groups (12 accumulators) instead of GEMM_PIXELS x GEMM_GROUPS? Yes for an odd multiple of 3 (24
    channels: 2 groups per item would compute a fourth, padding group, a third more work; 5 x 3
    would not fit AVX2's 16 registers). MobileNetV2's 24-channel projections at 56x56, alone on
    PoCL: 96 -> 24 80-87 against 108-116 us, 144 -> 24 138-164 against 156-165 us."""
    return groups % 2 == 1 and groups % 3 == 0


def _gemm_head(width: int) -> str:
    """Opening of every matrix-product kernel: output batch, width, slices and groups of
    ``width`` / 4 slices."""
    per = width // 4
    return f"""
MAIN_FUNCTION($0) {{
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int dst_slices = args.dst_tensor.Slices();
  int ngroups = (dst_slices + {per - 1}) / {per};
"""


def gemm_conv_code(act: int, *, kernel: tuple[int, int], flat: bool, transposed: bool = False,
                   phases: bool = False, sources: int = 1, lanes: int = 4, whole_pixels: bool = False,
                   pixels: int = GEMM_PIXELS, groups: int = GEMM_GROUPS, width: int = 8) -> str:  # fmt: skip
    """The matrix-product convolution; ``act`` is the fused activation (TFLite's enum).

    Scalar arguments: ``stride_h/w``, ``dilation_h/w``, ``pad_h/w`` (ignored when ``flat``).
    Objects: ``weights`` (FLT8 buffer, pack_gemm_weights), ``biases`` (FLT8 buffer).

    Grids: flat, (ceil(B*H*W / pixels), ceil(groups / per item), 1) over the flat pixel order;
    otherwise (ceil(W / pixels) * B, H, ceil(groups / per item)): a work-item's pixels are
    consecutive on one output row, so a window row is checked once and the pixels' input columns
    are one stride apart. ``transposed``: TRANSPOSE_CONV as a gather: output (X, Y) takes input
    ((X + pad_w - kx) / stride_w, ...) through tap (ky, kx) when the division is exact. A window
    row or tap no pixel of the work-item uses is skipped.

    ``phases`` (TRANSPOSE_CONV with kernel = stride, no padding, output = input x stride): every
    output pixel takes exactly one input pixel through one tap, so each tap is a 1x1 product of
    the input. Grid (ceil(IW / pixels) * B, IH, ceil(groups / per item) * KH * KW): a work-item
    takes ``pixels`` consecutive input pixels of a row through one tap and writes outputs one
    stride apart; no masks, no skipped taps.

    ``sources`` > 1: the input is the channel concatenation of ``src_tensor``, ``src_tensor_1``,
    ... (same batch, height and width; every one but the last a whole number of slices), read in
    place: the slice loop runs over each in turn.

    ``lanes`` < 4: the input is a single slice with that many channels (an image's first layer):
    the padding lanes are not multiplied.

    ``whole_pixels``: the work-item holds every output channel of its pixels (the grid has one
    group block); the code then carries a ``PIXEL_OPS`` marker after the accumulation, where an op
    over a pixel's channels (softmax, see ``pixel_softmax_code``) can be linked in.

    ``width``: output channels per group, 8 (FLT8 accumulators: one AVX2 register) or 16 (FLT16:
    one AVX-512 register); the weights and biases are packed for it.
    """
    kh, kw = kernel
    P, G, V = pixels, groups, width
    parts = SLICE_PARTS[V]
    per = len(parts)
    head = _gemm_head(V)
    if phases:
        L = [
            head
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
"""
        ]
    elif flat:
        L = [
            head
            + f"""  int npix = W * args.dst_tensor.Height() * B;
  int p0 = GLOBAL_ID_0 * {P};
  int g0 = GLOBAL_ID_1 * {G};
  if (p0 >= npix || g0 >= ngroups) return;
"""
        ]
    else:
        L = [
            head
            + f"""  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int g0 = GLOBAL_ID_2 * {G};
  if (gx >= ((W + {P - 1}) / {P}) * B || Y >= args.dst_tensor.Height() || g0 >= ngroups) return;
  int X0 = (gx / B) * {P};
  int b = gx % B;
  int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();
"""
        ]
    names = source_names(sources)
    L.append(
        f"""  int src_slices = {" + ".join(f"args.{name}.Slices()" for name in names)};
  int sstride = args.src_tensor.Offset(0, 0, 1, 0);
  int group_size = {kh * kw} * src_slices * 4;
"""
    )
    for g in range(G):
        L.append(f"  int w{g} = (g0 + {g} < ngroups ? g0 + {g} : ngroups - 1) * group_size;\n")
        L.append(f"  ACCUM_FLT{V} bias{g} = TO_ACCUM_FLT{V}(args.biases.Read(w{g} / group_size));\n")
        for p in range(P):
            L.append(f"  ACCUM_FLT{V} a{g}{p} = bias{g};\n")
        if phases:
            L.append(f"  w{g} += tap * src_slices * 4;\n")
    if phases:
        L.append("  int row = args.src_tensor.Offset(0, yi, 0, b);\n")
        for p in range(P):
            L.append(f"  int o{p} = row + (x0 + {p} < iw ? x0 + {p} : iw - 1) * B;\n")
        L += _slice_loop("  ", P, G, "w", masked=False, names=names, lanes=lanes, width=V)
    elif flat:
        for p in range(P):
            L.append(f"  int o{p} = p0 + {p} < npix ? p0 + {p} : npix - 1;\n")
        L += _slice_loop("  ", P, G, "w", masked=False, names=names, lanes=lanes, width=V)
    elif transposed:
        L += _row_window(P, G, kh, kw, names, lanes, transposed=True, interior=False, width=V)
    else:
        # Work-items whose window columns are all inside the input (most of them) skip the checks
        # and masks: 4-15% faster on UNet's 3x3 layers.
        last = f"(X0 + {P - 1}) * args.stride_w + {kw - 1} * args.dilation_w - args.pad_w"
        L.append(f"  if (X0 * args.stride_w - args.pad_w >= 0 && {last} < iw) {{\n")
        L += _row_window(P, G, kh, kw, names, lanes, transposed=False, interior=True, width=V)
        L.append("  } else {\n")
        L += _row_window(P, G, kh, kw, names, lanes, transposed=False, interior=False, width=V)
        L.append("  }\n")
    if whole_pixels:
        L.append(pixel_ops_marker(P, G, act, V))
    row_setup = f"    int at0 = args.dst_tensor.Offset(X0, Y, g0 * {per}, b);\n    int X = X0;\n"
    if phases:
        L += _gemm_fast_epilogue(act, P, G, f"x0 + {P - 1} < iw", row_setup, f"{kw} * B", f"    X += {kw};\n", V)
    elif flat:
        setup = f"    int at0 = p0 + g0 * {per} * dstride;\n    int b = p0 % B;\n    int X = (p0 / B) % W;\n"
        setup += "    int Y = p0 / (B * W);\n"
        L += _gemm_fast_epilogue(act, P, G, f"p0 + {P - 1} < npix", setup, "1", _STEP_PIXEL, V)
    else:
        L += _gemm_fast_epilogue(act, P, G, f"X0 + {P - 1} < W", row_setup, "B", "    X += 1;\n", V)
    L.append(f"  FLT4 outs[{per * G * P}];\n")
    for g in range(G):
        for p in range(P):
            i = p * per * G + g * per
            L.append(spill_slices(f"a{g}{p}", i, parts))
    activation = activation_code(act)
    if flat:  # coordinates of the first pixel, then stepped: no division per output
        L.append(
            f"""  int b = p0 % B; int X = (p0 / B) % W; int Y = p0 / (B * W);
  for (int p = 0; p < {P}; ++p) {{
    if (p0 + p >= npix) break;
"""
        )
    elif phases:
        L.append(f"  for (int p = 0; p < {P}; ++p) {{\n    int X = X0 + p * {kw};\n    if (x0 + p >= iw) break;\n")
    else:
        L.append(f"  for (int p = 0; p < {P}; ++p) {{\n    int X = X0 + p;\n    if (X >= W) break;\n")
    L.append(
        f"""    for (int j = 0; j < {per * G}; ++j) {{
    int S = g0 * {per} + j;
    if (S >= dst_slices) continue;
    FLT4 result = outs[p * {per * G} + j];
    {activation}
  args.dst_tensor.Write(result, X, Y, S, b);
}}
"""
    )
    if flat:
        L.append(_STEP_PIXEL)
    L.append("  }\n}\n")
    return "".join(L)


_PIXEL_OPS = re.compile(r"  /\* pixel ops: pixels=(\d+) groups=(\d+) activation=(\d+) width=(\d+) \*/\n")


def pixel_ops_marker(P: int, G: int, act: int, width: int = 8) -> str:
    return f"  /* pixel ops: pixels={P} groups={G} activation={act} width={width} */\n"


def _pixel_ops(code: str, channels: int, log: bool) -> tuple[re.Match[str], int, int, int, int] | None:
    """The ``PIXEL_OPS`` marker of ``code`` and its (pixels, groups, activation, width), when a softmax
    over ``channels`` can run there: the work-item holds them all, and a log-softmax meets no
    activation (the epilogue applies the kernel's activation again, which leaves softmax values,
    in [0, 1], unchanged but not log-softmax ones, negative)."""
    found = _PIXEL_OPS.search(code)
    if found is None:
        return None
    P, G, act, V = (int(v) for v in found.groups())
    if channels > V * G or (log and act != 0):
        return None
    return found, P, G, act, V


def accepts_pixel_softmax(code: str, channels: int, log: bool) -> bool:
    return _pixel_ops(code, channels, log) is not None


def pixel_softmax_code(code: str, channels: int, beta: float, log: bool) -> str:
    """``code`` (see ``accepts_pixel_softmax``) with SOFTMAX (or LOG_SOFTMAX) over each pixel's
    ``channels`` applied to the accumulators, after the kernel's own activation."""
    ops = _pixel_ops(code, channels, log)
    if ops is None:
        raise ValueError("the kernel cannot run a softmax over its pixels' channels")
    found, P, G, act, V = ops
    lo, hi = {1: ("0.0f", None), 2: ("-1.0f", "1.0f"), 3: ("0.0f", "6.0f")}.get(act, (None, None))
    L = [f"  // softmax over {channels} channels, beta {beta!r}\n"]
    for p in range(P):
        L.append("  {\n")
        for g in range(G):
            L.append(f"    float{V} x{g} = convert_float{V}(a{g}{p});\n")
            if lo is not None:
                L.append(f"    x{g} = x{g} < (float{V})({lo}) ? (float{V})({lo}) : x{g};\n")
            if hi is not None:
                L.append(f"    x{g} = x{g} > (float{V})({hi}) ? (float{V})({hi}) : x{g};\n")
        L.append("    float m = x0.s0;\n")
        for c in range(1, channels):
            g, lane = divmod(c, V)
            L.append(f"    m = x{g}.s{lane:x} > m ? x{g}.s{lane:x} : m;\n")
        for g in range(G):
            L.append(f"    float{V} z{g} = (x{g} - m) * {float(beta)!r}f;\n    float{V} e{g} = exp(z{g});\n")
        terms = [f"e{c // V}.s{c % V:x}" for c in range(channels)]
        L.append(f"    float sum = {' + '.join(terms)};\n")
        L.append("    float inv = 1.0f / sum;\n    float log_sum = log(sum);\n")
        for g in range(G):
            value = f"z{g} - log_sum" if log else f"e{g} * inv"
            mask = ", ".join("1.0f" if g * V + lane < channels else "0.0f" for lane in range(V))
            L.append(f"    a{g}{p} = TO_ACCUM_FLT{V}(({value}) * (float{V})({mask}));\n")
        L.append("  }\n")
    return code.replace(found.group(0), "".join(L), 1)


#: Advance (X, Y, b) to the next pixel in flat order.
_STEP_PIXEL = "    b += 1;\n    if (b == B) { b = 0; X += 1; if (X == W) { X = 0; Y += 1; } }\n"


def _gemm_fast_epilogue(act: int, P: int, G: int, full: str, setup: str, step: str, next_pixel: str,
                        width: int = 8) -> list[str]:  # fmt: skip
    """Write a whole block (every pixel and output slice of the work-item inside the tensor: the
    condition ``full``) at linear indices, straight from the accumulators, the activation applied
    to each FLT8: about 1.6x faster than the general write on MobileNetV2's wide 1x1 layers.
    ``setup`` defines ``at0`` (index of the first pixel's first slice) and (X, Y, b); pixels are
    ``step`` indices apart and ``next_pixel`` advances (X, Y, b), which stay defined for linked
    ops; the compiler drops them when nothing reads them. ``width``: channels per group."""
    parts = SLICE_PARTS[width]
    per = len(parts)
    L = [
        f"  if ({full} && g0 * {per} + {per * G - 1} < dst_slices) {{\n",
        "    int dstride = args.dst_tensor.Offset(0, 0, 1, 0);\n",
        setup,
    ]
    for p in range(P):
        for g in range(G):
            L.append(f"    FLT{width} r{g}{p} = TO_FLT{width}(a{g}{p});\n")
            activation = activation_code(act, f"r{g}{p}", width=width)
            if activation:
                L.append(f"    {activation}\n")
            for h, half in enumerate(parts):
                j = per * g + h
                L.append(
                    f"  {{\n    int S = g0 * {per} + {j};\n    int at = at0 + {j} * dstride + {p} * {step};\n"
                    f"    FLT4 result = r{g}{p}.{half};\n" + WRITE_AT
                )
        if p < P - 1:
            L.append(next_pixel)
    L.append("    return;\n  }\n")
    return L


def source_names(sources: int) -> list[str]:
    """Kernel names of the input tensors of a matrix-product kernel reading ``sources`` tensors."""
    return ["src_tensor", *(f"src_tensor_{i}" for i in range(1, sources))]


def _slice_loop(indent: str, P: int, G: int, wbase: str, masked: bool, names: list[str], lanes: int = 4,
                width: int = 8) -> list[str]:  # fmt: skip
    """Accumulate every input slice of pixels at offsets o0.. against weights from ``wbase``0.. on,
    through the input tensors ``names`` in turn (same geometry, so the same offsets)."""
    L = []
    for name in names:
        L.append(f"{indent}for (int s = 0; s < args.{name}.Slices(); ++s) {{\n")
        mask = " * m{p}" if masked else ""
        L += slice_step(f"{indent}  ", P, G, wbase, f"args.{name}.ReadAt(o{{p}} + s * sstride)", mask, lanes, width)
        L.append(f"{indent}}}\n")
    return L


def slice_step(indent: str, P: int, G: int, wbase: str, read: str, mask: str = "", lanes: int = 4,
               width: int = 8) -> list[str]:  # fmt: skip
    """One input slice of the matrix product: ``read`` (formatted with ``p``) is the FLT4 of pixel
    p, times ``mask`` (formatted likewise) when given; each lane meets its FLT8 weights of every
    group, read from ``wbase``0.. on, which then step to the next slice."""
    L = []
    for p in range(P):
        L.append(f"{indent}ACCUM_FLT4 v{p} = TO_ACCUM_FLT4({read.format(p=p)}){mask.format(p=p)};\n")
    for k, lane in enumerate("xyzw"[:lanes]):
        for g in range(G):
            L.append(f"{indent}ACCUM_FLT{width} k{g}{k} = TO_ACCUM_FLT{width}(args.weights.Read({wbase}{g} + {k}));\n")
        for p in range(P):
            for g in range(G):
                L.append(f"{indent}a{g}{p} += v{p}.{lane} * k{g}{k};\n")
    for g in range(G):
        L.append(f"{indent}{wbase}{g} += 4;\n")
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
    L += _slice_loop("    ", P, G, "t", masked=not interior, names=names, lanes=lanes, width=width)
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


def row_block_head(P: int, sw: int, pw: int, slice_var: str, slice_init: str) -> str:
    """Opening of a kernel whose work-item computes ``P`` consecutive output pixels of one row:
    ``X0`` (the first pixel), ``Y``, ``b``, the slice ``slice_var`` (= ``slice_init``), the input's
    ``iw`` / ``ih`` and ``xi``, the input column of the block's window (stride ``sw``, padding
    ``pw``). Work-items past the output return."""
    return f"""
MAIN_FUNCTION($0) {{
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int {slice_var} = {slice_init};
  if (gx >= ((W + {P - 1}) / {P}) * B || Y >= args.dst_tensor.Height()) return;
  if ({slice_var} >= args.dst_tensor.Slices()) return;
  int X0 = gx * {P}, b = 0;
  if (B != 1) {{ X0 = (gx / B) * {P}; b = gx % B; }}
  int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();
  int xi = X0 * {sw} - {pw};
"""


def window_row_loads(columns: list[int], load: Callable[[int], str], vtype: str, outside: str) -> list[str]:
    """Declare and load ``r{j}`` for every input column ``xi + j`` one window row needs (``row``:
    the row's linear offset). Work-items away from the left and right edges (most of them) load
    without checks; the others take ``outside`` for columns outside the input."""
    L = ["      " + vtype + " " + ", ".join(f"r{j}" for j in columns) + ";\n"]
    L.append(f"      if (xi >= 0 && xi + {columns[-1]} < iw) {{\n")
    L += [f"        r{j} = {load(j)};\n" for j in columns]
    L.append("      } else {\n")
    L += [f"        r{j} = (xi + {j} >= 0 && xi + {j} < iw) ? {load(j)} : {outside};\n" for j in columns]
    L.append("      }\n")
    return L


def pack_depthwise_weights(filters: np.ndarray, dtype: np.dtype, width: int = 8) -> bytes:
    """[1, KH, KW, C] filters as FLT8 per (pair of slices, ky, kx): the pair's two FLT4 side by
    side; a missing last slice is zero. ``width`` 16: FLT16 per four slices."""
    _, kh, kw, _ = filters.shape
    f = layout.pad_channels(filters[0].astype(np.float32), 2, width).reshape(kh, kw, -1, width // 4, 4)
    return np.ascontiguousarray(f.transpose(2, 0, 1, 3, 4)).astype(dtype).tobytes()


def slice_offsets(width: int, present: str) -> list[str]:
    """Declare ``off1`` .. for ``slice_pack_load``: slice k of the pack is ``off{k}`` indices
    after slice S0 when ``present`` (formatted with ``k``) holds, else 0 (a missing last slice
    read again, its weights zero)."""
    return [
        f"    int off{k} = {present.format(k=k)} ? {k} * args.src_tensor.Offset(0, 0, 1, 0) : 0;\n"
        for k in range(1, width // 4)
    ]


def slice_pack_load(j: int, width: int) -> str:
    """Input column ``xi + j`` of window row ``row`` for slices S0 .. S0 + ``width`` / 4 - 1 (a
    pair: FLT8, or four: FLT16) as one vector, slice k at ``off{k}`` (``slice_offsets``)."""
    at = f"row + (xi + {j}) * B"
    parts = ", ".join(
        f"TO_ACCUM_FLT4(args.src_tensor.ReadAt({at}{f' + off{k}' if k else ''}))" for k in range(width // 4)
    )
    return f"(ACCUM_FLT{width})({parts})"


def depthwise_code(act: int, *, kernel: tuple[int, int], stride: tuple[int, int],
                   dilation: tuple[int, int], pad: tuple[int, int], pixels: int = DEPTHWISE_PIXELS) -> str:  # fmt: skip
    """Depth multiplier 1 depthwise convolution over a pair of slices, the window unrolled.

    A work-item computes ``pixels`` consecutive output pixels of one row for slices S and S + 1 in
    FLT8 accumulators (one AVX register each; about 1.4x faster than one slice in FLT4 on PoCL).
    ``weights``: pack_depthwise_weights; ``biases``: FLT8 per pair (pack_gemm_biases). Grid:
    (ceil(W / pixels) * B, H, ceil(slices / 2)).
    """
    (kh, kw), (sh, sw), (dh, dw), (ph, pw) = kernel, stride, dilation, pad
    P = pixels
    L = [row_block_head(P, sw, pw, "S0", "GLOBAL_ID_2 * 2") + "  bool pair = S0 + 1 < args.dst_tensor.Slices();\n"]
    L += slice_offsets(8, "pair")
    L.append("  ACCUM_FLT8 bias = TO_ACCUM_FLT8(args.biases.Read(S0 / 2));\n")
    for p in range(P):
        L.append(f"  ACCUM_FLT8 a{p} = bias;\n")
    columns = sorted({p * sw + kx * dw for p in range(P) for kx in range(kw)})

    for ky in range(kh):
        L.append(f"  {{\n    int yi = Y * {sh} + {ky * dh - ph};\n    if (yi >= 0 && yi < ih) {{\n")
        L.append("      int row = args.src_tensor.Offset(0, yi, S0, b);\n")
        L += window_row_loads(columns, lambda j: slice_pack_load(j, 8), "ACCUM_FLT8", "(ACCUM_FLT8)(0.0f)")
        for kx in range(kw):
            L.append(
                f"      ACCUM_FLT8 k{kx} = TO_ACCUM_FLT8(args.weights.Read((S0 / 2 * {kh} + {ky}) * {kw} + {kx}));\n"
            )
        for p in range(P):
            for kx in range(kw):
                L.append(f"      a{p} += r{p * sw + kx * dw} * k{kx};\n")
        L.append("    }\n  }\n")
    for p in range(P):
        L.append(f"  FLT8 o{p} = TO_FLT8(a{p});\n")
        activation = activation_code(act, f"o{p}", width=8)
        if activation:
            L.append(f"  {activation}\n")
    # A whole row of pixels inside the tensor: written at linear indices, straight from the registers.
    L.append(
        f"  if (X0 + {P - 1} < W) {{\n    int at0 = args.dst_tensor.Offset(X0, Y, S0, b);\n"
        "    int dstride = args.dst_tensor.Offset(0, 0, 1, 0);\n"
    )
    for p in range(P):
        L.append(
            f"  {{\n    int X = X0 + {p};\n    int S = S0;\n    int at = at0 + {p} * B;\n"
            f"    FLT4 result = o{p}.lo;\n" + WRITE_AT
        )
        L.append(
            f"  if (pair) {{\n    int X = X0 + {p};\n    int S = S0 + 1;\n    int at = at0 + {p} * B + dstride;\n"
            f"    FLT4 result = o{p}.hi;\n" + WRITE_AT
        )
    L.append("    return;\n  }\n")
    L.append(f"  FLT4 outs[{2 * P}];\n")
    for p in range(P):
        L.append(f"  outs[{2 * p}] = o{p}.lo; outs[{2 * p + 1}] = o{p}.hi;\n")
    L.append(
        f"""  for (int i = 0; i < {2 * P}; ++i) {{
    int X = X0 + i / 2;
    if (X >= W) break;
    if (i % 2 == 1 && !pair) continue;
    int S = S0 + i % 2;
    FLT4 result = outs[i];
"""
        + WRITE
        + "}\n"
    )
    return "".join(L)
