"""Quantized models: dynamic-range (hybrid) weights, op by op and on the shared quant models.

Dynamic-range models keep int8 constant weights (per tensor or per channel) under float ops; the
delegate dequantizes them once at compile time and runs the float kernels. TFLite's hybrid CPU
kernels instead quantize each batch's activations on the fly to int8 (symmetric: scale max|x| /
127), so the two differ by that rounding. Each case is checked twice:

- against a float model with the dequantized weights through TFLite's builtin kernels: the same
  computation, so F32's tolerance (1e-4 of the output's scale);
- against the hybrid model through TFLite's builtin kernels, within the activation rounding's
  bound: every activation moves by at most half a step (max|x| / 254), so an output moves by at
  most that times the L1 norm of the weights it sums (the largest filter's), plus F32's tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegate.api import host_runtime
from delegate.compiler.graph import Builtin

from .helpers import delegate_and_builtin, shared_path
from .test_ops import EXAMPLES, TOLERANCE, rand, seeds
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

_PROGRAMS: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _program_cache(tmp_path_factory):
    _PROGRAMS["dir"] = str(tmp_path_factory.mktemp("programs"))


def quantize_weights(w: np.ndarray, axis: int | None) -> tuple[np.ndarray, list[float], int]:
    """Symmetric int8 weights as TFLite's converter writes them: per channel along ``axis`` (or per
    tensor for None), scale max|w| / 127, zero point 0."""
    if axis is None:
        scales = np.array([max(float(np.abs(w).max()), 1e-6) / 127])
        shaped = scales.reshape([1] * w.ndim)
    else:
        other = tuple(d for d in range(w.ndim) if d != axis)
        scales = np.maximum(np.abs(w).max(axis=other), 1e-6) / 127
        shape = [1] * w.ndim
        shape[axis] = -1
        shaped = scales.reshape(shape)
    q = np.clip(np.round(w / shaped), -127, 127).astype(np.int8)
    return q, [float(s) for s in scales.astype(np.float32)], 0 if axis is None else axis


def dequantize(q: np.ndarray, scales: list[float], axis: int) -> np.ndarray:
    shape = [1] * q.ndim
    if len(scales) > 1:
        shape[axis] = -1
    return (q.astype(np.float32) * np.asarray(scales, np.float32).reshape(shape)).astype(np.float32)


def check_hybrid(tensors, op: Op, weights: int, axis: int | None, data: int, out: int, x: np.ndarray, l1_axis: int):
    """Quantize tensor ``weights`` of the one-op model to int8, then compare the delegate with the
    float model (dequantized weights) and with TFLite's hybrid kernel (module docstring)."""
    w = tensors[weights].data
    q, scales, qaxis = quantize_weights(w, axis)
    hybrid = list(tensors)
    hybrid[weights] = T(w.shape, q, np.int8, quant=(scales, [0] * len(scales), qaxis))
    floats = list(tensors)
    floats[weights] = T(w.shape, dequantize(q, scales, qaxis))
    got, want_hybrid, state = delegate_and_builtin(build_model(hybrid, [op], [data], [out]), [x], _PROGRAMS["dir"])
    assert len(state.delegated_nodes) == 1, state.unsupported
    _, want_float, _ = delegate_and_builtin(build_model(floats, [op], [data], [out]), [x], _PROGRAMS["dir"])
    g, f, h = got[0].astype(np.float64), want_float[0], want_hybrid[0]
    scale = max(float(np.abs(f).max()), 1e-6)
    assert float(np.abs(g - f).max()) <= TOLERANCE["F32"] * scale, "delegate vs float reference"
    l1 = float(np.abs(dequantize(q, scales, qaxis)).sum(axis=tuple(d for d in range(q.ndim) if d != l1_axis)).max())
    bound = l1 * float(np.abs(x).max()) / 254 + TOLERANCE["F32"] * scale
    err = float(np.abs(g - h).max())
    assert err <= bound, f"delegate vs TFLite's hybrid kernel: {err} > bound {bound}"


_AXES = st.sampled_from(["channel", "tensor"])


