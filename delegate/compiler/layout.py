"""How TFLite tensors map onto the runtime's BHWDC tensors, and weight packing.

A TFLite shape is left-padded to rank 4 and read as (B, H, W, C), D = 1: [c] -> (1, 1, 1, c),
[n, c] -> (1, 1, n, c), [h, w, c] -> (1, h, w, c); a higher rank has its extra leading dims
merged into B ([n, a, b, c, d] -> (n * a, b, c, d)). The flat order of the runtime's BHWDC
staging buffer is then exactly TFLite's row-major order, so tensors cross with no copy or
transpose, and broadcasting dimensions line up as in TFLite.
"""

from __future__ import annotations

import numpy as np

from ..context import model
from ..context.model import CalculationsPrecision, DataType, TensorStorageType


def bhwc(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    if len(shape) > 4:
        # merged leading dims keep the row-major order (Keras' UpSampling2D reshapes to rank 5);
        # only the ops whose indexing that view keeps take such tensors (ops/base.value_tensors)
        shape = (int(np.prod(shape[:-3])), *shape[-3:])
    padded = (1,) * (4 - len(shape)) + tuple(int(d) for d in shape)
    return padded  # type: ignore[return-value]


def slices(channels: int) -> int:
    return (channels + 3) // 4


def tensor_descriptor(shape: tuple[int, ...], precision: CalculationsPrecision,
                      storage: TensorStorageType = TensorStorageType.BUFFER) -> model.TensorDescriptor:  # fmt: skip
    b, h, w, c = bhwc(shape)
    dtype = DataType.FLOAT32 if precision == CalculationsPrecision.F32 else DataType.FLOAT16
    return model.TensorDescriptor(
        data_type=dtype, storage_type=storage, layout=model.Layout.BHWC, shape=model.BHWDC(b, h, w, 1, c)
    )


def storage_dtype(precision: CalculationsPrecision) -> np.dtype:
    return np.dtype(np.float32 if precision == CalculationsPrecision.F32 else np.float16)


def pad_channels(array: np.ndarray, axis: int, multiple: int = 4) -> np.ndarray:
    extra = (-array.shape[axis]) % multiple
    if extra == 0:
        return array
    # zeros then a copy: what np.pad does, at a fraction of its fixed cost (a long chain of ops
    # with small constants pads one per op)
    shape = list(array.shape)
    shape[axis] += extra
    padded = np.zeros(shape, array.dtype)
    padded[(slice(None),) * axis + (slice(0, array.shape[axis]),)] = array
    return padded


def buffer_layout(value: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> bytes:
    """A constant tensor in the runtime's BUFFER order: (slice, h, w, b, 4 channels)."""
    b, h, w, c = bhwc(shape)
    data = np.broadcast_to(np.asarray(value, np.float32).reshape(bhwc(value.shape)), (b, h, w, c))
    data = pad_channels(np.ascontiguousarray(data), 3).reshape(b, h, w, slices(c), 4)
    return np.ascontiguousarray(data.transpose(3, 1, 2, 0, 4)).astype(dtype).tobytes()


def conv_weights(filters: np.ndarray, dtype: np.dtype) -> bytes:
    """OHWI filters as FLT4 rows: for (out slice, ky, kx, in slice, in channel i): 4 output channels."""
    _, kh, kw, _ = filters.shape
    f = pad_channels(pad_channels(filters.astype(np.float32), 0), 3)
    so, si = f.shape[0] // 4, f.shape[3] // 4
    f = f.reshape(so, 4, kh, kw, si, 4)  # (S, o4, ky, kx, s, i4)
    return np.ascontiguousarray(f.transpose(0, 2, 3, 4, 5, 1)).astype(dtype).tobytes()


def depthwise_weights(filters: np.ndarray, dtype: np.dtype) -> bytes:
    """[1, KH, KW, C] filters as FLT4 per (slice, ky, kx)."""
    _, kh, kw, c = filters.shape
    f = pad_channels(filters[0].astype(np.float32), 2).reshape(kh, kw, slices(c), 4)
    return np.ascontiguousarray(f.transpose(2, 0, 1, 3)).astype(dtype).tobytes()


def linear(values: np.ndarray | None, channels: int, dtype: np.dtype) -> bytes:
    """A per-channel vector (biases) padded to slices of 4; zeros when absent."""
    v = np.zeros(slices(channels) * 4, np.float32)
    if values is not None:
        v[:channels] = np.asarray(values, np.float32).reshape(-1)[:channels]
    return v.astype(dtype).tobytes()
