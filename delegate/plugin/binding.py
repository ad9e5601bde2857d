"""How a partition's Runtime is bound to the C kernel TFLite invokes (csrc/plugin.c): the tensors
it reads and writes, their byte sizes and types (float32; int8 / uint8 converted at the edge,
compiler/quant.py; int32, int64 and bool converted to and from the floats the partition holds them
in, compiler/claim.py), and the dims it was compiled for."""

from __future__ import annotations

from typing import Any

from .._native import ffi
from ..compiler.graph import BOOL, FLOAT32, INT32, INT64
from ..compiler.quant import carried_params
from ..runtime import Runtime
from .capture import capture_tensor, int_array


def tensor_dims(context: Any, index: int) -> tuple[int, ...]:
    """TFLite's dims of tensor ``index``."""
    return int_array(context.tensors[index].dims)


def bind_kernel(context: Any, runtime: Runtime, kernel: Any) -> tuple[list[tuple[int, ...]], list[Any]]:
    """Point the C kernel at ``runtime``: its plan, the tensors it binds, their sizes, types and the
    TFLite dims it was compiled for (checked at every invoke). Returns those dims and the C arrays
    the kernel now points into, which the caller keeps alive as long as the kernel."""
    inputs, outputs = runtime.input_ids, runtime.output_ids
    dims = [tensor_dims(context, i) for i in (*inputs, *outputs)]
    in_dims, out_dims = dims[: len(inputs)], dims[len(inputs) :]
    in_types, out_types = (edge_types(context, ids) for ids in (inputs, outputs))
    arrays = [
        ffi.new("int32_t[]", inputs or [0]),
        ffi.new("uint64_t[]", [_bytes(s, t[0]) for s, t in zip(runtime.input_shapes, in_types, strict=True)] or [0]),
        ffi.new("int32_t[]", outputs or [0]),
        ffi.new("uint64_t[]", [_bytes(s, t[0]) for s, t in zip(runtime.output_shapes, out_types, strict=True)] or [0]),
        ffi.new("int32_t[]", [v for d in in_dims for v in (len(d), *d)] or [0]),
        ffi.new("int32_t[]", [v for d in out_dims for v in (len(d), *d)] or [0]),
    ]
    for types, names in ((in_types, "input"), (out_types, "output")):
        arrays += [
            ffi.new("int32_t[]", [t[0] for t in types] or [0]),
            ffi.new("float[]", [t[1] for t in types] or [0.0]),
            ffi.new("int32_t[]", [t[2] for t in types] or [0]),
        ]
        setattr(kernel, f"{names}_types", arrays[-3])
        setattr(kernel, f"{names}_scales", arrays[-2])
        setattr(kernel, f"{names}_zero_points", arrays[-1])
    runtime.keep_host_buffers()  # TFLite's tensor memory outlives the kernel: zero-copy buffers stay
    kernel.plan = runtime.native_plan
    kernel.inputs_count, kernel.input_tensors, kernel.input_bytes = len(inputs), arrays[0], arrays[1]
    kernel.outputs_count, kernel.output_tensors, kernel.output_bytes = len(outputs), arrays[2], arrays[3]
    kernel.input_dims, kernel.output_dims = arrays[4], arrays[5]
    return dims, arrays


def edge_types(context: Any, tensors: list[int]) -> list[tuple[int, float, int]]:
    """(TfLiteType, scale, zero point) of each partition input or output: float32, a quantized
    activation the partition carries in float (compiler/quant.py), or an int32, int64 or bool
    tensor it holds as floats; the C kernel converts the last two kinds."""
    types = []
    for index in tensors:
        t = capture_tensor(context, index, read_limit=0)
        params = carried_params(t)
        if params is not None:
            types.append((params.dtype, params.scale, params.zero_point))
        else:
            types.append((t.dtype if t.dtype in _ELEMENT_BYTES else FLOAT32, 1.0, 0))
    return types


#: bytes of an element of each type the C kernel binds (int8 / uint8: 1)
_ELEMENT_BYTES = {FLOAT32: 4, INT32: 4, INT64: 8, BOOL: 1}


def _bytes(shape: tuple[int, ...], dtype: int = FLOAT32) -> int:
    n = _ELEMENT_BYTES.get(dtype, 1)
    for d in shape:
        n *= d
    return n
