"""The upsampling rewrite: a chain of RESHAPE and TILE nodes that amounts to nearest-neighbour
upsampling by integer factors becomes one node of ops/upsample.py (one kernel reading each input
slice where the chain copied the whole tensor once per node).

TensorFlow's converter writes Keras 3's UpSampling2D((fy, fx)) on (B, H, W, C) as RESHAPE (B, H, 1,
W, C), TILE (1, 1, fy, 1, 1), RESHAPE (B, H * fy, W, 1, C), TILE (1, 1, 1, fx, 1), RESHAPE (B, H *
fy, W * fx, C). The pass does not look for those shapes: it follows what the chain does to the flat
(row-major) index. A RESHAPE keeps the map from output element to input element as it is; a TILE
repeats each of its dims, which is a stride-0 dimension in front of it. The chain is an upsampling
when that map, as a list of (size, stride) dimensions, is the one in[b, y // fy, x // fx, c] has.
Every tensor inside the chain must be read only inside it."""

from __future__ import annotations

import numpy as np

from .graph import Builtin, Node
from .ops.upsample import UPSAMPLE_NEAREST
from .rewrites import Match, Site, replace_nodes

#: a dimension of the map from output element to input element, in row-major order: (size, the
#: step in the input's flat index when its index goes up by one; 0 for a repeat)
Dim = tuple[int, int]

_CHAIN = (Builtin.RESHAPE, Builtin.TILE)


def _normal(dims: list[Dim]) -> list[Dim]:
    """``dims`` with sizes of 1 dropped and neighbours that step as one merged: one list per map."""
    out: list[Dim] = []
    for size, step in dims:
        if size == 1:
            continue
        if out and out[-1][1] == size * step:
            out[-1] = (out[-1][0] * size, step)
        else:
            out.append((size, step))
    return out


def _grouped(dims: list[Dim], shape: tuple[int, ...]) -> list[list[Dim]] | None:
    """``dims`` cut at the boundaries of ``shape``'s dims (a dim split where one straddles them),
    one list per dim of ``shape``; None when a boundary falls where no split is exact."""
    queue, groups = _normal(dims), []
    for extent in shape:
        group, left = [], int(extent)
        while left > 1:
            if not queue:
                return None
            size, step = queue.pop(0)
            if left % size == 0:
                group.append((size, step))
                left //= size
            elif size % left == 0:
                group.append((left, step * (size // left)))
                queue.insert(0, (size // left, step))
                left = 1
            else:
                return None
        groups.append(group)
    return groups if not queue else None


def _tiled(dims: list[Dim], node: Node, site: Site) -> list[Dim] | None:
    """The map after TILE ``node``: each dim of its input preceded by a repeat of its multiple."""
    multiples = site.graph.tensor(node.inputs[1]).constant if len(node.inputs) > 1 else None
    shape = site.graph.tensor(node.inputs[0]).shape
    groups = _grouped(dims, shape)
    if multiples is None or groups is None or np.asarray(multiples).size != len(shape):
        return None
    out: list[Dim] = []
    for m, group in zip(np.asarray(multiples).reshape(-1), groups, strict=True):
        out += [(int(m), 0), *group]
    return out


def _chain(site: Site, last: Node) -> list[Node]:
    """The RESHAPE and TILE nodes ending at ``last`` whose outputs only the next of them reads."""
    chain = [last]
    while True:
        source = chain[0].inputs[0]
        before = site.producer.get(source)
        if before is None or before.op not in _CHAIN or site.only_reader(source) is not chain[0]:
            return chain
        chain.insert(0, before)


def _factors(site: Site, chain: list[Node]) -> tuple[int, int] | None:
    """(fy, fx) when ``chain`` upsamples its 4-D input to its 4-D output, else None."""
    g = site.graph
    src, dst = g.tensor(chain[0].inputs[0]).shape, g.tensor(chain[-1].outputs[0]).shape
    if len(src) != 4 or len(dst) != 4 or src[0] != dst[0] or src[3] != dst[3]:
        return None
    (b, h, w, c), (_, oh, ow, _) = src, dst
    if oh % h or ow % w:
        return None
    fy, fx = oh // h, ow // w
    dims: list[Dim] | None = [(b * h * w * c, 1)]
    for node in chain:
        if node.op == Builtin.TILE:
            dims = _tiled(dims, node, site)
            if dims is None:
                return None
    want = [(b, h * w * c), (h, w * c), (fy, 0), (w, c), (fx, 0), (c, 1)]
    return (fy, fx) if _normal(dims) == _normal(want) else None


class UpsampleRewrite:
    """The rewrite pass: ``match`` from the chain's last node, ``apply`` puts the fused node there."""

    def match(self, node: Node, site: Site) -> Match | None:
        if node.op not in _CHAIN or len(node.outputs) != 1 or len(site.graph.tensor(node.outputs[0]).shape) != 4:
            return None
        chain = _chain(site, node)
        # the longest chain from a 4-D tensor that upsamples it (the chain may start in a reshape
        # of something else)
        for start in range(len(chain)):
            part = chain[start:]
            if not any(n.op == Builtin.TILE for n in part):
                return None
            factors = _factors(site, part)
            if factors is None:
                continue
            fused = Node(
                index=node.index,
                op=UPSAMPLE_NEAREST,
                version=1,
                inputs=(part[0].inputs[0],),
                outputs=node.outputs,
                params={"factor_y": factors[0], "factor_x": factors[1], "fused_names": [n.name for n in part]},
            )
            return Match(tuple(n.index for n in part), fused)
        return None

    def apply(self, site: Site, found: Match) -> Site:
        return replace_nodes(site, found)
