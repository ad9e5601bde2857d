"""Pattern rewrites of a partition's graph before its kernels are emitted: an ordered list of
passes, each a ``match`` (where its pattern sits, from the node that ends it) and an ``apply``
(the graph with the pattern's nodes replaced: by one node of a compiler-internal op, or by
readers edited to take over a node's work). The PAD merge (pad_merge.py) runs first, then the
layer norm pass (layer_norm.py), then the attention pass (attention.py), then the swish pass
(swish.py), then the upsampling pass (upsample.py), then the transposed products
(transposed_products.py), then the re-index chains (reindex_chains.py), then the concatenation
chains (concat_chains.py); partition.REWRITES lists them. The passes over the emitted kernels come
after (fusion.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from .graph import Graph, Node


@dataclass(frozen=True)
class Match:
    """A pattern found: the nodes it replaces (in order) and the node that stands for them, or
    (``fused`` None) the nodes it drops and the ``edited`` nodes that take over their work."""

    nodes: tuple[int, ...]
    fused: Node | None
    edited: tuple[Node, ...] = ()
    #: names of dropped nodes that the kernel of an edited node carries: node index -> name
    names: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Site:
    """What a pass sees of the partition: its graph, nodes, outputs, and each tensor's readers."""

    graph: Graph
    nodes: list[int]
    outputs: list[int]
    readers: dict[int, list[Node]]
    producer: dict[int, Node]
    #: names of nodes dropped by a rewrite that the kernel of another node carries (a merged PAD's,
    #: on its first reader's kernel): node index -> name
    names: dict[int, str] = dataclasses.field(default_factory=dict)

    def only_reader(self, tensor: int) -> Node | None:
        """The one node of the partition reading ``tensor``, if it is not also a partition output."""
        found = self.readers.get(tensor, [])
        return found[0] if len(found) == 1 and tensor not in self.outputs else None

    def inner(self, tensor: int, readers: int) -> bool:
        """``tensor`` is read ``readers`` times, all in the partition, and is no partition output."""
        return len(self.readers.get(tensor, [])) == readers and tensor not in self.outputs

    def enclosed(self, members: list[Node], last: Node) -> tuple[int, ...] | None:
        """The indices of ``members`` (a chain that ends at ``last``) in the partition's order, when
        each is a node of it, none twice, and every tensor the others write is read inside the
        chain only and is no partition output; else None."""
        indices = {n.index for n in members}
        if len(indices) != len(members) or not all(i in self.nodes for i in indices):
            return None
        for n in members:
            if n is not last and (
                n.outputs[0] in self.outputs or not all(r.index in indices for r in self.readers.get(n.outputs[0], []))
            ):
                return None
        return tuple(i for i in self.nodes if i in indices)


def fused_match(
    site: Site, ordered: tuple[int, ...], last: Node, op: int, inputs: tuple[int, ...], params: dict[str, Any]
) -> Match:
    """``ordered`` replaced by one node of ``op`` in ``last``'s place, writing its outputs and
    carrying the names of the nodes it stands for (``fused_names``)."""
    names = [site.graph.nodes[i].name for i in ordered]
    return Match(ordered, Node(last.index, op, 1, inputs, last.outputs, {**params, "fused_names": names}))


class Rewrite(Protocol):
    def match(self, node: Node, site: Site) -> Match | None:
        """The pattern ending at ``node``, if it is there."""

    def apply(self, site: Site, found: Match) -> Site:
        """``site`` with ``found``'s nodes replaced by its fused node."""


def replace_nodes(site: Site, found: Match) -> Site:
    """``site``'s graph (a copy) with ``found.fused`` (and ``found.edited``) in place of ``found.nodes``."""
    put = [*found.edited, *([found.fused] if found.fused is not None else [])]
    graph = dataclasses.replace(site.graph, nodes={**site.graph.nodes, **{n.index: n for n in put}})
    dropped = set(found.nodes) - {n.index for n in put}
    nodes = [i for i in site.nodes if i not in dropped]
    return make_site(graph, nodes, site.outputs, {**site.names, **dict(found.names)})


def make_site(graph: Graph, nodes: list[int], outputs: list[int], names: dict[int, str] | None = None) -> Site:
    readers: dict[int, list[Node]] = {}
    producer: dict[int, Node] = {}
    for index in nodes:
        node = graph.nodes[index]
        for i in dict.fromkeys(node.inputs):
            readers.setdefault(i, []).append(node)
        for o in node.outputs:
            producer[o] = node
    return Site(graph, nodes, outputs, readers, producer, names or {})


def rewrite(graph: Graph, nodes: list[int], outputs: list[int], passes: list[Rewrite]) -> Site:
    """Each pass in order over the partition's nodes, applied wherever it matches."""
    site = make_site(graph, nodes, outputs)
    for each in passes:
        for index in list(site.nodes):
            if index not in site.nodes:
                continue
            found = each.match(site.graph.nodes[index], site)
            if found is not None:
                site = each.apply(site, found)
    return site
