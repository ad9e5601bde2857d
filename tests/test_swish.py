"""The swish rewrite (compiler/swish.py, ops/swish.py): MUL(y, LOGISTIC(y)) as Keras models write
it becomes one unary node, linked into y's producer, or one kernel of its own where the producer
takes no link; where the sigmoid is read elsewhere the two nodes stay as they are. Tiny models
built op by op, checked against TFLite's builtin kernels and by their kernel count."""

from __future__ import annotations

import re

import numpy as np
import pytest

from delegate.compiler import partition
from delegate.compiler.graph import Builtin

from .test_ops import check, rand
from .test_quant import check_quant, int_bias, int_weights, qrand, qt
from .tflite_builder import Op, T

pytestmark = pytest.mark.opencl

_SHAPE = (1, 5, 6, 8)
_CONV = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})
_DEPTHWISE = ("DepthwiseConv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "DepthMultiplier": 1})


def _kernels(state) -> int:
    return sum(p.kernels for p in state.partitions)


def _producer(kind: str, rng) -> tuple[list[T], list[Op]]:
    """Tensors 0 (input) .. 3 (y) and the op making y."""
    c = _SHAPE[-1]
    if kind == "conv":
        weights, options, code = rand((c, 3, 3, 5), rng, -0.5, 0.5), _CONV, Builtin.CONV_2D
        src = (*_SHAPE[:-1], 5)
    elif kind == "depthwise":
        weights, options, code = rand((1, 3, 3, c), rng), _DEPTHWISE, Builtin.DEPTHWISE_CONV_2D
        src = _SHAPE
    else:  # ADD of two runtime inputs: tensor 1 is the second input, tensor 2 unused
        return [T(_SHAPE), T(_SHAPE), T((1,), data=np.zeros(1, np.float32)), T(_SHAPE)], [
            Op(Builtin.ADD, [0, 1], [3], ("AddOptions", {}))
        ]
    tensors = [T(src), T(weights.shape, data=weights), T((c,), data=rand((c,), rng)), T(_SHAPE)]
    return tensors, [Op(code, [0, 1, 2], [3], options)]


def _swish(kind: str, rng, *, swapped: bool = False) -> tuple[list[T], list[Op], list[int]]:
    """y, then sigmoid (tensor 4), then the product (tensor 5)."""
    tensors, ops = _producer(kind, rng)
    tensors += [T(_SHAPE), T(_SHAPE)]
    ops += [Op(Builtin.LOGISTIC, [3], [4]), Op(Builtin.MUL, [4, 3] if swapped else [3, 4], [5], ("MulOptions", {}))]
    return tensors, ops, [0, 1] if kind == "add" else [0]


def _feeds(tensors: list[T], inputs: list[int], rng) -> list[np.ndarray]:
    return [rand(tensors[i].shape, rng, -3.0, 3.0) for i in inputs]


@pytest.mark.parametrize("precision", ["F32", "F16"])
@pytest.mark.parametrize("kind", ["conv", "depthwise", "add"])
def test_swish_links_into_its_producer(kind, precision):
    rng = np.random.default_rng(3)
    tensors, ops, inputs = _swish(kind, rng)
    state = check(tensors, ops, inputs, [5], _feeds(tensors, inputs, rng), precision)
    assert _kernels(state) == 1  # the producer, the sigmoid and the product in one kernel


def test_swish_with_its_operands_swapped():
    rng = np.random.default_rng(4)
    tensors, ops, inputs = _swish("conv", rng, swapped=True)
    state = check(tensors, ops, inputs, [5], _feeds(tensors, inputs, rng))
    assert _kernels(state) == 1


def test_without_the_rewrite_swish_takes_a_kernel_of_its_own(monkeypatch):
    """y has two readers: the convolution writes it, the MUL links into the sigmoid's kernel."""
    monkeypatch.setattr(partition, "REWRITES", [r for r in partition.REWRITES if type(r).__name__ != "SwishRewrite"])
    rng = np.random.default_rng(3)
    tensors, ops, inputs = _swish("conv", rng)
    assert _kernels(check(tensors, ops, inputs, [5], _feeds(tensors, inputs, rng))) == 2


def test_a_sigmoid_read_elsewhere_is_not_fused():
    """The sigmoid is also added to y: it must be written, so the nodes stay as they are."""
    rng = np.random.default_rng(5)
    tensors, ops, inputs = _swish("conv", rng)
    tensors.append(T(_SHAPE))
    ops.append(Op(Builtin.ADD, [4, 5], [6], ("AddOptions", {})))
    state = check(tensors, ops, inputs, [6], _feeds(tensors, inputs, rng))
    # the convolution (two readers), the sigmoid (two readers), the product with the ADD linked
    assert _kernels(state) == 3


def test_a_sigmoid_that_is_a_partition_output_is_not_fused():
    rng = np.random.default_rng(6)
    tensors, ops, inputs = _swish("conv", rng)
    state = check(tensors, ops, inputs, [5, 4], _feeds(tensors, inputs, rng))
    assert _kernels(state) == 3


def test_swish_on_a_partition_output_is_one_kernel():
    """y is also a partition output: the convolution writes it, the swish runs in one kernel."""
    rng = np.random.default_rng(7)
    tensors, ops, inputs = _swish("conv", rng)
    state = check(tensors, ops, inputs, [5, 3], _feeds(tensors, inputs, rng))
    assert _kernels(state) == 2


def test_swish_on_a_partition_input_is_one_kernel():
    rng = np.random.default_rng(8)
    tensors = [T(_SHAPE), T(_SHAPE), T(_SHAPE)]
    ops = [Op(Builtin.LOGISTIC, [0], [1]), Op(Builtin.MUL, [0, 1], [2], ("MulOptions", {}))]
    state = check(tensors, ops, [0], [2], [rand(_SHAPE, rng, -6.0, 6.0)])
    assert _kernels(state) == 1


def test_int8_swish_rounds_the_sigmoid_onto_its_grid():
    """TFLite's int8 LOGISTIC writes the sigmoid on its grid (scale 1/256), which its MUL reads:
    the fused op rounds it there too. Within one step of TFLite's integer kernels, as every
    carried op (test_quant.py); without the rounding 6.6% of these outputs are a step off."""
    rng = np.random.default_rng(9)
    src, c = (1, 6, 6, 4), 8
    weights, w_scales = int_weights((c, 3, 3, 4), 0, rng)
    y_scale = 0.05 * float(w_scales.mean()) * 64 * np.sqrt(36) / 4
    tensors = [
        qt(src, 0.05, 3),
        weights,
        int_bias(w_scales * np.float32(0.05), rng),
        qt((1, 6, 6, c), y_scale, -10),
        qt((1, 6, 6, c), 1 / 256, -128),
        qt((1, 6, 6, c), y_scale * 0.6, -60),
    ]
    ops = [
        Op(Builtin.CONV_2D, [0, 1, 2], [3], _CONV, version=3),
        Op(Builtin.LOGISTIC, [3], [4], version=2),
        Op(Builtin.MUL, [3, 4], [5], ("MulOptions", {}), version=2),
    ]
    state = check_quant(tensors, ops, [0], [5], [qrand(src, rng)])
    assert _kernels(state) == 1


# ------------------------------------------------------------------ on whole vectors


def _kernel_codes(monkeypatch) -> list[str]:
    """The code of every kernel the delegate compiles until ``monkeypatch`` is undone."""
    from delegate.plugin.registry import REGISTRY

    from .plugin_testing import inject

    real = REGISTRY.plan.loader.compiler.compile
    codes: list[str] = []

    def recording(graph, nodes, *args, **kwargs):
        ctx = real(graph, nodes, *args, **kwargs)
        codes.extend(n.gpu_op.code for n in ctx.nodes if n.gpu_op is not None and n.gpu_op.code)
        return ctx

    inject(monkeypatch, compile=recording)
    return codes


#: a swish on a whole wide vector: 8 floats, or 16 where the device compiles for AVX-512
#: (device_policy.vector_width) and the matrix products hold FLT16 groups
WIDE_SWISH = re.compile(r"FLT(8|16) swish_x")
#: a sigmoid's result converted from a whole wide vector
WIDE_SIGMOID = re.compile(r"convert_float(8|16)\(result\)")


def _layer(kind: str, h: int, w: int, cin: int, cout: int, rng) -> tuple[list[T], list[Op]]:
    """Tensors 0 (input) .. 3 (y): a 1x1 convolution (the flat matrix product), a 3x3 one (the
    row matrix product) or a 3x3 depthwise convolution (the row kernel), padded to keep h x w."""
    if kind == "depthwise":
        weights, options, code = rand((1, 3, 3, cin), rng), _DEPTHWISE, Builtin.DEPTHWISE_CONV_2D
        cout = cin
    else:
        k = 1 if kind == "conv1x1" else 3
        weights, options, code = rand((cout, k, k, cin), rng, -0.5, 0.5), _CONV, Builtin.CONV_2D
    y = (1, h, w, cout)
    tensors = [T((1, h, w, cin)), T(weights.shape, data=weights), T((cout,), data=rand((cout,), rng)), T(y)]
    return tensors, [Op(code, [0, 1, 2], [3], options)]


@pytest.mark.parametrize(
    ("kind", "shape"),
    [
        ("conv1x1", (7, 9, 8, 16)),  # 63 pixels: whole blocks of 6 and an edge block
        ("conv1x1", (5, 7, 12, 40)),  # 5 groups of 8, the last one part padding
        ("conv3x3", (6, 11, 8, 24)),  # the row product's lane-order blocks
        ("depthwise", (6, 11, 12, 0)),  # rows of 8 pixels and an edge; 3 slices: a half pair
    ],
)
@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_swish_runs_once_on_each_whole_vector(monkeypatch, kind, shape, precision):
    """Linked into a kernel that writes wider vectors in FLT4 parts (kernel.WideOps), the swish
    runs on the whole vector before the parts are written, not on each part."""
    rng = np.random.default_rng(10)
    tensors, ops = _layer(kind, *shape, rng)
    y = tensors[3].shape
    tensors += [T(y), T(y)]
    ops += [Op(Builtin.LOGISTIC, [3], [4]), Op(Builtin.MUL, [3, 4], [5], ("MulOptions", {}))]
    codes = _kernel_codes(monkeypatch)
    state = check(tensors, ops, [0], [5], _feeds(tensors, [0], rng), precision)
    assert _kernels(state) == 1
    assert any(WIDE_SWISH.search(code) for code in codes)


def test_an_op_linked_before_the_swish_keeps_it_on_each_write(monkeypatch):
    """y / c, then its swish: the quotient runs at each FLT4 write (DIV has no whole-vector code,
    ops/elementwise.py ``_WIDE_BINARY``), so the swish runs there too, after it."""
    rng = np.random.default_rng(11)
    tensors, ops = _layer("conv1x1", 7, 9, 8, 16, rng)
    y = tensors[3].shape
    c = rand((16,), rng, 0.5, 2.0)
    tensors += [T((16,), data=c), T(y), T(y), T(y)]
    ops += [
        Op(Builtin.DIV, [3, 4], [5], ("DivOptions", {})),
        Op(Builtin.LOGISTIC, [5], [6]),
        Op(Builtin.MUL, [5, 6], [7], ("MulOptions", {})),
    ]
    codes = _kernel_codes(monkeypatch)
    state = check(tensors, ops, [0], [7], _feeds(tensors, [0], rng))
    assert _kernels(state) == 1
    assert not any(WIDE_SWISH.search(code) for code in codes) and any("FLT4 swish_x" in code for code in codes)


def test_an_op_linked_after_the_swish_runs_after_it(monkeypatch):
    """swish(y), then + c: the swish on the whole vectors, the sum at each write, in that order."""
    rng = np.random.default_rng(12)
    tensors, ops = _layer("conv1x1", 7, 9, 8, 16, rng)
    y = tensors[3].shape
    tensors += [T(y), T(y), T((16,), data=rand((16,), rng)), T(y)]
    ops += [
        Op(Builtin.LOGISTIC, [3], [4]),
        Op(Builtin.MUL, [3, 4], [5], ("MulOptions", {})),
        Op(Builtin.ADD, [5, 6], [7], ("AddOptions", {})),
    ]
    codes = _kernel_codes(monkeypatch)
    state = check(tensors, ops, [0], [7], _feeds(tensors, [0], rng))
    assert _kernels(state) == 1
    assert any(WIDE_SWISH.search(code) for code in codes)


@pytest.mark.parametrize("kind", ["conv1x1", "conv3x3", "depthwise"])
def test_a_linked_sigmoid_runs_once_on_each_whole_vector(monkeypatch, kind):
    """LOGISTIC alone (a gate, a segmentation head's mask) takes the wide point like the swish."""
    rng = np.random.default_rng(13)
    tensors, ops = _layer(kind, 6, 11, 8, 20, rng)
    tensors.append(T(tensors[3].shape))
    ops.append(Op(Builtin.LOGISTIC, [3], [4]))
    codes = _kernel_codes(monkeypatch)
    state = check(tensors, ops, [0], [4], _feeds(tensors, [0], rng))
    assert _kernels(state) == 1
    assert any(WIDE_SIGMOID.search(code) for code in codes), codes


def _conv_swish_add(src: tuple[int, ...], channels: int, kernel: int, rng, *, add_first: bool
                    ) -> tuple[list[T], list[Op], list[int]]:  # fmt: skip
    """A convolution y (tensor 3), swish (tensors 4, 5) and an ADD of runtime input 6 (tensor 7);
    ``add_first``: the ADD on y, the swish on the sum."""
    out = (*src[:-1], channels)
    weights = rand((channels, kernel, kernel, src[-1]), rng, -0.5, 0.5)
    tensors = [T(src), T(weights.shape, data=weights), T((channels,), data=rand((channels,), rng)), T(out)]
    tensors += [T(out), T(out), T(out), T(out)]
    conv = Op(Builtin.CONV_2D, [0, 1, 2], [3], _CONV)
    if add_first:  # y + input 6 = tensor 7, then swish of it: tensors 4 and 5
        ops = [conv, Op(Builtin.ADD, [3, 6], [7], ("AddOptions", {})), Op(Builtin.LOGISTIC, [7], [4])]
        return tensors, [*ops, Op(Builtin.MUL, [7, 4], [5], ("MulOptions", {}))], [0, 6]
    ops = [conv, Op(Builtin.LOGISTIC, [3], [4]), Op(Builtin.MUL, [3, 4], [5], ("MulOptions", {}))]
    return tensors, [*ops, Op(Builtin.ADD, [5, 6], [7], ("AddOptions", {}))], [0, 6]


@pytest.mark.parametrize(
    ("src", "channels", "kernel"),
    [
        ((1, 9, 11, 3), 16, 3),  # an image's first layer: whole groups of 8 channels
        ((1, 7, 6, 8), 20, 3),  # a last group half past the channels
        ((1, 8, 8, 16), 6, 1),  # the flat matrix product, one group of 6 channels
        ((1, 5, 5, 24), 24, 3),  # thirds: 4 pixels x 3 groups
    ],
)
@pytest.mark.parametrize("add_first", [False, True])
def test_swish_and_a_residual_add_in_either_order_on_partial_blocks(src, channels, kernel, add_first):
    """A swish and an ADD reading a runtime operand, linked into one matrix product in either
    order (the swish wide only before the ADD), the partial blocks included, against TFLite."""
    rng = np.random.default_rng(11)
    tensors, ops, inputs = _conv_swish_add(src, channels, kernel, rng, add_first=add_first)
    state = check(tensors, ops, inputs, [5 if add_first else 7], _feeds(tensors, inputs, rng))
    assert _kernels(state) == 1


#: each unary op's statements on a whole wide vector (ops/elementwise.py, UnarySpec.wide)
WIDE_UNARY = {
    Builtin.HARD_SWISH: re.compile(r"FLT(8|16) r6 = result \+"),
    Builtin.TANH: re.compile(r"float(8|16) th_x = convert_float(8|16)\(result\)"),
    Builtin.RELU6: re.compile(r"result = result > \(\(FLT(8|16)\)\(6\.0f\)\)"),
    Builtin.RELU: re.compile(r"result = result < \(\(FLT(8|16)\)\(0\.0f\)\)"),
    Builtin.RELU_N1_TO_1: re.compile(r"result = result > \(\(FLT(8|16)\)\(1\.0f\)\)"),
}


@pytest.mark.parametrize("op", list(WIDE_UNARY), ids=lambda o: Builtin(o).name)
@pytest.mark.parametrize("kind", ["conv1x1", "conv3x3"])
@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_linked_activations_run_once_on_each_whole_vector(monkeypatch, op, kind, precision):
    """A hard swish (MobileNetV3's), tanh or clamp linked after a matrix product runs on its whole
    FLT8 / FLT16 vectors like the swish, edge blocks and a part-padding last group included."""
    rng = np.random.default_rng(14)
    tensors, ops = _layer(kind, 7, 9, 8, 40, rng)
    tensors.append(T(tensors[3].shape))
    ops.append(Op(op, [3], [4]))
    codes = _kernel_codes(monkeypatch)
    state = check(tensors, ops, [0], [4], _feeds(tensors, [0], rng), precision)
    assert _kernels(state) == 1
    assert any(WIDE_UNARY[op].search(code) for code in codes), codes
