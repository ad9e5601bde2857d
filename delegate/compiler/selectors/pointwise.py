"""The kernels of the ops computed pixel by pixel: elementwise ops (ops/elementwise.py), copies
(ops/reshape.py, ops/upsample.py) and pooling (ops/pooling.py). On CPU devices a work-item takes a
run of pixels of one row (its loop costs less than a work-item each); GPUs keep a work-item per
pixel, whose neighbours read neighbouring pixels. Pooling's row kernel unrolls its window, so
windows past POOL_MAX_TAPS take the plain kernel (benchmarks/RESULTS.md, "Elementwise kernels in
runs of pixels")."""

from __future__ import annotations

from .. import layout
from ..graph import Graph, Node
from ..options import CompileOptions, KernelFamily
from .spec import KernelSpec, Variant

#: output pixels per work-item of an elementwise row run: enough to pay for a work-item's start,
#: few enough to leave every core work on small tensors
ROW_PIXELS = 8
#: work-items per work-group of select_copy's kernels
COPY_WORK_ITEMS = 32
#: output pixels per work-item of the pooling row kernel
POOL_PIXELS = 4
#: the largest window the pooling row kernel is generated for (it is unrolled completely)
POOL_MAX_TAPS = 49


def _row_grid(node: Node, graph: Graph, pixels: int) -> tuple[int, int, int]:
    b, h, w, c = layout.bhwc(graph.tensor(node.outputs[0]).shape)
    return (-(-w // pixels) * b, h, layout.slices(c))


def select_elementwise(node: Node, graph: Graph, options: CompileOptions) -> KernelSpec:
    """ROW_RUNS of ROW_PIXELS on CPU devices, PLAIN (a work-item per pixel) in the gpu family."""
    if options.kernel_family is KernelFamily.GPU:
        return KernelSpec(Variant.PLAIN)
    return KernelSpec(Variant.ROW_RUNS, grid=_row_grid(node, graph, ROW_PIXELS), rows=ROW_PIXELS)


def select_copy(node: Node, graph: Graph, options: CompileOptions) -> KernelSpec:
    """The kernels that move values without arithmetic (RESHAPE to a divisor of the channels, the
    upsampling): ROW_RUNS as select_elementwise, the work-group fitted to the grid. A detection
    head's reshaped output is one run wide, where the default 8 x 4 work-group leaves 7 of 8
    columns past the grid (measured 2x slower than a column of COPY_WORK_ITEMS rows)."""
    if options.kernel_family is KernelFamily.GPU:
        return KernelSpec(Variant.PLAIN)
    grid = _row_grid(node, graph, ROW_PIXELS)
    local_x = min(8, 1 << (grid[0] - 1).bit_length())
    local_y = max(1, min(COPY_WORK_ITEMS // local_x, 1 << (grid[1] - 1).bit_length()))
    return KernelSpec(Variant.ROW_RUNS, grid=grid, work_group=(local_x, local_y, 1), rows=ROW_PIXELS)


def select_pool(node: Node, graph: Graph, options: CompileOptions) -> KernelSpec:
    """POOL_ROWS of POOL_PIXELS (work-groups of one column of rows) over buffers for windows of up
    to POOL_MAX_TAPS, else PLAIN."""
    taps = int(node.params["filter_height"]) * int(node.params["filter_width"])
    if not options.linear_storage or taps > POOL_MAX_TAPS:
        return KernelSpec(Variant.PLAIN)
    grid = _row_grid(node, graph, POOL_PIXELS)
    return KernelSpec(Variant.POOL_ROWS, grid=grid, work_group=(1, grid[1], 1), rows=POOL_PIXELS)
