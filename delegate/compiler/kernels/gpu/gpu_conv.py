"""The gpu kernel family's templates (CompileOptions.kernel_family): CONV_2D, FULLY_CONNECTED and
DEPTHWISE_CONV_2D shaped for GPUs, where the cpu family's blocks of pixels x channel groups in
registers leave most of a GPU's lanes idle (benchmarks/RESULTS.md, H200). selectors/gpu.py picks
which one a node gets and its ``GpuTile`` and launch.

- ``tiled_conv_body`` (``GPU_DIRECT``): a work-item computes ``pixels`` (1-2) consecutive output
  pixels of a row x ``blocks`` (1-4) output slices; a work-group is ``gpu_work_group`` work-items
  over a patch of pixels, all of one block of output slices, so they share its weights: the
  input-slice loop runs in tiles whose weights the work-group loads into local memory together
  (coalesced, one barrier-synchronised tile at a time), and every work-item reads them from
  there. Adjacent work-items read adjacent input pixels of one slice (coalesced). Grid
  (ceil(W / pixels) * B, H, ceil(slices / blocks)); the kernel requires its work-group size (the
  tile is shared by it).
- ``reduction_body`` (``GPU_REDUCTION``): a fully connected layer or a 1x1 convolution over few
  pixels (a classifier head, a squeeze-and-excite block): a work-group of up to
  ``gpu_work_group`` work-items splits one output slice's input slices, then sums its parts in
  local memory. Grid (R, pixels, slices).
- ``depthwise_body`` (``GPU_DEPTHWISE``, depth multiplier 1): a work-item per output pixel x
  slice, the window unrolled; the work-group's items share a slice, so its weights are one
  broadcast read each. No local memory and no required size: the runtime's tuning may pick its
  work-group.

Every kernel writes through the write hook, so elementwise ops link into it as into the cpu ones.
Shapes, strides and paddings are literals, so the OpenCL compiler folds the coordinate math.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import layout
from ...kernel import ENTRY, WRITE, Piece
from ..common.pieces import HEAD, activation_code

#: (input height, width), (output height, width) of a kernel's window
Extents = tuple[tuple[int, int], tuple[int, int]]


@dataclass(frozen=True)
class GpuTile:
    """The blocking of a ``tiled_conv_body`` kernel: ``pixels`` x ``blocks`` output slices per
    work-item, input slices in tiles of ``tile_slices`` whose weights the work-group holds in
    local memory, ``lanes`` input channels of a slice multiplied (fewer than 4: a single-slice
    input, its padding lanes skipped)."""

    pixels: int
    blocks: int
    tile_slices: int
    lanes: int


def pack_tile_weights(filters: np.ndarray, blocks: int, dtype: np.dtype) -> bytes:
    """OHWI ``filters`` as FLT4s of 4 output channels, ordered (block, input slice, tap, slice in
    block, input lane): a tile of consecutive input slices of one block is one contiguous range."""
    cout, kh, kw, cin = filters.shape
    nblk = -(-layout.slices(cout) // blocks)
    padded = np.zeros((nblk * blocks * 4, kh, kw, layout.slices(cin) * 4), np.float32)
    padded[:cout, :, :, :cin] = filters
    # (block, slice j, channel o, ky, kx, input slice s, lane k) -> (block, s, ky, kx, j, k, o)
    shaped = padded.reshape(nblk, blocks, 4, kh, kw, layout.slices(cin), 4)
    return np.ascontiguousarray(shaped.transpose(0, 5, 3, 4, 1, 6, 2)).astype(dtype).tobytes()


def _axis_code(name: str, out_expr: str, axis: str, ints: dict[str, int], masked: bool) -> str:
    """Per tap t of the window's ``axis`` ("h" or "w"): the input coordinate ``{name}{t}`` (clamped
    into the input, so every read is inside it) and, when ``masked``, whether it is inside
    (``m{name}{t}``)."""
    size = "args.src_tensor.Height()" if axis == "h" else "args.src_tensor.Width()"
    stride, dilation, pad = ints[f"stride_{axis}"], ints[f"dilation_{axis}"], ints[f"pad_{axis}"]
    lines = []
    for t in range(ints[f"kernel_{axis}"]):
        raw = f"{out_expr} * {stride} + {t * dilation - pad}"
        lines.append(f"  int {name}{t} = clamp({raw}, 0, {size} - 1);\n")
        if masked:
            lines.append(f"  bool m{name}{t} = {raw} >= 0 && {raw} < {size};\n")
    return "".join(lines)


def _needs_mask(in_size: int, out_size: int, kernel: int, stride: int, dilation: int, pad: int) -> bool:
    """Does some output's window reach past the input (so the reads there must count as zero)?"""
    return pad > 0 or (out_size - 1) * stride + (kernel - 1) * dilation - pad >= in_size


