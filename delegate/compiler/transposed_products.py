"""The transposed-products rewrite: TRANSPOSE -> FULLY_CONNECTED (-> unary ops, FULLY_CONNECTED,
...) -> TRANSPOSE, each TRANSPOSE swapping the last two axes, becomes the same products with the
weights on the left, read from and written in the untransposed layout: out[.., t', c] = sum_t
W[t', t] x[.., t, c], a BATCH_MATMUL of the constant W and x (ops/batch_matmul.py). MLP-Mixer's
token mixing is this chain; the two transposes were kernels that only copied.

A FULLY_CONNECTED's bias (per output feature: a row of the untransposed layout) and fused
activation become an ADD of a [t', 1] constant, which the fusion passes link into the product's
kernel. Unary ops keep their shapes, so they work on either layout. Every tensor inside the chain
must be read only inside it, and be float32 (not a quantized tensor carried in float)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from .graph import FLOAT32, Activation, Builtin, Graph, Node, Tensor
from .ops import op_for
from .ops.elementwise import UnaryOp
from .rewrites import Match, Site, make_site


def _swap(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:-2], shape[-1], shape[-2])


def _swaps_last_axes(node: Node, graph: Graph) -> bool:
    """``node`` is a TRANSPOSE of a rank 2 to 4 float tensor exchanging its last two axes only."""
    if node.op != Builtin.TRANSPOSE or len(node.inputs) != 2 or len(node.outputs) != 1:
        return False
    perm = graph.tensor(node.inputs[1]).constant
    rank = len(graph.tensor(node.inputs[0]).shape)
    if perm is None or not 2 <= rank <= 4 or np.asarray(perm).size != rank:
        return False
    want = [*range(rank - 2), rank - 1, rank - 2]
    return [int(p) % rank for p in np.asarray(perm).reshape(-1)] == want


def _plain_float(t: Tensor) -> bool:
    return t.dtype == FLOAT32 and t.carried is None and not t.quantized


def _float_constant(graph: Graph, index: int) -> np.ndarray | None:
    if index < 0:
        return None
    t = graph.tensor(index)
    if t.constant is None or t.quantized or np.asarray(t.constant).dtype.kind != "f":
        return None
    return np.asarray(t.constant, np.float32)


def _product(node: Node, graph: Graph) -> bool:
    """A FULLY_CONNECTED of float weights [N, K] keeping its input's leading dims: [.., c, K] -> [.., c, N]."""
    if node.op != Builtin.FULLY_CONNECTED or len(node.inputs) < 2 or len(node.outputs) != 1:
        return False
    weights = _float_constant(graph, node.inputs[1])
    src, dst = graph.tensor(node.inputs[0]).shape, graph.tensor(node.outputs[0]).shape
    if weights is None or weights.ndim != 2 or node.params.get("weights_format", 0) != 0:
        return False
    if len(node.inputs) > 2 and node.inputs[2] >= 0 and _float_constant(graph, node.inputs[2]) is None:
        return False
    return src[-1:] == (weights.shape[1],) and dst == (*src[:-1], weights.shape[0])


def _unary(node: Node, graph: Graph) -> bool:
    """An op of one runtime input computed value by value, whatever the layout."""
    op = op_for(node)
    keeps = graph.tensor(node.inputs[0]).shape == graph.tensor(node.outputs[0]).shape if node.inputs else False
    return isinstance(op, UnaryOp) and len(node.inputs) == 1 and len(node.outputs) == 1 and keeps


def _chain(site: Site, last: Node) -> list[Node] | None:
    """The nodes between the TRANSPOSE that ``last`` closes and ``last``, first TRANSPOSE first."""
    chain = [last]
    while True:
        source = chain[0].inputs[0]
        before = site.producer.get(source)
        if before is None or site.only_reader(source) is not chain[0]:
            return None
        chain.insert(0, before)
        if _swaps_last_axes(before, site.graph):
            return chain
        if not (_product(before, site.graph) or _unary(before, site.graph)):
            return None


