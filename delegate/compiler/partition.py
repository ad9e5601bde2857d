"""Compile a delegated partition (a set of TFLite nodes) into an InferenceContext."""

from __future__ import annotations

from dataclasses import dataclass

from ..context import model
from ..context.model import CalculationsPrecision, TensorStorageType
from . import layout
from .bounds import check_bounds
from .fusion import link, linkable
from .graph import FLOAT32, Builtin, Graph, Node
from .kernel import KernelNode
from .layer_norm import LayerNormRewrite
from .ops import EmitContext, op_for, traits_of
from .ops.base import HEAD, ConvKernels, KernelFamily, constant_tensor, operation, written
from .ops.conv import reads_concat_in_place
from .ops.conv_pair import pair_operation, pairs
from .pad_merge import merge_pads
from .precision import wide_tensors
from .quant import qdq_code
from .rewrites import Rewrite, rewrite
from .shape_check import declared_shape_problem

#: the pattern rewrites, in the order they run (rewrites.py)
REWRITES: list[Rewrite] = [LayerNormRewrite()]


@dataclass(frozen=True)
class CompileOptions:
    """How a partition is compiled: precision, tensor storage, fusion."""

    precision: CalculationsPrecision = CalculationsPrecision.F32
    storage: TensorStorageType = TensorStorageType.BUFFER
    #: link elementwise ops into the kernel of their producer (fusion.py)
    fuse: bool = True
    #: local memory a depthwise + 1x1 pair kernel may hold (ops/conv_pair.py); 0 (the default)
    #: keeps every pair as two kernels. The plugin sets it for CPU devices only (with ``fuse``).
    pair_local_bytes: int = 0
    #: floats per vector register of the device's compiler target: 16 makes the matrix-product
    #: kernels use 16-channel (AVX-512) accumulators where the channel counts suit them
    #: (ops/gemm_blocks.gemm_width). The plugin sets it for CPU devices compiling for AVX-512.
    vector_width: int = 8
    #: CONV_2D's kernel family (ops/base.py): the generic ones only for comparisons (tests,
    #: benchmarks); like every field, part of the serialization cache key (delegate/cache.py)
    conv_kernels: ConvKernels = "gemm"
    #: the kernels of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED (ops/base.py); device_policy
    #: picks gpu on GPU devices unless option kernel_family says otherwise
    kernel_family: KernelFamily = "cpu"
    #: work-items per work-group of the gpu family's convolutions: a power of two <= the device's limit
    gpu_work_group: int = 64
    #: at F16 and F32_F16, store in float32 the tensors whose rounding a high-gain consumer would
    #: magnify (precision.py); off only to measure what it saves
    widen_sensitive: bool = True


def _fusion_target(
    node: Node,
    graph: Graph,
    producer_of: dict[int, KernelNode],
    readers: dict[int, int],
    outputs: list[int],
    options: CompileOptions,
) -> int | None:
    """The tensor whose producing kernel ``node`` can be linked into, if any."""
    for candidate in node.inputs:
        if candidate < 0 or candidate not in producer_of:
            continue
        if readers.get(candidate, 0) != 1 or candidate in outputs:
            continue  # another reader, or the host wants it: it must be written
        if linkable(node, graph, candidate, producer_of[candidate]):
            return candidate
    return None


def _schedule_after_operands(
    kernels: list[KernelNode], producer: KernelNode, node: Node, fused: int, graph: Graph, inputs: list[int]
) -> None:
    """Move ``producer`` to the end of ``kernels`` when ``node``, about to be linked into it, reads
    a runtime tensor that a kernel after ``producer`` writes (the other operand of a binary op
    whose branch runs later): linked there, the kernel would read that tensor before it is written.

    Moving is always valid: ``producer``'s own inputs are written before its old place, and its
    output (``fused``) has no reader but ``node``, which is compiled now, after every kernel so far.
    """
    others = [i for i in node.inputs if i >= 0 and i != fused and graph.tensor(i).constant is None]
    if not others:
        return
    # from the end: the producer is mostly the last kernel (a chain), so linking stays linear
    position = next(k for k in range(len(kernels) - 1, -1, -1) if kernels[k] is producer)
    later = {i for k in kernels[position + 1 :] for i in k.output_ids}
    if any(i in later and i not in inputs for i in others):
        kernels.append(kernels.pop(position))


