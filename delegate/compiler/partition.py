"""Compile a delegated partition (a set of TFLite nodes) into an InferenceContext."""

from __future__ import annotations

from ..context import model
from ..context.model import CalculationsPrecision, TensorStorageType
from . import layout
from .attention import AttentionRewrite
from .bounds import check_bounds
from .codes import carry_codes
from .concat_chains import ConcatChainRewrite
from .fusion import FUSIONS, UNFUSED, check_rounded
from .graph import BOOL, FLOAT32, INT32, INT64, Graph, Node
from .kernel import KernelNode
from .kernel_graph import KernelGraph, emit_kernels, fuse, runtime_inputs
from .kernels.common.pieces import HEAD, operation, written
from .layer_norm import LayerNormRewrite
from .ops import EmitContext, op_for
from .ops.base import constant_tensor
from .options import CompileOptions
from .pad_merge import PadMerge
from .precision import wide_tensors
from .reindex_chains import ReindexChainRewrite
from .rewrites import Rewrite, rewrite
from .scheduler import check_schedule, schedule
from .shape_check import declared_shape_problem
from .swish import SwishRewrite
from .transposed_products import TransposedProductsRewrite
from .upsample import UpsampleRewrite

__all__ = ["EDGE_INPUTS", "EDGE_OUTPUTS", "CompileOptions", "compile_partition", "runtime_inputs", "unsupported_reason"]

#: the graph rewrites, in the order they run (rewrites.py): with CompileOptions.fuse only
REWRITES: list[Rewrite] = [
    PadMerge(),
    LayerNormRewrite(),
    AttentionRewrite(),
    SwishRewrite(),
    UpsampleRewrite(),
    TransposedProductsRewrite(),
    ReindexChainRewrite(),
    ConcatChainRewrite(),
]


#: the types a partition's inputs and outputs may have: csrc/plugin.c converts integers and bools
#: into the floats the partition holds them in (exact up to 2^24 in magnitude; an invoke with a
#: larger value fails rather than round it) and int32 and bool back (int8 / uint8 activations are
#: float32 here, carried by quant.py)
EDGE_INPUTS = frozenset({FLOAT32, INT32, INT64, BOOL})
EDGE_OUTPUTS = frozenset({FLOAT32, INT32, BOOL})


def unsupported_reason(node: Node, graph: Graph) -> str | None:
    """None when the compiler can run ``node``, else why not."""
    op = op_for(node)
    if op is None:
        return f"{node.op_description} is not supported by the compiler"
    try:
        return op.check(node, graph) or declared_shape_problem(node, graph)
    except (KeyError, ValueError, TypeError) as exc:  # odd params or shapes: stay on CPU
        return f"{node.op_description}: {exc}"


_COPY = written(HEAD + "  FLT4 result = args.value.Read(X, Y, S, b);\n")


def _constant_output(graph: Graph, index: int, emit: EmitContext) -> model.CLNode:
    """A node writing constant tensor ``index`` (e.g. a folded DEQUANTIZE output) as a partition output."""
    t = graph.tensor(index)
    if t.constant is None:
        raise ValueError(f"partition output {index} is neither produced by a node nor a known constant")
    kernel = operation(_COPY, srcs=[], tensor_objects=[constant_tensor("value", t, emit)])
    placed = KernelNode(kernel, [], [index], [f"constant_{index}"], stamps_precision=False)
    return placed.render(emit.precision)


def compile_partition(
    graph: Graph, nodes: list[int], inputs: list[int], outputs: list[int], options: CompileOptions
) -> model.InferenceContext:
    """The context running ``nodes`` (in execution order) from partition ``inputs`` to ``outputs``."""
    captured, claimed = graph, nodes  # before the graph rewrites: what check_bounds names
    # rewrite: the graph passes, zero PADs into their readers and patterns into single nodes (rewrites.py)
    site = rewrite(graph, nodes, outputs, REWRITES if options.fuse else [])
    graph, nodes = site.graph, site.nodes
    emit = EmitContext(graph, options)
    wide = wide_tensors(graph, nodes, options.precision) if options.widen_sensitive else frozenset()
    # emit: one kernel per op (kernel_graph.py); fuse: the passes over the kernels (fusion.py)
    kernel_graph = KernelGraph(graph, nodes, inputs, outputs, emit, site.names, wide)
    emit_kernels(kernel_graph)
    fuse(kernel_graph, FUSIONS if options.fuse else UNFUSED)
    check_rounded(kernel_graph)
    # schedule: the launch order (scheduler.py); tensors in order of first use as the ops run
    kernels = schedule(kernel_graph.kernels, inputs)
    uses = sorted((u for k in kernels for u in k.uses), key=lambda u: u[0])
    used = list(dict.fromkeys(i for _, tensors in uses for i in tensors))
    ctx = model.InferenceContext(precision=options.precision, storage_type=options.storage)
    # tensors only integer matrix products read, stored as their int8 codes (codes.py)
    codes = carry_codes(kernels, graph, {*inputs, *outputs})
    ctx.nodes = [k.render(options.precision) for k in kernels]
    # Tensors only ever written by a kernel that fused their reader away are not runtime tensors.
    written = {i for n in ctx.nodes for i in n.output_ids}
    read = {i for n in ctx.nodes for i in n.input_ids}
    partition_inputs = set(inputs)
    used = {i: None for i in used if i in written or i in read or i in partition_inputs}
    # Inputs a kernel updates in place (Op.updated_inputs: variable tensors) go back to TFLite; in
    # buffers whatever the storage, as one kernel reads and writes them (images allow one or the other).
    states = [i for i in written if i in partition_inputs]
    outputs = [*outputs, *(i for i in states if i not in outputs)]
    # Integer values folded at compile time (shapes.py) that another partition reads: every reader is
    # delegated and folds them too, so nothing reads what TFLite holds there and they are not written.
    outputs = [i for i in outputs if i in used or graph.tensor(i).dtype == FLOAT32]
    for i in outputs:
        if i not in used:  # a folded constant the host still wants as an output
            ctx.nodes.append(_constant_output(graph, i, emit))
            used[i] = None
    edge = [i for i in outputs if graph.tensor(i).dtype not in EDGE_OUTPUTS]
    edge += [i for i in inputs if i in used and graph.tensor(i).dtype not in EDGE_INPUTS]
    if edge:  # claim.edge_dtype_problems keeps such nodes on CPU; csrc/plugin.c converts these types only
        raise ValueError(f"partition input or output tensor {edge[0]} is of a type the delegate does not convert")
    for i in used:
        precision = CalculationsPrecision.F32 if i in wide else options.precision
        storage = TensorStorageType.BUFFER if i in states else options.storage
        desc = layout.tensor_descriptor(graph.tensor(i).shape, precision, storage)
        if i in codes:
            desc = model.codes_descriptor(desc)
        ctx.tensors.append(model.TensorDescWithId(desc, i))
    ctx.input_ids = [i for i in inputs if i in used]
    ctx.output_ids = list(outputs)
    check_schedule(ctx)
    check_bounds(ctx, captured, claimed)
    return ctx
