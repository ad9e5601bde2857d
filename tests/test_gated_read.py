"""The gated read (ops/gated_read.py, fusion.GatedRead): a squeeze-excite block's MUL(x, gate), the
gate [1, 1, 1, C] broadcast over x's pixels, read by the block's 1x1 projection as x times the
gate, so that the MUL gets no kernel. Tiny squeeze-excite blocks built op by op (EfficientNet's
sigmoid gate, MobileNetV3's hard sigmoid), checked against TFLite's builtin kernels and by their
kernel count; a product read elsewhere keeps its kernel. An int8 product is rounded onto its grid
as it is read, where the projection multiplies integers or one work-item computes every output
channel of its pixels."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler import fusion, partition
from delegate.compiler.graph import Builtin

from .helpers import delegate_and_builtin
from .test_ops import PROGRAM_CACHE, check, rand
from .test_quant import check_quant, int_bias, int_weights, qrand, qt
from .test_quant_integer import VNNI, _device_int8_dot, _kernel_codes
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

_CONV = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})
_RELU, _RELU6 = 1, 3
_DEPTHWISE = ("DepthwiseConv2DOptions", {"Padding": 1, "StrideW": 1, "StrideH": 1, "DepthMultiplier": 1})
_MEAN = ("ReducerOptions", {"KeepDims": True})
_MUL = ("MulOptions", {})
#: the tensor the block's product is, and the projection's output
PRODUCT, OUT = 10, 12
#: depthwise, mean, squeeze, excite (its gate linked in), projection: the product has no kernel
GATED_KERNELS = 5


def _kernels(state) -> int:
    return sum(p.kernels for p in state.partitions)


def _conv(cin: int, cout: int, act: int, rng) -> tuple[tuple[T, T], dict]:
    """A 1x1 convolution's weights and biases, and its options with activation ``act``."""
    weights = rand((cout, 1, 1, cin), rng, -0.5, 0.5)
    biases = rand((cout,), rng, -0.5, 0.5)
    return (T(weights.shape, data=weights), T(biases.shape, data=biases)), {**_CONV[1], "FusedActivationFunction": act}


def squeeze_excite(h: int, w: int, c: int, cout: int, gate: str, rng) -> tuple[list[T], list[Op]]:
    """x (tensor 2) from a depthwise convolution of the input, its mean, a squeeze to c // 4 + 1
    channels with ReLU, an excite back to c with the gate, x times the gate (tensor PRODUCT), then
    the projection to ``cout`` channels (tensor OUT)."""
    squeeze = c // 4 + 1
    dw = rand((1, 3, 3, c), rng, -0.5, 0.5)
    (sq_w, sq_b), sq_options = _conv(c, squeeze, _RELU, rng)
    (ex_w, ex_b), ex_options = _conv(squeeze, c, _RELU6 if gate == "hard" else 0, rng)
    (pr_w, pr_b), pr_options = _conv(c, cout, 0, rng)
    se = (1, 1, 1, c)
    tensors = [
        T((1, h + 2, w + 2, c)),  # 0: the input
        T(dw.shape, data=dw),
        T((1, h, w, c)),  # 2: x
        T((2,), data=np.array([1, 2], np.int32), dtype=np.int32),
        T(se),  # 4: the mean
        sq_w,
        sq_b,
        T((1, 1, 1, squeeze)),  # 7: squeezed
        ex_w,
        ex_b,
        T((1, h, w, c)),  # 10: PRODUCT
        pr_w,
        T((1, h, w, cout)),  # 12: OUT
        pr_b,
        T(se),  # 14: the excite's logits
        T(se),  # 15: the gate
        T((c,), data=np.zeros(c, np.float32)),  # 16: the depthwise's biases
        T((1,), data=np.array([1 / 6], np.float32)),  # 17: the hard sigmoid's scale
    ]
    ops = [
        Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 16], [2], _DEPTHWISE),
        Op(Builtin.MEAN, [2, 3], [4], _MEAN),
        Op(Builtin.CONV_2D, [4, 5, 6], [7], ("Conv2DOptions", sq_options)),
        Op(Builtin.CONV_2D, [7, 8, 9], [14], ("Conv2DOptions", ex_options)),
        # relu6(z + 3) / 6 (MobileNetV3): the + 3 is in the biases, the / 6 a MUL by a constant
        Op(Builtin.MUL, [14, 17], [15], _MUL) if gate == "hard" else Op(Builtin.LOGISTIC, [14], [15]),
        Op(Builtin.MUL, [2, 15], [PRODUCT], _MUL),
        Op(Builtin.CONV_2D, [PRODUCT, 11, 13], [OUT], ("Conv2DOptions", pr_options)),
    ]
    return tensors, ops