def _concats_read_in_place(
    graph: Graph, nodes: list[int], readers: dict[int, int], outputs: list[int], emit: EmitContext
) -> dict[int, list[int]]:
    """CONCATENATION outputs whose only reader reads the concatenation's inputs in place (so the
    concatenation gets no kernel and its output no memory): output -> inputs."""
    reader_of: dict[int, Node] = {}
    for index in nodes:
        for i in set(graph.nodes[index].inputs):
            reader_of[i] = graph.nodes[index]
    merged: dict[int, list[int]] = {}
    for index in nodes:
        node = graph.nodes[index]
        if node.op != Builtin.CONCATENATION or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        if readers.get(out, 0) != 1 or out in outputs or out not in reader_of:
            continue
        if _regrids(graph, node):
            continue  # its output must be rounded onto its grid, which a read in place skips
        if reads_concat_in_place(reader_of[out], node, emit):
            merged[out] = list(node.inputs)
    return merged


def _pairs(
    graph: Graph,
    nodes: list[int],
    readers: dict[int, int],
    outputs: list[int],
    emit: EmitContext,
    local_bytes: int,
    wide: frozenset[int],
) -> dict[int, Node]:
    """Depthwise nodes that run in one kernel with the 1x1 convolution reading them (ops/conv_pair.py):
    depthwise node index -> that convolution. The depthwise output must have no other reader, not
    be a partition output, and not need float32 storage (the pair holds it in FLT local memory)."""
    if local_bytes <= 0:
        return {}
    reader_of = {i: graph.nodes[index] for index in nodes for i in graph.nodes[index].inputs}
    found: dict[int, Node] = {}
    for index in nodes:
        node = graph.nodes[index]
        if node.op != Builtin.DEPTHWISE_CONV_2D or len(node.outputs) != 1:
            continue
        out = node.outputs[0]
        conv = reader_of.get(out)
        if conv is None or readers.get(out, 0) != 1 or out in outputs or conv.index not in nodes or out in wide:
            continue
        if graph.tensor(out).carried is not None:
            continue  # the depthwise output is rounded onto its grid, which the pair kernel has no point for
        if pairs(node, conv, emit, local_bytes):
            found[index] = conv
    return found


def _regrids(graph: Graph, node: Node) -> bool:
    """Does ``node`` write a carried tensor (quant.py) whose values its inputs may not hold already?"""
    out = graph.tensor(node.outputs[0]).carried if node.outputs else None
    data = [graph.tensor(i) for i in node.inputs if i >= 0 and not graph.tensor(i).is_constant]
    return out is not None and any(t.carried != out for t in data)


def _quantize_output(placed: KernelNode, node: Node, graph: Graph) -> None:
    """Round ``node``'s result onto its output's grid in ``placed``'s kernel when the output is a
    carried tensor (quant.py): the step runs in front of the kernel's writes, linked like an op."""
    params = graph.tensor(node.outputs[0]).carried if len(node.outputs) == 1 else None
    if params is None:
        return
    if placed.kernel.accepts_links:
        placed.kernel.linked.append(qdq_code(params, traits_of(node.op).rounds_with_zero_point))
    elif _regrids(graph, node):
        raise ValueError(f"{node.name}: its kernel has no write hook for the quantize-and-dequantize step")


def unsupported_reason(node: Node, graph: Graph) -> str | None:
    """None when the compiler can run ``node``, else why not."""
    op = op_for(node)
    if op is None:
        return f"{node.op_description} is not supported by the compiler"
    try:
        return op.check(node, graph) or declared_shape_problem(node, graph)
    except (KeyError, ValueError, TypeError) as exc:  # odd params or shapes: stay on CPU
        return f"{node.op_description}: {exc}"


