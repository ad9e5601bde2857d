"""Capture the interpreter's graph (TfLiteContext, read through cffi) into the compiler's model."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .._native import ffi, lib
from ..compiler.fold import fold_constants, folded_sources
from ..compiler.graph import CUSTOM, Builtin, Graph, Node, Tensor
from ..compiler.shapes import fold_reads
from ..compiler.sparsity import DimensionMetadata, densify
from ..compiler.while_loop import WHILE
from ..errors import DelegateError

_NUMPY_TYPES = {
    1: np.float32,
    2: np.int32,
    3: np.uint8,
    4: np.int64,
    6: np.bool_,
    7: np.int16,
    9: np.int8,
    10: np.float16,
}
_FLOAT16 = 10  # kTfLiteFloat16
#: constants up to this size are read during Prepare (shapes, axes); larger ones when compiling
SMALL_CONSTANT = 1 << 16


def int_array(array: Any) -> tuple[int, ...]:
    if array == ffi.NULL:
        return ()
    return tuple(array.data[i] for i in range(array.size))


def largest_partitions(context: Any, nodes: list[int], limit: int) -> list[int]:
    """``nodes`` less those outside the ``limit`` largest partitions TFLite would make of them
    (all of them when ``limit`` is 0 or the preview fails)."""
    if limit <= 0 or not nodes:
        return nodes
    array = ffi.new("int[]", [len(nodes), *nodes])
    params = ffi.new("TfLiteDelegateParams **")
    count = ffi.new("int *")
    status = context.PreviewDelegatePartitioning(context, ffi.cast("TfLiteIntArray *", array), params, count)
    if status != lib.kTfLiteOk:
        return nodes
    partitions = [int_array(params[0][i].nodes_to_replace) for i in range(count[0])]
    partitions.sort(key=len, reverse=True)
    keep = {n for part in partitions[:limit] for n in part}
    return [n for n in nodes if n in keep]


def preview_partitions(context: Any, nodes: list[int]) -> list[tuple[list[int], list[int], list[int]]]:
    """The partitions the runtime will make of ``nodes``: (nodes, inputs, outputs) each."""
    if not nodes:
        return []
    array = ffi.new("int[]", [len(nodes), *nodes])
    params = ffi.new("TfLiteDelegateParams **")
    count = ffi.new("int *")
    status = context.PreviewDelegatePartitioning(context, ffi.cast("TfLiteIntArray *", array), params, count)
    if status != lib.kTfLiteOk:
        raise DelegateError("the interpreter could not preview the partitions")
    return [
        (list(int_array(p.nodes_to_replace)), list(int_array(p.input_tensors)), list(int_array(p.output_tensors)))
        for p in (params[0][i] for i in range(count[0]))
    ]


def execution_plan(context: Any) -> list[int]:
    plan = ffi.new("TfLiteIntArray **")
    if context.GetExecutionPlan(context, plan) != lib.kTfLiteOk:
        raise RuntimeError("GetExecutionPlan failed")
    return list(int_array(plan[0]))


def _params(code: int, data: Any) -> dict[str, Any]:
    if data == ffi.NULL:
        return {}
    if code == Builtin.VAR_HANDLE:
        handle = ffi.cast("TfLiteVarHandleParams *", data)
        return {
            key: ffi.string(text).decode("utf-8", "replace") if text != ffi.NULL else ""
            for key, text in (("container", handle.container), ("shared_name", handle.shared_name))
        }
    if code == Builtin.GELU:  # TfLiteGeluParams holds one bool, read as such (no cdef needed)
        return {"approximate": bool(ffi.cast("bool *", data)[0])}
    if code == Builtin.UNIDIRECTIONAL_SEQUENCE_LSTM:
        return _sequence_lstm_params(data)
    if code == Builtin.STABLEHLO_COMPOSITE:
        return _composite_params(data)
    if code == WHILE:  # TfLiteWhileParams: the condition's and the body's subgraph indices
        ints = ffi.cast("int *", data)
        return {"subgraphs": (int(ints[0]), int(ints[1]))}
    struct = {
        Builtin.CONV_2D: "TfLiteConvParams",
        Builtin.DEPTHWISE_CONV_2D: "TfLiteDepthwiseConvParams",
        Builtin.FULLY_CONNECTED: "TfLiteFullyConnectedParams",
        Builtin.AVERAGE_POOL_2D: "TfLitePoolParams",
        Builtin.MAX_POOL_2D: "TfLitePoolParams",
        Builtin.ADD: "TfLiteAddParams",
        Builtin.SUB: "TfLiteAddParams",
        Builtin.MUL: "TfLiteMulParams",
        Builtin.SOFTMAX: "TfLiteSoftmaxParams",
        Builtin.MEAN: "TfLiteReducerParams",
        Builtin.DIV: "TfLiteDivParams",
        Builtin.LEAKY_RELU: "TfLiteLeakyReluParams",
        Builtin.CONCATENATION: "TfLiteConcatenationParams",
        Builtin.RESIZE_BILINEAR: "TfLiteResizeBilinearParams",
        Builtin.TRANSPOSE_CONV: "TfLiteTransposeConvParams",
        Builtin.RESIZE_NEAREST_NEIGHBOR: "TfLiteResizeNearestNeighborParams",
        Builtin.SPACE_TO_DEPTH: "TfLiteSpaceToDepthParams",
        Builtin.DEPTH_TO_SPACE: "TfLiteDepthToSpaceParams",
        Builtin.MIRROR_PAD: "TfLiteMirrorPaddingParams",
        Builtin.STRIDED_SLICE: "TfLiteStridedSliceParams",
        Builtin.SUM: "TfLiteReducerParams",
        Builtin.REDUCE_MAX: "TfLiteReducerParams",
        Builtin.REDUCE_MIN: "TfLiteReducerParams",
        Builtin.REDUCE_PROD: "TfLiteReducerParams",
        Builtin.BATCH_MATMUL: "TfLiteBatchMatMulParams",
        Builtin.PACK: "TfLitePackParams",
        Builtin.UNPACK: "TfLiteUnpackParams",
        Builtin.GATHER: "TfLiteGatherParams",
        Builtin.SHAPE: "TfLiteShapeParams",
    }.get(code)
    if struct is None:
        return {}
    p = ffi.cast(f"{struct} *", data)
    out: dict[str, Any] = {}
    for name, _ in ffi.typeof(struct).fields:
        value = getattr(p, name)
        out[name] = value if isinstance(value, (int, float, bool)) else list(value)
    return out


def capture_node(context: Any, index: int) -> Node:
    node_p = ffi.new("TfLiteNode **")
    reg_p = ffi.new("TfLiteRegistration **")
    if context.GetNodeAndRegistration(context, index, node_p, reg_p) != lib.kTfLiteOk:
        raise RuntimeError(f"GetNodeAndRegistration({index}) failed")
    node, reg = node_p[0], reg_p[0]
    code = int(reg.builtin_code)
    # Only a custom op is named by its registration (builtin ones have NULL or a name of their own).
    custom = code == CUSTOM and reg.custom_name != ffi.NULL
    return Node(
        index=index,
        op=code,
        version=int(reg.version),
        inputs=int_array(node.inputs),
        outputs=int_array(node.outputs),
        params=_params(code, node.builtin_data),
        custom_name=ffi.string(reg.custom_name).decode("utf-8", "replace") if custom else "",
        unresolved=code == CUSTOM and reg.prepare == ffi.NULL and reg.registration_external == ffi.NULL,
        custom_options=_custom_options(node) if code == CUSTOM else b"",
    )


def _sequence_lstm_params(data: Any) -> dict[str, Any]:
    """TfLiteUnidirectionalSequenceLSTMParams' leading fields, read in place (no cdef needed):
    activation (int), cell_clip and proj_clip (float), time_major (bool). The fields after them
    (asymmetric_quantize_inputs, diagonal_recurrent_tensors) are newer than some TFLite runtimes'
    struct, so they are not read: a diagonal form shows in its recurrent weights' rank."""
    ints, floats, flags = ffi.cast("int *", data), ffi.cast("float *", data), ffi.cast("bool *", data)
    return {
        "activation": int(ints[0]),
        "cell_clip": float(floats[1]),
        "proj_clip": float(floats[2]),
        "time_major": bool(flags[12]),
    }


