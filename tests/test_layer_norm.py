"""The layer-norm rewrite (compiler/layer_norm.py): the op chains TensorFlow's converter (Keras
LayerNormalization, checked against a model converted by TF 2.21) and PyTorch's converters emit,
built op by op, run as one kernel and checked against TFLite's builtin kernels."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import Builtin

from .test_ops import TOLERANCE, run_both
from .test_swish import _kernel_codes
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

_MEAN_KEEP = ("ReducerOptions", {"KeepDims": True})


def _keras(shape, gamma, beta, eps):
    """Tensors and ops as the TFLite converter writes Keras's LayerNormalization; ``beta`` None: as
    it writes a layer whose beta is all zeros (a freshly initialized one), without the ADD of beta;
    ``gamma`` None: a layer without scale, RSQRT's output scaling directly."""
    c = shape[-1]
    per_channel = (1,) * (len(shape) - 1) + (c,)
    stat = (*shape[:-1], 1)
    tensors = [
        T(shape),  # 0 x
        T((), data=np.float32(eps)),  # 1 eps
        T((1,), dtype=np.int32, data=np.array([-1], np.int32)),  # 2 axis
        *(T(stat) for _ in range(2)),  # 3 mean, 4 neg
        T(shape),  # 5 squared difference
        *(T(stat) for _ in range(3)),  # 6 variance, 7 add, 8 rsqrt
    ]
    ops = [
        Op(Builtin.MEAN, [0, 2], [3], _MEAN_KEEP),
        Op(Builtin.NEG, [3], [4]),
        Op(Builtin.SQUARED_DIFFERENCE, [0, 3], [5]),
        Op(Builtin.MEAN, [5, 2], [6], _MEAN_KEEP),
        Op(Builtin.ADD, [6, 1], [7]),
        Op(Builtin.RSQRT, [7], [8]),
    ]

    def add(op, inputs, out_shape, data=None):
        if data is not None:
            tensors.append(T(per_channel, data=data.reshape(per_channel)))
            inputs = [*inputs, len(tensors) - 1]
        tensors.append(T(out_shape))
        ops.append(Op(op, inputs, [len(tensors) - 1]))
        return len(tensors) - 1

    s = add(Builtin.MUL, [8], shape, gamma) if gamma is not None else 8
    shift = add(Builtin.MUL, [4, s], shape if gamma is not None else stat)
    if beta is not None:
        shift = add(Builtin.ADD, [shift], shape, beta)
    scaled = add(Builtin.MUL, [0, s], shape)
    out = add(Builtin.ADD, [scaled, shift], shape)
    return tensors, ops, out


def _torch(shape, gamma, beta, eps, square=Builtin.MUL):
    """Tensors and ops as PyTorch's nn.LayerNorm comes out of its converters: centre, square
    (MUL(c, c), SQUARE or POW-free forms), mean, eps, rsqrt, scale, then gamma and beta if any."""
    c = shape[-1]
    stat = (*shape[:-1], 1)
    tensors = [
        T(shape),  # 0 x
        T((1,), dtype=np.int32, data=np.array([len(shape) - 1], np.int32)),  # 1 axis
        T(stat),  # 2 mean
        T(shape),  # 3 centred
        T(shape),  # 4 squared
        T(stat),  # 5 variance
        T((1,), data=np.array([eps], np.float32)),  # 6 eps
        T(stat),  # 7 add
        T(stat),  # 8 rsqrt
        T(shape),  # 9 normalized
    ]
    ops = [
        Op(Builtin.MEAN, [0, 1], [2], _MEAN_KEEP),
        Op(Builtin.SUB, [0, 2], [3]),
        Op(square, [3, 3] if square == Builtin.MUL else [3], [4]),
        Op(Builtin.MEAN, [4, 1], [5], _MEAN_KEEP),
        Op(Builtin.ADD, [5, 6], [7]),
        Op(Builtin.RSQRT, [7], [8]),
        Op(Builtin.MUL, [3, 8], [9]),
    ]
    out = 9
    if gamma is not None:
        tensors += [T((c,), data=gamma), T(shape)]
        ops.append(Op(Builtin.MUL, [out, len(tensors) - 2], [len(tensors) - 1]))
        out = len(tensors) - 1
    if beta is not None:
        tensors += [T((c,), data=beta), T(shape)]
        ops.append(Op(Builtin.ADD, [out, len(tensors) - 2], [len(tensors) - 1]))
        out = len(tensors) - 1
    return tensors, ops, out


def _check(tensors, ops, out, x, precision="F32"):
    model = build_model(tensors, ops, [0], [out])
    got, want, state = run_both(model, [x], precision)
    assert len(state.delegated_nodes) == len(ops), state.unsupported
    # one kernel for the whole chain
    assert sum(p.kernels for p in state.partitions) == 1
    err = float(np.abs(got[0].astype(np.float64) - want[0]).max())
    assert err <= TOLERANCE[precision] * max(float(np.abs(want[0]).max()), 1.0), err


