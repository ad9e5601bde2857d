"""The layer-norm rewrite (compiler/layer_norm.py): the op chains TensorFlow's converter (Keras
LayerNormalization, checked against a model converted by TF 2.21) and PyTorch's converters emit,
built op by op, run as one kernel and checked against TFLite's builtin kernels."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import Builtin

from .test_ops import TOLERANCE, run_both
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

_MEAN_KEEP = ("ReducerOptions", {"KeepDims": True})


def _keras(shape, gamma, beta, eps):
    """Tensors and ops as the TFLite converter writes Keras's LayerNormalization."""
    c = shape[-1]
    per_channel = (1,) * (len(shape) - 1) + (c,)
    tensors = [
        T(shape),  # 0 x
        T((), data=np.float32(eps)),  # 1 eps
        T((1,), dtype=np.int32, data=np.array([-1], np.int32)),  # 2 axis
        T(per_channel, data=beta.reshape(per_channel)),  # 3 beta
        T(per_channel, data=gamma.reshape(per_channel)),  # 4 gamma
        *(T((*shape[:-1], 1)) for _ in range(2)),  # 5 mean, 6 neg
        T(shape),  # 7 squared difference
        *(T((*shape[:-1], 1)) for _ in range(3)),  # 8 variance, 9 add, 10 rsqrt
        *(T(shape) for _ in range(5)),  # 11 mul .. 15 out
    ]
    ops = [
        Op(Builtin.MEAN, [0, 2], [5], _MEAN_KEEP),
        Op(Builtin.NEG, [5], [6]),
        Op(Builtin.SQUARED_DIFFERENCE, [0, 5], [7]),
        Op(Builtin.MEAN, [7, 2], [8], _MEAN_KEEP),
        Op(Builtin.ADD, [8, 1], [9]),
        Op(Builtin.RSQRT, [9], [10]),
        Op(Builtin.MUL, [10, 4], [11]),
        Op(Builtin.MUL, [6, 11], [12]),
        Op(Builtin.ADD, [12, 3], [13]),
        Op(Builtin.MUL, [0, 11], [14]),
        Op(Builtin.ADD, [14, 13], [15]),
    ]
    return tensors, ops, 15


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
