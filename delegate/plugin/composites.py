"""Capture of STABLEHLO_COMPOSITE decompositions through the TfLiteContext, for inlining
(compiler/composites.py).

During Prepare, ``AcquireSubgraphContext`` gives the context of another subgraph of the model
(TFLite 2.14 and ai-edge-litert fill it in; a host that does not leaves composites on CPU, with
that reason), whose nodes and tensors are read as the calling graph's are, and which is released
before anything else is asked of TFLite.

The context does not list a subgraph's inputs and outputs, so they are found as the converter
writes them, and checked: the composite's k-th argument is the tensor named ``<function>_arg<k>``
(MLIR's export names a function's arguments so); its results are the outputs TFLite gives a
partition of all its nodes (they include the subgraph's outputs). Each must have the type and
shape of the composite's matching input or output, and results that could be taken for one
another (same type and shape) leave the composite on CPU rather than be guessed.
"""

from __future__ import annotations

import re
from typing import Any

from .._native import ffi
from ..compiler.claim import EXCLUDED
from ..compiler.composites import Decomposition, Inlining, fresh_tensor, inline, mismatch, ordered_results
from ..compiler.graph import Builtin, Graph
from ..errors import DelegateError
from .capture import capture_graph, capture_tensor, execution_plan, held_subgraph, preview_partitions

_ARGUMENT = re.compile(r"_arg(\d+)$")


def inline_composites(
    context: Any, graph: Graph, plan: list[int], *, excluded: bool = False
) -> tuple[Inlining, dict[int, int]]:
    """``graph`` with the decomposition of each composite of ``plan`` that can be inlined put in
    it (compiler/composites.py), and each inlined composite's subgraph context address (the
    plugin leaves those subgraphs alone when it delegates the composite). ``excluded``: none is
    (option exclude_ops names STABLEHLO_COMPOSITE)."""
    inlining = Inlining(list(plan))
    contexts: dict[int, int] = {}
    composites = [i for i in plan if graph.nodes[i].op == Builtin.STABLEHLO_COMPOSITE]
    if not composites:
        return inlining, contexts
    if excluded:
        inlining.reasons.update(dict.fromkeys(composites, EXCLUDED))
        return inlining, contexts
    next_tensor = fresh_tensor(graph.tensors, int(context.tensors_size))
    next_node = max(plan) + 1
    for index in composites:
        node = graph.nodes[index]
        try:
            body, address = _decomposition(context, int(node.params["subgraph"]))
        except (LookupError, ValueError, RuntimeError, DelegateError) as exc:
            inlining.reasons[index] = f"its decomposition could not be read: {exc}"
            continue
        body = ordered_results(graph, node, body)
        why = mismatch(graph, node, body)
        if why is not None:
            inlining.reasons[index] = why
            continue
        node.params["decomposition"] = body.digest()  # in the partition's fingerprint
        members = inline(graph, node, body, next_tensor, next_node)
        next_tensor = fresh_tensor(graph.tensors, next_tensor)
        next_node += len(members)
        inlining.members[index] = members
        contexts[index] = address
    inlining.plan = inlining.expand(list(plan))
    return inlining, contexts


def _decomposition(context: Any, subgraph: int) -> tuple[Decomposition, int]:
    """The decomposition in subgraph ``subgraph``, and its context's address."""
    with held_subgraph(context, subgraph) as sub:
        plan = execution_plan(sub)
        # constants are read whole now: the subgraph's context is not at hand when compiling
        body = capture_graph(sub, plan, read_limit=None)
        arguments = _arguments(sub)
        for tensor in arguments.values():
            if tensor not in body.tensors:  # an argument no node reads
                body.tensors[tensor] = capture_tensor(sub, tensor, read_limit=None)
        results = _results(sub, body, plan)
        address = int(ffi.cast("uintptr_t", sub))
    count = max(arguments, default=-1) + 1
    if sorted(arguments) != list(range(count)):
        raise ValueError(f"its arguments are not named _arg0 to _arg{count - 1}")
    return Decomposition(body, plan, [arguments[k] for k in range(count)], results), address


def _arguments(sub: Any) -> dict[int, int]:
    """Argument position -> tensor, from the tensors' names (``<function>_arg<k>``)."""
    found: dict[int, int] = {}
    for i in range(int(sub.tensors_size)):
        name = sub.tensors[i].name
        match = _ARGUMENT.search(ffi.string(name).decode("utf-8", "replace")) if name != ffi.NULL else None
        if match is not None:
            position = int(match.group(1))
            if position in found:
                raise ValueError(f"two tensors are named as its argument {position}")
            found[position] = i
    return found


def _results(sub: Any, body: Graph, plan: list[int]) -> list[int]:
    """The subgraph's outputs: those of one partition of all its nodes, as TFLite previews it (a
    partition's outputs include the subgraph's own); they must not be taken for one another."""
    previews = preview_partitions(sub, plan)
    if len(previews) != 1:
        raise ValueError(f"its nodes preview as {len(previews)} partitions, not one")
    results = previews[0][2]
    signatures = [(body.tensor(o).dtype, tuple(body.tensor(o).shape)) for o in results if o in body.tensors]
    if len(signatures) != len(results):
        raise ValueError("a result is no tensor of its nodes")
    if len(set(signatures)) != len(signatures):
        raise ValueError("its results cannot be told apart (two of one type and shape)")
    return results
