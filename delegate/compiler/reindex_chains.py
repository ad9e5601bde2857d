"""The re-index chain rewrite: consecutive RESHAPE / TRANSPOSE / SQUEEZE / EXPAND_DIMS nodes, pure
data movement, become one node of ops/reindex_chain.py (one copy kernel where each node was one).
Converters write attention's head split as FULLY_CONNECTED -> RESHAPE -> TRANSPOSE and its merge
as BATCH_MATMUL -> TRANSPOSE -> RESHAPE; each copy is a launch and a trip through memory.

The chain's index map is composed at compile time from the nodes' shapes and permutations, on
the element indices themselves, so it is exact whatever the shapes. Every tensor inside the chain
is read only by the chain's next node, is no partition output, and is plain (the one dtype of the
chain, unquantized). The pass runs after the others (partition.REWRITES), which look through or
take some of these nodes themselves (the attention pass's RESHAPEs, the transposed products)."""

from __future__ import annotations

import math

import numpy as np

from .graph import Builtin, Graph, Node
from .ops import op_for
from .ops.reindex import constant_values
from .ops.reindex_chain import REINDEX_CHAIN, axes_of
from .rewrites import Match, Site, fused_match, replace_nodes

_MOVES = (Builtin.RESHAPE, Builtin.TRANSPOSE, Builtin.SQUEEZE, Builtin.EXPAND_DIMS)

#: the largest tensor whose index map is composed (an int64 per element, at compile time)
MAX_ELEMENTS = 1 << 22


def _moves(node: Node | None, graph: Graph) -> bool:
    if node is None or node.op not in _MOVES or len(node.outputs) != 1:
        return False
    op = op_for(node)
    return op is not None and op.check(node, graph) is None


def _link(site: Site, tensor: int) -> Node | None:
    """The chain node reading ``tensor`` where ``tensor`` sits inside a chain (made by one such
    node, read by one other and only there, and of the dtype of the producer's input)."""
    before, after = site.producer.get(tensor), site.only_reader(tensor)
    if not (_moves(before, site.graph) and _moves(after, site.graph)) or after.inputs[0] != tensor:  # type: ignore[union-attr]
        return None
    t, source = site.graph.tensor(tensor), site.graph.tensor(before.inputs[0])  # type: ignore[union-attr]
    return after if t.dtype == source.dtype and t.carried is None and not t.quantized else None


def composed(chain: list[Node], graph: Graph) -> np.ndarray:
    """For each element of the chain's output in row-major order, its input's element."""
    index = np.arange(math.prod(graph.tensor(chain[0].inputs[0]).shape), dtype=np.int64)
    index = index.reshape(graph.tensor(chain[0].inputs[0]).shape)
    for node in chain:
        if node.op == Builtin.TRANSPOSE:
            perm = [int(p) % index.ndim for p in constant_values(graph, node, 1)]  # type: ignore[union-attr]
            index = index.transpose(perm)
        index = index.reshape(graph.tensor(node.outputs[0]).shape)
    return index.reshape(-1)


class ReindexChainRewrite:
    """The rewrite pass: ``match`` from the chain's last node, ``apply`` puts the fused node there."""

    def match(self, node: Node, site: Site) -> Match | None:
        g = site.graph
        if not _moves(node, g) or _link(site, node.outputs[0]) is not None:
            return None  # no chain node, or not the chain's last
        chain = [node]
        while _link(site, chain[0].inputs[0]) is chain[0]:
            chain.insert(0, site.producer[chain[0].inputs[0]])
        if len(chain) < 2 or math.prod(g.tensor(node.outputs[0]).shape) > MAX_ELEMENTS:
            return None
        if g.tensor(chain[0].inputs[0]).dtype != g.tensor(node.outputs[0]).dtype:
            return None
        axes = axes_of(composed(chain, g))
        ordered = site.enclosed(chain, node)
        if axes is None or ordered is None:
            return None
        return fused_match(site, ordered, node, REINDEX_CHAIN, (chain[0].inputs[0],), {"axes": axes})

    def apply(self, site: Site, found: Match) -> Site:
        return replace_nodes(site, found)
