"""Which nodes of a graph a delegate claims, and why each other one stays on CPU."""

from __future__ import annotations

from . import int_ranges
from .fold import consumers, fold_constants
from .graph import BOOL, INT32, INT64, Builtin, Graph, op_name
from .ops import CUSTOM_OPS, op_for
from .ops.base import DTYPE_NAMES
from .partition import EDGE_INPUTS, EDGE_OUTPUTS, runtime_inputs, unsupported_reason
from .quant import is_quantized_node, quantized_reason
from .shapes import StaticShapes, fold_values

#: what the reason of an unclaimed custom op with no TFLite kernel says (plugin/prepare.py warns of
#: it, model_run.py adds it to the host's error): the host cannot run the node either
NO_KERNEL = "this TFLite runtime has no kernel for it either"


#: the reason of a node whose op option exclude_ops names
EXCLUDED = "excluded by the exclude_ops option"


def no_kernel_note() -> str:
    """What to do about a custom op that neither the host nor the delegate runs."""
    return (
        f"{NO_KERNEL}, so allocate_tensors() fails unless another delegate runs it: register the op's kernel "
        "with the interpreter (a custom op resolver) or use a model without it (the OpenCL delegate runs the "
        f"custom ops {', '.join(sorted(CUSTOM_OPS))})"
    )


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
            unsupported[node.name] = EXCLUDED
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
    in_plan = set(plan)  # a composite inlined (composites.py) reads its tensors through its nodes
    readers = {t: [r for r in rs if r in in_plan] for t, rs in consumers(graph).items()}
    claimed = set(supported)
    folded = [i for i in plan if (i in weights or i in shape_folded) and graph.nodes[i].name not in unsupported]
    # A folded chain (SHAPE -> STRIDED_SLICE -> PACK, DENSIFY -> DEQUANTIZE) is claimed from its end.
    for index in reversed(folded):
        node = graph.nodes[index]
        outs = [o for o in node.outputs if o >= 0]
        # With no reader the folded tensor is a graph output, which the partition would have to produce.
        if all(readers.get(o) and all(r in claimed for r in readers[o]) for o in outs):
            claimed.add(index)
        elif index in weights or op_for(node) is not None:  # supported: its readers are not
            unsupported[node.name] = f"{op_name(node.op)} folded only when every consumer is delegated"
        else:
            unsupported[node.name] = f"{op_name(node.op)} is not supported by the compiler"
    for index in plan:  # a custom op nobody runs: say so where it is reported, with what to do
        node = graph.nodes[index]
        if node.unresolved and index not in claimed and node.name in unsupported:
            unsupported[node.name] = f"{unsupported[node.name]}; {no_kernel_note()}"
    return [i for i in plan if i in claimed], unsupported


def _non_float_tensors(graph: Graph, index: int) -> tuple[list[int], list[int]]:
    """The bool and integer runtime tensors node ``index``'s kernel reads and writes; none for a
    node with no kernel (folded values are constants by now: shapes.fold_values)."""
    node = graph.nodes[index]
    if op_for(node) is None or all(graph.tensor(o).is_constant for o in node.outputs):
        return [], []

    def non_float(ids: list[int]) -> list[int]:
        # int8 / uint8 activations are carried in float and converted at the edges (quant.py)
        return [i for i in ids if graph.tensor(i).dtype in (INT32, INT64, BOOL) and not graph.tensor(i).is_constant]

    return non_float(runtime_inputs(node, graph)), non_float([o for o in node.outputs if o >= 0])


def carries_non_float(graph: Graph, nodes: list[int]) -> bool:
    """Whether any of ``nodes`` reads or writes a tensor that could not cross a partition's edge,
    or is exact only under its guards (``edge_dtype_problems`` has something to look for)."""
    return any(
        any(graph.tensor(i).dtype not in EDGE_INPUTS for i in reads)
        or any(graph.tensor(o).dtype not in EDGE_OUTPUTS for o in writes)
        for reads, writes in (_non_float_tensors(graph, index) for index in nodes)
    ) or any(int_ranges.exact_only_where_guarded(graph, graph.nodes[index]) for index in nodes)


def node_guarded_out(graph: Graph, index: int, out_of: set[int]) -> bool:
    """Does node ``index``, exact only under its guards (int_ranges.py), write a partition output?"""
    node = graph.nodes[index]
    return any(o in out_of for o in node.outputs) and int_ranges.exact_only_where_guarded(graph, node)


def edge_dtype_problems(graph: Graph, nodes: list[int], inputs: list[int], outputs: list[int]) -> dict[int, str]:
    """The nodes of a partition (``nodes``, its ``inputs`` and ``outputs`` as TFLite partitions
    them) that would pass a tensor across its edge of a type the C kernel does not convert that
    way (``EDGE_INPUTS``, ``EDGE_OUTPUTS``: an int64 output), or would hand out an int32 result that
    is exact only where its guards use it (``node_guarded_out``), and why each stays on CPU; the
    plugin leaves these nodes on CPU and partitions again until none is left."""
    into, out_of = set(inputs), set(outputs)
    problems: dict[int, str] = {}
    for index in nodes:
        reads, writes = _non_float_tensors(graph, index)
        edge = [i for i in (*reads, *writes) if i in into and graph.tensor(i).dtype not in EDGE_INPUTS]
        edge += [i for i in (*reads, *writes) if i in out_of and graph.tensor(i).dtype not in EDGE_OUTPUTS]
        if index not in problems and node_guarded_out(graph, index, out_of):
            problems[index] = (
                "its int32 result is exact only where the SELECTs guarding it use it, and it leaves the "
                "partition (a model output or a CPU node reads all of it)"
            )
            out = graph.nodes[index].outputs[0]
            for reader in (n for n in nodes if out in graph.nodes[n].inputs):
                problems[reader] = f"reads int32 tensor {out}, which may pass 2^24 where it is computed on CPU"
        if edge:
            t = graph.tensor(edge[0])
            side = "reads" if edge[0] in reads else "writes"
            problems[index] = (
                f"{side} {DTYPE_NAMES.get(t.dtype, str(t.dtype))} tensor {edge[0]} across the partition's edge "
                "(the delegate takes in float32, int32, int64 and bool tensors, and hands out float32, int32 and bool)"
            )
    return problems