#: (h, w, c, cout): channels not a multiple of 4, few and many pixels, the kernel's blockings
#: (2 groups lane by lane, 4 pixels x 3 groups, dot products for 2 outputs)
_SHAPES = [(2, 3, 6, 5), (16, 16, 13, 8), (7, 7, 32, 24), (9, 9, 20, 32), (1, 2, 4, 3), (4, 4, 8, 2)]


@pytest.mark.parametrize("gate", ["sigmoid", "hard"])
@pytest.mark.parametrize("shape", _SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_projection_reads_the_gated_feature_map(shape, gate):
    rng = np.random.default_rng(sum(shape))
    h, w, c, cout = shape
    tensors, ops = squeeze_excite(h, w, c, cout, gate, rng)
    state = check(tensors, ops, [0], [OUT], [rand(tensors[0].shape, rng)])
    assert _kernels(state) == GATED_KERNELS


@pytest.mark.parametrize("precision", ["F16", "F32_F16"])
def test_gated_read_in_half_precision(precision):
    rng = np.random.default_rng(11)
    tensors, ops = squeeze_excite(6, 5, 20, 16, "sigmoid", rng)
    state = check(tensors, ops, [0], [OUT], [rand(tensors[0].shape, rng)], precision)
    assert _kernels(state) == GATED_KERNELS


def test_gate_first_in_the_product():
    rng = np.random.default_rng(12)
    tensors, ops = squeeze_excite(5, 5, 12, 8, "sigmoid", rng)
    product = next(op for op in ops if op.outputs == [PRODUCT])
    product.inputs.reverse()
    assert _kernels(check(tensors, ops, [0], [OUT], [rand(tensors[0].shape, rng)])) == GATED_KERNELS


def test_without_the_pass_the_product_has_a_kernel(monkeypatch):
    monkeypatch.setattr(partition, "FUSIONS", [f for f in fusion.FUSIONS if not isinstance(f, fusion.GatedRead)])
    rng = np.random.default_rng(13)
    tensors, ops = squeeze_excite(5, 5, 12, 8, "sigmoid", rng)
    assert _kernels(check(tensors, ops, [0], [OUT], [rand(tensors[0].shape, rng)])) == GATED_KERNELS + 1


def test_a_product_read_elsewhere_keeps_its_kernel():
    """The product is also added to x: it must be written, so the MUL keeps its kernel."""
    rng = np.random.default_rng(14)
    tensors, ops = squeeze_excite(5, 5, 12, 8, "sigmoid", rng)
    tensors.append(T(tensors[PRODUCT].shape))
    ops.append(Op(Builtin.ADD, [PRODUCT, 2], [len(tensors) - 1], ("AddOptions", {})))
    state = check(tensors, ops, [0], [OUT, len(tensors) - 1], [rand(tensors[0].shape, rng)])
    assert _kernels(state) == GATED_KERNELS + 2  # the product's and the ADD's


def test_a_product_that_is_a_partition_output_keeps_its_kernel():
    rng = np.random.default_rng(15)
    tensors, ops = squeeze_excite(5, 5, 12, 8, "sigmoid", rng)
    state = check(tensors, ops, [0], [OUT, PRODUCT], [rand(tensors[0].shape, rng)])
    assert _kernels(state) == GATED_KERNELS + 1


def test_a_projection_with_a_window_reads_the_product():
    """A 3x3 projection (same padding) is a row-mode matrix product, which has no gated read."""
    rng = np.random.default_rng(16)
    tensors, ops = squeeze_excite(5, 5, 12, 8, "sigmoid", rng)
    weights = rand((8, 3, 3, 12), rng, -0.5, 0.5)
    tensors[11] = T(weights.shape, data=weights)
    state = check(tensors, ops, [0], [OUT], [rand(tensors[0].shape, rng)])
    assert _kernels(state) == GATED_KERNELS + 1


def _int8_projection(shape: tuple[int, int, int, int], rng) -> tuple[bytes, list[np.ndarray], list[T], list[Op]]:
    """x (int8) times a gate on a sigmoid's grid, rounded onto the product's grid, then a 1x1
    projection: the model, its feeds, its tensors and ops."""
    h, w, c, cout = shape
    weights, scales = int_weights((cout, 1, 1, c), 0, rng)
    product_scale = 0.04
    tensors = [
        qt((1, h, w, c), 0.05, 3),
        qt((1, 1, 1, c), 1 / 256, -128),  # a sigmoid's grid
        qt((1, h, w, c), product_scale, 1),
        weights,
        int_bias(scales * np.float32(product_scale), rng),
        qt((1, h, w, cout), product_scale * float(scales.mean()) * 64 * np.sqrt(c) / 4, -7),
    ]
    ops = [
        Op(Builtin.MUL, [0, 1], [2], _MUL, version=2),
        Op(Builtin.CONV_2D, [2, 3, 4], [5], _CONV, version=3),
    ]
    feeds = [qrand(tensors[0].shape, rng), qrand(tensors[1].shape, rng)]
    return build_model(tensors, ops, [0, 1], [5]), feeds, tensors, ops


def _id(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


#: (h, w, c, cout), kernels of a float product, and whether a VNNI device multiplies integers (16-wide
#: groups): projections one work-item computes every output channel of on 8- and 16-wide devices
#: (8 and 17 channels; 8 take an 8-wide float group), and one whose channels take several (80)
_INT8_SHAPES = [((6, 6, 12, 8), 1, False), ((9, 8, 22, 17), 1, True), ((5, 5, 12, 80), 2, True)]


@pytest.mark.parametrize("int8_dot", [False, True], ids=["float-product", "integer-product"])
@pytest.mark.parametrize(("shape", "kernels", "wide"), _INT8_SHAPES, ids=[_id(c[0]) for c in _INT8_SHAPES])
def test_an_int8_product_is_rounded_as_it_is_read(monkeypatch, shape, kernels, wide, int8_dot):
    """A quantized product (compiler/quant.py) read through its operands is rounded onto its grid
    as the projection reads it: the outputs are the MUL kernel's, bit for bit, and agree with
    TFLite's integer kernels as every carried op does. A float product whose work-item holds only
    some output channels would redo the rounding for each: the MUL keeps its kernel there. An
    integer product (AVX512-VNNI devices) converts each input slice to codes anyway, and rounds
    the product as it does (gemm_blocks.gated_codes), whatever its blocks."""
    if int8_dot and not _device_int8_dot():
        pytest.skip("the device has no AVX512-VNNI dot product for the integer product")
    rng = np.random.default_rng(sum(shape))
    model, feeds, tensors, ops = _int8_projection(shape, rng)
    codes = _kernel_codes(monkeypatch, int8_dot)
    integer = int8_dot and wide
    assert _kernels(check_quant(tensors, ops, [0, 1], [5], feeds)) == (1 if integer else kernels)
    assert any(VNNI in code and "args.gate.Read" in code for code in codes) == integer
    (gated,), _, _ = delegate_and_builtin(model, feeds, PROGRAM_CACHE)
    monkeypatch.setattr(partition, "FUSIONS", [f for f in fusion.FUSIONS if not isinstance(f, fusion.GatedRead)])
    (unfused,), _, state = delegate_and_builtin(model, feeds, PROGRAM_CACHE)
    assert _kernels(state) == 2
    np.testing.assert_array_equal(gated, unfused)