def tiled_conv_body(tile: GpuTile, ints: dict[str, int], shapes: Extents, group: int, act: int) -> list[Piece]:
    """The ``GPU_DIRECT`` kernel over window ``ints``, its work-group ``group`` work-items (weights:
    ``pack_tile_weights`` with the tile's ``blocks``)."""
    (ih, iw), (oh, ow) = shapes
    pixels, blocks, tile_slices, lanes = tile.pixels, tile.blocks, tile.tile_slices, tile.lanes
    kh, kw = ints["kernel_h"], ints["kernel_w"]
    per_slice = kh * kw * blocks * 4
    mask_y = _needs_mask(ih, oh, kh, ints["stride_h"], ints["dilation_h"], ints["pad_h"])
    mask_x = _needs_mask(iw, ow, kw, ints["stride_w"], ints["dilation_w"], ints["pad_w"])
    head = f"""  __local FLT4 tile[{tile_slices * per_slice}];
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int H = args.dst_tensor.Height();
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int blk = GLOBAL_ID_2;
  int b = gx % B;
  int X0 = (gx / B) * {pixels};
  int lid = LOCAL_ID_1 * GROUP_SIZE_0 + LOCAL_ID_0;
  int src_slices = args.src_tensor.Slices();
  int dst_slices = args.dst_tensor.Slices();
  int first = blk * {blocks};
"""
    parts: list[Piece] = [ENTRY, head]
    for j in range(blocks):
        parts.append(f"  ACCUM_FLT4 bias{j} = TO_ACCUM_FLT4(args.biases.Read(min(first + {j}, dst_slices - 1)));\n")
        parts += [f"  ACCUM_FLT4 a{j}_{p} = bias{j};\n" for p in range(pixels)]
    # rounded-up work-items (past W or H) read clamped coordinates, share the loads and write nothing
    parts.append(_axis_code("y", "Y", "h", ints, mask_y))
    parts += [_axis_code(f"x{p}_", f"(X0 + {p})", "w", ints, mask_x) for p in range(pixels)]
    parts.append(f"""  int wbase = blk * src_slices * {per_slice};
  for (int s0 = 0; s0 < src_slices; s0 += {tile_slices}) {{
    int ns = min(src_slices - s0, {tile_slices});
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < ns * {per_slice}; i += {group}) tile[i] = args.weights.Read(wbase + s0 * {per_slice} + i);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int ds = 0; ds < ns; ++ds) {{
      int s = s0 + ds;
      __local FLT4* t = tile + ds * {per_slice};
""")
    zero = "(FLT4)(0.0f)"
    for ky in range(kh):
        for kx in range(kw):
            tap = ky * kw + kx
            parts.append("      {\n")
            for p in range(pixels):
                read = f"args.src_tensor.Read(x{p}_{kx}, y{ky}, s, b)"
                cond = " && ".join(c for c in (f"my{ky}" if mask_y else "", f"mx{p}_{kx}" if mask_x else "") if c)
                parts.append(f"      FLT4 v{tap}_{p} = {f'{cond} ? {read} : {zero}' if cond else read};\n")
            for j in range(blocks):
                for k, lane in enumerate("xyzw"[:lanes]):
                    parts.append(f"      FLT4 w{j}{lane} = t[{(tap * blocks + j) * 4 + k}];\n")
                for p in range(pixels):
                    terms = " + ".join(f"v{tap}_{p}.{lane} * w{j}{lane}" for lane in "xyzw"[:lanes])
                    parts.append(f"      a{j}_{p} += TO_ACCUM_FLT4({terms});\n")
            parts.append("      }\n")
    parts.append("    }\n  }\n")
    for p in range(pixels):
        for j in range(blocks):
            parts.append(f"""  if (X0 + {p} < W && Y < H && first + {j} < dst_slices) {{
    int X = X0 + {p};
    int S = first + {j};
    FLT4 result = TO_FLT4(a{j}_{p});
    {activation_code(act)}
""")
            parts.append(WRITE)
    parts.append("}\n")
    return parts


