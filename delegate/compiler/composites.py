"""STABLEHLO_COMPOSITE nodes compiled by inlining their decomposition.

A composite (litert-torch marks RMSNorm, LayerNorm, scaled-dot-product attention so) is one node
of its graph whose semantics are its decomposition: another subgraph of the model, which TFLite
runs as a call. The plugin captures that subgraph (plugin/composites.py) as a ``Decomposition``;
``inline`` gives its nodes and tensors fresh indices in the calling graph, its arguments and
result replaced by the composite's own input and output tensors. The claim then sees the
composite's nodes as ordinary nodes of the plan (``Inlining.plan``; stand_ins.py): the composite
is delegated when every one of them is, and its partition compiles them, so the usual rewrites
(layer norm, fusion) apply inside it. The node stays in the graph for TFLite's view (partitions
are made of TFLite's node indices).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

from .graph import Builtin, Graph, Node, Tensor
from .stand_ins import StandIns

#: the most nodes a decomposition may bring into the graph
MAX_INLINED_NODES = 512


@dataclass(frozen=True)
class Decomposition:
    """A composite's decomposition subgraph as captured: its graph, execution plan, and which of
    its tensors are the composite's arguments and results (positions as the composite node's
    inputs and outputs)."""

    graph: Graph
    plan: list[int]
    arguments: list[int]
    results: list[int]

    def digest(self) -> str:
        """SHA-256 (hex) of what a compiled partition takes from it: ops, parameters, shapes and constants."""
        h = hashlib.sha256()
        for index in self.plan:
            node = self.graph.nodes[index]
            h.update(json.dumps([node.op, node.version, node.inputs, node.outputs, sorted(node.params.items())],
                                default=str).encode())  # fmt: skip
        for index in sorted(self.graph.tensors):
            t = self.graph.tensors[index]
            h.update(json.dumps([index, t.dtype, t.shape, t.scales, t.zero_points, t.quant_axis]).encode())
            if t.is_constant and t.constant is not None:
                h.update(t.constant.tobytes())
        h.update(json.dumps([self.arguments, self.results]).encode())
        return h.hexdigest()


class Inlining(StandIns):
    """The composites of one graph: which were inlined (node -> its nodes in the graph, in order)
    and why each other one was not."""

    def refusal(self, graph: Graph, owner: int, member: Node, why: str | None) -> str:
        title = graph.nodes[owner].params.get("name", "")
        return f"its decomposition ({title}) has {member.op_description} that stays on CPU: " + (
            why or "it is claimed only with the nodes it feeds"
        )


def inline(graph: Graph, node: Node, body: Decomposition, first_tensor: int, first_node: int) -> list[int]:
    """Put ``body``'s nodes and tensors into ``graph`` as the composite ``node``'s: its arguments read
    ``node``'s inputs, its results are ``node``'s outputs, the rest numbered from ``first_tensor``
    and ``first_node`` on. The nodes' indices, in execution order."""
    rename: dict[int, int] = {-1: -1}
    for position, tensor in enumerate(body.arguments):
        rename[tensor] = node.inputs[position]
    for position, tensor in enumerate(body.results):
        rename[tensor] = node.outputs[position]
    fresh = first_tensor
    for index in sorted(body.graph.tensors):
        if index not in rename:
            rename[index] = fresh
            graph.tensors[fresh] = dataclasses.replace(body.graph.tensors[index], index=fresh)
            fresh += 1
    members: list[int] = []
    for number, index in enumerate(body.plan):
        original = body.graph.nodes[index]
        copy = dataclasses.replace(
            original,
            index=first_node + number,
            inputs=tuple(rename[i] for i in original.inputs),
            outputs=tuple(rename[o] for o in original.outputs),
            params=dict(original.params),
        )
        graph.nodes[copy.index] = copy
        members.append(copy.index)
    return members


def ordered_results(graph: Graph, node: Node, body: Decomposition) -> Decomposition:
    """``body`` with its results in the order of ``node``'s outputs, matched by type and shape
    (results are told apart by those: plugin/composites.py); as it is where they do not match."""
    by_signature = {(body.graph.tensor(r).dtype, tuple(body.graph.tensor(r).shape)): r for r in body.results}
    wanted = [(graph.tensor(o).dtype, tuple(graph.tensor(o).shape)) if o >= 0 else None for o in node.outputs]
    if len(wanted) != len(body.results) or any(w not in by_signature for w in wanted):
        return body
    return dataclasses.replace(body, results=[by_signature[w] for w in wanted])  # type: ignore[index]


def mismatch(graph: Graph, node: Node, body: Decomposition) -> str | None:
    """Why ``body`` does not stand for ``node`` (its arguments' and results' types and shapes must
    be the node's inputs' and outputs'), or None."""
    if len(body.arguments) != len(node.inputs) or len(body.results) != len(node.outputs):
        return (
            f"its decomposition takes {len(body.arguments)} and gives {len(body.results)} tensors, "
            f"the node {len(node.inputs)} and {len(node.outputs)}"
        )
    pairs = [*zip(node.inputs, body.arguments, strict=True), *zip(node.outputs, body.results, strict=True)]
    for outer, inner in pairs:
        if outer < 0:
            return "it has an omitted input"
        a, b = graph.tensor(outer), body.graph.tensor(inner)
        if (a.dtype, tuple(a.shape)) != (b.dtype, tuple(b.shape)):
            return f"its tensor {outer} {list(a.shape)} is {list(b.shape)} in its decomposition"
    if len(body.plan) > MAX_INLINED_NODES:
        return f"its decomposition has {len(body.plan)} nodes (at most {MAX_INLINED_NODES} are inlined)"
    if any(body.graph.nodes[i].op == Builtin.STABLEHLO_COMPOSITE for i in body.plan):
        return "its decomposition holds composites itself"
    return None


def fresh_tensor(tensors: dict[int, Tensor], floor: int) -> int:
    """The first tensor index at or past ``floor`` that ``tensors`` does not use after its last one."""
    return max([floor - 1, *tensors]) + 1