def _composite_params(data: Any) -> dict[str, Any]:
    """TfLiteStablehloCompositeParams, read in place (no cdef needed): name (const char *),
    subgraph_index and version (int32), attributes (const uint8_t *) and their size (size_t)."""
    name = ffi.cast("char **", data)[0]
    ints = ffi.cast("int32_t *", data)
    attributes, size = ffi.cast("uint8_t **", data)[2], int(ffi.cast("size_t *", data)[3])
    return {
        "name": ffi.string(name).decode("utf-8", "replace") if name != ffi.NULL else "",
        "subgraph": int(ints[2]),
        "version": int(ints[3]),
        "attributes": bytes(ffi.buffer(attributes, size)).hex() if attributes != ffi.NULL and size > 0 else "",
    }


def _custom_options(node: Any) -> bytes:
    """A custom node's options (TfLiteNode.custom_initial_data: the model's Operator.custom_options)."""
    size = int(node.custom_initial_data_size)
    if node.custom_initial_data == ffi.NULL or size <= 0:
        return b""
    return bytes(ffi.buffer(ffi.cast("const char *", node.custom_initial_data), size))


def _int_vector(array: Any) -> np.ndarray:
    """A TfLiteIntArray's values (none for NULL)."""
    if array == ffi.NULL:
        return np.zeros(0, np.int32)
    if array.size < 0:
        raise ValueError(f"an int array of size {array.size}")
    return np.frombuffer(ffi.buffer(array.data, ffi.sizeof("int") * array.size), np.intc).copy()