class TransposedProductsRewrite:
    """The rewrite pass: ``match`` from the closing TRANSPOSE, ``apply`` edits the products in place."""

    def match(self, node: Node, site: Site) -> Match | None:
        g = site.graph
        if not _swaps_last_axes(node, g):
            return None
        chain = _chain(site, node)
        if chain is None or not any(n.op == Builtin.FULLY_CONNECTED for n in chain):
            return None
        x = g.tensor(chain[0].inputs[0])
        if not all(_plain_float(g.tensor(n.outputs[0])) for n in chain) or not _plain_float(x) or x.is_constant:
            return None
        if len(g.tensor(node.outputs[0]).shape) != len(x.shape):
            return None
        return Match(tuple(n.index for n in chain), None, edited=tuple(chain[1:-1]))

    def apply(self, site: Site, found: Match) -> Site:
        g = site.graph
        first, *inner, last = (g.nodes[i] for i in found.nodes)
        edit = _Edit(dict(g.tensors), dict(g.nodes), max(g.tensors) + 1, max(g.nodes) + 1)
        source = first.inputs[0]
        for position, node in enumerate(inner):
            end = position == len(inner) - 1
            out = last.outputs[0] if end else node.outputs[0]
            if not end:  # the inner tensors take the untransposed layout
                t = edit.tensors[out]
                edit.tensors[out] = dataclasses.replace(t, shape=_swap(t.shape), signature=None)
            names = [node.name, *([first.name] if position == 0 else []), *([last.name] if end else [])]
            if node.op == Builtin.FULLY_CONNECTED:
                edit.product(node, source, out, names)
            else:
                params = {**node.params, "fused_names": names}
                edit.put(dataclasses.replace(node, inputs=(source,), outputs=(out,), params=params))
            source = out
        graph = dataclasses.replace(g, tensors=edit.tensors, nodes=edit.nodes)
        at = site.nodes.index(found.nodes[0])  # the chain reads nothing made after its first node
        kept = [i for i in site.nodes if i not in found.nodes]
        before = [i for i in kept if site.nodes.index(i) < at]
        after = [i for i in kept if site.nodes.index(i) > at]
        return make_site(graph, [*before, *edit.order, *after], site.outputs, site.names)


@dataclass
class _Edit:
    """The graph's tensors and nodes as the rewrite edits them, the next free indices, and the
    rewritten chain's nodes in order."""

    tensors: dict[int, Tensor]
    nodes: dict[int, Node]
    next_tensor: int
    next_node: int
    order: list[int] = field(default_factory=list)

    def put(self, node: Node) -> None:
        self.nodes[node.index] = node
        self.order.append(node.index)

    def product(self, fc: Node, source: int, out: int, names: list[str]) -> None:
        """FULLY_CONNECTED ``fc`` as W x ``source`` into ``out``, then its bias and activation."""
        bias = fc.inputs[2] if len(fc.inputs) > 2 else -1
        act = fc.params.get("activation", Activation.NONE)
        product_out = out
        if bias >= 0 or act != Activation.NONE:  # an ADD of the bias as a column, linked into the product
            product_out = self._tensor(Tensor(0, FLOAT32, self.tensors[out].shape))
        params = {"adj_x": False, "adj_y": False, "fused_names": names}
        self.put(Node(fc.index, Builtin.BATCH_MATMUL, 1, (fc.inputs[1], source), (product_out,), params))
        if product_out == out:
            return
        rows = int(self.tensors[fc.inputs[1]].shape[0])
        column = np.zeros(rows, np.float32) if bias < 0 else np.asarray(self.tensors[bias].constant, np.float32)
        shape = (*(1,) * (len(self.tensors[out].shape) - 2), rows, 1)
        added = self._tensor(Tensor(0, FLOAT32, shape, is_constant=True, constant=column.reshape(shape)))
        params = {"activation": act, "fused_names": []}  # the product's kernel carries the names
        self.put(Node(self.next_node, Builtin.ADD, 1, (product_out, added), (out,), params))
        self.next_node += 1

    def _tensor(self, t: Tensor) -> int:
        index, self.next_tensor = self.next_tensor, self.next_tensor + 1
        self.tensors[index] = dataclasses.replace(t, index=index)
        return index
