"""Building blocks of the matrix-product kernels (gemm_conv.py, and the 1x1 stage of conv_pair.py).

A work-item computes ``pixels`` output pixels x ``groups`` groups of ``width`` (8 or 16) output
channels, with one FLT8 (FLT16) accumulator ``a{g}{p}`` per (group, pixel): on AVX2 (AVX-512)
that is one register each. Weights are packed by ``pack_gemm_weights`` so that a group's output
channels at one input channel are one vector, and a group's weights are one contiguous run. A
work-item whose block lies wholly inside the output writes it at linear indices straight from
the accumulators (``block_write``); edge blocks take the general write (``spilled_writes``).
Both end in the write hooks (``WRITE_AT`` / ``WRITE``) that elementwise fusion links code in
front of.
"""

from __future__ import annotations

import numpy as np

from ... import layout
from ...graph import Carried
from ...kernel import WRITE, WRITE_AT_WIDE, CodesRead, Piece, WideOps
from ...quant_step import codes_code, rounded_codes_code
from ..common.pieces import activation_code

#: Default blocking of the matrix-product kernel: 6 (or 5, see selectors/gemm.gemm_pixels) pixels x 2 groups of 8
#: output channels, 12 FLT8 accumulators: with a lane's FMAs going pixel by pixel (slice_step)
#: they fit AVX2's 16 registers (the choice is measured in benchmarks/RESULTS.md, "Kernel
#: choices").
GEMM_PIXELS = 6
GEMM_GROUPS = 2