def _densified(t: Any, shape: tuple[int, ...], stored: np.ndarray) -> np.ndarray:
    """The dense value of sparse constant ``t`` from its ``stored`` values (TfLiteSparsity)."""
    s = t.sparsity
    if s.dim_metadata_size < 0 or (s.dim_metadata_size and s.dim_metadata == ffi.NULL):
        raise ValueError(f"sparse tensor with {s.dim_metadata_size} dimension metadata entries and no array")
    levels = [s.dim_metadata[i] for i in range(s.dim_metadata_size)]
    metadata = [
        DimensionMetadata(int(m.format), int(m.dense_size), _int_vector(m.array_segments), _int_vector(m.array_indices))
        for m in levels
    ]
    return densify(shape, _int_vector(s.traversal_order), _int_vector(s.block_map), metadata, stored)


def _value_bytes(t: Any, shape: tuple[int, ...], dtype: Any) -> int:
    """How many bytes reading constant ``t`` holds: its dense size for a sparse one."""
    if t.sparsity == ffi.NULL:
        return int(t.bytes)
    return max(int(t.bytes), int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize)


def capture_tensor(context: Any, index: int, read_limit: int | None = SMALL_CONSTANT) -> Tensor:
    """A tensor's type and shape; a constant's value when it is at most ``read_limit`` bytes (None: any).

    A sparse constant (``sparsity`` set: the weights a DENSIFY node reads) is densified to its shape.
    """
    t = context.tensors[index]
    shape = int_array(t.dims)
    is_constant = t.allocation_type == lib.kTfLiteMmapRo and t.data.raw != ffi.NULL
    value = None
    dtype = _NUMPY_TYPES.get(int(t.type))
    if is_constant and dtype is not None and (read_limit is None or _value_bytes(t, shape, dtype) <= read_limit):
        stored = np.frombuffer(ffi.buffer(t.data.raw, t.bytes), dtype=dtype)
        if dtype is np.bool_:  # any non-zero byte is true; numpy would keep the byte itself
            stored = stored.view(np.uint8) != 0
        if t.sparsity != ffi.NULL:
            value = _densified(t, shape, stored)
        else:
            value = stored.reshape(shape).copy()
    name = ffi.string(t.name).decode("utf-8", "replace") if t.name != ffi.NULL else ""
    tensor = Tensor(index, int(t.type), shape, name, is_constant, value, quantized=t.quantization.type != 0)
    tensor.is_variable = bool(t.is_variable)
    if t.dims_signature != ffi.NULL:
        tensor.signature = int_array(t.dims_signature)
    if t.quantization.type == 1 and t.quantization.params != ffi.NULL:  # kTfLiteAffineQuantization
        q = ffi.cast("TfLiteAffineQuantization *", t.quantization.params)
        if q.scale != ffi.NULL:
            tensor.scales = tuple(float(q.scale.data[i]) for i in range(q.scale.size))
        tensor.zero_points = int_array(q.zero_point)
        tensor.quant_axis = int(q.quantized_dimension)
    return tensor


