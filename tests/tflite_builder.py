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
    np.dtype(np.int8): 9,
}


@dataclass
class T:
    """A tensor: its shape, and its value when it is a constant."""

    shape: tuple[int, ...]
    data: np.ndarray | None = None
    dtype: Any = np.float32
    #: affine quantization: (scales, zero points, quantized dimension)
    quant: tuple[list[float], list[int], int] | None = None


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
    getattr(tflite, f"{name}Start")(b)
    for key, value in values.items():
        getattr(tflite, f"{name}Add{key}")(b, vectors.get(key, value))
    return getattr(tflite.BuiltinOptions, name), getattr(tflite, f"{name}End")(b)


def build_model(tensors: list[T], ops: list[Op], inputs: list[int], outputs: list[int]) -> bytes:
    b = flatbuffers.Builder(1024)
    # Buffers: 0 is the empty sentinel; each constant gets its own.
    buffer_data = [b""] + [np.ascontiguousarray(t.data, dtype=t.dtype).tobytes() for t in tensors if t.data is not None]
    buffers = []
    for raw in buffer_data:
        data = b.CreateByteVector(raw) if raw else None
        tflite.BufferStart(b)
        if data is not None:
            tflite.BufferAddData(b, data)
        buffers.append(tflite.BufferEnd(b))
    tensor_offsets, next_buffer = [], 1
    for i, t in enumerate(tensors):
        name = b.CreateString(f"t{i}")
        shape = _vector(b, tflite.TensorStartShapeVector, list(t.shape))
        quant = None
        if t.quant is not None:
            scales, zeros, axis = t.quant
            tflite.QuantizationParametersStartScaleVector(b, len(scales))
            for v in reversed(scales):
                b.PrependFloat32(v)
            scale_vec = b.EndVector()
            zero_vec = _vector(b, tflite.QuantizationParametersStartZeroPointVector, list(zeros), "PrependInt64")
            tflite.QuantizationParametersStart(b)
            tflite.QuantizationParametersAddScale(b, scale_vec)
            tflite.QuantizationParametersAddZeroPoint(b, zero_vec)
            tflite.QuantizationParametersAddQuantizedDimension(b, axis)
            quant = tflite.QuantizationParametersEnd(b)
        tflite.TensorStart(b)
        if quant is not None:
            tflite.TensorAddQuantization(b, quant)
        tflite.TensorAddShape(b, shape)
        tflite.TensorAddType(b, _TENSOR_TYPES[np.dtype(t.dtype)])
        tflite.TensorAddName(b, name)
        if t.data is not None:
            tflite.TensorAddBuffer(b, next_buffer)
            next_buffer += 1
        else:
            tflite.TensorAddBuffer(b, 0)
        tensor_offsets.append(tflite.TensorEnd(b))
    codes = sorted({(op.code, op.version, op.custom_code) for op in ops})
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
    op_offsets = []
    for op in ops:
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
    in_vec = _vector(b, tflite.SubGraphStartInputsVector, inputs)
    out_vec = _vector(b, tflite.SubGraphStartOutputsVector, outputs)
    tflite.SubGraphStart(b)
    tflite.SubGraphAddTensors(b, tensors_vec)
    tflite.SubGraphAddOperators(b, ops_vec)
    tflite.SubGraphAddInputs(b, in_vec)
    tflite.SubGraphAddOutputs(b, out_vec)
    subgraph = tflite.SubGraphEnd(b)
    subgraphs = offsets(tflite.ModelStartSubgraphsVector, [subgraph])
    codes_vec = offsets(tflite.ModelStartOperatorCodesVector, code_offsets)
    buffers_vec = offsets(tflite.ModelStartBuffersVector, buffers)
    tflite.ModelStart(b)
    tflite.ModelAddVersion(b, 3)
    tflite.ModelAddOperatorCodes(b, codes_vec)
    tflite.ModelAddSubgraphs(b, subgraphs)
    tflite.ModelAddBuffers(b, buffers_vec)
    b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())
