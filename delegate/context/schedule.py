"""The schedule invariant of a context: every node reads only what is ready when it runs.

A node may read the context's inputs, its variables and tensors written by nodes before it; each
tensor is written by at most one node, never an input unless it is also an output (a state the
context updates in place and hands back: a TFLite variable tensor, as an LSTM's). A node reading
a tensor that a later node writes would read stale memory (memory is shared between tensors whose
lifetimes do not overlap), a silently wrong result: the compiler keeps the invariant, the writer
refuses a context that breaks it and the runtime checks every context it loads.
"""

from __future__ import annotations

from .model import InferenceContext


def _label(index: int, name: str | None) -> str:
    return f"node {index} ({name})" if name else f"node {index}"


def schedule_violation(ctx: InferenceContext) -> str | None:
    """Why ``ctx``'s nodes do not run in a valid order, or None when they do."""
    ready = set(ctx.input_ids) | {pair.first for pair in ctx.variable_ids_and_refs}
    inputs, outputs = set(ctx.input_ids), set(ctx.output_ids)
    writer_of: dict[int, int] = {}
    for index, node in enumerate(ctx.nodes):
        for i in node.output_ids:
            if i in writer_of:
                first = writer_of[i]
                return (
                    f"{_label(index, node.name)} writes tensor {i}, already written by "
                    f"{_label(first, ctx.nodes[first].name)}"
                )
            writer_of[i] = index
    for index, node in enumerate(ctx.nodes):
        for i in node.input_ids:
            if i in ready:
                continue
            writer = writer_of.get(i)
            label = _label(index, node.name)
            if writer is None:
                return f"{label} reads tensor {i}, which is neither a context input nor written by any node"
            return f"{label} reads tensor {i} before {_label(writer, ctx.nodes[writer].name)} writes it"
        for i in node.output_ids:
            if i in inputs and i not in outputs:
                return f"{_label(index, node.name)} writes tensor {i}, a context input it does not hand back"
            ready.add(i)
    for i in ctx.output_ids:
        if i not in ready:
            return f"output tensor {i} is written by no node"
    return None
