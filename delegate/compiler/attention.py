"""The attention rewrite: scaled-dot-product attention as converters write it becomes one node of
ops/attention.py (one kernel; the score matrix never reaches global memory).

The chain, matched from its last node: s = BATCH_MATMUL(Q, K) (K transposed by adj_y or not);
[MUL(s, scale)] with a scalar constant (absent where the scale is folded into Q); [ADD(s, mask)]
with a constant mask, or [SELECT_V2(cond, s, fill)] with a constant condition and fill (a causal
mask, folded from constants: shapes.py), either order of the choices; SOFTMAX(s, beta);
y = BATCH_MATMUL(s, V). RESHAPEs between them that keep the runtime's 4-D view (litert-torch's
rank-3 products around a rank-4 softmax) are looked through. litert-torch's
``odml.scaled_dot_product_attention`` composite is inlined into this same chain (composites.py).
Float only, static shapes, K's length at most ops/attention.MAX_KEYS; every tensor inside the chain
is read only inside it and is no partition output."""

from __future__ import annotations

import numpy as np

from . import layout
from .graph import FLOAT32, Builtin, Graph, Node
from .ops.attention import ATTENTION, MASK_ADD, MASK_NONE, MASK_SELECT, OP
from .rewrites import Match, Site, fused_match, replace_nodes


def _view(graph: Graph, tensor: int) -> tuple[int, int, int, int]:
    return layout.bhwc(graph.tensor(tensor).shape)


def _made_by(site: Site, tensor: int, *ops: int) -> Node | None:
    node = site.producer.get(tensor)
    if node is None or node.op not in ops or len(node.outputs) != 1 or node.params.get("activation", 0):
        return None
    return node


def _through_views(site: Site, tensor: int, chain: list[Node]) -> int:
    """``tensor`` traced back through RESHAPEs that keep the 4-D view, each added to ``chain``."""
    while (reshape := _made_by(site, tensor, Builtin.RESHAPE)) is not None:
        src = reshape.inputs[0]
        if len(site.graph.tensor(src).shape) > 4 or _view(site.graph, src) != _view(site.graph, tensor):
            break
        chain.append(reshape)
        tensor = src
    return tensor


def _constant(graph: Graph, tensor: int) -> bool:
    t = graph.tensor(tensor)
    return t.constant is not None and not t.quantized and len(t.shape) <= 4


def _broadcasts(graph: Graph, tensor: int, view: tuple[int, ...]) -> bool:
    return all(d in (1, v) for d, v in zip(_view(graph, tensor), view, strict=True))


def _mask(site: Site, node: Node, scores: tuple[int, ...]) -> tuple[int, dict] | None:
    """The scores' tensor under mask ``node`` and the mask's params, or None when it is no mask."""
    g = site.graph
    if node.op == Builtin.ADD and len(node.inputs) == 2:
        for below, mask in (node.inputs, node.inputs[::-1]):
            if not _constant(g, below) and _constant(g, mask) and _broadcasts(g, mask, scores):
                return below, {"mask": MASK_ADD, "mask_inputs": [mask]}
    if node.op == Builtin.SELECT_V2 and len(node.inputs) == 3:
        cond, first, second = node.inputs
        for below, fill, keep_when in ((first, second, True), (second, first, False)):
            constants = _constant(g, cond) and _constant(g, fill) and not _constant(g, below)
            if constants and all(_broadcasts(g, t, scores) for t in (cond, fill)):
                return below, {"mask": MASK_SELECT, "mask_inputs": [cond, fill], "keep_when": keep_when}
    return None


def _chain(site: Site, y: Node) -> tuple[Node, list[Node], dict] | None:
    """From y = BATCH_MATMUL(probabilities, V) back to the scores' BATCH_MATMUL: (that node, the
    chain's nodes, the fused node's params)."""
    g = site.graph
    if y.op != Builtin.BATCH_MATMUL or len(y.inputs) != 2 or y.params.get("adj_x") or y.params.get("adj_y"):
        return None
    chain: list[Node] = [y]
    softmax = _made_by(site, _through_views(site, y.inputs[0], chain), Builtin.SOFTMAX)
    if softmax is None:
        return None
    chain.append(softmax)
    scores = _view(g, softmax.outputs[0])
    params: dict = {"beta": float(softmax.params.get("beta", 1.0)), "mask": MASK_NONE, "scale": 1.0}
    tensor = _through_views(site, softmax.inputs[0], chain)
    node = _made_by(site, tensor, Builtin.ADD, Builtin.SELECT_V2)
    mask = _mask(site, node, scores) if node is not None else None
    if node is not None and mask is not None:
        chain.append(node)
        tensor, found = mask
        params.update(found)
        tensor = _through_views(site, tensor, chain)
    scale = _made_by(site, tensor, Builtin.MUL)
    if scale is not None and len(scale.inputs) == 2:
        below, factor = scale.inputs if _constant(g, scale.inputs[1]) else scale.inputs[::-1]
        value = g.tensor(factor).constant
        if value is not None and np.asarray(value).size == 1 and not _constant(g, below):
            chain.append(scale)
            params["scale"] = float(np.asarray(value).reshape(-1)[0])
            tensor = _through_views(site, below, chain)
    product = _made_by(site, tensor, Builtin.BATCH_MATMUL)
    if product is None or len(product.inputs) != 2 or product.params.get("adj_x"):
        return None
    chain.append(product)
    if any(_view(g, n.outputs[0]) != scores for n in chain[1:]):
        return None  # every intermediate is the (b, head, M, N) scores
    params["adj_y"] = bool(product.params.get("adj_y"))
    return product, chain, params


class AttentionRewrite:
    """The rewrite pass: ``match`` from the product with V, ``apply`` puts the fused node there."""

    def match(self, node: Node, site: Site) -> Match | None:
        found = _chain(site, node)
        if found is None:
            return None
        product, chain, params = found
        g = site.graph
        ordered = site.enclosed(chain, node)
        if ordered is None:
            return None
        data = [*product.inputs, node.inputs[1], node.outputs[0]]
        if any(g.tensor(i).dtype != FLOAT32 or g.tensor(i).quantized for i in data):
            return None
        inputs = (*product.inputs, node.inputs[1], *params.get("mask_inputs", []))
        found = fused_match(site, ordered, node, ATTENTION, inputs, params)
        if found.fused is None or OP.check(found.fused, g) is not None:
            return None  # past the kernel's bounds (MAX_KEYS): the separate kernels run it
        return found

    def apply(self, site: Site, found: Match) -> Site:
        return replace_nodes(site, found)