def capture_graph(context: Any, node_indices: list[int], read_limit: int | None = SMALL_CONSTANT) -> Graph:
    """The graph of ``node_indices``, constants up to ``read_limit`` bytes read, and those a value
    fold needs whatever their size (an attention mask picked from constants: shapes.fold_reads)."""
    graph = capture_tensors(context, {i: capture_node(context, i) for i in node_indices}, read_limit)
    for i in fold_reads(graph):
        graph.tensors[i] = capture_tensor(context, i, read_limit=None)
    return graph


def capture_tensors(context: Any, nodes: dict[int, Node], read_limit: int | None = SMALL_CONSTANT) -> Graph:
    """The graph of ``nodes`` (captured earlier) with their tensors as they are now: a delegate
    kernel's prepare may read tensors, but not ask TFLite for nodes."""
    tensors: dict[int, Tensor] = {}
    for node in nodes.values():
        for i in (*node.inputs, *node.outputs):
            # past the context's tensors: a node the compiler put in (an inlined composite's, an
            # unrolled WHILE's), whose tensors are put in again with it
            if 0 <= i < context.tensors_size and i not in tensors:
                tensors[i] = capture_tensor(context, i, read_limit)
    return Graph(tensors, {i: copy.copy(node) for i, node in nodes.items()})


def undo_unsafe_reason(context: Any, plan: list[int]) -> str | None:
    """Why TFLite could not restore this plan if the delegate's Prepare failed, or None.

    Undoing a delegation, tflite-runtime 2.14 rewires every float16 input of a node that is not a
    DEQUANTIZE to the output of the DEQUANTIZE reading that tensor, and to tensor -1 when there is
    none: a DENSIFY of sparse fp16 weights then crashes the process in its Prepare. Read with as
    little as possible (node inputs and tensor types), since it is asked when Prepare has failed.
    """
    node_p = ffi.new("TfLiteNode **")
    reg_p = ffi.new("TfLiteRegistration **")
    for index in plan:
        if context.GetNodeAndRegistration(context, index, node_p, reg_p) != lib.kTfLiteOk:
            return f"node {index} could not be read"
        if int(reg_p[0].builtin_code) == Builtin.DEQUANTIZE:
            continue
        for i in int_array(node_p[0].inputs):
            if 0 <= i < context.tensors_size and int(context.tensors[i].type) == _FLOAT16:
                return f"node {index} reads the float16 tensor {i} directly"
    return None


