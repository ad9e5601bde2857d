"""Zero PADs merged into the convolutions that read them (delegate/compiler/pad_merge.py), against
TFLite's builtin kernels: the merged graphs run one kernel less per PAD and give the same outputs;
the PADs that must not merge keep their kernel."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegate.compiler.graph import Builtin

from .test_ops import EXAMPLES, check, families, precisions, rand, seeds
from .test_quant import check_quant, int_bias, int_weights, qrand, qt
from .tflite_builder import Op, T

pytestmark = pytest.mark.opencl

VALID, SAME = 1, 0  # TFLite's Padding enum as the builder writes it (SAME = 0)


def _out(size: int, kernel: int, stride: int, padding: int) -> int:
    return -(-size // stride) if padding == SAME else (size - kernel) // stride + 1


def _kernels(state) -> tuple[int, int]:
    (partition,) = state.partitions
    return partition.kernels, partition.fused_ops


def _pad_then(op: Builtin, src, pads, k: int, stride: int, padding: int, cout: int, rng) -> tuple[list, list]:
    """PAD (height and width by ``pads``) and then ``op`` (k x k, ``stride``, ``padding``)."""
    b, h, w, c = src
    (top, bottom), (left, right) = pads
    padded = (b, h + top + bottom, w + left + right, c)
    out = (b, _out(padded[1], k, stride, padding), _out(padded[2], k, stride, padding), cout)
    paddings = np.array([[0, 0], [top, bottom], [left, right], [0, 0]], np.int32)
    if op == Builtin.DEPTHWISE_CONV_2D:
        weights = (1, k, k, cout)
        params = {"Padding": padding, "StrideW": stride, "StrideH": stride, "DepthMultiplier": cout // c}
        options = ("DepthwiseConv2DOptions", {**params, "FusedActivationFunction": 1})
    else:
        weights = (cout, k, k, c)
        params = {"Padding": padding, "StrideW": stride, "StrideH": stride}
        options = ("Conv2DOptions", {**params, "FusedActivationFunction": 3})
    tensors = [T(src), T((4, 2), paddings, np.int32), T(padded)]
    tensors += [T(weights, rand(weights, rng)), T((cout,), rand((cout,), rng)), T(out)]
    ops = [Op(Builtin.PAD, [0, 1], [2]), Op(op, [2, 3, 4], [5], options)]
    return tensors, ops


@families
@EXAMPLES
@given(
    src=st.tuples(st.integers(1, 2), st.integers(3, 12), st.integers(3, 12), st.integers(1, 13)),
    pads=st.tuples(st.tuples(st.integers(0, 2), st.integers(0, 2)), st.tuples(st.integers(0, 2), st.integers(0, 2))),
    op=st.sampled_from([Builtin.DEPTHWISE_CONV_2D, Builtin.CONV_2D]),
    k=st.sampled_from([1, 3, 5]),
    stride=st.integers(1, 2),
    padding=st.sampled_from([VALID, SAME]),
    seed=seeds,
    precision=precisions,
)
def test_pad_merged_into_the_convolution(family, src, pads, op, k, stride, padding, seed, precision):
    rng = np.random.default_rng(seed)
    _, h, w, c = src
    if padding == VALID and (h + sum(pads[0]) < k or w + sum(pads[1]) < k):
        return
    cout = c if op == Builtin.DEPTHWISE_CONV_2D else int(rng.integers(1, 9))
    tensors, ops = _pad_then(op, src, pads, k, stride, padding, cout, rng)
    state = check(tensors, ops, [0], [5], [rand(src, rng)], precision, kernel_family=family)
    assert _kernels(state) == (1, 1)  # the PAD runs inside the convolution, named in its kernel


def test_pad_with_two_convolution_readers_merges_into_both():
    # MediaPipe's pose detector pads once for two strided depthwise layers
    rng = np.random.default_rng(5)
    src, padded, out = (1, 9, 9, 6), (1, 11, 11, 6), (1, 5, 5, 6)
    paddings = np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)
    params = {"Padding": VALID, "StrideW": 2, "StrideH": 2, "DepthMultiplier": 1}
    tensors = [T(src), T((4, 2), paddings, np.int32), T(padded)]
    tensors += [T((1, 3, 3, 6), rand((1, 3, 3, 6), rng)), T((6,), rand((6,), rng)), T(out)]
    tensors += [T((1, 3, 3, 6), rand((1, 3, 3, 6), rng)), T((6,), rand((6,), rng)), T(out)]
    ops = [
        Op(Builtin.PAD, [0, 1], [2]),
        Op(Builtin.DEPTHWISE_CONV_2D, [2, 3, 4], [5], ("DepthwiseConv2DOptions", params)),
        Op(Builtin.DEPTHWISE_CONV_2D, [2, 6, 7], [8], ("DepthwiseConv2DOptions", params)),
    ]
    state = check(tensors, ops, [0], [5, 8], [rand(src, rng)])
    assert _kernels(state) == (2, 1)


def _padded_conv_with(pad_op: Op, extra: list, paddings: np.ndarray, rng) -> tuple[list, list]:
    src = (1, 6, 7, 4)
    padded = tuple(int(d + p[0] + p[1]) for d, p in zip(src, paddings, strict=True))
    out = (1, padded[1] - 2, padded[2] - 2, 3)
    tensors = [T(src), T((4, 2), paddings.astype(np.int32), np.int32), *extra, T(padded)]
    n = len(tensors)
    tensors += [T((3, 3, 3, padded[3]), rand((3, 3, 3, padded[3]), rng)), T((3,), rand((3,), rng)), T(out)]
    options = ("Conv2DOptions", {"Padding": VALID, "StrideW": 1, "StrideH": 1})
    return tensors, [pad_op, Op(Builtin.CONV_2D, [n - 1, n, n + 1], [n + 2], options)]


@pytest.mark.parametrize("case", ["pad value 0.75", "channels padded", "pad output read outside", "pad value 0"])
def test_pads_that_must_not_merge_keep_their_kernel(case):
    rng = np.random.default_rng(7)
    spatial = np.array([[0, 0], [1, 2], [2, 1], [0, 0]])
    if case in ("pad value 0.75", "pad value 0"):
        value = 0.75 if case == "pad value 0.75" else 0.0
        extra = [T((1,), np.array([value], np.float32))]
        tensors, ops = _padded_conv_with(Op(Builtin.PADV2, [0, 1, 2], [3]), extra, spatial, rng)
        outputs = [6]
    elif case == "channels padded":
        channels = np.array([[0, 0], [1, 1], [0, 0], [0, 3]])
        tensors, ops = _padded_conv_with(Op(Builtin.PAD, [0, 1], [2]), [], channels, rng)
        outputs = [5]
    else:
        tensors, ops = _padded_conv_with(Op(Builtin.PAD, [0, 1], [2]), [], spatial, rng)
        outputs = [2, 5]
    state = check(tensors, ops, [0], outputs, [rand((1, 6, 7, 4), rng)])
    assert _kernels(state) == ((1, 1) if case == "pad value 0" else (2, 0))


def test_pad_between_depthwise_and_pointwise_convolutions_is_not_paired_away():
    # depthwise -> PAD -> 1x1 convolution: after the merge the 1x1 convolution reads the depthwise
    # output directly, but with padding, which the depthwise + 1x1 pair kernel has no place for
    rng = np.random.default_rng(11)
    src, padded, c = (1, 12, 12, 8), (1, 14, 14, 8), 8
    paddings = np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)
    dw = {"Padding": SAME, "StrideW": 1, "StrideH": 1, "DepthMultiplier": 1}
    tensors = [T(src), T((1, 3, 3, c), rand((1, 3, 3, c), rng)), T((c,), rand((c,), rng)), T(src)]
    tensors += [T((4, 2), paddings, np.int32), T(padded)]
    tensors += [T((16, 1, 1, c), rand((16, 1, 1, c), rng)), T((16,), rand((16,), rng)), T((1, 14, 14, 16))]
    ops = [
        Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 2], [3], ("DepthwiseConv2DOptions", dw)),
        Op(Builtin.PAD, [3, 4], [5]),
        Op(Builtin.CONV_2D, [5, 6, 7], [8], ("Conv2DOptions", {"Padding": VALID, "StrideW": 1, "StrideH": 1})),
    ]
    state = check(tensors, ops, [0], [8], [rand(src, rng)])
    assert _kernels(state) == (2, 1)


@EXAMPLES
@given(
    src=st.tuples(st.just(1), st.integers(3, 9), st.integers(3, 9), st.integers(1, 10)),
    stride=st.integers(1, 2),
    seed=seeds,
)
def test_int8_pad_merged_into_the_depthwise_convolution(src, stride, seed):
    # TFLite pads an int8 tensor with its zero point: the real zero the merged reads count as
    rng = np.random.default_rng(seed)
    b, h, w, c = src
    padded = (b, h + 2, w + 2, c)
    out = (b, (padded[1] - 3) // stride + 1, (padded[2] - 3) // stride + 1, c)
    weights, w_scales = int_weights((1, 3, 3, c), 3, rng)
    paddings = np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)
    tensors = [qt(src, 0.05, 7), T((4, 2), paddings, np.int32), qt(padded, 0.05, 7), weights]
    tensors += [int_bias(w_scales * np.float32(0.05), rng), qt(out, 0.05 * float(w_scales.mean()) * 48, -2)]
    params = {"Padding": VALID, "StrideW": stride, "StrideH": stride, "DepthMultiplier": 1}
    ops = [
        Op(Builtin.PAD, [0, 1], [2]),
        Op(Builtin.DEPTHWISE_CONV_2D, [2, 3, 4], [5], ("DepthwiseConv2DOptions", params), version=3),
    ]
    state = check_quant(tensors, ops, [0], [5], [qrand(src, rng)])
    assert _kernels(state) == (1, 1)


@EXAMPLES
@given(
    shape=st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6), st.integers(1, 13)),
    extra=st.integers(1, 9),
    op=st.sampled_from([Builtin.ADD, Builtin.MUL, Builtin.SUB]),
    padded_first=st.booleans(),
    linked=st.booleans(),
    seed=seeds,
    precision=precisions,
)
def test_channel_pad_merged_into_the_elementwise_op(shape, extra, op, padded_first, linked, seed, precision):
    # BlazeFace's residual blocks: relu(conv(x) + pad_channels(x)); the op reads x, the appended
    # channels as zeros, inside the convolution's kernel (linked) or in its own
    rng = np.random.default_rng(seed)
    b, h, w, c = shape
    wide = (b, h, w, c + extra)
    paddings = np.array([[0, 0], [0, 0], [0, 0], [0, extra]], np.int32)
    tensors = [T(shape), T((4, 2), paddings, np.int32), T(wide)]
    ops = [Op(Builtin.PAD, [0, 1], [2])]
    if not linked:  # x from a LOGISTIC kernel: the lanes past its channels hold 0.5, not zeros
        tensors.append(T(shape))
        ops = [Op(Builtin.LOGISTIC, [3], [0]), *ops]
    if linked:
        tensors += [T((c + extra, 1, 1, c), rand((c + extra, 1, 1, c), rng)), T((c + extra,), rand((c + extra,), rng))]
        tensors.append(T(wide))
        conv = {"Padding": VALID, "StrideW": 1, "StrideH": 1}
        ops.append(Op(Builtin.CONV_2D, [0, 3, 4], [5], ("Conv2DOptions", conv)))
        other, inputs, feeds = 5, [0], [rand(shape, rng)]
    else:
        tensors.append(T(wide))
        other, inputs, feeds = 4, [3, 4], [rand(shape, rng), rand(wide, rng)]
    tensors.append(T(wide))
    operands = [2, other] if padded_first else [other, 2]
    options = {Builtin.ADD: ("AddOptions", {"FusedActivationFunction": 1}), Builtin.MUL: ("MulOptions", {})}
    ops.append(Op(op, operands, [len(tensors) - 1], options.get(op, ("SubOptions", {}))))
    state = check(tensors, ops, inputs, [len(tensors) - 1], feeds, precision)
    assert _kernels(state) == ((1, 2) if linked else (2, 1))


def test_channel_pad_read_twice_or_broadcast_keeps_its_kernel():
    rng = np.random.default_rng(3)
    shape, wide = (1, 4, 4, 5), (1, 4, 4, 8)
    paddings = np.array([[0, 0], [0, 0], [0, 0], [0, 3]], np.int32)
    # pad(x) + pad(x): one operand read twice
    tensors = [T(shape), T((4, 2), paddings, np.int32), T(wide), T(wide)]
    ops = [Op(Builtin.PAD, [0, 1], [2]), Op(Builtin.ADD, [2, 2], [3], ("AddOptions", {}))]
    state = check(tensors, ops, [0], [3], [rand(shape, rng)])
    assert _kernels(state) == (2, 0)
    # an ADD that broadcasts the padded tensor: [1, 1, 1, 8] + [1, 4, 4, 8]
    small, small_wide = (1, 1, 1, 5), (1, 1, 1, 8)
    tensors = [T(small), T((4, 2), paddings, np.int32), T(small_wide), T(wide), T(wide)]
    ops = [Op(Builtin.PAD, [0, 1], [2]), Op(Builtin.ADD, [2, 3], [4], ("AddOptions", {}))]
    state = check(tensors, ops, [0, 3], [4], [rand(small, rng), rand(wide, rng)])
    assert _kernels(state) == (2, 0)


def _conv_pad_pool(activation: int, pads, k: int, stride: int, rng) -> tuple[list, list]:
    """A 1x1 CONV_2D (fused ``activation``), a zero PAD (height and width by ``pads``), then a VALID
    k x k MAX_POOL_2D of ``stride``: the stem of ResNet and DenseNet."""
    src, cout = (1, 9, 10, 5), 6
    (top, bottom), (left, right) = pads
    conv_out = (1, 9, 10, cout)
    padded = (1, 9 + top + bottom, 10 + left + right, cout)
    out = (1, (padded[1] - k) // stride + 1, (padded[2] - k) // stride + 1, cout)
    paddings = np.array([[0, 0], [top, bottom], [left, right], [0, 0]], np.int32)
    conv = {"Padding": VALID, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": activation}
    pool = {"Padding": VALID, "StrideW": stride, "StrideH": stride, "FilterWidth": k, "FilterHeight": k}
    tensors = [T(src), T((cout, 1, 1, 5), rand((cout, 1, 1, 5), rng)), T((cout,), rand((cout,), rng)), T(conv_out)]
    tensors += [T((4, 2), paddings, np.int32), T(padded), T(out)]
    ops = [
        Op(Builtin.CONV_2D, [0, 1, 2], [3], ("Conv2DOptions", conv)),
        Op(Builtin.PAD, [3, 4], [5]),
        Op(Builtin.MAX_POOL_2D, [5], [6], ("Pool2DOptions", pool)),
    ]
    return tensors, ops


@pytest.mark.parametrize("precision", ["F32", "F16"])
@pytest.mark.parametrize(
    ("pads", "k", "stride"), [(((1, 1), (1, 1)), 3, 2), (((0, 1), (1, 0)), 2, 2), (((2, 1), (1, 2)), 3, 1)]
)
@pytest.mark.parametrize("activation", [1, 3])  # RELU, RELU6
def test_zero_pad_merged_into_max_pooling_of_non_negative_values(precision, pads, k, stride, activation):
    # the pooling skips cells past its input: the PAD's zeros change no maximum of values >= 0
    rng = np.random.default_rng(11)
    tensors, ops = _conv_pad_pool(activation, pads, k, stride, rng)
    state = check(tensors, ops, [0], [6], [rand((1, 9, 10, 5), rng)], precision)
    assert state.partitions[0].kernels == 2  # the convolution and the pooling, no PAD


@pytest.mark.parametrize(
    ("case", "pads", "k"),
    [("no activation", ((1, 1), (1, 1)), 3), ("padding as wide as the window", ((0, 2), (2, 0)), 2)],
)
def test_zero_pad_before_max_pooling_that_must_not_merge_keeps_its_kernel(case, pads, k):
    # values below zero would pool to the PAD's zero at the edges; a window wholly in the padding
    # holds no input cell to skip to
    rng = np.random.default_rng(12)
    tensors, ops = _conv_pad_pool(0 if case == "no activation" else 1, pads, k, 1, rng)
    state = check(tensors, ops, [0], [6], [rand((1, 9, 10, 5), rng)])
    assert state.partitions[0].kernels == 3


@pytest.mark.parametrize(("zero_point", "merged"), [(-128, True), (7, False)])
def test_int8_zero_pad_merged_into_max_pooling_on_a_grid_from_zero(zero_point, merged):
    # an int8 grid whose lowest integer is its zero point holds no value below zero
    rng = np.random.default_rng(13)
    src, padded, out = (1, 8, 7, 6), (1, 10, 9, 6), (1, 4, 4, 6)
    paddings = np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)
    tensors = [qt(src, 0.04, zero_point), T((4, 2), paddings, np.int32), qt(padded, 0.04, zero_point)]
    tensors.append(qt(out, 0.04, zero_point))
    pool = {"Padding": VALID, "StrideW": 2, "StrideH": 2, "FilterWidth": 3, "FilterHeight": 3}
    ops = [Op(Builtin.PAD, [0, 1], [2]), Op(Builtin.MAX_POOL_2D, [2], [3], ("Pool2DOptions", pool))]
    state = check_quant(tensors, ops, [0], [3], [qrand(src, rng)], steps=0, exact=1.0)
    assert state.partitions[0].kernels == (1 if merged else 2)
