"""Concatenations of concatenations read the inner inputs: CONCATENATION(CONCATENATION(a, b), c)
along one axis becomes CONCATENATION(a, b, c).

A DenseNet block grows its feature map one concatenation at a time: x_k = CONCATENATION(x_k-1,
y_k), where x_k-1 has a second reader (the block's next batch norm). Each concatenation's kernel
copies everything before it again, and x_k, read twice, can never join a reader's kernel. Read
from the inner inputs, x_k is left with the batch norm as its only reader, which then links into
the concatenation's kernel (fusion.py): x_k is never written, and the int8 batch norm's output
is written by a kernel that may write codes (codes.py).

The inner concatenation must not move its inputs onto another grid (a carried int8 output on the
grid of every input, quant.py), nor apply an activation, and along channels every inner input
must be whole slices, so that the outer kernel keeps its slice-by-slice copy. The inputs stay at
most ``ops.concatenation.MAX_INPUTS``: a longer chain keeps the concatenation where the count
would pass it, and starts again from there. An inner concatenation left without readers (and not
a partition output) is dropped, the outer one's kernel carrying its name.
"""

from __future__ import annotations

import dataclasses

from .graph import Builtin, Node
from .kernel_names import joined
from .ops.concatenation import MAX_INPUTS, Concatenation, concat_axis, copies_on_grid
from .rewrites import Match, Site, replace_nodes


def _inner(tensor: int, outer: Node, site: Site) -> Node | None:
    """The concatenation writing ``tensor`` if ``outer`` may read its inputs instead."""
    node = site.producer.get(tensor)
    if node is None or node.op != Builtin.CONCATENATION or len(node.outputs) != 1 or node.index == outer.index:
        return None
    graph = site.graph
    axis = concat_axis(outer, graph)
    if concat_axis(node, graph) != axis or not copies_on_grid(node, graph):
        return None  # the inner concatenation applies an activation or moves an input onto its grid
    if axis == 3 and any(graph.tensor(i).shape[-1] % 4 for i in node.inputs):
        return None  # an input of part slices would turn the outer copy lane by lane
    return node


def _flattened(node: Node, site: Site) -> tuple[list[int], list[Node]]:
    """``node``'s inputs with inner concatenations' inputs in their place, and those inner nodes."""
    inputs: list[int] = []
    inner: list[Node] = []
    for k, tensor in enumerate(node.inputs):
        found = _inner(tensor, node, site)
        rest = len(node.inputs) - k - 1
        if found is not None and len(inputs) + len(found.inputs) + rest <= MAX_INPUTS:
            inputs += found.inputs
            inner.append(found)
        else:
            inputs.append(tensor)
    return inputs, inner


class ConcatChainRewrite:
    """The rewrite pass (partition.REWRITES): ``match`` at the outer concatenation."""

    def match(self, node: Node, site: Site) -> Match | None:
        if node.op != Builtin.CONCATENATION or len(node.outputs) != 1:
            return None
        inputs, inner = _flattened(node, site)
        if not inner:
            return None
        edited = dataclasses.replace(node, inputs=tuple(inputs))
        if Concatenation().check(edited, site.graph) is not None:
            return None
        dead = [n for n in inner if n.outputs[0] not in inputs and site.only_reader(n.outputs[0]) is node]
        dropped = tuple(i for i in site.nodes if i in {n.index for n in dead})
        # the outer kernel carries the dropped nodes' names (and those they carried), so that the
        # plugin's reports count them as run (kernel_names.py)
        carried = [site.names[node.index]] if node.index in site.names else []
        for n in dead:
            carried += [n.name, *([site.names[n.index]] if n.index in site.names else [])]
        names = ((node.index, joined(carried)),) if dead else ()
        return Match((*dropped, node.index), None, edited=(edited,), names=names)

    def apply(self, site: Site, found: Match) -> Site:
        return replace_nodes(site, found)