@pytest.mark.parametrize("precision", ["F32", "F16"])
@pytest.mark.parametrize("shape", [(1, 4, 6, 16), (2, 5, 10), (1, 3, 7)])
def test_keras_layer_norm(shape, precision):
    rng = np.random.default_rng(1)
    c = shape[-1]
    gamma, beta = rng.uniform(0.5, 1.5, c).astype(np.float32), rng.uniform(-1, 1, c).astype(np.float32)
    x = rng.normal(0.5, 2.0, shape).astype(np.float32)
    _check(*_keras(shape, gamma, beta, 1e-3), x, precision)


@pytest.mark.parametrize("affine", ["gamma", "neither"])
def test_keras_layer_norm_without_beta(affine):
    """A zero beta is dropped by the converter (every freshly initialized Keras model: the
    transformers of tests/models/), and a layer may have no scale either: still one kernel."""
    rng = np.random.default_rng(3)
    shape = (1, 9, 24)
    gamma = rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32) if affine == "gamma" else None
    x = rng.normal(0.5, 2.0, shape).astype(np.float32)
    _check(*_keras(shape, gamma, None, 1e-6), x)


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("square", [Builtin.MUL, Builtin.SQUARE])
def test_torch_layer_norm(square, affine):
    rng = np.random.default_rng(2)
    shape = (1, 6, 20)
    c = shape[-1]
    gamma = rng.uniform(0.5, 1.5, c).astype(np.float32) if affine else None
    beta = rng.uniform(-1, 1, c).astype(np.float32) if affine else None
    x = rng.normal(-1.0, 3.0, shape).astype(np.float32)
    _check(*_torch(shape, gamma, beta, 1e-5, square), x)


def _rms(shape, gamma, eps, *, square=Builtin.MUL, keep_dims=True, gamma_inside=False):
    """RMSNorm as litert-torch and Keras write it: x * rsqrt(mean(x^2) + eps) [* gamma]; the MEAN
    keeping the last axis, or not and reshaped back after the ADD (litert-torch); gamma on the
    product or (``gamma_inside``) on the RSQRT."""
    c, stat = shape[-1], (*shape[:-1], 1)
    reduced = stat if keep_dims else shape[:-1]
    tensors = [
        T(shape),  # 0 x
        T((1,), dtype=np.int32, data=np.array([len(shape) - 1], np.int32)),  # 1 axis
        T(shape),  # 2 squared
        T(reduced),  # 3 mean square
        T((), data=np.array(eps, np.float32)),  # 4 eps
        T(reduced),  # 5 add
    ]
    ops = [
        Op(square, [0, 0] if square == Builtin.MUL else [0], [2]),
        Op(Builtin.MEAN, [2, 1], [3], ("ReducerOptions", {"KeepDims": keep_dims})),
        Op(Builtin.ADD, [3, 4], [5]),
    ]
    at = 5
    if not keep_dims:
        tensors += [T((len(stat),), dtype=np.int32, data=np.array(stat, np.int32)), T(stat)]
        ops.append(Op(Builtin.RESHAPE, [5, 6], [7], ("ReshapeOptions", {"NewShape": list(stat)})))
        at = 7
    tensors.append(T(stat))  # rsqrt
    ops.append(Op(Builtin.RSQRT, [at], [len(tensors) - 1]))
    r = len(tensors) - 1
    if gamma is not None and gamma_inside:
        tensors += [T((c,), data=gamma), T(shape)]
        ops.append(Op(Builtin.MUL, [r, len(tensors) - 2], [len(tensors) - 1]))
        r = len(tensors) - 1
    tensors.append(T(shape))
    ops.append(Op(Builtin.MUL, [0, r], [len(tensors) - 1]))
    out = len(tensors) - 1
    if gamma is not None and not gamma_inside:
        tensors += [T((c,), data=gamma), T(shape)]
        ops.append(Op(Builtin.MUL, [out, len(tensors) - 2], [len(tensors) - 1]))
        out = len(tensors) - 1
    return tensors, ops, out


@pytest.mark.parametrize(
    ("shape", "square", "keep_dims", "gamma_inside", "precision"),
    [
        ((1, 12, 24), Builtin.MUL, False, False, "F32"),  # litert-torch, its RMSNorm composites too
        ((1, 12, 24), Builtin.MUL, False, False, "F16"),
        ((2, 5, 10), Builtin.SQUARE, True, False, "F32"),
        ((1, 4, 6, 16), Builtin.MUL, True, True, "F32"),
        ((1, 3, 7), Builtin.MUL, True, None, "F32"),  # no gamma
    ],
)
def test_rms_norm(shape, square, keep_dims, gamma_inside, precision):
    rng = np.random.default_rng(4)
    gamma = None if gamma_inside is None else rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32)
    x = rng.normal(0.5, 2.0, shape).astype(np.float32)
    tensors, ops, out = _rms(shape, gamma, 1e-6, square=square, keep_dims=keep_dims, gamma_inside=bool(gamma_inside))
    _check(tensors, ops, out, x, precision)


