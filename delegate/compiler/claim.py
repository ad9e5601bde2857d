"""Which nodes of a graph a delegate claims, and why each other one stays on CPU."""

from __future__ import annotations

from .fold import consumers, fold_constants
from .graph import Builtin, Graph, op_name
from .partition import unsupported_reason
from .quant import is_quantized_node, quantized_reason
from .shapes import StaticShapes, fold_values


def claimed_nodes(
    graph: Graph, plan: list[int], static: StaticShapes, *, exclude_ops: frozenset[str], dequantize: bool
) -> tuple[list[int], dict[str, str]]:
    """The nodes to claim, in plan order, and why each other one stays on CPU (node name -> why).

    ``exclude_ops``: op names left on CPU (option exclude_ops); ``dequantize``: DEQUANTIZE of
    constant weights is folded and quantized activations are carried in float (option
    enable_quantized_inference, quant.py). Nodes the compiler folds into
    constants (DENSIFY of sparse weights and DEQUANTIZE of weights, fold.py; integer shape
    arithmetic, shapes.py) need no kernel: they are claimed only when every consumer is, so that
    their outputs never have to leave the partition.
    """
    weights = fold_constants(graph, dequantize=dequantize)
    shape_folded = fold_values(graph, static)
    supported: list[int] = []
    unsupported: dict[str, str] = {}
    for index in plan:
        node = graph.nodes[index]
        if op_name(node.op) in exclude_ops:
            unsupported[node.name] = "excluded by the exclude_ops option"
        elif index in shape_folded:
            continue
        elif node.op == Builtin.DEQUANTIZE and index not in weights and not is_quantized_node(node, graph):
            unsupported[node.name] = (
                "DEQUANTIZE runs on CPU: enable_quantized_inference is off"
                if not dequantize
                else "DEQUANTIZE of a non-constant or unsupported tensor"
            )
        elif node.op == Builtin.DENSIFY and index not in weights:
            unsupported[node.name] = "DENSIFY of a non-constant tensor"
        elif index not in weights:
            quantized = quantized_reason(node, graph) if is_quantized_node(node, graph) else None
            reason = quantized or unsupported_reason(node, graph) or static.reason(node)
            if reason is None:
                supported.append(index)
            else:
                unsupported[node.name] = reason
    readers = consumers(graph)
    claimed = set(supported)
    folded = [i for i in plan if (i in weights or i in shape_folded) and graph.nodes[i].name not in unsupported]
    # A folded chain (SHAPE -> STRIDED_SLICE -> PACK, DENSIFY -> DEQUANTIZE) is claimed from its end.
    for index in reversed(folded):
        node = graph.nodes[index]
        outs = [o for o in node.outputs if o >= 0]
        # With no reader the folded tensor is a graph output, which the partition would have to produce.
        if all(readers.get(o) and all(r in claimed for r in readers[o]) for o in outs):
            claimed.add(index)
        elif index in weights:
            unsupported[node.name] = f"{op_name(node.op)} folded only when every consumer is delegated"
        else:
            unsupported[node.name] = f"{op_name(node.op)} is not supported by the compiler"
    return [i for i in plan if i in claimed], unsupported
