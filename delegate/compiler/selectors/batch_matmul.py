"""BATCH_MATMUL's kernel (kernels/common/batch_matmul.py): rows of the output per work-item, each
right-operand read shared by them. Without adj_x, ROWS rows read the left operand a slice of K at a
time; with adj_x, a slice of the left operand's channels is 4 output rows, read a row of K at a
time. Measured on PoCL (benchmarks/RESULTS.md, "Batch products"): the scores of a 4-head
attention over 128 tokens of 64 channels took 7.2 ms in the plain kernel, 0.34 ms in rows of 4."""

from __future__ import annotations

from .. import layout
from ..graph import Graph, Node
from ..kernels.common.batch_matmul import SLICE_ROWS
from .spec import KernelSpec, Variant

#: output rows per work-item: four right-operand FLT4s feed this many rows' products
ROWS = 4


def select_batch_matmul(node: Node, graph: Graph) -> KernelSpec:
    """The node's kernel and launch: BATCH_ROWS, or BATCH_SLICE_ROWS with adj_x, over (row blocks x
    batch, height, slices of N)."""
    b, h, w, c = layout.bhwc(graph.tensor(node.outputs[0]).shape)
    if node.params.get("adj_x"):  # a work-item per slice of the left operand's channels
        variant, rows = Variant.BATCH_SLICE_ROWS, SLICE_ROWS
    else:
        variant, rows = Variant.BATCH_ROWS, min(ROWS, w)
    return KernelSpec(variant, grid=(-(-w // rows) * b, h, layout.slices(c)), rows=rows)