def _torch_native(shape, gamma, beta, eps, axes):
    """PyTorch's native layer norm as litert-torch writes it: statistics reduced over ``axes`` (the
    last, and the batch of 1) without keeping them, reshaped back; x * r + (0 - r * m)."""
    stat, reduced = (*shape[:-1], 1), tuple(d for i, d in enumerate(shape) if i not in axes)
    tensors = [
        T(shape),  # 0 x
        T((len(axes),), dtype=np.int32, data=np.array(axes, np.int32)),  # 1 axes
        T(reduced),  # 2 mean
        T((len(stat),), dtype=np.int32, data=np.array(stat, np.int32)),  # 3 stat shape
        T(stat),  # 4 mean, reshaped
        T(shape),  # 5 squared difference
        T(reduced),  # 6 variance
        T((), data=np.array(eps, np.float32)),  # 7 eps
        T(reduced),  # 8 add
        T(reduced),  # 9 rsqrt
        T(reduced),  # 10 r * m
        T((), data=np.array(0.0, np.float32)),  # 11 zero
        T(reduced),  # 12 shift
        T(stat),  # 13 r, reshaped
        T(shape),  # 14 x * r
        T(stat),  # 15 shift, reshaped
        T(shape),  # 16 normalized
    ]
    reshape = ("ReshapeOptions", {"NewShape": list(stat)})
    mean = ("ReducerOptions", {"KeepDims": False})
    ops = [
        Op(Builtin.MEAN, [0, 1], [2], mean),
        Op(Builtin.RESHAPE, [2, 3], [4], reshape),
        Op(Builtin.SQUARED_DIFFERENCE, [0, 4], [5]),
        Op(Builtin.MEAN, [5, 1], [6], mean),
        Op(Builtin.ADD, [6, 7], [8]),
        Op(Builtin.RSQRT, [8], [9]),
        Op(Builtin.MUL, [9, 2], [10]),
        Op(Builtin.SUB, [11, 10], [12]),
        Op(Builtin.RESHAPE, [9, 3], [13], reshape),
        Op(Builtin.MUL, [0, 13], [14]),
        Op(Builtin.RESHAPE, [12, 3], [15], reshape),
        Op(Builtin.ADD, [14, 15], [16]),
    ]
    out = 16
    for data, op in ((gamma, Builtin.MUL), (beta, Builtin.ADD)):
        if data is not None:
            tensors += [T((shape[-1],), data=data), T(shape)]
            ops.append(Op(op, [len(tensors) - 2, out], [len(tensors) - 1]))
            out = len(tensors) - 1
    return tensors, ops, out


@pytest.mark.parametrize(
    ("shape", "axes", "affine", "precision"),
    [
        ((1, 12, 24), [0, 2], True, "F32"),  # litert-torch: the batch of 1 reduced too; its group_norm composites
        ((1, 12, 24), [0, 2], True, "F16"),
        ((2, 7, 10), [2], False, "F32"),  # nn.LayerNorm at its initial weights: the converter drops them
    ],
)
def test_torch_native_layer_norm(shape, axes, affine, precision):
    rng = np.random.default_rng(6)
    c = shape[-1]
    gamma = rng.uniform(0.5, 1.5, c).astype(np.float32) if affine else None
    beta = rng.uniform(-1, 1, c).astype(np.float32) if affine else None
    x = rng.normal(-1.0, 3.0, shape).astype(np.float32)
    _check(*_torch_native(shape, gamma, beta, 1e-5, axes), x, precision)


@pytest.mark.parametrize(
    ("shape", "block"),
    [
        ((1, 64, 128), True),  # MLP-Mixer's: whole blocks of 4 pixels
        ((2, 5, 10), True),  # 10 pixels (batch 2): the last block moved back, 3 slices, the last half padding
        ((1, 7, 37), True),  # a last slice of one channel
        ((1, 3, 12), False),  # fewer pixels than a block: a work-item per pixel
    ],
)
@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_layer_norm_in_blocks_of_four_pixels(monkeypatch, shape, block, precision):
    """On buffers (the CPU device's storage) a work-item normalizes 4 consecutive pixels at once,
    their slices one FLT16, where there are 4 pixels; a residual ADD of a runtime tensor linked
    after it reads each pixel's own (X, Y, b). TFLite's answer either way."""
    rng = np.random.default_rng(len(shape) + shape[-1])
    c = shape[-1]
    gamma, beta = (rng.uniform(0.5, 1.5, c).astype(np.float32) for _ in range(2))
    tensors, ops, out = _keras(shape, gamma, beta, 1e-3)
    tensors += [T(shape), T(shape)]
    ops.append(Op(Builtin.ADD, [out, len(tensors) - 2], [len(tensors) - 1]))
    codes = _kernel_codes(monkeypatch)
    model = build_model(tensors, ops, [0, len(tensors) - 2], [len(tensors) - 1])
    x, r = (rng.normal(0.5, 2.0, shape).astype(np.float32) for _ in range(2))
    got, want, state = run_both(model, [x, r], precision)
    assert len(state.delegated_nodes) == len(ops), state.unsupported
    assert sum(p.kernels for p in state.partitions) == 1
    err = float(np.abs(got[0].astype(np.float64) - want[0]).max())
    assert err <= TOLERANCE[precision] * max(float(np.abs(want[0]).max()), 1.0), err
    assert any("float16 squares" in code for code in codes) == block, codes
