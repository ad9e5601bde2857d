"""The gpu family's choices (kernels/gpu/gpu_conv.py): which of its kernels a convolution gets, the
blocking of a work-item and of the weight tile, the grid and the work-group."""

from __future__ import annotations

from .. import layout
from ..kernels.gpu.gpu_conv import GpuTile
from .spec import Extent3, KernelSpec, Variant

#: windows up to this many taps run in the gpu family (unrolled); larger ones keep the cpu kernels
GPU_MAX_TAPS = 25
#: local memory a convolution's weight tile may take (f32 bytes): a quarter of the 32 KiB every
#: OpenCL GPU has, so several work-groups fit on one compute unit
TILE_BYTES = 8192
#: below this many output pixels a 1x1 product splits its input slices over a work-group instead
REDUCTION_PIXELS = 16


def _pow2_at_least(n: int) -> int:
    return 1 << (max(n, 1) - 1).bit_length()


def work_group_2d(extent_x: int, extent_y: int, total: int) -> Extent3:
    """A (x, y, 1) work-group of at most ``total`` work-items (a power of two), x first, neither
    axis beyond the next power of two above its grid extent."""
    x = min(total, _pow2_at_least(extent_x))
    y = min(total // x, _pow2_at_least(extent_y))
    return (x, y, 1)


def _blocks(dst_slices: int, taps: int) -> int:
    """Output slices per work-item: 4 where there are enough, fewer on thin outputs (no work-item
    of a block past the last slice) and wide windows (the tile of one input slice fits TILE_BYTES)."""
    blocks = 4 if dst_slices >= 8 or dst_slices % 4 == 0 else 2 if dst_slices >= 2 else 1
    while blocks > 1 and taps * blocks * 4 * 16 > TILE_BYTES:
        blocks //= 2
    return blocks


def select_gpu_conv(
    dst_shape: tuple[int, ...], filters: tuple[int, ...], window: dict[str, int], work_group_limit: int
) -> KernelSpec:
    """CONV_2D (OHWI ``filters``' shape, not grouped, at most GPU_MAX_TAPS taps) or FULLY_CONNECTED
    (1x1 ``filters``) writing ``dst_shape`` over ``window``, in work-groups of
    ``work_group_limit`` work-items: GPU_REDUCTION for a 1x1 product over fewer than
    REDUCTION_PIXELS pixels, else GPU_DIRECT."""
    b, h, w, c = layout.bhwc(dst_shape)
    _, kh, kw, cin = filters
    assert kh * kw <= GPU_MAX_TAPS
    strides, pads = (window["stride_h"], window["stride_w"]), (window["pad_h"], window["pad_w"])
    if kh == kw == 1 and strides == (1, 1) and pads == (0, 0) and b * h * w < REDUCTION_PIXELS:
        size = min(work_group_limit, _pow2_at_least(layout.slices(cin)))
        return KernelSpec(Variant.GPU_REDUCTION, grid=(size, b * h * w, layout.slices(c)), work_group=(size, 1, 1))
    blocks = _blocks(layout.slices(c), kh * kw)
    per_slice = kh * kw * blocks * 4
    src_slices = layout.slices(cin)
    pixels = 2 if w >= 14 else 1
    tile = GpuTile(
        pixels=pixels,
        blocks=blocks,
        tile_slices=max(1, min(src_slices, TILE_BYTES // (per_slice * 16))),
        lanes=cin if src_slices == 1 else 4,
    )
    grid = (-(-w // pixels) * b, h, -(-layout.slices(c) // blocks))
    return KernelSpec(Variant.GPU_DIRECT, grid=grid, work_group=work_group_2d(grid[0], grid[1], work_group_limit),
                      tile=tile)  # fmt: skip


def select_gpu_depthwise(dst_shape: tuple[int, ...], work_group_limit: int) -> KernelSpec:
    """DEPTHWISE_CONV_2D (depth multiplier 1, at most GPU_MAX_TAPS taps) writing ``dst_shape``: a
    work-group over a patch of pixels of one slice (not required: the runtime's tuning may
    pick another)."""
    b, h, w, _ = layout.bhwc(dst_shape)
    return KernelSpec(Variant.GPU_DEPTHWISE, work_group=work_group_2d(w * b, h, work_group_limit))