def runtime_inputs(node: Node, graph: Graph) -> list[int]:
    op = op_for(node)
    assert op is not None, f"{node.name} was claimed with no op to compile it"
    return [i for i in node.inputs[: op.data_inputs] if i >= 0 and not graph.tensor(i).is_constant]


_COPY = written(HEAD + "  FLT4 result = args.value.Read(X, Y, S, b);\n")


def _constant_output(graph: Graph, index: int, emit: EmitContext) -> model.CLNode:
    """A node writing constant tensor ``index`` (e.g. a folded DEQUANTIZE output) as a partition output."""
    t = graph.tensor(index)
    if t.constant is None:
        raise ValueError(f"partition output {index} is neither produced by a node nor a known constant")
    kernel = operation(_COPY, srcs=[], tensor_objects=[constant_tensor("value", t, emit)])
    placed = KernelNode(kernel, [], [index], [f"constant_{index}"], stamps_precision=False)
    return placed.render(emit.precision)


def _readers(graph: Graph, nodes: list[int]) -> dict[int, int]:
    """Tensor -> how many of ``nodes`` read it."""
    readers: dict[int, int] = {}
    for index in nodes:
        for i in set(graph.nodes[index].inputs):
            readers[i] = readers.get(i, 0) + 1
    return readers


def compile_partition(
    graph: Graph, nodes: list[int], inputs: list[int], outputs: list[int], options: CompileOptions
) -> model.InferenceContext:
    """The context running ``nodes`` (in execution order) from partition ``inputs`` to ``outputs``."""
    captured, claimed = graph, nodes  # before the PAD merge: what check_bounds names
    pad_names: dict[int, str] = {}
    if options.fuse:  # zero PADs run inside their readers: convolutions, elementwise ops (pad_merge.py)
        merged = merge_pads(graph, nodes, outputs)
        graph, nodes, pad_names = merged.graph, merged.nodes, merged.names
        graph, nodes = rewrite(graph, nodes, outputs, REWRITES)  # patterns into single nodes (rewrites.py)
    emit = EmitContext(
        graph,
        options.precision,
        options.storage,
        vector_width=options.vector_width,
        conv_kernels=options.conv_kernels,
        kernel_family=options.kernel_family,
        gpu_work_group=options.gpu_work_group,
    )
    readers = _readers(graph, nodes)
    if options.fuse:
        emit.concat_sources = _concats_read_in_place(graph, nodes, readers, outputs, emit)
    wide = wide_tensors(graph, nodes, options.precision) if options.widen_sensitive else frozenset()
    paired = _pairs(graph, nodes, readers, outputs, emit, options.pair_local_bytes, wide) if options.fuse else {}
    kernels, used = _kernels(graph, nodes, inputs, outputs, options, emit, readers, paired, pad_names)
    ctx = model.InferenceContext(precision=options.precision, storage_type=options.storage)
    ctx.nodes = [k.render(options.precision) for k in kernels]
    # Tensors only ever written by a kernel that fused their reader away are not runtime tensors.
    written = {i for n in ctx.nodes for i in n.output_ids}
    read = {i for n in ctx.nodes for i in n.input_ids}
    partition_inputs = set(inputs)
    used = {i: None for i in used if i in written or i in read or i in partition_inputs}
    # Integer values folded at compile time (shapes.py) that another partition reads: every reader is
    # delegated and folds them too, so nothing reads what TFLite holds there and they are not written.
    outputs = [i for i in outputs if i in used or graph.tensor(i).dtype == FLOAT32]
    for i in outputs:
        if i not in used:  # a folded constant the host still wants as an output
            ctx.nodes.append(_constant_output(graph, i, emit))
            used[i] = None
    edge = [i for i in (*outputs, *(i for i in inputs if i in used)) if graph.tensor(i).dtype != FLOAT32]
    if edge:  # claim.edge_dtype_problems keeps such nodes on CPU; the runtime converts float32 only
        raise ValueError(f"partition input or output tensor {edge[0]} is not float32")
    for i in used:
        precision = CalculationsPrecision.F32 if i in wide else options.precision
        desc = layout.tensor_descriptor(graph.tensor(i).shape, precision, options.storage)
        ctx.tensors.append(model.TensorDescWithId(desc, i))
    ctx.input_ids = [i for i in inputs if i in used]
    ctx.output_ids = list(outputs)
    check_bounds(ctx, captured, claimed)
    return ctx