@EXAMPLES
@given(
    src=st.tuples(st.integers(1, 2), st.integers(1, 9), st.integers(1, 9), st.integers(1, 13)),
    cout=st.integers(1, 11),
    k=st.integers(1, 3),
    stride=st.integers(1, 2),
    padding=st.sampled_from([1, 2]),
    per=_AXES,
    seed=seeds,
)
def test_hybrid_conv_2d(src, cout, k, stride, padding, per, seed):
    rng = np.random.default_rng(seed)
    b, h, w, cin = src
    oh = -(-h // stride) if padding == 1 else (h - k) // stride + 1
    ow = -(-w // stride) if padding == 1 else (w - k) // stride + 1
    if oh < 1 or ow < 1:
        return
    tensors = [T(src), T((cout, k, k, cin), rand((cout, k, k, cin), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, oh, ow, cout)))
    options = ("Conv2DOptions", {"Padding": padding - 1, "StrideW": stride, "StrideH": stride})
    op = Op(Builtin.CONV_2D, [0, 1, 2], [3], options, version=2)
    check_hybrid(tensors, op, 1, 0 if per == "channel" else None, 0, 3, rand(src, rng), 0)


@EXAMPLES
@given(
    src=st.tuples(st.integers(1, 2), st.integers(1, 9), st.integers(1, 9), st.integers(1, 13)),
    k=st.integers(1, 3),
    multiplier=st.integers(1, 2),
    seed=seeds,
)
def test_hybrid_depthwise_conv_2d(src, k, multiplier, seed):
    # TFLite's hybrid depthwise kernel takes per-channel weights only (quantized dimension 3).
    rng = np.random.default_rng(seed)
    b, h, w, cin = src
    cout = cin * multiplier
    tensors = [T(src), T((1, k, k, cout), rand((1, k, k, cout), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, h, w, cout)))
    options = ("DepthwiseConv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "DepthMultiplier": multiplier})
    op = Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 2], [3], options, version=2)
    check_hybrid(tensors, op, 1, 3, 0, 3, rand(src, rng), 3)


@EXAMPLES
@given(rows=st.integers(1, 4), cin=st.integers(1, 40), cout=st.integers(1, 19), per=_AXES, seed=seeds)
def test_hybrid_fully_connected(rows, cin, cout, per, seed):
    rng = np.random.default_rng(seed)
    tensors = [T((rows, cin)), T((cout, cin), rand((cout, cin), rng)), T((cout,), rand((cout,), rng)), T((rows, cout))]
    op = Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], ("FullyConnectedOptions", {}), version=3)
    check_hybrid(tensors, op, 1, 0 if per == "channel" else None, 0, 3, rand((rows, cin), rng), 0)


@EXAMPLES
@given(
    src=st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6), st.integers(1, 9)),
    cout=st.integers(1, 9),
    k=st.integers(1, 3),
    stride=st.integers(1, 2),
    seed=seeds,
)
def test_hybrid_transpose_conv(src, cout, k, stride, seed):
    rng = np.random.default_rng(seed)
    b, h, w, cin = src
    out = (b, (h - 1) * stride + k, (w - 1) * stride + k, cout)  # VALID
    tensors = [T((4,), np.array(out, np.int32), np.int32), T((cout, k, k, cin), rand((cout, k, k, cin), rng)), T(src)]
    tensors.append(T(out))
    options = ("TransposeConvOptions", {"Padding": 1, "StrideW": stride, "StrideH": stride})
    op = Op(Builtin.TRANSPOSE_CONV, [0, 1, 2], [3], options, version=3)
    check_hybrid(tensors, op, 1, 0, 2, 3, rand(src, rng), 0)


def test_hybrid_weights_stay_on_cpu_with_quantized_inference_off():
    rng = np.random.default_rng(3)
    q, scales, axis = quantize_weights(rand((5, 8), rng), 0)
    tensors = [T((2, 8)), T((5, 8), q, np.int8, quant=(scales, [0] * 5, axis)), T((5,), rand((5,), rng)), T((2, 5))]
    model = build_model(tensors, [Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], version=3)], [0], [3])
    _, _, state = delegate_and_builtin(model, [rand((2, 8), rng)], _PROGRAMS["dir"], enable_quantized_inference=False)
    assert state.delegated_nodes == [] and "enable_quantized_inference on" in str(state.unsupported), state.unsupported


#: Dynamic-range models against TFLite's hybrid kernels: each hybrid layer rounds its input to 8
#: bits (half a step, 1/254 of the activations' range); a handful of them in series (4 in
#: small_cnn, 6 in UNet-small, some through skip connections) stays within 2e-2 of the output's
#: scale, where a wrong weight, scale or axis is off by its order (tests of this file per op).
DYNAMIC_MODELS = {"small_cnn_dynamic.tflite": 2e-2, "unet_small_dynamic.tflite": 2e-2}


@pytest.mark.parametrize("name", sorted(DYNAMIC_MODELS))
def test_dynamic_range_models(name):
    model = shared_path("models", "quant", name).read_bytes()
    interpreter = host_runtime().Interpreter(model_content=model)
    rng = np.random.default_rng(0)
    feeds = [rng.uniform(0, 1, d["shape"]).astype(np.float32) for d in interpreter.get_input_details()]
    got, want, state = delegate_and_builtin(model, feeds, _PROGRAMS["dir"])
    assert state.unsupported == {} and len(state.delegated_nodes) == len(interpreter._get_ops_details())
    for g, w in zip(got, want, strict=True):
        scale = float(np.abs(w).max())
        assert float(np.abs(g - w).max()) <= DYNAMIC_MODELS[name] * scale