def reduction_body(size: int, act: int) -> list[Piece]:
    """The ``GPU_REDUCTION`` kernel: a 1x1 product over few pixels, a work-group of ``size`` per
    output pixel x slice, its work-items taking every ``size``-th input slice, their sums added in
    local memory (a tree of halvings). Weights: layout.conv_weights."""
    return [
        ENTRY,
        f"""  __local ACCUM_FLT4 part[{size}];
  int lid = LOCAL_ID_0;
  int p = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  int W = args.dst_tensor.Width();
  int H = args.dst_tensor.Height();
  int X = p % W;
  int Y = (p / W) % H;
  int b = p / (W * H);
  int src_slices = args.src_tensor.Slices();
  ACCUM_FLT4 acc = INIT_ACCUM_FLT4(0.0f);
  for (int s = lid; s < src_slices; s += {size}) {{
    FLT4 v = args.src_tensor.Read(X, Y, s, b);
    int w = (S * src_slices + s) * 4;
    acc += TO_ACCUM_FLT4(v.x * args.weights.Read(w) + v.y * args.weights.Read(w + 1)
                       + v.z * args.weights.Read(w + 2) + v.w * args.weights.Read(w + 3));
  }}
  part[lid] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int n = {size // 2}; n > 0; n >>= 1) {{
    if (lid < n) part[lid] += part[lid + n];
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  if (lid == 0) {{
    FLT4 result = TO_FLT4(part[0] + TO_ACCUM_FLT4(args.biases.Read(S)));
    {activation_code(act)}
""",
        WRITE,
        "}\n",
    ]


def depthwise_body(ints: dict[str, int], shapes: Extents, act: int) -> list[Piece]:
    """The ``GPU_DEPTHWISE`` kernel (depth multiplier 1) over window ``ints``: a work-item per
    output pixel x slice. Weights: layout.depthwise_weights."""
    (ih, iw), (h, w) = shapes
    kh, kw = ints["kernel_h"], ints["kernel_w"]
    mask_y = _needs_mask(ih, h, kh, ints["stride_h"], ints["dilation_h"], ints["pad_h"])
    mask_x = _needs_mask(iw, w, kw, ints["stride_w"], ints["dilation_w"], ints["pad_w"])
    code = [
        HEAD,
        "  ACCUM_FLT4 acc = TO_ACCUM_FLT4(args.biases.Read(S));\n",
        _axis_code("y", "Y", "h", ints, mask_y),
        _axis_code("x", "X", "w", ints, mask_x),
        f"  int wbase = S * {kh * kw};\n",
    ]
    for ky in range(kh):
        for kx in range(kw):
            read = f"args.src_tensor.Read(x{kx}, y{ky}, S, b) * args.weights.Read(wbase + {ky * kw + kx})"
            cond = " && ".join(c for c in (f"my{ky}" if mask_y else "", f"mx{kx}" if mask_x else "") if c)
            code.append(f"  {f'if ({cond}) ' if cond else ''}acc += TO_ACCUM_FLT4({read});\n")
    code.append(f"  FLT4 result = TO_FLT4(acc);\n  {activation_code(act)}\n")
    return [*code, WRITE]
