"""BATCH_MATMUL's kernel (kernels/common/batch_matmul.py): rows of the output per work-item, each
right-operand read shared by them. Without adj_x, ROWS rows read the left operand a slice of K at a
time; with adj_x, a slice of the left operand's channels is 4 output rows, read a row of K at a
time. Measured on PoCL (benchmarks/RESULTS.md, "Batch products"): the scores of a 4-head
attention over 128 tokens of 64 channels took 7.2 ms in the plain kernel, 0.34 ms in rows of 4.
Neither operand transposed, on buffers, batch 1 and M >= 6 (attention's products where the
converter wrote the transposes as nodes): blocks of 6 rows x 16 channels of N in FLT8
(BATCH_BLOCK), as the flat matrix product, about 2.5x faster than rows of 4 on one core; a
constant left operand too (MLP-Mixer's token mixing, transposed_products.py: a third of the time of
rows of 4)."""

from __future__ import annotations

from .. import layout
from ..graph import Graph, Node
from ..kernels.common.batch_matmul import BLOCK_GROUPS, BLOCK_ROWS, SLICE_ROWS
from ..options import CompileOptions, KernelFamily
from .spec import KernelSpec, Variant

#: output rows per work-item: four right-operand FLT4s feed this many rows' products
ROWS = 4


def select_batch_matmul(node: Node, graph: Graph, options: CompileOptions) -> KernelSpec:
    """The node's kernel and launch: BATCH_BLOCK where it applies, else BATCH_ROWS, or
    BATCH_SLICE_ROWS with adj_x, over (row blocks x batch, height, slices of N)."""
    b, h, w, c = layout.bhwc(graph.tensor(node.outputs[0]).shape)
    plain = not node.params.get("adj_x") and not node.params.get("adj_y")
    cpu_buffers = options.linear_storage and options.kernel_family is not KernelFamily.GPU
    if plain and cpu_buffers and b == 1 and w >= BLOCK_ROWS:
        items = -(-layout.slices(c) // (2 * BLOCK_GROUPS))
        return KernelSpec(Variant.BATCH_BLOCK, grid=(-(-w // BLOCK_ROWS), h, items), work_group=(8, 1, 1))
    if node.params.get("adj_x"):  # a work-item per slice of the left operand's channels
        variant, rows = Variant.BATCH_SLICE_ROWS, SLICE_ROWS
    else:
        variant, rows = Variant.BATCH_ROWS, min(ROWS, w)
    return KernelSpec(variant, grid=(-(-w // rows) * b, h, layout.slices(c)), rows=rows)
