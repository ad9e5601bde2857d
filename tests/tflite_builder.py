"""Build small .tflite models in tests (PyPI's `tflite` schema package; no TensorFlow needed)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import flatbuffers
import numpy as np
import tflite

_TENSOR_TYPES = {
    np.dtype(np.float32): 0,
    np.dtype(np.float16): 1,
    np.dtype(np.int32): 2,
    np.dtype(np.int64): 4,
    np.dtype(np.bool_): 6,
    np.dtype(np.int8): 9,
    np.dtype(np.uint8): 3,
}
#: a resource variable's handle (VAR_HANDLE's output): ``T(dtype=RESOURCE)``
RESOURCE = "resource"
_RESOURCE_TYPE = 13  # schema TensorType.RESOURCE


@dataclass
class Sparse:
    """How a constant is stored sparse (schema SparsityParameters): one format per traversal level
    (0 DENSE, 1 SPARSE_CSR), over the original dimensions and then one block dimension per entry of
    ``block_map`` (the original dimension it splits, into blocks of ``block_sizes``)."""

    formats: list[int]
    traversal_order: list[int] | None = None  # default: 0, 1, ... (original dims, then block dims)
    block_map: list[int] = field(default_factory=list)
    block_sizes: list[int] = field(default_factory=list)
    #: the SparseIndexVector the segments and indices are written as: "int32", "uint16" or "uint8"
    index_type: str = "uint8"


@dataclass
class T:
    """A tensor: its shape, and its value when it is a constant."""

    shape: tuple[int, ...]
    data: np.ndarray | None = None
    dtype: Any = np.float32
    #: affine quantization: (scales, zero points, quantized dimension)
    quant: tuple[list[float], list[int], int] | None = None
    #: written in TFLite's sparse format (``data`` is the dense value)
    sparse: Sparse | None = None
    #: the shape signature (-1 for a dimension known only at run time); None: not written
    signature: tuple[int, ...] | None = None
    #: a variable tensor (state kept between invokes: an LSTM's)
    variable: bool = False


#: one traversal level of a sparse tensor: (format, dense_size, array_segments, array_indices)
Level = tuple[int, int, list[int], list[int]]


def sparsify(dense: np.ndarray, spec: Sparse) -> tuple[np.ndarray, list[Level]]:
    """The stored values and per-level metadata of ``dense`` stored as ``spec`` says: what TFLite's
    converter writes. Written independently of delegate/compiler/sparsity.py (the reverse), from
    the schema's description: a CSR level lists the coordinates under which something is non-zero."""
    rank, blocks = dense.ndim, len(spec.block_map)
    split: list[int] = []  # each blocked dimension d split into (d / block, block)
    outer, inner = [], [0] * blocks
    for d in range(rank):
        outer.append(len(split))
        if d in spec.block_map:
            k = spec.block_map.index(d)
            split += [dense.shape[d] // spec.block_sizes[k], spec.block_sizes[k]]
            inner[k] = len(split) - 1
        else:
            split.append(dense.shape[d])
    expanded = dense.reshape(split).transpose(outer + inner)
    order = spec.traversal_order if spec.traversal_order is not None else list(range(rank + blocks))
    walked = expanded.transpose(order)
    segments: list[list[int]] = [[0] for _ in spec.formats]
    indices: list[list[int]] = [[] for _ in spec.formats]
    values: list[Any] = []

    def visit(sub: np.ndarray, level: int) -> None:
        if level == len(spec.formats):
            values.append(sub[()])
            return
        for i in range(sub.shape[0]):
            if spec.formats[level] == 0:
                visit(sub[i], level + 1)
            elif np.any(sub[i] != 0):
                indices[level].append(i)
                visit(sub[i], level + 1)
        if spec.formats[level] == 1:
            segments[level].append(len(indices[level]))

    visit(walked, 0)
    levels: list[Level] = [
        (f, walked.shape[n] if f == 0 else 0, segments[n] if f else [], indices[n] if f else [])
        for n, f in enumerate(spec.formats)
    ]
    return np.array(values, dense.dtype), levels


_INDEX_VECTORS = {"int32": (1, "Int32Vector", "PrependInt32"), "uint16": (2, "Uint16Vector", "PrependUint16")}
_INDEX_VECTORS["uint8"] = (3, "Uint8Vector", "PrependUint8")


def _sparsity(b: flatbuffers.Builder, spec: Sparse, levels: list[Level]) -> int:
    union, table, prepend = _INDEX_VECTORS[spec.index_type]

    def index_vector(items: list[int]) -> int:
        values = _vector(b, getattr(tflite, f"{table}StartValuesVector"), items, prepend)
        getattr(tflite, f"{table}Start")(b)
        getattr(tflite, f"{table}AddValues")(b, values)
        return getattr(tflite, f"{table}End")(b)

    dims = []
    for fmt, dense_size, segments, indices in levels:
        vectors = (index_vector(segments), index_vector(indices)) if fmt == 1 else None
        tflite.DimensionMetadataStart(b)
        tflite.DimensionMetadataAddFormat(b, fmt)
        tflite.DimensionMetadataAddDenseSize(b, dense_size)
        if vectors is not None:
            tflite.DimensionMetadataAddArraySegmentsType(b, union)
            tflite.DimensionMetadataAddArraySegments(b, vectors[0])
            tflite.DimensionMetadataAddArrayIndicesType(b, union)
            tflite.DimensionMetadataAddArrayIndices(b, vectors[1])
        dims.append(tflite.DimensionMetadataEnd(b))
    order = spec.traversal_order if spec.traversal_order is not None else list(range(len(levels)))
    order_vec = _vector(b, tflite.SparsityParametersStartTraversalOrderVector, order)
    block_vec = _vector(b, tflite.SparsityParametersStartBlockMapVector, spec.block_map) if spec.block_map else None
    dims_vec = _vector(b, tflite.SparsityParametersStartDimMetadataVector, dims, "PrependUOffsetTRelative")
    tflite.SparsityParametersStart(b)
    tflite.SparsityParametersAddTraversalOrder(b, order_vec)
    if block_vec is not None:
        tflite.SparsityParametersAddBlockMap(b, block_vec)
    tflite.SparsityParametersAddDimMetadata(b, dims_vec)
    return tflite.SparsityParametersEnd(b)


@dataclass
class Op:
    code: int  # builtin operator code
    inputs: list[int]
    outputs: list[int]
    #: (options table name, {field: value}), e.g. ("AddOptions", {"FusedActivationFunction": 1})
    options: tuple[str, dict[str, Any]] | None = None
    version: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    #: a custom op (code 32): its name (OperatorCode.custom_code) and its flexbuffer options
    custom_code: str = ""
    custom_options: bytes = b""


def _vector(b: flatbuffers.Builder, start: Any, items: list[int], prepend: str = "PrependInt32") -> int:
    start(b, len(items))
    for item in reversed(items):
        getattr(b, prepend)(item)
    return b.EndVector()


def _options(b: flatbuffers.Builder, spec: tuple[str, dict[str, Any]]) -> tuple[int, int]:
    name, values = spec
    vectors = {}
    for key, value in values.items():
        if isinstance(value, (list, tuple)):
            vectors[key] = _vector(b, getattr(tflite, f"{name}Start{key}Vector"), list(value))
        elif isinstance(value, str):
            vectors[key] = b.CreateString(value)
    getattr(tflite, f"{name}Start")(b)
    for key, value in values.items():
        getattr(tflite, f"{name}Add{key}")(b, vectors.get(key, value))
    return getattr(tflite.BuiltinOptions, name), getattr(tflite, f"{name}End")(b)


@dataclass
class Subgraph:
    """A subgraph after the first (a CALL_ONCE's initialiser, say): its tensors, ops, inputs, outputs."""

    tensors: list[T]
    ops: list[Op]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


def _type(t: T) -> int:
    return _RESOURCE_TYPE if t.dtype == RESOURCE else _TENSOR_TYPES[np.dtype(t.dtype)]


def _quantization(b: flatbuffers.Builder, quant: tuple[list[float], list[int], int]) -> int:
    scales, zeros, axis = quant
    tflite.QuantizationParametersStartScaleVector(b, len(scales))
    for v in reversed(scales):
        b.PrependFloat32(v)
    scale_vec = b.EndVector()
    zero_vec = _vector(b, tflite.QuantizationParametersStartZeroPointVector, list(zeros), "PrependInt64")
    tflite.QuantizationParametersStart(b)
    tflite.QuantizationParametersAddScale(b, scale_vec)
    tflite.QuantizationParametersAddZeroPoint(b, zero_vec)
    tflite.QuantizationParametersAddQuantizedDimension(b, axis)
    return tflite.QuantizationParametersEnd(b)


def build_model(
    tensors: list[T], ops: list[Op], inputs: list[int], outputs: list[int], subgraphs: tuple[Subgraph, ...] = ()
) -> bytes:
    """A model of one subgraph (``tensors``, ``ops``, ``inputs``, ``outputs``), then ``subgraphs``."""
    graphs = [Subgraph(tensors, ops, inputs, outputs), *subgraphs]
    b = flatbuffers.Builder(1024)
    # Buffers: 0 is the empty sentinel; each constant (of any subgraph) gets its own.
    stored = [
        {i: sparsify(np.asarray(t.data, t.dtype), t.sparse) for i, t in enumerate(g.tensors) if t.sparse is not None}
        for g in graphs
    ]
    buffer_data = [b""] + [
        np.ascontiguousarray(stored[k][i][0] if i in stored[k] else t.data, dtype=t.dtype).tobytes()
        for k, g in enumerate(graphs)
        for i, t in enumerate(g.tensors)
        if t.data is not None
    ]
    buffers = []
    for raw in buffer_data:
        data = b.CreateByteVector(raw) if raw else None
        tflite.BufferStart(b)
        if data is not None:
            tflite.BufferAddData(b, data)
        buffers.append(tflite.BufferEnd(b))
    codes = sorted({(op.code, op.version, op.custom_code) for g in graphs for op in g.ops})
    code_offsets = []
    for code, version, custom in codes:
        custom_name = b.CreateString(custom) if custom else None
        tflite.OperatorCodeStart(b)
        if custom_name is not None:
            tflite.OperatorCodeAddCustomCode(b, custom_name)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
        tflite.OperatorCodeAddBuiltinCode(b, code)
        tflite.OperatorCodeAddVersion(b, version)
        code_offsets.append(tflite.OperatorCodeEnd(b))
    next_buffer = [1]
    subgraph_offsets = [_subgraph(b, g, stored[k], codes, next_buffer) for k, g in enumerate(graphs)]

    def offsets(start: Any, items: list[int]) -> int:
        return _vector(b, start, items, "PrependUOffsetTRelative")

    subgraphs_vec = offsets(tflite.ModelStartSubgraphsVector, subgraph_offsets)
    codes_vec = offsets(tflite.ModelStartOperatorCodesVector, code_offsets)
    buffers_vec = offsets(tflite.ModelStartBuffersVector, buffers)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, codes_vec)
    tflite.ModelAddSubgraphs(b, subgraphs_vec)
    tflite.ModelAddBuffers(b, buffers_vec)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def _subgraph(
    b: flatbuffers.Builder,
    graph: Subgraph,
    stored: dict[int, tuple[np.ndarray, list[Level]]],
    codes: list[tuple[int, int, str]],
    next_buffer: list[int],
) -> int:
    tensor_offsets = []
    for i, t in enumerate(graph.tensors):
        name = b.CreateString(f"t{i}")
        shape = _vector(b, tflite.TensorStartShapeVector, list(t.shape))
        signature = (
            _vector(b, tflite.TensorStartShapeSignatureVector, list(t.signature)) if t.signature is not None else None
        )
        quant = _quantization(b, t.quant) if t.quant is not None else None
        sparsity = _sparsity(b, t.sparse, stored[i][1]) if t.sparse is not None else None
        tflite.TensorStart(b)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        if sparsity is not None:
            tflite.TensorAddSparsity(b, sparsity)
        tflite.TensorAddShape(b, shape)
        if signature is not None:
            tflite.TensorAddShapeSignature(b, signature)
        tflite.TensorAddType(b, _type(t))
        tflite.TensorAddName(b, name)
        if t.variable:
            tflite.TensorAddIsVariable(b, True)
        if t.data is not None:
            tflite.TensorAddBuffer(b, next_buffer[0])
            next_buffer[0] += 1
        else:
            tflite.TensorAddBuffer(b, 0)
        tensor_offsets.append(tflite.TensorEnd(b))
    op_offsets = []
    for op in graph.ops:
        ins = _vector(b, tflite.OperatorStartInputsVector, op.inputs)
        outs = _vector(b, tflite.OperatorStartOutputsVector, op.outputs)
        options = _options(b, op.options) if op.options else None
        custom_options = b.CreateByteVector(op.custom_options) if op.custom_options else None
        tflite.OperatorStart(b)
        tflite.OperatorAddOpcodeIndex(b, codes.index((op.code, op.version, op.custom_code)))
        if custom_options is not None:
            tflite.OperatorAddCustomOptions(b, custom_options)
        tflite.OperatorAddInputs(b, ins)
        tflite.OperatorAddOutputs(b, outs)
        if options:
            tflite.OperatorAddBuiltinOptionsType(b, options[0])
            tflite.OperatorAddBuiltinOptions(b, options[1])
        op_offsets.append(tflite.OperatorEnd(b))

    def offsets(start: Any, items: list[int]) -> int:
        return _vector(b, start, items, "PrependUOffsetTRelative")

    tensors_vec = offsets(tflite.SubGraphStartTensorsVector, tensor_offsets)
    ops_vec = offsets(tflite.SubGraphStartOperatorsVector, op_offsets)
    in_vec = _vector(b, tflite.SubGraphStartInputsVector, graph.inputs)
    out_vec = _vector(b, tflite.SubGraphStartOutputsVector, graph.outputs)
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensors_vec)
    tflite.SubGraphAddOperators(b, ops_vec)
    tflite.SubGraphAddInputs(b, in_vec)
    tflite.SubGraphAddOutputs(b, out_vec)
    return tflite.SubGraphEnd(b)