def pack_gemm_weights(filters: np.ndarray, dtype: np.dtype, width: int = 8, dot: bool = False, block: int = 1) -> bytes:
    """OHWI filters as FLT8 (``width`` 16: FLT16) rows: (group of ``width`` output channels, ky,
    kx, input channel padded to a multiple of 4) -> the group's output channels. Missing output
    channels are zero. ``dot`` (``width`` 4, see selectors/gemm.dot_outputs): each input slice's 4x4 block
    transposed, so that row j holds output channel j's weights of the slice's 4 input channels.
    ``block`` > 1 (the lane-order kernels, ``lane_step``): the rows of ``block`` consecutive groups
    interleaved, (block of groups, ky, kx, input channel, group in the block), the groups padded
    to a multiple of ``block``: a work-item's weights for one input channel are one run, reached
    through one offset."""
    _, kh, kw, _ = filters.shape
    f = layout.pad_channels(filters.astype(np.float32), 3)
    f = layout.pad_channels(f, 0, width * block)
    groups = f.shape[0] // width
    if block > 1:
        f = f.reshape(groups // block, block, width, kh, kw, f.shape[3])  # (gb, g, o, ky, kx, ci)
        return np.ascontiguousarray(f.transpose(0, 3, 4, 5, 1, 2)).astype(dtype).tobytes()
    f = f.reshape(groups, width, kh, kw, f.shape[3])  # (g, o, ky, kx, ci)
    if dot:
        f = f.reshape(groups, width, kh, kw, f.shape[4] // 4, 4)  # (g, o, ky, kx, slice, lane)
        return np.ascontiguousarray(f.transpose(0, 2, 3, 4, 1, 5)).astype(dtype).tobytes()
    return np.ascontiguousarray(f.transpose(0, 2, 3, 4, 1)).astype(dtype).tobytes()


def dot_fold(pixels: int, dot: int) -> list[str]:
    """Add the dot products' lane sums ``d{p}{c}`` into the accumulators ``a0{p}`` (after the slice loops)."""
    parts: list[str] = []
    for p in range(pixels if dot else 0):
        sums = [f"(d{p}{c}.x + d{p}{c}.y) + (d{p}{c}.z + d{p}{c}.w)" for c in range(dot)]
        sums += ["0.0f"] * (4 - dot)
        parts.append(f"  a0{p} += (ACCUM_FLT4)({', '.join(sums)});\n")
    return parts


def pack_gemm_biases(bias: bytes, dtype: np.dtype, width: int = 8) -> bytes:
    """Per-channel biases (as laid out by layout.linear) padded to a multiple of ``width`` channels."""
    values = np.frombuffer(bias, dtype)
    extra = (-len(values)) % width
    return np.concatenate([values, np.zeros(extra, dtype)]).tobytes()


def gemm_groups(channels: int, width: int = 8) -> int:
    return -(-channels // width)


#: Components of an accumulator of ``width`` channels, one FLT4 (slice) each, in order.
SLICE_PARTS = {4: ("s0123",), 8: ("lo", "hi"), 16: ("s0123", "s4567", "s89ab", "scdef")}


def spill_slices(accumulator: str, first: int, parts: tuple[str, ...]) -> str:
    """Copy ``accumulator``'s slices (``parts``) into ``outs[first]``, ``outs[first + 1]``, ..."""
    return "  " + " ".join(f"outs[{first + h}] = TO_FLT4({accumulator}.{part});" for h, part in enumerate(parts)) + "\n"


#: Items of an output that selectors/gemm.odd_thirds picks: pixels x groups of 8 channels.
THIRDS_PIXELS, THIRDS_GROUPS = 4, 3


def gemm_head(width: int) -> str:
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


#: Advance (X, Y, b) to the next pixel in flat order.
STEP_PIXEL = "    b += 1;\n    if (b == B) { b = 0; X += 1; if (X == W) { X = 0; Y += 1; } }\n"


def block_write(act: int, pixels: int, groups: int, full: str, setup: str, step: str, next_pixel: str, width: int = 8,
                leave: str = "    return;\n") -> list[Piece]:  # fmt: skip
    """Write a whole block (every pixel and output slice of the work-item inside the tensor: the
    condition ``full``) at linear indices, straight from the accumulators, the activation applied
    to each FLT8, which spares the wide layers the spill through ``outs``; linked ops that run on
    whole vectors (kernel.WideOps) run there too, those reading an operand at the pixel's slices
    (a residual ADD) included.
    ``setup`` defines ``at0`` (index of the first pixel's first slice) and (X, Y, b); pixels are
    ``step`` indices apart and ``next_pixel`` advances (X, Y, b), which stay defined for linked
    ops; the compiler drops them when nothing reads them. ``width``: channels per group. ``leave``
    ends the work-item's block (``continue;`` where a work-item loops over several)."""
    parts = SLICE_PARTS[width]
    per = len(parts)
    pieces: list[Piece] = [
        f"  if ({full} && g0 * {per} + {per * groups - 1} < dst_slices) {{\n",
        "    int dstride = args.dst_tensor.Offset(0, 0, 1, 0);\n",
        setup,
    ]
    for p in range(pixels):
        for g in range(groups):
            pieces.append(f"    FLT{width} r{g}{p} = TO_FLT{width}(a{g}{p});\n")
            activation = activation_code(act, f"r{g}{p}", width=width)
            if activation:
                pieces.append(f"    {activation}\n")
            pieces.append(WideOps(f"r{g}{p}", width, f"g0 * {per} + {per * g}"))
            for h, half in enumerate(parts):
                j = per * g + h
                pieces.append(
                    f"  {{\n    int S = g0 * {per} + {j};\n    int at = at0 + {j} * dstride + {p} * {step};\n"
                    f"    FLT4 result = r{g}{p}.{half};\n"
                )
                pieces.append(WRITE_AT_WIDE)
        if p < pixels - 1:
            pieces.append(next_pixel)
    pieces.append(leave + "  }\n")
    return pieces


def source_names(sources: int) -> list[str]:
    """Kernel names of the input tensors of a matrix-product kernel reading ``sources`` tensors."""
    return ["src_tensor", *(f"src_tensor_{i}" for i in range(1, sources))]


def slice_loop(indent: str, pixels: int, groups: int, wbase: str, masked: bool, names: list[str], lanes: int = 4,
               width: int = 8, dot: int = 0, order: str = "", consecutive: bool = False,
               gate: bool = False, gate_rounding: dict[int, str] | None = None,
               prefetch: bool = False, grouped: bool = False) -> list[str]:  # fmt: skip
    """Accumulate every input slice of pixels at offsets o0.. against weights from ``wbase``0.. on,
    through the input tensors ``names`` in turn (same geometry, so the same offsets). ``lanes`` < 4:
    a single input of one slice, read without a loop (its bound is a run-time value the compiler
    cannot see is 1). ``order`` (``lane_step``): read the inputs one lane at a time, the slice
    loop kept rolled (unrolled, the compiler hoists the next slice's loads over the registers
    the accumulators need). ``consecutive`` (with ``order``): the pixels are o0, o0 + 1, ..., read
    at one offset plus constants. ``gate`` (one input of four lanes, batch 1): the input is
    multiplied channel by channel by the runtime tensor ``gate`` ([1, 1, 1, C], a squeeze-excite
    block's gate): the steps scale each lane's weights by it, (x * g) . k as x . (g * k), a vector
    product per group rather than one per pixel (the dot products scale their inputs).
    ``gate_rounding`` (with ``gate``, FLT4 slices only: no ``order``): per width 4, 8 and 16,
    statements rounding FLT``width`` ``result`` onto the grid of the product x * g (a carried
    MUL's output, compiler/quant.py): each input slice is multiplied and rounded as the MUL's
    kernel would write it, then read (``rounded_slices``). ``prefetch`` (one input ``src_tensor``,
    FLT4 slices): hint the slices ``slice_prefetches`` ahead. ``grouped`` (one input): the loop
    runs over the ``src_slices`` slices from ``gslice`` on, a grouped convolution's group
    (gemm_conv.GemmSpec.group_slices)."""
    mask = " * m{p}" if masked else ""
    if lanes < 4:
        (name,) = names
        if order:
            pixel = "o0 + {p}" if consecutive else "o{p}"
            return lane_step(indent, pixels, groups, wbase, f"args.{name}.ReadLaneAt({pixel}, {{lane}})", mask, lanes,
                             width, order)  # fmt: skip
        return slice_step(indent, pixels, groups, wbase, f"args.{name}.ReadAt(o{{p}})", mask, lanes, width, dot)
    parts = []
    for name in names:
        if order:
            parts.append(f"{indent}#pragma unroll 1\n")
        bounds = "int s = gslice; s < gslice + src_slices" if grouped else f"int s = 0; s < args.{name}.Slices()"
        parts.append(f"{indent}for ({bounds}; ++s) {{\n")
        if prefetch and not order:
            parts += slice_prefetches(f"{indent}  ", pixels)
        if gate:
            parts.append(f"{indent}  FLT4 gs = args.gate.Read(0, 0, s, 0);\n")
        if order:
            pixel = "(o0 + {p}) + s * sstride" if consecutive else "o{p} + s * sstride"
            read = f"args.{name}.ReadLaneAt({pixel}, {{lane}})"
            parts += lane_step(f"{indent}  ", pixels, groups, wbase, read, mask, lanes, width, order, gate)
        else:
            read = f"args.{name}.ReadAt(o{{p}} + s * sstride)"
            parts += slice_step(
                f"{indent}  ", pixels, groups, wbase, read, mask, lanes, width, dot, gate, gate_rounding
            )
        parts.append(f"{indent}}}\n")
    return parts


#: ``lane_step`` orders: each lane's pixel inputs first, then each group's weights (pixels <=
#: groups), or each group's weights first, then each pixel's input (pixels > groups)
PIXELS_FIRST, WEIGHTS_FIRST = "pixels", "weights"


def lane_step(indent: str, pixels: int, groups: int, wbase: str, read: str, mask: str, lanes: int, width: int,
              order: str, gated: bool = False) -> list[str]:  # fmt: skip
    """One input slice of the matrix product, a lane at a time: ``read`` (formatted with ``p`` and
    ``lane``) is the scalar input of pixel p, lane ``lane``. Written in the order its registers
    are live: per lane, PIXELS_FIRST holds the pixels' inputs and one weight vector at a time,
    WEIGHTS_FIRST the groups' weights and one input at a time, besides the pixels x groups
    accumulators (selectors/gemm.row_blocking keeps the sum within the vector registers). Reading a whole
    FLT4 per pixel instead lets the compiler hoist every lane's broadcast of every pixel ahead of
    the products, which spills accumulators (benchmarks/RESULTS.md, "Lane-order matrix products")."""
    parts = []
    for lane in range(lanes):
        value = [f"TO_ACCUM_FLT({read.format(p=p, lane=lane)}){mask.format(p=p)}" for p in range(pixels)]
        # a gated read (slice_loop): the lane's weights times its gate
        scale = f" * TO_ACCUM_FLT(gs.{'xyzw'[lane]})" if gated else ""
        weights = [
            f"TO_ACCUM_FLT{width}(args.weights.Read({wbase} + {lane * groups + g})){scale}" for g in range(groups)
        ]
        parts.append(f"{indent}{{\n")
        if order == PIXELS_FIRST:
            parts += [f"{indent}  ACCUM_FLT x{p} = {value[p]};\n" for p in range(pixels)]
            for g in range(groups):
                parts.append(f"{indent}  {{ ACCUM_FLT{width} k = {weights[g]};\n")
                parts += [f"{indent}    a{g}{p} += x{p} * k;\n" for p in range(pixels)]
                parts.append(f"{indent}  }}\n")
        else:
            parts += [f"{indent}  ACCUM_FLT{width} k{g} = {weights[g]};\n" for g in range(groups)]
            for p in range(pixels):
                parts.append(f"{indent}  {{ ACCUM_FLT x = {value[p]};\n")
                parts += [f"{indent}    a{g}{p} += x * k{g};\n" for g in range(groups)]
                parts.append(f"{indent}  }}\n")
        parts.append(f"{indent}}}\n")
    parts.append(f"{indent}{wbase} += {4 * groups};\n")
    return parts


def lane_accumulators(pixels: int, groups: int, width: int) -> list[str]:
    """The lane-order kernels' ``accumulators``: ``w``, the offset of the work-item's block of
    weights (``pack_gemm_weights`` with ``block`` = ``groups``), and per group g its ``pixels``
    accumulators ``a{g}{p}``, set to its biases (padded to whole blocks)."""
    parts = [f"  long w = (long)(g0 / {groups}) * {groups} * group_size;\n"]
    for g in range(groups):
        parts.append(f"  ACCUM_FLT{width} bias{g} = TO_ACCUM_FLT{width}(args.biases.Read(g0 + {g}));\n")
        parts += [f"  ACCUM_FLT{width} a{g}{p} = bias{g};\n" for p in range(pixels)]
    return parts


def rounded_slices(indent: str, pixels: int, read: str, mask: str, rounding: dict[int, str]) -> list[str]:
    """The ``pixels`` FLT4 inputs ``v{p}`` of a slice step, each ``read`` (formatted with ``p``)
    times slice_loop's gate ``gs`` in FLT, as the MUL's kernel computes the product, and rounded
    by ``rounding`` (per width: statements on FLT``width`` ``result``): the weights then meet the
    values the MUL's kernel would have written. The pixels go four (two, one) to a vector, whose
    rounding costs what a FLT4's does on a CPU device."""
    parts = []
    first = 0
    while first < pixels:
        count = 4 if pixels - first >= 4 else 2 if pixels - first >= 2 else 1
        width = 4 * count
        ps = range(first, first + count)
        joined = ", ".join(read.format(p=p) for p in ps)
        parts.append(
            f"{indent}FLT{width} gx{first} = (FLT{width})({joined}) * (FLT{width})({', '.join(['gs'] * count)});\n"
        )
        parts.append(f"{indent}{{ FLT{width} result = gx{first};\n{rounding[width]}{indent}  gx{first} = result; }}\n")
        for k, p in enumerate(ps):
            part = SLICE_PARTS[width][k] if width > 4 else ""
            value = f"gx{first}.{part}" if part else f"gx{first}"
            parts.append(f"{indent}ACCUM_FLT4 v{p} = TO_ACCUM_FLT4({value}){mask.format(p=p)};\n")
        first += count
    return parts


def slice_step(indent: str, pixels: int, groups: int, wbase: str, read: str, mask: str = "", lanes: int = 4,
               width: int = 8, dot: int = 0, gated: bool = False,
               gate_rounding: dict[int, str] | None = None) -> list[str]:  # fmt: skip
    """One input slice of the matrix product: ``read`` (formatted with ``p``) is the FLT4 of pixel
    p, times ``mask`` (formatted likewise) when given; each lane meets its FLT8 weights of every
    group, read from ``wbase``0.. on, which then step to the next slice. ``dot``: the slice meets
    the weights of each of the ``dot`` output channels in one product (selectors/gemm.dot_outputs).
    ``gated``: the input is multiplied by slice_loop's gate, and rounded by ``gate_rounding``."""
    if gated and gate_rounding is not None:
        # the inputs already carry the gate (rounded as the MUL writes them): the weights are not scaled
        parts = rounded_slices(indent, pixels, read, mask, gate_rounding)
        gated = False
    else:
        # gated (slice_loop's gate, ``gs``): the dot products scale their inputs, the others each
        # lane's weights, a product per group rather than per pixel (scaling the inputs measured
        # 1.6x the ungated kernel's time in blocks of 4 pixels x 3 groups; the weights, about the same)
        scale = " * TO_ACCUM_FLT4(gs)" if gated and dot else ""
        parts = [
            f"{indent}ACCUM_FLT4 v{p} = TO_ACCUM_FLT4({read.format(p=p)}){mask.format(p=p)}{scale};\n"
            for p in range(pixels)
        ]
    if dot:
        for c in range(dot):
            parts.append(f"{indent}ACCUM_FLT4 k{c} = TO_ACCUM_FLT4(args.weights.Read({wbase}0 + {c}));\n")
            parts += [f"{indent}d{p}{c} += v{p} * k{c};\n" for p in range(pixels)]
        return [*parts, f"{indent}{wbase}0 += 4;\n"]
    for k, lane in enumerate("xyzw"[:lanes]):
        scale = f" * TO_ACCUM_FLT(gs.{lane})" if gated else ""
        for g in range(groups):
            parts.append(
                f"{indent}ACCUM_FLT{width} k{g}{k} = TO_ACCUM_FLT{width}(args.weights.Read({wbase}{g} + {k})){scale};\n"
            )
        for p in range(pixels):
            for g in range(groups):
                parts.append(f"{indent}a{g}{p} += v{p}.{lane} * k{g}{k};\n")
    for g in range(groups):
        parts.append(f"{indent}{wbase}{g} += 4;\n")
    return parts


def accumulators(pixels: int, groups: int, width: int, after_group: str = "", dot: int = 0) -> list[str]:
    """Per group g of the work-item: ``w{g}``, the offset of its weights (the last group's for
    groups past ``ngroups``, whose results are never written), and its ``pixels`` accumulators
    ``a{g}{p}``, set to its biases; then ``after_group`` (formatted with ``g``). ``dot``: the
    dot products' accumulators ``d{p}{c}`` too, zero."""
    parts = [f"  ACCUM_FLT4 d{p}{c} = INIT_ACCUM_FLT4(0.0f);\n" for p in range(pixels) for c in range(dot)]
    for g in range(groups):
        parts.append(f"  int w{g} = (g0 + {g} < ngroups ? g0 + {g} : ngroups - 1) * group_size;\n")
        parts.append(f"  ACCUM_FLT{width} bias{g} = TO_ACCUM_FLT{width}(args.biases.Read(w{g} / group_size));\n")
        for p in range(pixels):
            parts.append(f"  ACCUM_FLT{width} a{g}{p} = bias{g};\n")
        if after_group:
            parts.append(after_group.format(g=g))
    return parts


def pack_integer_weights(values: np.ndarray, scales: np.ndarray, grid: Carried, width: int = 16,
                         rows: bool = False) -> tuple[bytes, bytes]:  # fmt: skip
    """The integer product's objects (``integer_slice_loop``) for OHWI int8 ``values`` with
    per-output-channel weight ``scales``, over an input on ``grid``: ``weights``, per group of
    ``width`` output channels, tap (ky, kx) and input slice, the group's codes of the slice's 4
    input channels (channel-major: one int32 lane per output channel, as the dot product reads
    them), the input channels padded with zeros to whole slices; ``params``, per group its
    channels' real scale (input scale x weight scale, float32) then their integer correction
    (int32): the input's codes are offset by ``zero_point - low`` to make them unsigned (a padded
    input pixel reads as that offset, the real zero), which adds that times the sum of a channel's
    codes to its sum. ``rows`` (a window of several rows): then per window row ky the sum a row of
    padding adds, that offset times the sum of the row's codes (int32), which a work-item adds in
    place of reading a row outside the input (``skipped_row``)."""
    cout, kh, kw, cin = values.shape
    q = values.reshape(cout, kh * kw, cin).astype(np.int8)
    q = np.pad(q, ((0, (-cout) % width), (0, 0), (0, (-cin) % 4)))
    groups = q.shape[0] // width
    codes = q.reshape(groups, width, kh * kw, q.shape[2] // 4, 4).transpose(0, 2, 3, 1, 4)
    offset = grid.zero_point - grid.low
    real = np.zeros(q.shape[0], np.float32)
    real[:cout] = (np.float64(grid.scale) * np.asarray(scales, np.float64)).astype(np.float32)
    correction = (-offset * q.astype(np.int64).sum(axis=(1, 2))).astype(np.int32)
    blocks = [real.reshape(groups, width).view(np.int32), correction.reshape(groups, width)]
    if rows:
        per_row = q.astype(np.int64).reshape(q.shape[0], kh, kw * q.shape[2]).sum(axis=2)  # (o, ky)
        blocks += [(offset * per_row[:, ky]).astype(np.int32).reshape(groups, width) for ky in range(kh)]
    params = np.concatenate(blocks, axis=1)
    return np.ascontiguousarray(codes).tobytes(), np.ascontiguousarray(params).tobytes()


def integer_accumulators(pixels: int, groups: int, taps: int = 1, width: int = 16) -> list[str]:
    """The integer product's ``accumulators``: per group g of ``width`` channels of the work-item
    ``n{g}`` (its index, the last group's for groups past ``ngroups``), ``c{g}``, its codes
    (``taps`` window taps of every input slice), and its ``pixels`` int32 sums ``i{g}{p}``."""
    parts = [f"  __global const int{width}* codes = (__global const int{width}*)args.weights.GetPtr();\n"]
    for g in range(groups):
        parts.append(f"  int n{g} = g0 + {g} < ngroups ? g0 + {g} : ngroups - 1;\n")
        # a pointer per group: its taps' and slices' offsets are then one index shared by the
        # groups, where a sign-extended int index per group cost each load five instructions
        parts.append(f"  __global const int{width}* c{g} = codes + n{g} * {taps} * src_slices;\n")
        parts += [f"  int{width} i{g}{p} = (int{width})(0);\n" for p in range(pixels)]
    return parts


def integer_slice_loop(pixels: int, groups: int, grid: Carried, indent: str = "  ", tap: str = "",
                       masked: bool = False, prefetch: bool = False, gated: bool = False, width: int = 16,
                       grouped: bool = False) -> list[Piece]:  # fmt: skip
    """Every input slice of pixels at offsets o0.. times the codes of the work-item's groups, in
    integers: a pixel's FLT4 (real values on ``grid``) back to its four codes, made unsigned
    (``pack_integer_weights``) and packed into one int, then per group one AVX512-VNNI dot product
    (``width`` lanes, 16 or 8, each the sum of four u8 x s8 products) into each pixel's sums.
    Exact, as TFLite's int32 accumulators. ``tap``: the offset of the window tap's codes past each
    group's; ``masked``: a pixel whose ``in{p}`` is false reads the real zero's codes (padding);
    ``prefetch``: hint the slices ahead with a ``tap`` too (a window of one tap); ``gated``: the
    input is a squeeze-excite MUL's output read as its operands (``gated_codes``); ``grouped``: the
    ``src_slices`` input slices from ``gslice`` on, a grouped convolution's group."""
    bound, read_slice = slice_run(grouped)
    parts: list[Piece] = [f"{indent}for (int s = 0; s < {bound}; ++s) {{\n"]
    if not tap or prefetch:
        parts += slice_prefetches(f"{indent}  ", pixels, read_slice)
    if gated:
        assert not masked and not grouped, "a gated read is the flat mode's, over every slice"
        parts += gated_codes(f"{indent}  ", pixels, grid)
    else:
        parts += column_codes(f"{indent}  ", pixels, grid, masked, read_slice)
    at = f"{tap} + " if tap else ""
    parts += [f"{indent}  int{width} k{g} = c{g}[{at}s];\n" for g in range(groups)]
    # pixel by pixel, each pixel's broadcast codes meeting every group's weights: one broadcast
    # live at a time beside the groups' weights (group by group kept every pixel's broadcast
    # live, and the accumulators no longer fit AVX-512's 32 registers: rotations and spills)
    for p in range(pixels):
        parts += [f"{indent}  i{g}{p} = {vnni(width)}(i{g}{p}, (int{width})(u{p}), k{g});\n" for g in range(groups)]
    parts.append(f"{indent}}}\n")
    return parts


def vnni(width: int) -> str:
    """The dot product's builtin for ``width`` int32 lanes (AVX512-VNNI; its 256-bit form with VL)."""
    return f"__builtin_ia32_vpdpbusd{32 * width}"


def slice_run(grouped: bool) -> tuple[str, str]:
    """An integer slice loop's bound and the input slice of its index ``s``: a grouped
    convolution's group's ``src_slices`` from ``gslice`` on, or every slice."""
    return ("src_slices", "(gslice + s)") if grouped else ("args.src_tensor.Slices()", "s")


def gated_codes(indent: str, pixels: int, grid: Carried) -> list[str]:
    """``u0``.. as ``column_codes`` makes them, of slice ``s`` of a MUL(x, g) output on ``grid``
    read through its operands: each pixel's x times the slice's gate, in FLT as the MUL's kernel
    computes it, rounded onto ``grid`` as that kernel rounds it (quant_step.rounded_codes_code):
    the codes of the value it would have written. The pixels go four (two, one) to a vector."""
    parts = [f"{indent}FLT4 gs = args.gate.Read(0, 0, s, 0);\n"]
    first = 0
    while first < pixels:
        count = 4 if pixels - first >= 4 else 2 if pixels - first >= 2 else 1
        width = 4 * count
        joined = ", ".join(f"args.src_tensor.ReadAt(o{p} + s * sstride)" for p in range(first, first + count))
        product = f"(FLT{width})({joined}) * (FLT{width})({', '.join(['gs'] * count)})"
        block = rounded_codes_code(product, grid, width, f"ug{first}")
        parts.append("".join(f"{indent}{line[2:]}\n" for line in block.splitlines()))
        for k, p in enumerate(range(first, first + count)):
            parts.append(f"{indent}int u{p} = ug{first}{f'.s{k}' if count > 1 else ''};\n")
        first += count
    return parts


#: Input slices ahead that ``slice_prefetches`` asks for.
PREFETCH_SLICES = 4


def slice_prefetches(indent: str, pixels: int, at: str = "s") -> list[str]:
    """Prefetch hints for the input slice PREFETCH_SLICES ahead of ``s`` at offsets ``o0``..: the
    slice planes lie a plane apart in memory, further than the hardware prefetchers look, so each
    slice's lines are otherwise fetched when the loads reach them (measured 0.75x the time of a
    flat 64x64-pixel 256 -> 64 product without them). One hint per 64-byte line the pixels span
    (every fourth pixel and the last: consecutive FLT4 offsets in the flat mode)."""
    hinted = sorted({*range(0, pixels, 4), pixels - 1})
    return [f"{indent}args.src_tensor.PrefetchAt(o{p} + ({at} + {PREFETCH_SLICES}) * sstride);\n" for p in hinted]


def column_codes(indent: str, count: int, grid: Carried, masked: bool = True, at: str = "s") -> list[Piece]:
    """``u0``.. ``u{count - 1}``: the codes of input slice ``s`` at offsets ``o0``.. (real values on
    ``grid``), made unsigned and packed four to an int (``pack_integer_weights``): converted from
    the carried floats, or loaded where the input carries codes (kernel.CodesRead, codes.py);
    ``masked``: a pixel whose ``in{c}`` is false reads the real zero's codes (padding); ``at``: the
    input slice read."""
    # the four codes' bit pattern as a signed int: a literal past INT_MAX would make the compiler
    # warn on every line, and PoCL prints its count on stderr
    zero = int(np.uint32((grid.zero_point - grid.low) * 0x01010101).view(np.int32))
    converted, loaded, masks = [], [], []
    for c in range(count):
        real = f"convert_float4(args.src_tensor.ReadAt(o{c} + {at} * sstride))"
        converted.append(f"{indent}int u{c} = as_int(convert_uchar4({codes_code(real, grid)}));\n")
        loaded.append(f"{indent}int u{c} = args.src_tensor.CodesAt(o{c} + {at} * sstride);\n")
        if masked:
            masks.append(f"{indent}u{c} = in{c} ? u{c} : {zero};\n")
    return [CodesRead("".join(converted), "".join(loaded)), *masks]


def integer_params(rows: int) -> int:
    """Vectors of ``params`` per group (``pack_integer_weights``): scales and corrections, then one
    per window row where the rows' sums are there (``rows`` > 1)."""
    return 2 + (rows if rows > 1 else 0)


def skipped_row(pixels: int, groups: int, rows: int, width: int = 16) -> str:
    """In a window-row loop over ``rows`` rows (``ky``) with ``rin`` (the row lies inside the
    input): a row outside adds the sums its padding would (``pack_integer_weights``, ``rows``) and
    is not read, the same int32 sums for less work (a 4x4-pixel 3x3 layer reads 2 rows of 12 so)."""
    step = integer_params(rows)
    parts = [f"  if (!rin) {{\n    __global const int{width}* rq = (__global const int{width}*)args.params.GetPtr();\n"]
    for g in range(groups):
        parts.append(f"    {{ int{width} r = rq[{step} * n{g} + 2 + ky];")
        parts.append("".join(f" i{g}{p} += r;" for p in range(pixels)) + " }\n")
    parts.append("    continue;\n  }\n")
    return "".join(parts)


def integer_sums(pixels: int, groups: int, rows: int = 1, width: int = 16) -> list[str]:
    """The float accumulators ``a{g}{p}`` the writes take, from the integer sums: corrected
    (``pack_integer_weights``; ``rows``: the window's, which sets where each group's are), times
    the channels' real scales, plus the biases."""
    step = integer_params(rows)
    w = width
    parts = [f"  __global const int{w}* qp = (__global const int{w}*)args.params.GetPtr();\n"]
    for g in range(groups):
        parts.append(
            f"  float{w} scale{g} = as_float{w}(qp[{step} * n{g}]);\n  int{w} corr{g} = qp[{step} * n{g} + 1];\n"
            f"  ACCUM_FLT{w} bias{g} = TO_ACCUM_FLT{w}(args.biases.Read(n{g}));\n"
        )
        parts += [
            f"  ACCUM_FLT{w} a{g}{p} = TO_ACCUM_FLT{w}(convert_float{w}(i{g}{p} + corr{g}) * scale{g}) + bias{g};\n"
            for p in range(pixels)
        ]
    return parts


def row_pixels(pixels: int) -> str:
    """Open the loop over a block's ``pixels`` pixels, consecutive from ``X0`` on one row."""
    return f"  for (int p = 0; p < {pixels}; ++p) {{\n    int X = X0 + p;\n    if (X >= W) break;\n"


def spilled_writes(act: int, pixels: int, groups: int, width: int, pixel_loop: str) -> list[Piece]:
    """The general write of a block: the accumulators spilled to ``outs``, then for each pixel
    (``pixel_loop`` opens the loop and sets ``X``, ``Y``, ``b``) every slice inside the tensor,
    activated, through the masked write; the pixel loop is left open."""
    parts = SLICE_PARTS[width]
    per = len(parts)
    pieces: list[Piece] = [f"  FLT4 outs[{per * groups * pixels}];\n"]
    for g in range(groups):
        for p in range(pixels):
            pieces.append(spill_slices(f"a{g}{p}", p * per * groups + g * per, parts))
    pieces.append(pixel_loop)
    pieces.append(
        f"""    for (int j = 0; j < {per * groups}; ++j) {{
    int S = g0 * {per} + j;
    if (S >= dst_slices) continue;
    FLT4 result = outs[p * {per * groups} + j];
    {activation_code(act)}
"""
    )
    pieces.append(WRITE)
    return pieces
