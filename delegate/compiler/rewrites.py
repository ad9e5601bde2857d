"""Pattern rewrites of a partition's graph before its kernels are emitted: an ordered list of
passes, each a ``match`` (where its pattern sits, from the node that ends it) and an ``apply``
(the graph with the pattern's nodes replaced by one node of a compiler-internal op). The layer
norm pass (layer_norm.py) is the first; merge_pads (pad_merge.py) still runs on its own."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

from .graph import Graph, Node


@dataclass(frozen=True)
class Match:
    """A pattern found: the nodes it replaces (in order) and the node that stands for them."""

    nodes: tuple[int, ...]
    fused: Node


@dataclass(frozen=True)
class Site:
    """What a pass sees of the partition: its graph, nodes, outputs, and each tensor's readers."""

    graph: Graph
    nodes: list[int]
    outputs: list[int]
    readers: dict[int, list[Node]]
    producer: dict[int, Node]

    def only_reader(self, tensor: int) -> Node | None:
        """The one node of the partition reading ``tensor``, if it is not also a partition output."""
        found = self.readers.get(tensor, [])
        return found[0] if len(found) == 1 and tensor not in self.outputs else None

    def inner(self, tensor: int, readers: int) -> bool:
        """``tensor`` is read ``readers`` times, all in the partition, and is no partition output."""
        return len(self.readers.get(tensor, [])) == readers and tensor not in self.outputs


class Rewrite(Protocol):
    def match(self, node: Node, site: Site) -> Match | None:
        """The pattern ending at ``node``, if it is there."""

    def apply(self, site: Site, found: Match) -> Site:
        """``site`` with ``found``'s nodes replaced by its fused node."""


def replace_nodes(site: Site, found: Match) -> Site:
    """``site``'s graph (a copy) with ``found.fused`` in place of ``found.nodes``."""
    fused = found.fused
    graph = dataclasses.replace(site.graph, nodes={**site.graph.nodes, fused.index: fused})
    dropped = set(found.nodes) - {fused.index}
    nodes = [i for i in site.nodes if i not in dropped]
    return make_site(graph, nodes, site.outputs)


def make_site(graph: Graph, nodes: list[int], outputs: list[int]) -> Site:
    readers: dict[int, list[Node]] = {}
    producer: dict[int, Node] = {}
    for index in nodes:
        node = graph.nodes[index]
        for i in dict.fromkeys(node.inputs):
            readers.setdefault(i, []).append(node)
        for o in node.outputs:
            producer[o] = node
    return Site(graph, nodes, outputs, readers, producer)


def rewrite(graph: Graph, nodes: list[int], outputs: list[int], passes: list[Rewrite]) -> tuple[Graph, list[int]]:
    """Each pass in order over the partition's nodes, applied wherever it matches."""
    site = make_site(graph, nodes, outputs)
    for each in passes:
        for index in list(site.nodes):
            if index not in site.nodes:
                continue
            found = each.match(site.graph.nodes[index], site)
            if found is not None:
                site = each.apply(site, found)
    return site.graph, site.nodes
