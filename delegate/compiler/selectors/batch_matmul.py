"""BATCH_MATMUL's kernel (kernels/common/batch_matmul.py): rows of the output per work-item, each
right-operand read shared by them, unless the left operand is transposed (adj_x), which the plain
kernel takes. Measured on PoCL (benchmarks/RESULTS.md, "Batch products"): the scores of a 4-head
attention over 128 tokens of 64 channels took 7.2 ms in the plain kernel, 0.34 ms in rows of 4."""

from __future__ import annotations

from .. import layout
from ..graph import Graph, Node
from .spec import KernelSpec, Variant

#: output rows per work-item: four right-operand FLT4s feed this many rows' products
ROWS = 4


def select_batch_matmul(node: Node, graph: Graph) -> KernelSpec:
    """The node's kernel and launch: BATCH_ROWS over (row blocks x batch, height, slices of N)."""
    if node.params.get("adj_x"):
        return KernelSpec(Variant.PLAIN)
    b, h, w, c = layout.bhwc(graph.tensor(node.outputs[0]).shape)
    rows = min(ROWS, w)
    return KernelSpec(Variant.BATCH_ROWS, grid=(-(-w // rows) * b, h, layout.slices(c)), rows=rows)
