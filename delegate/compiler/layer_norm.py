"""The layer-norm rewrite: the chain TensorFlow's and PyTorch's converters emit for a layer
normalization over the last axis becomes one node of ops/layer_norm.py (one kernel, instead of
eight to eleven small ones, four of them reductions re-reading the tensor).

Keras (LayerNormalization, TFLite converter of TF 2.21): m = MEAN(x); v = MEAN(SQUARED_DIFFERENCE(x,
m)); s = MUL(RSQRT(ADD(v, eps)), gamma); y = ADD(MUL(x, s), ADD(MUL(NEG(m), s), beta)); without
the ADD of beta when beta is all zeros (a freshly initialized layer: the converter drops it), and
s = RSQRT(..) itself without a scale.
PyTorch (nn.LayerNorm through its converters): c = SUB(x, m); v = MEAN(SQUARE(c) or MUL(c, c) or
SQUARED_DIFFERENCE(x, m)); y = ADD(MUL(MUL(c, RSQRT(ADD(v, eps))), gamma), beta), gamma and beta
optional. PyTorch's native form (litert-torch): the same statistics reduced (over the last axis and
the batch of 1) and reshaped back, y = ADD(MUL(x, r), SUB(0, MUL(r, m))), then gamma and beta.
RMSNorm (litert-torch, Keras): y = MUL(x, RSQRT(ADD(MEAN(MUL(x, x) or SQUARE(x)), eps))) times
gamma (outside, or on the RSQRT), the MEAN keeping the last axis or reshaped back to it.
Every tensor inside the chain must be read only inside it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .graph import Builtin, Graph, Node
from .ops.layer_norm import LAYER_NORM
from .rewrites import Match, Site, fused_match, replace_nodes


def _made_by(site: Site, tensor: int, *ops: int) -> Node | None:
    node = site.producer.get(tensor)
    return node if node is not None and node.op in ops and len(node.outputs) == 1 else None


def _other(node: Node, tensor: int) -> int | None:
    """The other input of binary ``node`` when ``tensor`` is one of its two."""
    if len(node.inputs) != 2 or node.inputs.count(tensor) != 1:
        return None
    return node.inputs[1] if node.inputs[0] == tensor else node.inputs[0]


def _last_axis_mean(node: Node | None, graph: Graph) -> int | None:
    """The input of a MEAN over the last axis that keeps it (size 1), else None."""
    if node is None or node.op != Builtin.MEAN or len(node.inputs) != 2 or not node.params.get("keep_dims"):
        return None
    return _mean_over_last(node, graph)


def _mean_over_last(node: Node, graph: Graph) -> int | None:
    """The input of MEAN ``node`` when it reduces over the last axis alone (kept or not), else None."""
    src = graph.tensor(node.inputs[0])
    axes = graph.tensor(node.inputs[1]).constant
    rank = len(src.shape)
    if axes is None or src.is_constant or not 1 <= rank <= 4 or np.asarray(axes).size != 1:
        return None
    return node.inputs[0] if int(np.asarray(axes).reshape(-1)[0]) % rank == rank - 1 else None


def _per_channel(graph: Graph, tensor: int | None, channels: int) -> bool:
    """A float constant of ``channels`` values along the last axis only."""
    if tensor is None or tensor < 0:
        return False
    t = graph.tensor(tensor)
    return (
        t.constant is not None and not t.quantized and t.shape[-1:] == (channels,) and all(d == 1 for d in t.shape[:-1])
    )


@dataclass(frozen=True)
class _Core:
    x: int
    mean: Node | None  # None: RMSNorm's statistics, about zero
    centred: Node | None  # SUB(x, m), the PyTorch form's
    rsqrt: Node
    epsilon: float
    nodes: tuple[Node, ...]


def _core(site: Site, r: int) -> _Core | None:
    """The statistics ending at RSQRT output ``r``: rsqrt(mean((x - mean(x))^2) + eps)."""
    g = site.graph
    rsqrt = _made_by(site, r, Builtin.RSQRT)
    add = rsqrt and _made_by(site, rsqrt.inputs[0], Builtin.ADD)
    if not rsqrt or not add or add.params.get("activation", 0):
        return None
    var = next((i for i in add.inputs if g.tensor(i).constant is None), None)
    eps = next((i for i in add.inputs if g.tensor(i).constant is not None), None)
    if var is None or eps is None or np.asarray(g.tensor(eps).constant).size != 1:
        return None
    var_mean = _made_by(site, var, Builtin.MEAN)
    squared = _last_axis_mean(var_mean, g)
    square = squared is not None and _made_by(site, squared, Builtin.SQUARED_DIFFERENCE, Builtin.SQUARE, Builtin.MUL)
    if not square:
        return None
    centred = None
    if square.op == Builtin.SQUARED_DIFFERENCE:
        pair = square.inputs
    else:
        if square.op == Builtin.MUL and (square.inputs[0] != square.inputs[1] or square.params.get("activation", 0)):
            return None
        centred = _made_by(site, square.inputs[0], Builtin.SUB)
        if centred is None or centred.params.get("activation", 0):
            return None
        pair = centred.inputs
    mean = next((n for i in pair if (n := _made_by(site, i, Builtin.MEAN)) and _last_axis_mean(n, g) is not None), None)
    if mean is None or len(pair) != 2 or _last_axis_mean(mean, g) not in pair or pair.index(mean.outputs[0]) != 1:
        return None
    x = pair[0]
    if x != _last_axis_mean(mean, g):
        return None
    epsilon = float(np.asarray(g.tensor(eps).constant).reshape(-1)[0])
    nodes = (mean, *((centred,) if centred else ()), square, var_mean, add, rsqrt)
    return _Core(x, mean, centred, rsqrt, epsilon, nodes)


def _keras(site: Site, y: Node) -> tuple[_Core, int, int, list[Node]] | None:
    """y = ADD(MUL(x, s), shift), s = MUL(r, gamma) or r alone (no scale), shift = ADD(MUL(NEG(m),
    s), beta) or MUL(NEG(m), s) alone (the converter drops an all-zero beta, as Keras initializes
    it): (core, gamma or -1, beta or -1, tail)."""
    if y.op != Builtin.ADD or len(y.inputs) != 2 or y.params.get("activation", 0):
        return None
    for scaled, shifted in (y.inputs, y.inputs[::-1]):
        xs = _made_by(site, scaled, Builtin.MUL)
        shift = _made_by(site, shifted, Builtin.ADD, Builtin.MUL)
        if not xs or not shift or shift.params.get("activation", 0) or xs.params.get("activation", 0):
            continue
        for s in xs.inputs:
            x = _other(xs, s)
            if x is None:
                continue
            found = _scale(site, s)
            if found is None:
                continue
            core, gamma, gain = found
            if core.centred is not None or core.x != x:
                continue
            shifted_mean = _shifted_mean(site, shift, s, core)
            if shifted_mean is None:
                continue
            neg, ms, beta = shifted_mean
            added = [shift] if shift is not ms else []
            return core, gamma, beta, [*gain, neg, ms, *added, xs, y]
    return None


def _scale(site: Site, s: int) -> tuple[_Core, int, list[Node]] | None:
    """s = MUL(r, gamma) or r itself, r = RSQRT(..) of a core: (core, gamma or -1, [the MUL])."""
    if _made_by(site, s, Builtin.RSQRT):
        core = _core(site, s)
        return (core, -1, []) if core is not None else None
    gain = _made_by(site, s, Builtin.MUL)
    if gain is None or gain.params.get("activation", 0):
        return None
    for r in gain.inputs:
        core = _core(site, r) if _made_by(site, r, Builtin.RSQRT) else None
        gamma = _other(gain, r)
        if core is not None and gamma is not None:
            return core, gamma, [gain]
    return None


def _shifted_mean(site: Site, shift: Node, s: int, core: _Core) -> tuple[Node, Node, int] | None:
    """shift = ADD(MUL(NEG(m), s), beta) or MUL(NEG(m), s): (the NEG, the MUL, beta or -1)."""
    if shift.op == Builtin.MUL:
        ms, beta = shift, -1
    else:
        ms = next((n for i in shift.inputs if (n := _made_by(site, i, Builtin.MUL))), None)
        other = ms and _other(shift, ms.outputs[0])
        if not ms or other is None:
            return None
        beta = other
    if ms.params.get("activation", 0) or s not in ms.inputs:
        return None
    neg = _made_by(site, _other(ms, s) if _other(ms, s) is not None else -1, Builtin.NEG)
    if neg is None or neg.inputs[0] != core.mean.outputs[0]:
        return None
    return neg, ms, beta


def _torch(site: Site, y: Node) -> tuple[_Core, int, int, list[Node]] | None:
    """y = [ADD(.., beta)] of [MUL(.., gamma)] of MUL(SUB(x, m), r): (core, gamma, beta, tail)."""
    g, tail, node = site.graph, [], y
    gamma = beta = -1
    if node.op == Builtin.ADD and not node.params.get("activation", 0):
        inner = next((i for i in node.inputs if g.tensor(i).constant is None), None)
        beta = _other(node, inner) if inner is not None else None  # type: ignore[assignment]
        below = inner is not None and _made_by(site, inner, Builtin.MUL)
        if beta is None or not below:
            return None
        tail.append(node)
        node = below
    for _ in range(2):  # MUL(.., gamma) then MUL(c, r), or MUL(c, r) alone
        if node.op != Builtin.MUL or node.params.get("activation", 0) or len(node.inputs) != 2:
            return None
        tail.append(node)
        for r in node.inputs:
            core = _core(site, r) if _made_by(site, r, Builtin.RSQRT) else None
            if core is not None and core.centred is not None and _other(node, r) == core.centred.outputs[0]:
                return core, gamma, beta, tail[::-1]
        inner = next((i for i in node.inputs if g.tensor(i).constant is None), None)
        gamma = _other(node, inner) if inner is not None else None  # type: ignore[assignment]
        below = inner is not None and _made_by(site, inner, Builtin.MUL)
        if gamma is None or not below:
            return None
        node = below
    return None


def _rms_core(site: Site, r: int) -> _Core | None:
    """RMSNorm's statistics ending at RSQRT output ``r``: rsqrt(mean(x^2) + eps) over the last axis,
    the MEAN keeping that axis or reshaped back to it (litert-torch), before or after the ADD."""
    g = site.graph
    rsqrt = _made_by(site, r, Builtin.RSQRT)
    if rsqrt is None:
        return None
    chain: list[Node] = [rsqrt]
    node = site.producer.get(rsqrt.inputs[0])
    add: Node | None = None
    while node is not None and len(chain) < 5:
        if node.op == Builtin.RESHAPE and len(node.outputs) == 1:
            chain.append(node)
        elif node.op == Builtin.ADD and add is None and not node.params.get("activation", 0):
            add = node
            chain.append(node)
        else:
            break
        node = site.producer.get(next((i for i in node.inputs if g.tensor(i).constant is None), -1))
    if add is None or node is None or node.op != Builtin.MEAN or len(node.inputs) != 2:
        return None
    eps = next((i for i in add.inputs if g.tensor(i).constant is not None), None)
    if eps is None or np.asarray(g.tensor(eps).constant).size != 1:
        return None
    squared = _mean_over_last(node, g)
    square = squared is not None and _made_by(site, squared, Builtin.SQUARE, Builtin.MUL)
    if not square or (
        square.op == Builtin.MUL and (square.inputs[0] != square.inputs[1] or square.params.get("activation", 0))
    ):
        return None
    x = square.inputs[0]
    shape = g.tensor(x).shape
    if tuple(g.tensor(r).shape) not in ((*shape[:-1], 1),):
        return None  # the statistic broadcast along the last axis only
    epsilon = float(np.asarray(g.tensor(eps).constant).reshape(-1)[0])
    return _Core(x, None, None, rsqrt, epsilon, (square, node, *chain[::-1]))


def _rms(site: Site, y: Node) -> tuple[_Core, int, int, list[Node]] | None:
    """y = MUL(x, r), MUL(MUL(x, r), gamma) or MUL(x, MUL(r, gamma)), r RMSNorm's statistics:
    (core, gamma or -1, -1, tail)."""
    g = site.graph
    if y.op != Builtin.MUL or len(y.inputs) != 2 or y.params.get("activation", 0):
        return None
    gamma, tail, node = -1, [y], y
    constant = next((i for i in y.inputs if g.tensor(i).constant is not None), None)
    if constant is not None:  # MUL(MUL(x, r), gamma)
        inner = _made_by(site, _other(y, constant) if _other(y, constant) is not None else -1, Builtin.MUL)
        if inner is None or inner.params.get("activation", 0):
            return None
        gamma, node = constant, inner
        tail.insert(0, inner)
    for r in node.inputs:
        x = _other(node, r)
        core = _rms_core(site, r) if x is not None else None
        if core is not None and core.x == x:
            return core, gamma, -1, tail
        scaled = _made_by(site, r, Builtin.MUL) if gamma < 0 and x is not None else None
        if scaled is None or scaled.params.get("activation", 0):
            continue
        for inner_r in scaled.inputs:  # MUL(x, MUL(r, gamma))
            factor = _other(scaled, inner_r)
            core = _rms_core(site, inner_r)
            if core is not None and core.x == x and factor is not None and g.tensor(factor).constant is not None:
                return core, factor, -1, [scaled, y]
    return None


def _row_mean(node: Node | None, graph: Graph) -> int | None:
    """The input of a MEAN over the last axis and, at most, dims of size 1 (litert-torch reduces
    over the batch of 1 too), keeping them or not; else None."""
    if node is None or node.op != Builtin.MEAN or len(node.inputs) != 2:
        return None
    src = graph.tensor(node.inputs[0])
    axes = graph.tensor(node.inputs[1]).constant
    rank = len(src.shape)
    if axes is None or src.is_constant or not 1 <= rank <= 4:
        return None
    reduced = {int(a) % rank for a in np.asarray(axes).reshape(-1)}
    if rank - 1 not in reduced or any(src.shape[a] != 1 for a in reduced - {rank - 1}):
        return None
    return node.inputs[0]


def _viewed(site: Site, tensor: int, shape: tuple[int, ...]) -> tuple[int, list[Node]]:
    """``tensor`` seen through a RESHAPE to ``shape`` (the RESHAPE's input, and the RESHAPE), or
    itself when it already has that shape."""
    reshape = _made_by(site, tensor, Builtin.RESHAPE)
    if reshape is not None and tuple(site.graph.tensor(tensor).shape) == shape:
        return reshape.inputs[0], [reshape]
    return tensor, []


def _torch_native(site: Site, y: Node) -> tuple[_Core, int, int, list[Node]] | None:
    """PyTorch's native layer norm as litert-torch writes it: m = MEAN(x); v = MEAN(
    SQUARED_DIFFERENCE(x, m)); r = RSQRT(ADD(v, eps)); y = ADD(MUL(x, r), SUB(0, MUL(r, m))), the
    statistics reduced and reshaped back, then [MUL(gamma, ..)] [ADD(beta, ..)]:
    (core, gamma, beta, tail)."""
    g = site.graph
    tail: list[Node] = []
    gamma = beta = -1
    node: Node | None = y
    for op in (Builtin.ADD, Builtin.MUL):  # beta, then gamma, each optional
        if node is None or node.op != op or node.params.get("activation", 0) or len(node.inputs) != 2:
            continue
        constant = next((i for i in node.inputs if g.tensor(i).constant is not None), None)
        inner = _made_by(site, _other(node, constant), Builtin.ADD, Builtin.MUL) if constant is not None else None
        if constant is None or inner is None:
            continue
        if op == Builtin.ADD:
            beta = constant
        else:
            gamma = constant
        tail.insert(0, node)
        node = inner
    if node is None or node.op != Builtin.ADD or node.params.get("activation", 0) or len(node.inputs) != 2:
        return None
    for scaled_out, shift_out in (node.inputs, node.inputs[::-1]):
        scaled = _made_by(site, scaled_out, Builtin.MUL)
        if scaled is None or scaled.params.get("activation", 0):
            continue
        for x in scaled.inputs:
            shape = tuple(g.tensor(x).shape)
            stat = (*shape[:-1], 1)
            r_out = _other(scaled, x)
            if r_out is None:
                continue
            r, r_views = _viewed(site, r_out, stat)
            shift, shift_views = _viewed(site, shift_out, stat)
            found = _native_statistics(site, x, r, shift)
            if found is not None:
                core, shift_nodes = found
                nodes = (*core.nodes, *shift_nodes, *r_views, *shift_views, scaled, node)
                return dataclasses.replace(core, nodes=nodes), gamma, beta, tail
    return None


def _native_statistics(site: Site, x: int, r: int, shift: int) -> tuple[_Core, list[Node]] | None:
    """r = RSQRT(ADD(MEAN(SQUARED_DIFFERENCE(x, m)), eps)) and shift = SUB(0, MUL(r, m)) over
    m = MEAN(x) (reshaped back for the difference): the core, and the shift's nodes."""
    g = site.graph
    rsqrt = _made_by(site, r, Builtin.RSQRT)
    add = rsqrt and _made_by(site, rsqrt.inputs[0], Builtin.ADD)
    if not rsqrt or not add or add.params.get("activation", 0):
        return None
    eps = next((i for i in add.inputs if g.tensor(i).constant is not None), None)
    var = _other(add, eps) if eps is not None else None
    var_mean = var is not None and _made_by(site, var, Builtin.MEAN)
    if not var_mean or np.asarray(g.tensor(eps).constant).size != 1:
        return None
    diff = _made_by(site, _row_mean(var_mean, g) or -1, Builtin.SQUARED_DIFFERENCE)
    if diff is None or diff.inputs[0] != x:
        return None
    m_out, m_views = _viewed(site, diff.inputs[1], (*g.tensor(x).shape[:-1], 1))
    mean = _made_by(site, m_out, Builtin.MEAN)
    if mean is None or _row_mean(mean, g) != x or _row_mean(var_mean, g) != diff.outputs[0]:
        return None
    negate = _made_by(site, shift, Builtin.SUB)
    if negate is None or negate.params.get("activation", 0) or len(negate.inputs) != 2:
        return None
    zero = g.tensor(negate.inputs[0]).constant
    product = _made_by(site, negate.inputs[1], Builtin.MUL)
    if zero is None or np.any(np.asarray(zero) != 0) or product is None or product.params.get("activation", 0):
        return None
    if sorted(product.inputs) != sorted((r, mean.outputs[0])):
        return None
    epsilon = float(np.asarray(g.tensor(eps).constant).reshape(-1)[0])
    core = _Core(x, mean, None, rsqrt, epsilon, (mean, *m_views, diff, var_mean, add, rsqrt))
    return core, [product, negate]


class LayerNormRewrite:
    """The rewrite pass: ``match`` from the chain's last node, ``apply`` puts the fused node there."""

    def match(self, node: Node, site: Site) -> Match | None:
        found = _keras(site, node) or _torch(site, node) or _torch_native(site, node) or _rms(site, node)
        if found is None:
            return None
        core, gamma, beta, tail = found
        ordered = site.enclosed([*core.nodes, *tail], node)
        if ordered is None:
            return None
        channels = site.graph.tensor(core.x).shape[-1]
        for extra in (gamma, beta):
            if extra >= 0 and not _per_channel(site.graph, extra, channels):
                return None
        if site.graph.tensor(node.outputs[0]).shape != site.graph.tensor(core.x).shape:
            return None
        params = {"epsilon": core.epsilon, **({"centred": False} if core.mean is None else {})}
        return fused_match(site, ordered, node, LAYER_NORM, (core.x, gamma, beta), params)

    def apply(self, site: Site, found: Match) -> Site:
        return replace_nodes(site, found)