def _kernels(
    graph: Graph,
    nodes: list[int],
    inputs: list[int],
    outputs: list[int],
    options: CompileOptions,
    emit: EmitContext,
    readers: dict[int, int],
    paired: dict[int, Node],
    pad_names: dict[int, str],
) -> tuple[list[KernelNode], list[int]]:
    """The partition's kernels in launch order, and the tensors they use (in order of first use)."""
    kernels: list[KernelNode] = []
    used: dict[int, None] = {}  # in order of first use (a dict: linear in the partition's size)

    def use(tensors: list[int]) -> None:
        used.update(dict.fromkeys(tensors))

    producer_of: dict[int, KernelNode] = {}  # runtime tensor -> the kernel that writes it, open to links
    merged_names: dict[int, str] = {}  # concatenations read in place: output -> node name
    paired_convs = {conv.index for conv in paired.values()}
    for index in nodes:
        node = graph.nodes[index]
        if index in paired_convs:
            continue  # runs in the kernel of the depthwise node before it
        if index in paired:  # the depthwise node and the 1x1 convolution reading it, one kernel
            conv = paired[index]
            kernel = pair_operation(node, conv, emit, options.pair_local_bytes)
            names = [node.name, conv.name, *(pad_names[i] for i in (index, conv.index) if i in pad_names)]
            placed = KernelNode(kernel, [node.inputs[0]], list(conv.outputs), names)
        else:
            if node.outputs and all(graph.tensor(o).is_constant for o in node.outputs):
                continue  # folded into a constant (fold.py, shapes.py): no kernel
            if node.op == Builtin.CONCATENATION and node.outputs[0] in emit.concat_sources:
                merged_names[node.outputs[0]] = node.name  # its reader (later in order) takes the name
                continue  # and reads the inputs in place: no kernel
            fused = _fusion_target(node, graph, producer_of, readers, outputs, options) if options.fuse else None
            if fused is not None:
                producer = producer_of.pop(fused)
                _schedule_after_operands(kernels, producer, node, fused, graph, inputs)
                link(producer, node, fused, emit)
                producer.nodes += [pad_names[index]] if index in pad_names else []
                _quantize_output(producer, node, graph)
                producer_of[node.outputs[0]] = producer
                use([*producer.input_ids, *node.outputs])
                continue
            op = op_for(node)
            assert op is not None
            node_inputs = runtime_inputs(node, graph)
            if op.per_output:  # several outputs: one kernel each, all reading the same input
                for kernel, output in op.emit_many(node, emit):
                    name = f"{node.name}:{output}"
                    kernels.append(KernelNode(kernel, node_inputs, [output], [name], stamps_precision=False))
                use([*node_inputs, *node.outputs])
                continue
            kernel = op.emit(node, emit)
            node_inputs = [j for i in node_inputs for j in emit.concat_sources.get(i, [i])]
            names = [*node.params.get("fused_names", [node.name])]  # a rewrite's node carries its nodes' names
            names += [merged_names[i] for i in node.inputs if i in merged_names]
            names += [pad_names[index]] if index in pad_names else []
            placed = KernelNode(kernel, node_inputs, list(node.outputs), names)
        if len(placed.input_ids) != len(kernel.operation.src_tensors_names):
            raise ValueError(
                f"{node.name}: {len(placed.input_ids)} runtime inputs for {kernel.operation.src_tensors_names}"
            )
        _quantize_output(placed, conv if index in paired else node, graph)
        kernels.append(placed)
        producer_of[placed.output_ids[0]] = placed  # linkable() decides whether ops can join it
        use([*placed.input_ids, *placed.output_ids])
    return kernels, list(used)
