"""Output shapes a node's inputs and parameters imply, checked against the ones the model declares.

A delegated partition runs on the shapes the model file declares: TFLite computes a node's output
shape in the node's own prepare, which a delegated node never runs. A model whose declared shape
disagrees with what the op computes (a corrupt or hand-edited file) would make a kernel read or
write the wrong region, a wrong answer with no error. An op that declares its shape rule
(``Op.implied_shape``, ops/shape_rules.py) says what it computes from its inputs and parameters
(TFLite's semantics); a node whose declared output differs stays on CPU, where TFLite computes the
right shape, with the reason. Other ops are left to their own checks or have no shape of their
own to get wrong.
"""

from __future__ import annotations

from .graph import Graph, Node
from .ops import op_for
from .ops.shape_rules import shape_of


def declared_shape_problem(node: Node, graph: Graph) -> str | None:
    """Why ``node``'s declared output shape cannot be trusted (it differs from what its op computes
    from its inputs), or None when it matches or the op is not one this module knows."""
    op = op_for(node)
    if op is None or len(node.outputs) != 1 or node.outputs[0] < 0:
        return None
    try:
        implied = op.implied_shape(node, graph)
    except (KeyError, ValueError, IndexError, TypeError):
        return None  # parameters the op's own check reports
    declared = shape_of(graph, node.outputs[0])
    if implied is None or implied == declared:
        return None
    placeholder = next((i for i in (*node.inputs, *node.outputs) if _dynamic(graph, i)), None)
    if placeholder is not None:
        # a stored shape that is a placeholder (TensorList elements in a WHILE body): not corruption,
        # said as shapes.StaticShapes.reason says a shape computed at run time
        t = graph.tensor(placeholder)
        return (
            f"tensor {placeholder}'s shape is only known at run time: the model stores {list(t.shape)} "
            f"for it as a placeholder (shape signature {list(t.signature or ())})"
        )
    return (
        f"the model declares output shape {list(declared)}, but the op computes {list(implied)} from its inputs "
        "(a corrupt or edited model file?)"
    )


def _dynamic(graph: Graph, index: int) -> bool:
    """Whether tensor ``index`` has a dimension the model says is known only at run time."""
    tensor = graph.tensors.get(index)
    return tensor is not None and tensor.signature is not None and any(d < 0 for d in tensor.signature)
