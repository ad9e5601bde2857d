"""What a selector returns: the kernel variant a node gets and what its template and launch take."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..kernels.cpu.gemm_conv import GemmSpec
from ..kernels.gpu.gpu_conv import GpuTile

#: a launch's three extents (x, y, z)
Extent3 = tuple[int, int, int]


class Variant(Enum):
    """The kernels the selectors choose between; kernels/ (and the ops' own modules) hold their templates."""

    #: CONV_2D whose input channels split into groups: one output lane at a time (common/conv_plain)
    GROUPED = "grouped"
    #: gpu family (gpu/gpu_conv): pixels x slices per work-item, weight tiles shared in local memory
    GPU_DIRECT = "gpu_direct"
    #: gpu family: a 1x1 product over few pixels, a work-group summing an output's input slices
    GPU_REDUCTION = "gpu_reduction"
    #: gpu family: DEPTHWISE_CONV_2D (depth multiplier 1), a work-item per output pixel x slice
    GPU_DEPTHWISE = "gpu_depthwise"
    #: matrix products (cpu/gemm_conv), named for how a work-item finds its input: the flat pixel
    #: order (a 1x1 window), output rows, the transposed gather, one tap per output (kernel = stride)
    GEMM_FLAT = "gemm_flat"
    GEMM_ROWS = "gemm_rows"
    GEMM_TRANSPOSED = "gemm_transposed"
    GEMM_PHASES = "gemm_phases"
    #: DEPTHWISE_CONV_2D (depth multiplier 1, buffers): rows of pixels x a pair of slices, the
    #: window unrolled (cpu/depthwise_rows)
    DEPTHWISE_ROWS = "depthwise_rows"
    #: DEPTHWISE_CONV_2D with depth multiplier > 1: one input lane at a time (common/conv_plain)
    DEPTHWISE_MULTIPLIER = "depthwise_multiplier"
    #: CONV_2D's generic kernel of 4 pixels x 2 slices per work-item (common/conv_blocked)
    BLOCKED = "blocked"
    #: BATCH_MATMUL: rows of the output per work-item, a slice of K at a time (common/batch_matmul)
    BATCH_ROWS = "batch_rows"
    #: BATCH_MATMUL with adj_x: the 4 output rows of one slice of the transposed left operand per
    #: work-item, K read a row at a time (common/batch_matmul)
    BATCH_SLICE_ROWS = "batch_slice_rows"
    #: BATCH_MATMUL, neither operand transposed, batch 1, buffers: blocks of rows x groups of 8
    #: channels, the flat matrix product's (common/batch_matmul)
    BATCH_BLOCK = "batch_block"
    #: elementwise ops: a run of pixels of one row per work-item (ops/elementwise.py's ROW_HEAD)
    ROW_RUNS = "row_runs"
    #: pooling: consecutive pixels of one row per work-item, the window unrolled (ops/pooling.py)
    POOL_ROWS = "pool_rows"
    #: the op's generic kernel: one output FLT4 per work-item, any storage (common/conv_plain)
    PLAIN = "plain"


GEMM_VARIANTS = frozenset({Variant.GEMM_FLAT, Variant.GEMM_ROWS, Variant.GEMM_TRANSPOSED, Variant.GEMM_PHASES})
#: the variants whose kernels require their work-group size (its work-items share local memory)
REQUIRED_WORK_GROUP = frozenset({Variant.GPU_DIRECT, Variant.GPU_REDUCTION})


@dataclass(frozen=True)
class KernelSpec:
    """A node's kernel, as a selector chose it: its ``variant``, its launch and its template's
    parameters (the ones the variant takes; None elsewhere)."""

    variant: Variant
    #: the grid, or None for the default: a work-item per output pixel x slice (pieces.HEAD)
    grid: Extent3 | None = None
    #: the work-group size, or None for the default; REQUIRED_WORK_GROUP variants require theirs
    work_group: Extent3 | None = None
    #: GEMM_* variants: the matrix product's block, width and mode parameters
    gemm: GemmSpec | None = None
    #: GPU_DIRECT: the work-item's and the weight tile's blocking
    tile: GpuTile | None = None
    #: BATCH_ROWS, BATCH_SLICE_ROWS: output rows per work-item; ROW_RUNS, POOL_ROWS,
    #: DEPTHWISE_ROWS: output pixels of a row per work-item
    rows: int | None = None
    #: DEPTHWISE_ROWS: channels per work-item (8: a pair of slices, 16: four)
    pack: int | None = None
