"""What TFLite can do around a partition, as rules on the nodes Prepare may claim: shapes TFLite
must propagate through the original plan, and tensors of types the delegate's kernel cannot pass
across a partition's edge."""

from __future__ import annotations

from typing import Any

from ..compiler.claim import carries_non_float, edge_dtype_problems
from ..compiler.op_names import BUILTIN_OPERATORS
from .capture import preview_partitions

#: builtin codes of the ops whose kernel prepares (allocates) other subgraphs of the model
SUBGRAPH_RUNNERS = frozenset(
    code
    for code, name in BUILTIN_OPERATORS.items()
    if name in {"IF", "WHILE", "CALL_ONCE", "STABLEHLO_WHILE", "STABLEHLO_COMPOSITE"}
)


def propagation_blocker(graph: Any, plan: list[int]) -> str | None:
    """Why TFLite must not propagate shapes through ``plan`` (the subgraph's original nodes) for
    this delegate, or None: the first node that would fail or multiply that propagation.

    With kTfLiteDelegateFlagsRequirePropagatedShapes, TFLite prepares the original plan at every
    allocation as well as the delegated one, so every node left on CPU is prepared twice. A custom
    op that no kernel implements (one only a delegate runs, as XNNPACK runs MediaPipe's
    Convolution2DTransposeBias under ai-edge-litert) fails that prepare, and the allocation with
    it. A node that runs other subgraphs (IF, WHILE, CALL_ONCE, StableHLO's WHILE and COMPOSITE)
    allocates them again at each of its prepares, so the work doubles at every level of nesting
    (an IF nested 20 deep took seconds where TFLite alone takes a millisecond)."""
    for index in plan:
        node = graph.nodes[index]
        if node.unresolved:
            return f"{node.name} is a custom op with no kernel: TFLite cannot prepare it"
        if node.op in SUBGRAPH_RUNNERS:
            return f"{node.name} runs other subgraphs: preparing it twice doubles the work at every nesting level"
    return None


def float_edges(context: Any, graph: Any, nodes: list[int], unsupported: dict[str, str]) -> list[int]:
    """``nodes`` less those that would pass a tensor of a type the C kernel does not convert (an
    int64 output) across the edge of the partitions TFLite makes of them (compiler/claim.py
    ``edge_dtype_problems``), partitioning again after each removal (which can put other such
    tensors on an edge) until none is left."""
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
