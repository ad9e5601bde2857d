"""What TFLite can do around a partition, as rules on the nodes Prepare may claim: shapes TFLite
must propagate through the original plan, and tensors of types TFLite cannot pass across a
partition's edge."""

from __future__ import annotations

from typing import Any

from ..compiler.claim import carries_non_float, edge_dtype_problems
from .capture import preview_partitions


def propagation_blocker(graph: Any, plan: list[int]) -> str | None:
    """The node that keeps TFLite from propagating shapes through the original plan, or None.

    With kTfLiteDelegateFlagsRequirePropagatedShapes, TFLite prepares the original nodes at every
    allocation, delegated ones included; a custom op that no kernel implements (one only a
    delegate runs, as XNNPACK runs MediaPipe's Convolution2DTransposeBias under ai-edge-litert)
    fails that prepare, and with it the whole allocation."""
    for index in plan:
        node = graph.nodes[index]
        if node.unresolved:
            return node.name
    return None


def float_edges(context: Any, graph: Any, nodes: list[int], unsupported: dict[str, str]) -> list[int]:
    """``nodes`` less those that would pass a bool or int32 tensor across the edge of the
    partitions TFLite makes of them (compiler/claim.py ``edge_dtype_problems``), partitioning
    again after each removal (which can put other such tensors on an edge) until none is left."""
    while nodes and carries_non_float(graph, nodes):
        problems: dict[int, str] = {}
        for members, inputs, outputs in preview_partitions(context, nodes):
            problems.update(edge_dtype_problems(graph, members, inputs, outputs))
        if not problems:
            break
        for index, why in problems.items():
            unsupported[graph.nodes[index].name] = why
        nodes = [n for n in nodes if n not in problems]
    return nodes
