"""Whether the delegate may ask TFLite to propagate shapes through a graph's original nodes.

The delegate sets kTfLiteDelegateFlagsRequirePropagatedShapes so that a resize after it was
applied reaches its kernels with every tensor's new shape (callbacks.py recompiles for them).
TFLite then prepares, at every allocation of a subgraph the delegate was applied to, the original
execution plan as well as the delegated one: every node that stays on CPU is prepared twice. That
is harmless for ordinary nodes and wrong for two kinds:

- a custom op that no kernel implements (one only a delegate runs): its prepare fails, and the
  allocation with it;
- a node that prepares other subgraphs (IF, WHILE, CALL_ONCE, StableHLO's WHILE and COMPOSITE):
  each of its prepares allocates those subgraphs again, so the work doubles at every level of
  nesting. An IF nested 20 deep took seconds to allocate where TFLite alone takes a millisecond.

On a graph with either, the delegate clears the flag (on its own ``TfLiteDelegate``, which TFLite
reads at every allocation): the model runs, and a resize after the delegate was applied fails the
allocation with a message saying so (``dlg_py_kernel_prepare``).
"""

from __future__ import annotations

from ..compiler.graph import Graph
from ..compiler.op_names import BUILTIN_OPERATORS

#: builtin codes of the ops whose kernel prepares (allocates) other subgraphs of the model
SUBGRAPH_RUNNERS = frozenset(
    code
    for code, name in BUILTIN_OPERATORS.items()
    if name in {"IF", "WHILE", "CALL_ONCE", "STABLEHLO_WHILE", "STABLEHLO_COMPOSITE"}
)


def propagation_blocker(graph: Graph, plan: list[int]) -> str | None:
    """Why TFLite must not propagate shapes through ``plan`` (the subgraph's original nodes) for
    this delegate, or None: the first node that would fail or multiply that propagation."""
    for index in plan:
        node = graph.nodes[index]
        if node.unresolved:
            return f"{node.name} is a custom op with no kernel: TFLite cannot prepare it"
        if node.op in SUBGRAPH_RUNNERS:
            return f"{node.name} runs other subgraphs: preparing it twice doubles the work at every nesting level"
    return None