def hash_constants(context: Any, graph: Graph, update: Any) -> None:
    """Feed every constant of the model in ``graph`` to ``update``: its index and size, then its
    bytes, read in place (no copy).

    Tensors the compiler made constant (outputs of folded DEQUANTIZE and DENSIFY nodes) are
    ordinary tensors to TFLite, with no data during Prepare, and their value is only computed for
    the partitions that read them: they are skipped, as each is determined by its node's input, a
    constant of the model hashed here. A sparse constant is hashed as stored, with its sparsity
    parameters (which, with its shape, give its dense value). Tensors past the context's are an
    unrolled WHILE's (compiler/while_loop.py): their values, read from its body, are hashed.
    """
    for i in sorted(graph.tensors):
        if not graph.tensors[i].is_constant:
            continue
        if i >= context.tensors_size:  # another subgraph's constant, read whole (plugin/composites.py)
            update(f"{i}:inlined;".encode())
            update(inlined_constant_bytes(graph, i))
            continue
        t = context.tensors[i]
        if t.allocation_type == lib.kTfLiteMmapRo and t.data.raw != ffi.NULL:
            update(f"{i}:{t.bytes};".encode())
            update(ffi.buffer(t.data.raw, t.bytes))
            q = capture_tensor(context, i, read_limit=0)  # as TFLite has it (folding drops the scales)
            if q.scales:  # quantized weights: their value is the bytes with these scales
                update(f"quant:{q.scales!r}:{q.zero_points!r}:{q.quant_axis};".encode())
            if t.sparsity != ffi.NULL:
                update(_sparsity_bytes(t.sparsity))


def inlined_constant_bytes(graph: Graph, index: int) -> bytes:
    """The value of a constant that is not the context's own (a composite's decomposition's: not
    in ``context.tensors``), as captured."""
    value = graph.tensors[index].constant
    return b"" if value is None else np.ascontiguousarray(value).tobytes()


def _sparsity_bytes(s: Any) -> bytes:
    """A sparse tensor's TfLiteSparsity as bytes (for hashing)."""
    parts = [_int_vector(s.traversal_order), _int_vector(s.block_map)]
    for i in range(max(0, s.dim_metadata_size) if s.dim_metadata != ffi.NULL else 0):
        m = s.dim_metadata[i]
        parts += [np.array([m.format, m.dense_size]), _int_vector(m.array_segments), _int_vector(m.array_indices)]
    return b"".join(f"sparsity:{len(p)};".encode() + p.astype("<i8").tobytes() for p in parts)


def partition_graph(context: Any, nodes: list[int], graph: Graph, *, dequantize: bool) -> Graph:
    """``graph`` (captured by this Prepare, constants folded) with every constant the partition's
    nodes read valued.

    The whole graph is used because a partition may read a folded DEQUANTIZE or DENSIFY output
    whose node is in another partition (ai-edge-litert makes single-node partitions when all
    tensors are kept); folded chains (sparse fp16 -> DENSIFY -> DEQUANTIZE) are followed back to
    the model's constants, sparse ones read densified (capture.py).
    """
    wanted = folded_sources(graph, (i for index in nodes for i in graph.nodes[index].inputs))
    for i in wanted:
        if graph.tensors[i].is_constant and graph.tensors[i].constant is None:
            graph.tensors[i] = capture_tensor(context, i, read_limit=None)
    fold_constants(graph, dequantize=dequantize)
    return graph


@contextmanager
def held_subgraph(context: Any, index: int) -> Iterator[Any]:
    """Subgraph ``index``'s TfLiteContext, held while the block runs (TFLite gives another
    subgraph's context during Prepare only, AcquireSubgraphContext); DelegateError where it does not."""
    if context.AcquireSubgraphContext == ffi.NULL or context.ReleaseSubgraphContext == ffi.NULL:
        raise DelegateError("this TFLite runtime does not give a delegate other subgraphs (no AcquireSubgraphContext)")
    acquired = ffi.new("TfLiteContext **")
    acquire = ffi.cast("TfLiteStatus (*)(TfLiteContext *, int, TfLiteContext **)", context.AcquireSubgraphContext)
    if index <= 0 or acquire(context, index, acquired) != lib.kTfLiteOk:
        raise DelegateError(f"TFLite did not give the context of its subgraph {index}")
    try:
        yield acquired[0]
    finally:
        ffi.cast("TfLiteStatus (*)(TfLiteContext *, int)", context.ReleaseSubgraphContext)(context, index)
