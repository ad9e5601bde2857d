"""Op by op: single-op (and small multi-op) models built here, through the delegate and through
the host runtime's CPU kernels, on shapes drawn by hypothesis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate.compiler.graph import Builtin
from delegate.compiler.ops.reindex import strided_slice_values

from .helpers import delegate_and_builtin
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

TOLERANCE = {"F32": 1e-4, "F32_F16": 1e-2, "F16": 1e-2}
EXAMPLES = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
#: the program cache kernel tests run with: the default, as users have it (on PoCL no binaries of
#: the delegate's own, whose making would double every cold compile; PoCL's kernel cache keeps them)
PROGRAM_CACHE = "default"


def run_both(model: bytes, feeds: list[np.ndarray], precision: str = "F32", **options) -> tuple:
    return delegate_and_builtin(model, feeds, PROGRAM_CACHE, precision=precision, **options)


def check(tensors, ops, inputs, outputs, feeds, precision="F32", delegated=None, **options):
    model = build_model(tensors, ops, inputs, outputs)
    got, want, state = run_both(model, feeds, precision, **options)
    expected = len(ops) if delegated is None else delegated
    assert len(state.delegated_nodes) == expected, state.unsupported
    # Half-precision storage rounds every input to 11 significant bits before the op runs, so an
    # output made small by cancellation (a - b with a ~ b) can only be checked against the size of
    # the inputs; F32 is checked against the output alone.
    input_scale = max((float(np.abs(f).max()) for f in feeds), default=0.0) if precision != "F32" else 0.0
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        scale = max(float(np.abs(w).max()), input_scale, 1e-6)
        err = float(np.abs(g.astype(np.float64) - w).max())
        assert err <= TOLERANCE[precision] * scale, f"max abs error {err} vs scale {scale}"
    return state


def rand(shape, rng, low=-2.0, high=2.0) -> np.ndarray:
    return rng.uniform(low, high, size=shape).astype(np.float32)


shapes = st.tuples(st.integers(1, 2), st.integers(1, 9), st.integers(1, 9), st.integers(1, 13))
seeds = st.integers(0, 2**31 - 1)
precisions = st.sampled_from(["F32", "F32", "F16", "F32_F16"])
#: the kernel families of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED (option kernel_family):
#: their tests run with each; PoCL picks cpu by itself, gpu is what GPUs pick (kernels/gpu/gpu_conv.py)
families = pytest.mark.parametrize("family", ["cpu", "gpu"])

# ------------------------------------------------------------------ elementwise

_UNARY_DOMAIN = {
    Builtin.LOG: (0.1, 4.0),
    Builtin.SQRT: (0.0, 4.0),
    Builtin.RSQRT: (0.1, 4.0),
}
UNARY = [
    Builtin.LOGISTIC,
    Builtin.RELU,
    Builtin.RELU6,
    Builtin.RELU_N1_TO_1,
    Builtin.TANH,
    Builtin.ABS,
    Builtin.NEG,
    Builtin.EXP,
    Builtin.LOG,
    Builtin.SQRT,
    Builtin.RSQRT,
    Builtin.SQUARE,
    Builtin.SIN,
    Builtin.COS,
    Builtin.ELU,
    Builtin.HARD_SWISH,
    Builtin.LEAKY_RELU,
]


@pytest.mark.parametrize("op", UNARY, ids=lambda o: o.name)
@EXAMPLES
@given(shape=shapes, seed=seeds, precision=precisions)
def test_unary(op, shape, seed, precision):
    rng = np.random.default_rng(seed)
    x = rand(shape, rng, *_UNARY_DOMAIN.get(op, (-4.0, 4.0)))
    options = ("LeakyReluOptions", {"Alpha": 0.3}) if op == Builtin.LEAKY_RELU else None
    check([T(shape), T(shape)], [Op(op, [0], [1], options)], [0], [1], [x], precision)


BINARY = [
    Builtin.ADD,
    Builtin.SUB,
    Builtin.MUL,
    Builtin.DIV,
    Builtin.MAXIMUM,
    Builtin.MINIMUM,
    Builtin.SQUARED_DIFFERENCE,
    Builtin.POW,
    Builtin.PRELU,
]
_OPTIONS = {Builtin.ADD: "AddOptions", Builtin.SUB: "SubOptions", Builtin.MUL: "MulOptions", Builtin.DIV: "DivOptions"}


@st.composite
def broadcast_pair(draw):
    out = draw(shapes)
    other = tuple(d if draw(st.booleans()) else 1 for d in out)
    rank = draw(st.integers(1, 4))
    return out, other[4 - rank :]


@pytest.mark.parametrize("op", BINARY, ids=lambda o: o.name)
@EXAMPLES
@given(pair=broadcast_pair(), seed=seeds, constant=st.booleans(), act=st.sampled_from([0, 1, 3]), precision=precisions)
def test_binary_with_broadcasting(op, pair, seed, constant, act, precision):
    rng = np.random.default_rng(seed)
    out, other = pair
    positive = op in (Builtin.POW, Builtin.DIV)
    a = rand(out, rng, 0.5, 2.0) if positive else rand(out, rng)
    b = rand(other, rng, 0.5, 2.0) if positive else rand(other, rng)
    options = (_OPTIONS[op], {"FusedActivationFunction": act}) if op in _OPTIONS else None
    if constant or op == Builtin.PRELU:
        tensors = [T(out), T(other, b), T(out)]
        check(tensors, [Op(op, [0, 1], [2], options)], [0], [2], [a], precision)
    else:
        tensors = [T(out), T(other), T(out)]
        check(tensors, [Op(op, [0, 1], [2], options)], [0, 1], [2], [a, b], precision)


@pytest.mark.parametrize("other", [(), (5,), (7, 1), (1, 3, 1, 5), (2, 1, 1, 1), (2, 3, 7, 5)])
@pytest.mark.parametrize("first", [False, True])
def test_constant_operands_read_at_their_broadcast_coordinates(monkeypatch, other, first):
    """A constant operand of any broadcast shape, on either side of a non-commutative op, in a
    kernel of its own (DIV of a partition input) and linked into a producer's (SUB after an ADD):
    its broadcast dimensions are written into its read, not tested per element as a runtime
    operand's are; TFLite's answer."""
    from .test_swish import _kernel_codes

    out = (2, 3, 7, 5)
    rng = np.random.default_rng(len(other) + first)
    c, d = rand(other, rng, 0.5, 2.0), rand(other, rng, 0.5, 2.0)
    tensors = [T(out), T(out), T(out), T(other, c), T(out), T(other, d), T(out)]
    ops = [
        Op(Builtin.ADD, [0, 1], [2], ("AddOptions", {})),
        Op(Builtin.SUB, [3, 2] if first else [2, 3], [4], ("SubOptions", {})),
        Op(Builtin.DIV, [5, 0] if first else [0, 5], [6], ("DivOptions", {})),
    ]
    codes = _kernel_codes(monkeypatch)
    check(tensors, ops, [0, 1], [4, 6], [rand(out, rng, 0.5, 2.0), rand(out, rng)])
    # the runtime operands only: the ADD's two and the DIV's partition input
    assert sum(code.count("Width() == 1 ? 0 : X") for code in codes) == 3, codes


@pytest.mark.parametrize("shape", [(1, 3, 8, 5), (2, 2, 9, 8), (2, 3, 17, 13), (1, 1, 1, 3)])
@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_elementwise_kernels_in_runs_of_pixels(shape, precision):
    # On CPU devices an elementwise kernel's work-item runs a row's pixels 8 at a time
    # (selectors/pointwise.ROW_PIXELS): a whole run, a run and one pixel, two runs and one, one pixel, in
    # batches of 1 and 2. A PRELU with an ADD of a runtime tensor broadcast along the width linked
    # in, and a TANH: two kernels, every op standalone or linked inside the run.
    from delegate.compiler.selectors.pointwise import ROW_PIXELS

    assert ROW_PIXELS == 8
    rng = np.random.default_rng(sum(shape))
    b, h, _, c = shape
    tensors = [T(shape), T((1, 1, c), rand((1, 1, c), rng)), T(shape), T((b, h, 1, c)), T(shape), T(shape)]
    ops = [Op(Builtin.PRELU, [0, 1], [2]), Op(Builtin.ADD, [2, 3], [4]), Op(Builtin.TANH, [0], [5])]
    feeds = [rand(shape, rng), rand((b, h, 1, c), rng)]
    state = check(tensors, ops, [0, 3], [4, 5], feeds, precision)
    assert [p.kernels for p in state.partitions] == [2]


# ------------------------------------------------------------------ convolutions and pooling


@st.composite
def conv_case(draw):
    b, h, w, cin = draw(st.integers(1, 2)), draw(st.integers(1, 12)), draw(st.integers(1, 12)), draw(st.integers(1, 9))
    return {
        "src": (b, h, w, cin),
        "cout": draw(st.integers(1, 11)),
        "k": (draw(st.integers(1, 4)), draw(st.integers(1, 4))),
        "stride": (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        "dilation": (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
        "padding": draw(st.sampled_from([1, 2])),  # SAME, VALID
        "act": draw(st.sampled_from([0, 1, 2, 3])),
    }


def _out(size: int, k: int, stride: int, dilation: int, padding: int) -> int:
    effective = (k - 1) * dilation + 1
    return (size + stride - 1) // stride if padding == 1 else (size - effective + stride) // stride


@families
@EXAMPLES
@given(case=conv_case(), seed=seeds, precision=precisions, bias=st.booleans())
def test_conv_2d(family, case, seed, precision, bias):
    rng = np.random.default_rng(seed)
    b, h, w, cin = case["src"]
    (kh, kw), (sh, sw), (dh, dw) = case["k"], case["stride"], case["dilation"]
    oh, ow = _out(h, kh, sh, dh, case["padding"]), _out(w, kw, sw, dw, case["padding"])
    if oh < 1 or ow < 1:
        return
    cout = case["cout"]
    tensors = [T(case["src"]), T((cout, kh, kw, cin), rand((cout, kh, kw, cin), rng)), T((b, oh, ow, cout))]
    # TFLite 2.14's float CONV_2D requires the bias; bias=False makes it zeros.
    bias_value = rand((cout,), rng) if bias else np.zeros(cout, np.float32)
    tensors.insert(2, T((cout,), bias_value))
    inputs = [0, 1, 2]
    options = (
        "Conv2DOptions",
        {
            "Padding": case["padding"] - 1,
            "StrideW": sw,
            "StrideH": sh,
            "DilationWFactor": dw,
            "DilationHFactor": dh,
            "FusedActivationFunction": case["act"],
        },
    )
    out = len(tensors) - 1
    feeds = [rand(case["src"], rng)]
    check(tensors, [Op(Builtin.CONV_2D, inputs, [out], options)], [0], [out], feeds, precision, kernel_family=family)


@families
@EXAMPLES
@given(case=conv_case(), seed=seeds, multiplier=st.integers(1, 3), precision=precisions)
def test_depthwise_conv_2d(family, case, seed, multiplier, precision):
    rng = np.random.default_rng(seed)
    b, h, w, cin = case["src"]
    (kh, kw), (sh, sw), (dh, dw) = case["k"], case["stride"], case["dilation"]
    oh, ow = _out(h, kh, sh, dh, case["padding"]), _out(w, kw, sw, dw, case["padding"])
    if oh < 1 or ow < 1:
        return
    cout = cin * multiplier
    tensors = [
        T(case["src"]),
        T((1, kh, kw, cout), rand((1, kh, kw, cout), rng)),
        T((cout,), rand((cout,), rng)),
        T((b, oh, ow, cout)),
    ]
    options = (
        "DepthwiseConv2DOptions",
        {
            "Padding": case["padding"] - 1,
            "StrideW": sw,
            "StrideH": sh,
            "DepthMultiplier": multiplier,
            "DilationWFactor": dw,
            "DilationHFactor": dh,
            "FusedActivationFunction": case["act"],
        },
    )
    op = Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 2], [3], options)
    check(tensors, [op], [0], [3], [rand(case["src"], rng)], precision, kernel_family=family)


@families
@pytest.mark.parametrize(
    ("out_w", "stride", "padding"),
    [(7, 1, 1), (14, 2, 1), (21, 1, 2), (28, 2, 2), (15, 1, 1), (10, 1, 1), (17, 1, 2), (30, 1, 1), (19, 1, 1)],
)
def test_depthwise_conv_2d_pixel_blocks(family, out_w, stride, padding):
    # MobileNetV2's row widths (7 to 28) and 15, with strides and both paddings: the depthwise
    # kernel's blocks of 8 pixels end partial on each of them, its left and right work-items take
    # the edge loads; at stride 1, rows of 10 and 30 (whole blocks of 10), 17 (blocks of 9, the
    # last partial) and 19 (10, partial). Batch 2 and 10 channels (a partial slice pair) on top.
    rng = np.random.default_rng(out_w * 10 + stride)
    b, h, c = 2, 4, 10
    w = out_w * stride if padding == 1 else (out_w - 1) * stride + 3  # SAME / VALID
    oh = -(-h // stride) if padding == 1 else (h - 3) // stride + 1
    tensors = [
        T((b, h, w, c)),
        T((1, 3, 3, c), rand((1, 3, 3, c), rng)),
        T((c,), rand((c,), rng)),
        T((b, oh, out_w, c)),
    ]
    params = {
        "Padding": padding - 1,
        "StrideW": stride,
        "StrideH": stride,
        "DepthMultiplier": 1,
        "FusedActivationFunction": 1,  # RELU
    }
    op = Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 2], [3], ("DepthwiseConv2DOptions", params))
    check(tensors, [op], [0], [3], [rand((b, h, w, c), rng)], kernel_family=family)


@pytest.mark.parametrize(("rows", "cin", "cout"), [(6, 3, 16), (7, 20, 16), (13, 64, 40), (128, 48, 32), (65, 36, 24)])
def test_fully_connected_over_token_rows(rows, cin, cout):
    """A transformer's (tokens x hidden) rows: blocks of 6 consecutive rows, the last one moved back
    to end on the last row (overlapping the block before) where the row count is not a multiple of 6."""
    rng = np.random.default_rng(rows + cout)
    tensors = [T((1, rows, cin)), T((cout, cin), rand((cout, cin), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((1, rows, cout)))
    options = ("FullyConnectedOptions", {"FusedActivationFunction": 0, "KeepNumDims": True})
    check(tensors, [Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], options)], [0], [3], [rand((1, rows, cin), rng)])


@families
@EXAMPLES
@given(
    rows=st.integers(1, 40),
    cin=st.integers(1, 40),
    cout=st.integers(1, 19),
    seed=seeds,
    precision=precisions,
    act=st.sampled_from([0, 1, 3]),
)
def test_fully_connected(family, rows, cin, cout, seed, precision, act):
    rng = np.random.default_rng(seed)
    tensors = [T((rows, cin)), T((cout, cin), rand((cout, cin), rng)), T((cout,), rand((cout,), rng)), T((rows, cout))]
    options = ("FullyConnectedOptions", {"FusedActivationFunction": act})
    op = Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], options)
    check(tensors, [op], [0], [3], [rand((rows, cin), rng)], precision, kernel_family=family)


@pytest.mark.parametrize("op", [Builtin.AVERAGE_POOL_2D, Builtin.MAX_POOL_2D], ids=lambda o: o.name)
@EXAMPLES
@given(
    shape=shapes,
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.sampled_from([1, 2]),
    seed=seeds,
    precision=precisions,
    act=st.sampled_from([0, 1, 3]),
    storage=st.sampled_from(["BUFFER", "BUFFER", "TEXTURE_2D"]),
)
def test_pooling(op, shape, k, stride, padding, seed, precision, act, storage):
    b, h, w, c = shape
    oh, ow = _out(h, k[0], stride[0], 1, padding), _out(w, k[1], stride[1], 1, padding)
    if oh < 1 or ow < 1:
        return
    options = (
        "Pool2DOptions",
        {
            "Padding": padding - 1,
            "StrideW": stride[1],
            "StrideH": stride[0],
            "FilterWidth": k[1],
            "FilterHeight": k[0],
            "FusedActivationFunction": act,
        },
    )
    rng = np.random.default_rng(seed)
    # BUFFER storage runs the row kernel (pooling.pool_rows_code), TEXTURE_2D the generic one
    check(
        [T(shape), T((b, oh, ow, c))],
        [Op(op, [0], [1], options)],
        [0],
        [1],
        [rand(shape, rng)],
        precision,
        storage_type=storage,
    )


@EXAMPLES
@given(shape=shapes, keep=st.booleans(), seed=seeds, precision=precisions)
def test_mean_over_space(shape, keep, seed, precision):
    b, _, _, c = shape
    if b != 1 and not keep:
        b = 1
        shape = (1, *shape[1:])
    out = (b, 1, 1, c) if keep else (b, c)
    tensors = [T(shape), T((2,), np.array([1, 2], np.int32), np.int32), T(out)]
    options = ("ReducerOptions", {"KeepDims": keep})
    check(
        tensors,
        [Op(Builtin.MEAN, [0, 1], [2], options)],
        [0],
        [2],
        [rand(shape, np.random.default_rng(seed))],
        precision,
    )


@pytest.mark.parametrize("storage", ["BUFFER", "TEXTURE_2D"])
@pytest.mark.parametrize("op", [Builtin.MEAN, Builtin.SUM], ids=["mean", "sum"])
@pytest.mark.parametrize("shape", [(1, 1, 1, 3), (1, 3, 3, 8), (2, 5, 4, 5), (2, 2, 9, 17), (1, 7, 13, 6)])
def test_sums_over_space(shape, op, storage):
    """Buffer storage sums each row in partial sums, four pixels at a time, then the pixels past
    the last four (reduce._plane_sum); texture storage takes the generic loop. Widths below,
    at and past a multiple of four, and a second batch between the pixels of a row."""
    b, _, _, c = shape
    tensors = [T(shape), T((2,), np.array([1, 2], np.int32), np.int32), T((b, 1, 1, c))]
    feed = rand(shape, np.random.default_rng(sum(shape)))
    check(tensors, [Op(op, [0, 1], [2], ("ReducerOptions", {"KeepDims": True}))], [0], [2], [feed],
          storage_type=storage)  # fmt: skip


@EXAMPLES
@given(shape=shapes, beta=st.floats(0.1, 3.0), seed=seeds, precision=precisions)
def test_softmax(shape, beta, seed, precision):
    options = ("SoftmaxOptions", {"Beta": beta})
    check(
        [T(shape), T(shape)],
        [Op(Builtin.SOFTMAX, [0], [1], options)],
        [0],
        [1],
        [rand(shape, np.random.default_rng(seed), -5, 5)],
        precision,
    )


@pytest.mark.parametrize("channels", [1, 2, 3, 4, 5, 9])
@pytest.mark.parametrize("op", [Builtin.SOFTMAX, Builtin.LOG_SOFTMAX], ids=["softmax", "log_softmax"])
def test_softmax_kernels_for_one_and_more_slices(op, channels):
    # Up to four channels the kernel reads its slice once; more take the looping kernel.
    shape = (2, 5, 3, channels)
    options = ("SoftmaxOptions", {"Beta": 0.7}) if op == Builtin.SOFTMAX else None
    feed = rand(shape, np.random.default_rng(channels), -5, 5)
    check([T(shape), T(shape)], [Op(op, [0], [1], options)], [0], [1], [feed])


@pytest.mark.parametrize("channels", [7, 128, 150, 256, 257])
def test_softmax_over_attention_rows(channels):
    """Rows held in private memory (up to 256 channels) and the looping kernel past them, with
    masked-out scores (attention masks set them to about -1e9), rows far below zero and rows off
    the slice grid."""
    shape = (1, 4, 3, channels)
    rng = np.random.default_rng(channels)
    feed = rand(shape, rng, -30, 30)
    feed[..., channels // 3 :: 5] = np.float32(-1e9)
    feed[0, 0] -= 2000  # rows far below zero: the padding lanes must not enter the maximum
    options = ("SoftmaxOptions", {"Beta": 0.125})
    check([T(shape), T(shape)], [Op(Builtin.SOFTMAX, [0], [1], options)], [0], [1], [feed])


@EXAMPLES
@given(shape=shapes, seed=seeds, data=st.data())
def test_reshape(shape, seed, data):
    n = int(np.prod(shape))
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    last = data.draw(st.sampled_from(divisors))
    out = (n // last, last)
    tensors = [T(shape), T((2,), np.array(out, np.int32), np.int32), T(out)]
    options = ("ReshapeOptions", {"NewShape": list(out)})
    check(tensors, [Op(Builtin.RESHAPE, [0, 1], [2], options)], [0], [2], [rand(shape, np.random.default_rng(seed))])


@pytest.mark.parametrize(
    ("shape", "out"),
    [
        ((1, 6, 5, 32), (1, 240, 4)),  # a detection head's regressors: one read per output slice
        ((2, 3, 4, 8), (2, 12, 8)),
        ((1, 4, 4, 12), (1, 8, 24)),
        ((1, 4, 4, 12), (1, 32, 6)),  # 6 channels out: the lane-by-lane kernel
    ],
)
def test_reshape_between_whole_slices(shape, out):
    tensors = [T(shape), T((len(out),), np.array(out, np.int32), np.int32), T(out)]
    options = ("ReshapeOptions", {"NewShape": list(out)})
    check(tensors, [Op(Builtin.RESHAPE, [0, 1], [2], options)], [0], [2], [rand(shape, np.random.default_rng(4))])


@pytest.mark.parametrize(
    ("shape", "out"),
    [
        ((1, 20, 20, 75), (1, 400, 3, 25)),  # a detection head's anchors: lanes cross input pixels
        ((3, 2, 1, 1), (1, 1, 6)),  # one slice's lanes cross input columns, rows and batches
        ((2, 3, 1, 2), (2, 1, 1, 6)),
    ],
)
def test_reshape_steps_lanes_across_pixels_rows_and_batches(shape, out):
    # the lane-by-lane kernel divides out its slice's first lane only and steps to the next ones
    tensors = [T(shape), T((len(out),), np.array(out, np.int32), np.int32), T(out)]
    options = ("ReshapeOptions", {"NewShape": list(out)})
    check(tensors, [Op(Builtin.RESHAPE, [0, 1], [2], options)], [0], [2], [rand(shape, np.random.default_rng(6))])


@pytest.mark.parametrize(
    ("shape", "out"),
    [
        ((1, 20, 20, 75), (1, 400, 3, 25)),  # a detection head's anchors: runs of 25, every shift
        ((1, 5, 5, 126), (1, 150, 21)),  # SSD's class scores: 126 = 6 anchors x 21
        ((2, 3, 4, 10), (2, 12, 2, 5)),  # batches: a run's input pixel found past the first batch
        ((1, 3, 9, 6), (1, 27, 2, 3)),  # runs of 3 inside the input's two slices
        ((1, 7, 3, 5), (1, 105, 1)),  # runs of one channel
        ((1, 4, 6, 8), (1, 24, 4, 2)),  # input of whole slices, output not: shifts 0 and 2
    ],
)
def test_reshape_to_runs_of_an_input_pixels_channels(shape, out):
    # the input's channels a multiple of the output's: each output slice is one or two input
    # slices shifted (ops/reshape.py, the runs kernel), in runs of a row
    tensors = [T(shape), T((len(out),), np.array(out, np.int32), np.int32), T(out)]
    options = ("ReshapeOptions", {"NewShape": list(out)})
    check(tensors, [Op(Builtin.RESHAPE, [0, 1], [2], options)], [0], [2], [rand(shape, np.random.default_rng(8))])


@pytest.mark.parametrize(
    ("shape", "axes"),
    [((1, 7, 6), [1]), ((2, 5, 3, 6), [-1]), ((2, 5, 3, 6), [0]), ((6, 9), [0]), ((1, 4, 5, 3), [1, 2]), ((11,), [0])],
)
def test_reverse_v2(shape, axes):
    tensors = [T(shape), T((len(axes),), np.array(axes, np.int32), np.int32), T(shape)]
    check(tensors, [Op(Builtin.REVERSE_V2, [0, 1], [2])], [0], [2], [rand(shape, np.random.default_rng(len(shape)))])


def _upsampling_chain(lead: int):
    """Keras 3's UpSampling2D (x2) on a (lead, 4, 4, 6) input: rank-5 RESHAPE / TILE / RESHAPE twice."""
    steps = [(lead, 4, 1, 4, 6), (lead, 4, 2, 4, 6), (lead, 8, 4, 1, 6), (lead, 8, 4, 2, 6), (lead, 8, 8, 6)]
    multiples = [None, (1, 1, 2, 1, 1), None, (1, 1, 1, 2, 1), None]
    tensors, ops = [T((lead, 4, 4, 6))], []
    for shape, tile in zip(steps, multiples, strict=True):
        src = len(tensors) - 1
        if tile is None:
            tensors.append(T((len(shape),), np.array(shape, np.int32), np.int32))
            ops.append(Op(Builtin.RESHAPE, [src, src + 1], [src + 2], ("ReshapeOptions", {"NewShape": list(shape)})))
        else:
            tensors.append(T((5,), np.array(tile, np.int32), np.int32))
            ops.append(Op(Builtin.TILE, [src, src + 1], [src + 2]))
        tensors.append(T(shape))
    return tensors, ops


@pytest.mark.parametrize("lead", [1, 2])
def test_rank5_reshape_and_tile_run_in_the_4d_view(lead):
    # without fusion: the RESHAPE and TILE kernels, not the upsampling rewrite's (test_upsample.py)
    tensors, ops = _upsampling_chain(lead)
    x = rand((lead, 4, 4, 6), np.random.default_rng(7))
    check(tensors, ops, [0], [len(tensors) - 1], [x], fuse=False)


@pytest.mark.parametrize(
    ("shape", "multiples", "runs"),
    [
        ((2, 3, 1, 4, 5), (2, 1, 2, 1, 1), True),  # the merged first dim tiled as a whole
        ((1, 3, 2, 4, 5), (3, 2, 1, 1, 1), True),  # a size-1 dim before the tiled one
        ((2, 3, 1, 4, 5), (1, 2, 1, 1, 1), False),  # 3 tiled inside the merged (6, ...): a repeat of 3 rows
    ],
)
def test_rank5_tile_merged_leading_dims(shape, multiples, runs):
    tiled = tuple(d * m for d, m in zip(shape, multiples, strict=True))
    tensors = [T(shape), T((5,), np.array(multiples, np.int32), np.int32), T(tiled)]
    x = rand(shape, np.random.default_rng(9))
    state = check(tensors, [Op(Builtin.TILE, [0, 1], [2])], [0], [2], [x], delegated=1 if runs else 0)
    assert runs or any("merges" in why for why in state.unsupported.values())


@pytest.mark.parametrize(
    ("shape", "target", "runs"),
    [
        ((1, 2, 1, 5, 6), (1, 2, 3, 5, 6), True),  # grouped-query attention's heads, each repeated
        ((1, 1, 5, 6), (2, 4, 5, 6), True),  # two dims of size 1
        ((3, 1, 6), (3, 4, 6), True),  # rank 3
        ((2, 3, 1, 4, 5), (2, 3, 2, 4, 5), True),  # repeated after the merged (6, ...) first dim
        ((1, 2, 1, 4, 5), (3, 2, 1, 4, 5), True),  # the merged first dim (2, ...) repeated whole
        ((2, 1, 1, 4, 5), (2, 3, 1, 4, 5), False),  # each of the merged (2, ...) rows repeated: not a tile
    ],
)
def test_broadcast_to(shape, target, runs):
    tensors = [T(shape), T((len(target),), np.array(target, np.int32), np.int32), T(target)]
    x = rand(shape, np.random.default_rng(11))
    op = Op(Builtin.BROADCAST_TO, [0, 1], [2], version=2)  # TFLite registers BROADCAST_TO from version 2
    state = check(tensors, [op], [0], [2], [x], delegated=1 if runs else 0)
    assert runs or any("merges" in why for why in state.unsupported.values())


@pytest.mark.parametrize(
    ("shape", "perm"),
    [
        ((1, 17, 3, 4, 12), (2, 0, 3, 1, 4)),  # timm's attention: qkv split into (3, B, heads, N, D)
        ((2, 3, 4, 5, 6), (4, 3, 2, 1, 0)),  # every dim moved, channels too
        ((2, 3, 1, 5, 6), (1, 0, 2, 4, 3)),
        ((2, 1, 3, 2, 3, 5), (3, 5, 0, 2, 1, 4)),  # rank 6
    ],
)
def test_high_rank_transpose(shape, perm):
    out = tuple(shape[p] for p in perm)
    tensors = [T(shape), T((len(perm),), np.array(perm, np.int32), np.int32), T(out)]
    x = rand(shape, np.random.default_rng(12))
    check(tensors, [Op(Builtin.TRANSPOSE, [0, 1], [2], version=6 if len(shape) > 5 else 5)], [0], [2], [x])


@pytest.mark.parametrize(
    ("shape", "begin", "end", "strides", "shrink"),
    [
        ((3, 1, 4, 17, 12), (1, 0, 0, 0, 0), (2, 1, 4, 17, 12), (1, 1, 1, 1, 1), 0),  # q, k or v of timm's qkv
        ((3, 2, 4, 5, 6), (2, 0, 1, 0, 1), (3, 2, 4, 5, 6), (1, 1, 2, 1, 2), 0b00001),  # shrunk to rank 4
        ((2, 3, 4, 5, 6), (0, 1, 0, 4, 0), (2, 3, 4, 5, 6), (1, 1, 1, 1, 3), 0b01000),
    ],
)
def test_high_rank_strided_slice(shape, begin, end, strides, shrink):
    want = strided_slice_values(
        np.zeros(shape), np.array(begin), np.array(end), np.array(strides), {"shrink_axis_mask": shrink}
    )
    vec = [T((len(shape),), np.array(v, np.int32), np.int32) for v in (begin, end, strides)]
    tensors = [T(shape), *vec, T(want.shape)]
    options = ("StridedSliceOptions", {"ShrinkAxisMask": shrink})
    x = rand(shape, np.random.default_rng(13))
    check(tensors, [Op(Builtin.STRIDED_SLICE, [0, 1, 2, 3], [4], options, version=5)], [0], [4], [x])


def test_high_rank_slice():
    shape, begin, size = (3, 1, 4, 5, 6), (2, 0, 1, 0, 2), (1, 1, 3, 5, 3)
    vec = [T((5,), np.array(v, np.int32), np.int32) for v in (begin, size)]
    x = rand(shape, np.random.default_rng(14))
    check([T(shape), *vec, T(size)], [Op(Builtin.SLICE, [0, 1, 2], [3], version=5)], [0], [3], [x])


def test_fused_tanh_stays_on_cpu():
    rng = np.random.default_rng(3)
    shape = (1, 4, 4, 3)
    options = ("AddOptions", {"FusedActivationFunction": 4})
    state = check(
        [T(shape), T(shape), T(shape)],
        [Op(Builtin.ADD, [0, 1], [2], options)],
        [0, 1],
        [2],
        [rand(shape, rng), rand(shape, rng)],
        delegated=0,
    )
    assert "TANH" in " ".join(state.unsupported.values())


def test_unsupported_op_stays_on_cpu_between_delegated_ones():
    shape = (1, 5, 5, 6)
    rng = np.random.default_rng(7)
    tensors = [T(shape), T(shape), T((2,), np.array([-1, 6], np.int32), np.int32), T((25, 6)), T((25, 6))]
    ops = [
        Op(Builtin.RELU, [0], [1]),
        Op(Builtin.RESHAPE, [1, 2], [3], ("ReshapeOptions", {"NewShape": [-1, 6]})),
        Op(8, [3], [4]),  # FLOOR: not in this compiler
    ]
    state = check(tensors, ops, [0], [4], [rand(shape, rng)], delegated=2)
    assert state.unsupported == {"floor_2": "FLOOR is not supported by the compiler"}


# ------------------------------------------------------------------ data movement


@EXAMPLES
@given(
    shape=shapes,
    axis=st.integers(-4, 3),
    n=st.integers(1, 4),
    constant=st.booleans(),
    seed=seeds,
    data=st.data(),
    precision=precisions,
)
def test_concatenation(shape, axis, n, constant, seed, data, precision):
    rng = np.random.default_rng(seed)
    a4 = axis % 4
    sizes = [data.draw(st.integers(1, 7)) for _ in range(n)]
    parts = [tuple(s if d == a4 else shape[d] for d in range(4)) for s in sizes]
    out = tuple(sum(sizes) if d == a4 else shape[d] for d in range(4))
    values = [rand(p, rng) for p in parts]
    tensors = [T(p, values[k] if (constant and k == n - 1 and n > 1) else None) for k, p in enumerate(parts)]
    tensors.append(T(out))
    feeds = [v for t, v in zip(tensors[:-1], values, strict=True) if t.data is None]
    inputs = [k for k, t in enumerate(tensors[:-1]) if t.data is None]
    options = ("ConcatenationOptions", {"Axis": axis})  # float CONCATENATION takes no fused activation in TFLite
    check(tensors, [Op(Builtin.CONCATENATION, list(range(n)), [n], options)], inputs, [n], feeds, precision)


@pytest.mark.parametrize("sizes", [(8, 4, 3), (4, 4), (12, 5), (3, 4)], ids=str)
@pytest.mark.parametrize("constant", [False, True])
def test_channel_concatenation_of_whole_slices(sizes, constant):
    """Inputs that start on a slice boundary are copied slice by slice (the last may be partial);
    (3, 4) does not start on one and takes the lane-by-lane path."""
    rng = np.random.default_rng(len(sizes))
    parts = [(2, 3, 5, c) for c in sizes]
    values = [rand(p, rng) for p in parts]
    tensors = [T(p, values[k] if constant and k == 1 else None) for k, p in enumerate(parts)]
    tensors.append(T((2, 3, 5, sum(sizes))))
    n = len(sizes)
    inputs = [k for k, t in enumerate(tensors[:-1]) if t.data is None]
    feeds = [values[k] for k in inputs]
    options = ("ConcatenationOptions", {"Axis": -1})
    check(tensors, [Op(Builtin.CONCATENATION, list(range(n)), [n], options)], inputs, [n], feeds)


@pytest.mark.parametrize("op", [Builtin.PAD, Builtin.PADV2], ids=lambda o: o.name)
@EXAMPLES
@given(
    shape=shapes,
    pads=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=4, max_size=4),
    seed=seeds,
    precision=precisions,
)
def test_pad(op, shape, pads, seed, precision):
    rng = np.random.default_rng(seed)
    paddings = np.array(pads, np.int32)
    out = tuple(int(d + p[0] + p[1]) for d, p in zip(shape, pads, strict=True))
    tensors = [T(shape), T((4, 2), paddings, np.int32)]
    inputs = [0, 1]
    if op == Builtin.PADV2:
        tensors.append(T((1,), np.array([0.75], np.float32)))
        inputs.append(2)
    tensors.append(T(out))
    check(tensors, [Op(op, inputs, [len(tensors) - 1])], [0], [len(tensors) - 1], [rand(shape, rng)], precision)


@EXAMPLES
@given(
    shape=shapes,
    size=st.tuples(st.integers(1, 17), st.integers(1, 17)),
    mode=st.sampled_from(["plain", "align", "half"]),
    seed=seeds,
    precision=precisions,
)
def test_resize_bilinear(shape, size, mode, seed, precision):
    rng = np.random.default_rng(seed)
    b, _, _, c = shape
    out = (b, size[0], size[1], c)
    tensors = [T(shape), T((2,), np.array(size, np.int32), np.int32), T(out)]
    options = ("ResizeBilinearOptions", {"AlignCorners": mode == "align", "HalfPixelCenters": mode == "half"})
    check(tensors, [Op(Builtin.RESIZE_BILINEAR, [0, 1], [2], options)], [0], [2], [rand(shape, rng)], precision)


@pytest.mark.parametrize(
    ("shape", "size"), [((1, 5, 6, 40), (10, 12)), ((2, 4, 3, 35), (7, 9)), ((1, 3, 3, 70), (6, 6))]
)
@pytest.mark.parametrize("mode", ["plain", "align", "half"])
@pytest.mark.parametrize("storage", ["BUFFER", "TEXTURE_2D"])
def test_resize_bilinear_of_many_slices_with_a_linked_add(shape, size, mode, storage):
    # Buffer storage runs the kernel whose work-items blend a pixel's slices in blocks
    # (resize.BILINEAR_SLICES): 10 slices are two blocks, 35 channels end in a partial slice. A
    # residual ADD linked behind it writes through the same loop.
    rng = np.random.default_rng(shape[-1])
    b, _, _, c = shape
    out = (b, size[0], size[1], c)
    tensors = [T(shape), T((2,), np.array(size, np.int32), np.int32), T(out), T(out), T(out)]
    options = ("ResizeBilinearOptions", {"AlignCorners": mode == "align", "HalfPixelCenters": mode == "half"})
    ops = [Op(Builtin.RESIZE_BILINEAR, [0, 1], [2], options), Op(Builtin.ADD, [2, 3], [4], ("AddOptions", {}))]
    state = check(tensors, ops, [0, 3], [4], [rand(shape, rng), rand(out, rng)], storage_type=storage)
    assert [p.kernels for p in state.partitions] == [1]


@EXAMPLES
@given(
    src=shapes,
    cout=st.integers(1, 9),
    k=st.integers(1, 4),
    stride=st.integers(1, 3),
    padding=st.sampled_from([1, 2]),
    seed=seeds,
    precision=precisions,
    bias=st.booleans(),
)
def test_transpose_conv(src, cout, k, stride, padding, seed, precision, bias):
    rng = np.random.default_rng(seed)
    b, h, w, cin = src
    oh = h * stride if padding == 1 else (h - 1) * stride + k
    ow = w * stride if padding == 1 else (w - 1) * stride + k
    out = (b, oh, ow, cout)
    tensors = [T((4,), np.array(out, np.int32), np.int32), T((cout, k, k, cin), rand((cout, k, k, cin), rng)), T(src)]
    inputs = [0, 1, 2]
    if bias:
        tensors.append(T((cout,), rand((cout,), rng)))
        inputs.append(3)
    tensors.append(T(out))
    options = ("TransposeConvOptions", {"Padding": padding - 1, "StrideW": stride, "StrideH": stride})
    o = len(tensors) - 1
    check(tensors, [Op(Builtin.TRANSPOSE_CONV, inputs, [o], options)], [2], [o], [rand(src, rng)], precision)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize(("src", "cout"), [((1, 4, 11, 6), 9), ((2, 3, 5, 17), 16), ((1, 5, 13, 16), 1)])
@pytest.mark.parametrize("padding", [1, 2])
def test_transpose_conv_with_kernel_equal_to_stride(k, src, cout, padding):
    # The phase kernel: every output pixel takes one input pixel through one tap. One output
    # channel (a segmentation mask's upsampling) takes groups of 4 channels (gemm_width).
    rng = np.random.default_rng(k * 10 + cout)
    b, h, w, cin = src
    out = (b, h * k, w * k, cout)
    tensors = [
        T((4,), np.array(out, np.int32), np.int32),
        T((cout, k, k, cin), rand((cout, k, k, cin), rng)),
        T(src),
        T((cout,), rand((cout,), rng)),
        T(out),
    ]
    options = ("TransposeConvOptions", {"Padding": padding - 1, "StrideW": k, "StrideH": k})
    check(tensors, [Op(Builtin.TRANSPOSE_CONV, [0, 1, 2, 3], [4], options)], [2], [4], [rand(src, rng)])


def test_dequantize_of_fp16_weights_is_folded():
    rng = np.random.default_rng(11)
    shape, cout = (1, 6, 6, 5), 7
    weights = rand((cout, 3, 3, 5), rng).astype(np.float16)
    tensors = [
        T(shape),
        T(weights.shape, weights, np.float16),
        T(weights.shape),
        T((cout,), rand((cout,), rng)),
        T((1, 6, 6, cout)),
    ]
    ops = [
        Op(Builtin.DEQUANTIZE, [1], [2]),
        Op(Builtin.CONV_2D, [0, 2, 3], [4], ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})),
    ]
    check(tensors, ops, [0], [4], [rand(shape, rng)])


# ------------------------------------------------------------------ fusion


def _conv_then(rng, chain):
    """A 3x3 convolution followed by ``chain(conv_out_index, next_index) -> (tensors, ops, out)``."""
    shape, cout = (1, 9, 9, 6), 10
    tensors = [
        T(shape),
        T((cout, 3, 3, 6), rand((cout, 3, 3, 6), rng)),
        T((cout,), rand((cout,), rng)),
        T((1, 9, 9, cout)),
    ]
    ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1}))]
    more_tensors, more_ops, out = chain(3, 4)
    return tensors + more_tensors, ops + more_ops, out, shape


def _swish(t, n):
    # x * sigmoid(x): x has two readers, but the swish rewrite (compiler/swish.py) makes the pair one
    # unary op, x's only reader, which links into the convolution's kernel.
    return (
        [T((1, 9, 9, 10)), T((1, 9, 9, 10))],
        [Op(Builtin.LOGISTIC, [t], [n]), Op(Builtin.MUL, [t, n], [n + 1])],
        n + 1,
    )


def _hard_swish_residual(t, n):
    return (
        [T((1, 9, 9, 10)), T((1, 9, 9, 10), None), T((1, 1, 1, 10), np.linspace(-1, 1, 10, dtype=np.float32))],
        [Op(Builtin.HARD_SWISH, [t], [n]), Op(Builtin.ADD, [n, n + 2], [n + 1])],
        n + 1,
    )


@pytest.mark.parametrize(
    ("producer", "stride", "multiplier", "act", "kernels"),
    [
        ("conv", 1, 1, 1, 1),  # linked into the convolution: a per-channel scale and shift
        ("prelu", 1, 1, 3, 1),  # into an elementwise kernel; RELU6
        ("conv", 2, 1, 0, 2),  # strided: it samples, not elementwise
        ("conv", 1, 2, 0, 2),  # a depth multiplier: other channels out than in
    ],
)  # fmt: skip
@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_a_1x1_depthwise_convolution_links_like_an_elementwise_op(producer, stride, multiplier, act, kernels,
                                                                  precision):  # fmt: skip
    # (TFLite's builtin DEPTHWISE_CONV_2D needs its bias: the reference cannot run one without.)
    rng = np.random.default_rng(stride * 10 + multiplier + act)
    c = 12
    tensors = [T((1, 7, 9, c)), T((1, 7, 9, c))]
    if producer == "conv":
        tensors += [T((c, 3, 3, c), rand((c, 3, 3, c), rng)), T((c,), rand((c,), rng))]
        conv = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})
        ops = [Op(Builtin.CONV_2D, [0, 2, 3], [1], conv)]
    else:
        tensors += [T((1, 1, c), rand((1, 1, c), rng))]
        ops = [Op(Builtin.PRELU, [0, 2], [1])]
    cout = c * multiplier
    oh, ow = -(-7 // stride), -(-9 // stride)
    tensors += [T((1, 1, 1, cout), rand((1, 1, 1, cout), rng)), T((cout,), rand((cout,), rng)), T((1, oh, ow, cout))]
    options = {"Padding": 0, "StrideW": stride, "StrideH": stride, "DepthMultiplier": multiplier,
               "FusedActivationFunction": act}  # fmt: skip
    n = len(tensors)
    ops.append(Op(Builtin.DEPTHWISE_CONV_2D, [1, n - 3, n - 2], [n - 1], ("DepthwiseConv2DOptions", options)))
    state = check(tensors, ops, [0], [n - 1], [rand((1, 7, 9, c), rng)], precision)
    assert [p.kernels for p in state.partitions] == [kernels]


@pytest.mark.parametrize("chain,kernels", [(_swish, 1), (_hard_swish_residual, 1)], ids=["swish", "hard_swish"])
def test_elementwise_chains_are_fused(chain, kernels):
    rng = np.random.default_rng(5)
    tensors, ops, out, shape = _conv_then(rng, chain)
    x = rand(shape, rng)
    fused = check(tensors, ops, [0], [out], [x])
    plain = check(tensors, ops, [0], [out], [x], fuse="false")
    assert [p.kernels for p in fused.partitions] == [kernels]
    assert [p.kernels for p in plain.partitions] == [len(ops)]
    assert fused.partitions[0].fused_ops == len(ops) - kernels


@pytest.mark.parametrize(("k", "stride", "w", "cin", "cout"), [
    (1, 1, 15, 40, 36), (3, 1, 14, 40, 36), (3, 2, 29, 24, 64), (5, 1, 16, 8, 20), (2, 1, 17, 13, 8),
])  # fmt: skip
@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_gpu_family_convolution_blocks(k, stride, w, cin, cout, precision):
    # The hypothesis shapes stay below the gpu family's pixel pairs (14 columns and up), its 4-slice
    # blocks (8 output slices and up) and its partial weight tiles (an input-slice count that the
    # tile does not divide): these take them, with an odd width ending on a single pixel.
    rng = np.random.default_rng(k * 100 + w)
    b, h = 2, 6
    oh, ow = _out(h, k, stride, 1, 1), _out(w, k, stride, 1, 1)
    tensors = [T((b, h, w, cin)), T((cout, k, k, cin), rand((cout, k, k, cin), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, oh, ow, cout)))
    options = ("Conv2DOptions", {"Padding": 0, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": 1})
    op = Op(Builtin.CONV_2D, [0, 1, 2], [3], options)
    check(tensors, [op], [0], [3], [rand((b, h, w, cin), rng)], precision, kernel_family="gpu")


@pytest.mark.parametrize(
    ("size", "cin", "cout"),
    [(5, 160, 126), (5, 160, 24), (3, 64, 2), (5, 40, 3), (4, 3, 16), (10, 24, 40), (1, 12, 9)],
)
@pytest.mark.parametrize("precision", ["F32", "F32_F16"])
def test_convolution_edge_blocks_undo_the_taps_outside_the_input(size, cin, cout, precision):
    # A detection head's 3x3 layers on small outputs: every work-item of a row of 5 or fewer
    # pixels has a window column outside the input. Its pixels read the row's first pixel there,
    # and the tap's sums are put back: lane-order blocks of pixels or weights first (24, 126
    # channels), dot products (2), one slice (3, 16 channels from 3), and wider rows (10).
    rng = np.random.default_rng(size * 1000 + cin + cout)
    b = 2
    tensors = [T((b, size, size, cin)), T((cout, 3, 3, cin), rand((cout, 3, 3, cin), rng, -0.3, 0.3))]
    tensors += [T((cout,), rand((cout,), rng)), T((b, size, size, cout))]
    options = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 0})
    op = Op(Builtin.CONV_2D, [0, 1, 2], [3], options)
    # large values in every row's first column: a pixel that kept what it read there is far off
    feed = rand((b, size, size, cin), rng)
    feed[:, :, 0, :] *= 100
    check(tensors, [op], [0], [3], [feed], precision, kernel_family="cpu")


@pytest.mark.parametrize("rows", [1, 15, 16, 33])
@pytest.mark.parametrize("cin", [3, 200, 1280])
def test_gpu_family_fully_connected_either_side_of_the_reduction(rows, cin):
    # Below 16 rows a work-group splits each output slice's input slices and sums its parts; from 16
    # rows on, the 1x1 convolution kernel runs. cin 1280 (320 slices): MobileNetV2's classifier.
    rng = np.random.default_rng(rows + cin)
    cout = 19
    tensors = [T((rows, cin)), T((cout, cin), rand((cout, cin), rng)), T((cout,), rand((cout,), rng)), T((rows, cout))]
    op = Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], ("FullyConnectedOptions", {"FusedActivationFunction": 0}))
    check(tensors, [op], [0], [3], [rand((rows, cin), rng)], kernel_family="gpu")


def test_kernel_family_reaches_the_compiler(monkeypatch):
    # The option picks the kernels: gpu's convolutions share weight tiles in local memory, cpu's do not.
    from delegate.plugin.registry import REGISTRY
    from tests.plugin_testing import inject

    codes: dict[str, list[str]] = {}
    real = REGISTRY.plan.loader.compiler.compile

    def capture(*args, **kwargs):
        ctx = real(*args, **kwargs)
        codes.setdefault(args[4].kernel_family, []).extend(n.gpu_op.code for n in ctx.nodes)
        return ctx

    inject(monkeypatch, compile=capture)
    rng = np.random.default_rng(5)
    tensors = [T((1, 8, 8, 16)), T((16, 3, 3, 16), rand((16, 3, 3, 16), rng)), T((16,), rand((16,), rng))]
    tensors.append(T((1, 8, 8, 16)))
    options = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 0})
    for family in ("cpu", "gpu"):
        ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], options)]
        check(tensors, ops, [0], [3], [rand((1, 8, 8, 16), rng)], kernel_family=family)
    assert any("__local FLT4 tile[" in code for code in codes["gpu"])
    assert not any("__local FLT4 tile[" in code for code in codes["cpu"])


@families
@pytest.mark.parametrize("cin", [1, 2, 3])
@pytest.mark.parametrize(("k", "stride"), [(3, 2), (3, 1), (1, 1)])
def test_convolution_of_fewer_than_four_channels(family, cin, k, stride):
    # An image's first layer: one input slice whose padding lanes the kernel skips.
    rng = np.random.default_rng(cin * 10 + k)
    src, cout = (2, 9, 11, cin), 20
    oh, ow = _out(9, k, stride, 1, 1), _out(11, k, stride, 1, 1)
    tensors = [T(src), T((cout, k, k, cin), rand((cout, k, k, cin), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((2, oh, ow, cout)))
    options = ("Conv2DOptions", {"Padding": 0, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": 3})
    check(tensors, [Op(Builtin.CONV_2D, [0, 1, 2], [3], options)], [0], [3], [rand(src, rng)], kernel_family=family)


@pytest.mark.parametrize("op", [Builtin.SOFTMAX, Builtin.LOG_SOFTMAX], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize(("k", "cout", "act", "linked"), [
    (1, 2, 0, True), (3, 5, 3, True), (1, 9, 1, True), (3, 16, 0, True), (3, 17, 0, True), (1, 17, 0, True),
    (1, 24, 3, True), (3, 24, 0, True), (1, 25, 0, False), (3, 25, 0, True), (3, 56, 0, False),
])  # fmt: skip
def test_softmax_runs_inside_a_convolution_holding_every_channel(op, k, cout, act, linked):
    # A segmentation head: a convolution to a few channels, then softmax over them. When one
    # work-item holds all of a pixel's channels, the softmax runs on its accumulators: 1x1 layers
    # hold up to 16 (up to 24 for 17-24 channels, in items of 4 pixels x 3 groups); windowed ones
    # hold the groups selectors/gemm.row_blocking gives an item, here up to 4 (7-pixel rows).
    rng = np.random.default_rng(cout * 10 + k)
    src = (2, 6, 7, 8)
    tensors = [T(src), T((cout, k, k, 8), rand((cout, k, k, 8), rng)), T((cout,), rand((cout,), rng))]
    tensors += [T((2, 6, 7, cout)), T((2, 6, 7, cout))]
    conv = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": act})
    options = ("SoftmaxOptions", {"Beta": 0.7}) if op == Builtin.SOFTMAX else None
    ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], conv), Op(op, [3], [4], options)]
    state = check(tensors, ops, [0], [4], [rand(src, rng)], vector_width="8")
    # a log-softmax is negative: the convolution's clamp, applied again in its write, would change it
    linked = linked and not (op == Builtin.LOG_SOFTMAX and act)
    assert [p.kernels for p in state.partitions] == [1 if linked else 2]


@pytest.mark.parametrize("op", [Builtin.SOFTMAX, Builtin.LOG_SOFTMAX], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize(("k", "cout"), [(1, 9), (3, 16), (1, 25), (3, 32)])
def test_softmax_runs_inside_a_convolution_of_16_channel_groups(op, k, cout):
    # With 16-channel groups a work-item holds up to 32 channels of a pixel (2 groups).
    if _device_vector_floats() != 16:
        pytest.skip("16-channel groups are built only for CPU devices compiling for AVX-512 (this one does not)")
    rng = np.random.default_rng(cout * 10 + k + 1)
    src = (1, 5, 9, 8)
    tensors = [T(src), T((cout, k, k, 8), rand((cout, k, k, 8), rng)), T((cout,), rand((cout,), rng))]
    tensors += [T((1, 5, 9, cout)), T((1, 5, 9, cout))]
    conv = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 0})
    options = ("SoftmaxOptions", {"Beta": 1.3}) if op == Builtin.SOFTMAX else None
    ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], conv), Op(op, [3], [4], options)]
    state = check(tensors, ops, [0], [4], [rand(src, rng)], vector_width="16")
    assert [p.kernels for p in state.partitions] == [1]


def test_softmax_is_not_moved_before_ops_already_linked():
    # conv -> ADD (linked into the convolution's write) -> SOFTMAX: the softmax must see the sum,
    # so it keeps its own kernel; a MUL after a linked softmax still links.
    rng = np.random.default_rng(21)
    shape = (1, 5, 6, 4)
    tensors = [T(shape), T((4, 1, 1, 4), rand((4, 1, 1, 4), rng)), T((4,), rand((4,), rng)), T(shape), T(shape)]
    tensors += [T(shape), T(shape)]
    conv = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})
    ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], conv), Op(Builtin.ADD, [3, 4], [5]), Op(Builtin.SOFTMAX, [5], [6])]
    state = check(tensors, ops, [0, 4], [6], [rand(shape, rng), rand(shape, rng)])
    assert [p.kernels for p in state.partitions] == [2]
    tensors = [T(shape), T((4, 1, 1, 4), rand((4, 1, 1, 4), rng)), T((4,), rand((4,), rng)), T(shape), T(shape)]
    tensors += [T((1, 1, 1, 4), np.array([1.0, 2.0, 3.0, 4.0], np.float32)), T(shape)]
    ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], conv), Op(Builtin.SOFTMAX, [3], [4]), Op(Builtin.MUL, [4, 5], [6])]
    state = check(tensors, ops, [0], [6], [rand(shape, rng)])
    assert [p.kernels for p in state.partitions] == [1]
    assert [p.fused_ops for p in state.partitions] == [2]


@families
@pytest.mark.parametrize("producer", ["conv_1x1", "conv_3x3", "depthwise"])
@pytest.mark.parametrize(("b", "w", "c"), [(1, 10, 10), (2, 9, 7), (1, 16, 16)])
@pytest.mark.parametrize("precision", ["F32", "F32_F16"])
def test_linked_add_after_the_fast_kernels(family, producer, b, w, c, precision):
    # The matrix-product and depthwise kernels write whole blocks at linear indices and partial
    # ones through the general write; a linked ADD of a runtime tensor has to run in both paths,
    # for every slice of a pair or group (c = 7, 10: partial last slices and groups).
    rng = np.random.default_rng(b * 100 + w * 10 + c)
    h = 5
    if producer == "depthwise":
        filters, op_code, options = (1, 3, 3, c), Builtin.DEPTHWISE_CONV_2D, "DepthwiseConv2DOptions"
        params = {"Padding": 0, "StrideW": 1, "StrideH": 1, "DepthMultiplier": 1, "FusedActivationFunction": 3}
    else:
        k = 1 if producer == "conv_1x1" else 3
        filters, op_code, options = (c, k, k, c), Builtin.CONV_2D, "Conv2DOptions"
        params = {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 3}
    tensors = [
        T((b, h, w, c)),
        T(filters, rand(filters, rng)),
        T((c,), rand((c,), rng)),
        T((b, h, w, c)),
        T((b, h, w, c)),
        T((b, h, w, c)),
    ]
    ops = [Op(op_code, [0, 1, 2], [3], (options, params)), Op(Builtin.ADD, [3, 4], [5])]
    feeds = [rand((b, h, w, c), rng), rand((b, h, w, c), rng)]
    state = check(tensors, ops, [0, 4], [5], feeds, precision, kernel_family=family)
    assert [p.kernels for p in state.partitions] == [1]


@pytest.mark.parametrize(
    ("channels", "k", "in_place"),
    [((8, 4), 3, True), ((4, 8, 3), 1, True), ((16, 5), 3, True), ((6, 5), 3, False), ((4,), 1, True)],
)
@pytest.mark.parametrize("precision", ["F32", "F32_F16"])
def test_concatenation_read_in_place_by_a_convolution(channels, k, in_place, precision):
    # A channel concatenation whose inputs start on slice boundaries gets no kernel: the
    # convolution reading it loops over its inputs (6 + 5 channels does not line up: it stays).
    rng = np.random.default_rng(sum(channels) * k)
    b, h, w, cout = 2, 5, 7, 9
    total = sum(channels)
    n = len(channels)
    tensors = [T((b, h, w, c)) for c in channels]
    tensors += [
        T((b, h, w, total)),
        T((cout, k, k, total), rand((cout, k, k, total), rng)),
        T((cout,), rand((cout,), rng)),
    ]
    tensors.append(T((b, h, w, cout)))
    ops = [
        Op(Builtin.CONCATENATION, list(range(n)), [n], ("ConcatenationOptions", {"Axis": 3})),
        Op(Builtin.CONV_2D, [n, n + 1, n + 2], [n + 3], ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})),
    ]
    feeds = [rand((b, h, w, c), rng) for c in channels]
    state = check(tensors, ops, list(range(n)), [n + 3], feeds, precision)
    assert [p.kernels for p in state.partitions] == [1 if in_place else 2]
    assert [p.fused_ops for p in state.partitions] == [1 if in_place else 0]


def test_concatenation_also_wanted_elsewhere_is_written():
    # The concatenation is a model output too (and read twice): it needs its own kernel.
    rng = np.random.default_rng(11)
    shape = (1, 4, 6, 4)
    tensors = [T(shape), T(shape), T((1, 4, 6, 8)), T((3, 1, 1, 8), rand((3, 1, 1, 8), rng)), T((3,), rand((3,), rng))]
    tensors.append(T((1, 4, 6, 3)))
    ops = [
        Op(Builtin.CONCATENATION, [0, 1], [2], ("ConcatenationOptions", {"Axis": 3})),
        Op(Builtin.CONV_2D, [2, 3, 4], [5], ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})),
    ]
    state = check(tensors, ops, [0, 1], [5, 2], [rand(shape, rng), rand(shape, rng)])
    assert [p.kernels for p in state.partitions] == [2]


# ------------------------------------------------------------------ re-indexing and reductions

shapes_any_rank = st.integers(1, 4).flatmap(lambda r: st.tuples(*[st.integers(1, 6)] * r))


@EXAMPLES
@given(shape=shapes_any_rank, seed=seeds, data=st.data())
def test_transpose(shape, seed, data):
    perm = data.draw(st.permutations(list(range(len(shape)))))
    out = tuple(shape[p] for p in perm)
    tensors = [T(shape), T((len(shape),), np.array(perm, np.int32), np.int32), T(out)]
    check(tensors, [Op(Builtin.TRANSPOSE, [0, 1], [2])], [0], [2], [rand(shape, np.random.default_rng(seed))])


@pytest.mark.parametrize(
    ("shape", "perm"),
    [
        ((1, 5, 3, 6), (0, 2, 1, 3)),
        ((5, 3, 7), (1, 0, 2)),
        ((2, 3, 4, 9), (1, 0, 2, 3)),
        ((1, 16, 4, 12), (0, 2, 1, 3)),
    ],
)
def test_transpose_keeping_channels_last_copies_slices(shape, perm):
    """Attention's head split and merge: the channel axis stays, so whole slices are copied
    (channel counts off the slice grid included)."""
    out = tuple(shape[p] for p in perm)
    tensors = [T(shape), T((len(shape),), np.array(perm, np.int32), np.int32), T(out)]
    check(tensors, [Op(Builtin.TRANSPOSE, [0, 1], [2])], [0], [2], [rand(shape, np.random.default_rng(3))])


@EXAMPLES
@given(shape=shapes_any_rank, seed=seeds, data=st.data())
def test_slice_and_strided_slice(shape, seed, data):
    rng = np.random.default_rng(seed)
    x = rand(shape, rng)
    begin = [data.draw(st.integers(0, d - 1)) for d in shape]
    size = [data.draw(st.integers(1, d - b)) for d, b in zip(shape, begin, strict=True)]
    out = tuple(size)
    tensors = [
        T(shape),
        T((len(shape),), np.array(begin, np.int32), np.int32),
        T((len(shape),), np.array(size, np.int32), np.int32),
        T(out),
    ]
    check(tensors, [Op(Builtin.SLICE, [0, 1, 2], [3])], [0], [3], [x])
    shrink = data.draw(st.integers(0, 2 ** len(shape) - 1))
    # Shrunk dims take one element with stride 1 (TFLite returned uninitialised memory for a shrunk
    # dim with a negative stride).
    strides = [1 if shrink >> d & 1 else data.draw(st.sampled_from([1, 2, -1])) for d in range(len(shape))]
    starts = [b if s > 0 else b + n - 1 for b, n, s in zip(begin, size, strides, strict=True)]
    ends = [b + n if s > 0 else b - 1 for b, n, s in zip(begin, size, strides, strict=True)]
    ends = [e if e >= 0 else -(len(shape) * 100) for e in ends]  # "before the start": a large negative end
    expected = x[tuple(slice(b, e if e >= 0 else None, s) for b, e, s in zip(starts, ends, strides, strict=True))]
    expected = expected[tuple(0 if shrink >> d & 1 else slice(None) for d in range(len(shape)))]
    tensors = [
        T(shape),
        T((len(shape),), np.array(starts, np.int32), np.int32),
        T((len(shape),), np.array(ends, np.int32), np.int32),
        T((len(shape),), np.array(strides, np.int32), np.int32),
        T(expected.shape),
    ]
    options = ("StridedSliceOptions", {"ShrinkAxisMask": shrink})
    check(tensors, [Op(Builtin.STRIDED_SLICE, [0, 1, 2, 3], [4], options)], [0], [4], [x])


@EXAMPLES
@given(shape=shapes, seed=seeds, data=st.data())
def test_tile_squeeze_expand_cast(shape, seed, data):
    rng = np.random.default_rng(seed)
    x = rand(shape, rng)
    multiples = [data.draw(st.integers(1, 3)) for _ in shape]
    tiled = tuple(d * m for d, m in zip(shape, multiples, strict=True))
    check(
        [T(shape), T((4,), np.array(multiples, np.int32), np.int32), T(tiled)],
        [Op(Builtin.TILE, [0, 1], [2])],
        [0],
        [2],
        [x],
    )
    squeezed = tuple(d for d in shape if d != 1) or (1,)
    check([T(shape), T(squeezed)], [Op(Builtin.SQUEEZE, [0], [1])], [0], [1], [x])
    check(
        [T(shape[1:]), T((1,), np.array([0], np.int32), np.int32), T((1, *shape[1:]))],
        [Op(Builtin.EXPAND_DIMS, [0, 1], [2])],
        [0],
        [2],
        [x[0]],
    )
    check(
        [T(shape), T(shape)],
        [Op(Builtin.CAST, [0], [1], ("CastOptions", {"InDataType": 0, "OutDataType": 0}))],
        [0],
        [1],
        [x],
    )


@EXAMPLES
@given(
    shape=shapes,
    pads=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=4, max_size=4),
    mode=st.sampled_from([0, 1]),
    seed=seeds,
)
def test_mirror_pad(shape, pads, mode, seed):
    if mode == 0 and any(p > d - 1 for d, pair in zip(shape, pads, strict=True) for p in pair):
        return  # REFLECT needs padding smaller than the dimension
    out = tuple(d + a + b for d, (a, b) in zip(shape, pads, strict=True))
    tensors = [T(shape), T((4, 2), np.array(pads, np.int32), np.int32), T(out)]
    check(
        tensors,
        [Op(Builtin.MIRROR_PAD, [0, 1], [2], ("MirrorPadOptions", {"Mode": mode}))],
        [0],
        [2],
        [rand(shape, np.random.default_rng(seed))],
    )


@EXAMPLES
@given(
    b=st.integers(1, 2),
    hw=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    c=st.integers(1, 6),
    block=st.integers(1, 3),
    seed=seeds,
)
def test_space_to_depth_and_back(b, hw, c, block, seed):
    shape = (b, hw[0] * block, hw[1] * block, c)
    deep = (b, hw[0], hw[1], c * block * block)
    x = rand(shape, np.random.default_rng(seed))
    check(
        [T(shape), T(deep)],
        [Op(Builtin.SPACE_TO_DEPTH, [0], [1], ("SpaceToDepthOptions", {"BlockSize": block}))],
        [0],
        [1],
        [x],
    )
    check(
        [T(deep), T(shape)],
        [Op(Builtin.DEPTH_TO_SPACE, [0], [1], ("DepthToSpaceOptions", {"BlockSize": block}))],
        [0],
        [1],
        [rand(deep, np.random.default_rng(seed + 1))],
    )


@EXAMPLES
@given(
    shape=shapes,
    size=st.tuples(st.integers(1, 13), st.integers(1, 13)),
    mode=st.sampled_from(["plain", "align", "half"]),
    seed=seeds,
)
def test_resize_nearest_neighbor(shape, size, mode, seed):
    out = (shape[0], size[0], size[1], shape[3])
    tensors = [T(shape), T((2,), np.array(size, np.int32), np.int32), T(out)]
    options = ("ResizeNearestNeighborOptions", {"AlignCorners": mode == "align", "HalfPixelCenters": mode == "half"})
    check(
        tensors,
        [Op(Builtin.RESIZE_NEAREST_NEIGHBOR, [0, 1], [2], options)],
        [0],
        [2],
        [rand(shape, np.random.default_rng(seed))],
    )


@pytest.mark.parametrize(("size_in", "size_out"), [(2, 82), (3, 123), (2, 110), (7, 23), (5, 305)])
def test_resize_nearest_neighbor_at_large_factors(size_in, size_out):
    """Large and uneven factors (41, 55, 61, 23 / 7), where a float32 scale can round an output
    row's source below the next integer: the rows the delegate picks are TFLite's."""
    shape, out = (1, size_in, size_in, 3), (1, size_out, size_out, 3)
    tensors = [T(shape), T((2,), np.array([size_out, size_out], np.int32), np.int32), T(out)]
    options = ("ResizeNearestNeighborOptions", {"AlignCorners": False, "HalfPixelCenters": False})
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    check(tensors, [Op(Builtin.RESIZE_NEAREST_NEIGHBOR, [0, 1], [2], options)], [0], [2], [x])


@EXAMPLES
@given(shape=shapes, axis=st.integers(0, 3), seed=seeds, data=st.data())
def test_split_and_split_v(shape, axis, seed, data):
    x = rand(shape, np.random.default_rng(seed))
    n = data.draw(st.sampled_from([k for k in (1, 2, 3) if shape[axis] % k == 0]))
    parts = [tuple(d // n if i == axis else d for i, d in enumerate(shape))] * n
    tensors = [T((1,), np.array([axis], np.int32), np.int32), T(shape), *[T(p) for p in parts]]
    outs = list(range(2, 2 + n))
    check(tensors, [Op(Builtin.SPLIT, [0, 1], outs, ("SplitOptions", {"NumSplits": n}))], [1], outs, [x])
    cut = data.draw(st.integers(0, shape[axis]))
    sizes = [s for s in (cut, shape[axis] - cut) if s > 0]
    parts = [tuple(s if i == axis else d for i, d in enumerate(shape)) for s in sizes]
    tensors = [
        T(shape),
        T((len(sizes),), np.array(sizes, np.int32), np.int32),
        T((1,), np.array([axis], np.int32), np.int32),
        *[T(p) for p in parts],
    ]
    outs = list(range(3, 3 + len(sizes)))
    check(tensors, [Op(Builtin.SPLIT_V, [0, 1, 2], outs, ("SplitVOptions", {"NumSplits": len(sizes)}))], [0], outs, [x])


#: (piece shape, pieces, axis): every axis of ranks 1 to 3, negative axes, one piece, channels split across slices
PACKS = [
    ((5,), 3, 0),
    ((5,), 2, 1),
    ((3, 6), 4, 0),
    ((3, 6), 2, 1),
    ((3, 6), 3, -1),
    ((2, 3, 5), 2, 0),
    ((2, 3, 5), 3, 1),
    ((2, 3, 5), 2, 2),
    ((2, 3, 5), 5, 3),
    ((4, 7), 1, 1),
]


@pytest.mark.parametrize(("shape", "count", "axis"), PACKS)
def test_pack(shape, count, axis):
    rng = np.random.default_rng(count + len(shape))
    packed = np.stack([np.zeros(shape)] * count, axis=axis).shape
    tensors = [*[T(shape) for _ in range(count)], T(packed)]
    options = ("PackOptions", {"ValuesCount": count, "Axis": axis})
    feeds = [rand(shape, rng) for _ in range(count)]
    check(tensors, [Op(Builtin.PACK, list(range(count)), [count], options)], list(range(count)), [count], feeds)


@pytest.mark.parametrize(("shape", "count", "axis"), PACKS)
def test_unpack(shape, count, axis):
    packed = np.stack([np.zeros(shape)] * count, axis=axis).shape
    tensors = [T(packed), *[T(shape) for _ in range(count)]]
    outs = list(range(1, count + 1))
    options = ("UnpackOptions", {"Num": count, "Axis": axis})
    x = rand(packed, np.random.default_rng(count))
    check(tensors, [Op(Builtin.UNPACK, [0], outs, options)], [0], outs, [x])


@pytest.mark.parametrize(
    "op", [Builtin.SUM, Builtin.MEAN, Builtin.REDUCE_MAX, Builtin.REDUCE_MIN, Builtin.REDUCE_PROD], ids=lambda o: o.name
)
@EXAMPLES
@given(shape=shapes_any_rank, keep=st.booleans(), seed=seeds, data=st.data())
def test_reductions(op, shape, keep, seed, data):
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
    x = (
        rand(shape, np.random.default_rng(seed), 0.5, 1.5)
        if op == Builtin.REDUCE_PROD
        else rand(shape, np.random.default_rng(seed))
    )
    out = (
        tuple(1 if d in axes else n for d, n in enumerate(shape))
        if keep
        else tuple(n for d, n in enumerate(shape) if d not in axes)
    )
    tensors = [T(shape), T((len(axes),), np.array(axes, np.int32), np.int32), T(out or (1,) if keep else out)]
    check(tensors, [Op(op, [0, 1], [2], ("ReducerOptions", {"KeepDims": keep}))], [0], [2], [x])


@EXAMPLES
@given(shape=shapes, seed=seeds)
def test_log_softmax(shape, seed):
    check(
        [T(shape), T(shape)],
        [Op(Builtin.LOG_SOFTMAX, [0], [1])],
        [0],
        [1],
        [rand(shape, np.random.default_rng(seed), -5, 5)],
    )


def _check_grouped_conv(groups, cin_group, cout_group, k, stride, hw, seed, act, batch=1):
    """A CONV_2D of ``groups`` groups (SAME padding) on a random input, against TFLite's."""
    rng = np.random.default_rng(seed)
    cin, cout = groups * cin_group, groups * cout_group
    src = (batch, hw[0], hw[1], cin)
    out = (batch, -(-hw[0] // stride), -(-hw[1] // stride), cout)
    tensors = [
        T(src),
        T((cout, k, k, cin_group), rand((cout, k, k, cin_group), rng)),
        T((cout,), rand((cout,), rng)),
        T(out),
    ]
    options = ("Conv2DOptions", {"Padding": 0, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": act})
    check(tensors, [Op(Builtin.CONV_2D, [0, 1, 2], [3], options)], [0], [3], [rand(src, rng)])


@EXAMPLES
@given(
    groups=st.integers(2, 3),
    cin_group=st.integers(1, 3),
    cout_group=st.integers(1, 3),
    k=st.integers(1, 3),
    stride=st.integers(1, 2),
    hw=st.tuples(st.integers(1, 8), st.integers(1, 8)),
    seed=seeds,
    act=st.sampled_from([0, 1, 3]),
)
def test_grouped_conv_2d(groups, cin_group, cout_group, k, stride, hw, seed, act):
    _check_grouped_conv(groups, cin_group, cout_group, k, stride, hw, seed, act)


@EXAMPLES
@given(
    groups=st.integers(2, 4),
    cin_group=st.sampled_from([4, 8, 24]),
    cout_group=st.sampled_from([4, 8, 12, 16, 24, 32]),
    k=st.sampled_from([1, 3]),
    stride=st.integers(1, 2),
    hw=st.tuples(st.integers(1, 13), st.integers(1, 13)),
    batch=st.integers(1, 2),
    seed=seeds,
    act=st.sampled_from([0, 1, 3]),
)
def test_grouped_conv_2d_of_whole_slices(groups, cin_group, cout_group, k, stride, hw, batch, seed, act):
    # each group's inputs and outputs whole slices: the matrix products, every block of output
    # channels reading its own group's input slices (selectors/conv.grouped_product)
    _check_grouped_conv(groups, cin_group, cout_group, k, stride, hw, seed, act, batch)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_dequantize_of_int8_weights_is_folded(per_channel):
    rng = np.random.default_rng(12)
    shape, cout = (1, 6, 6, 5), 7
    q = rng.integers(-127, 128, size=(cout, 3, 3, 5)).astype(np.int8)
    scales = list(rng.uniform(0.001, 0.02, cout)) if per_channel else [0.01]
    zeros = [0] * len(scales)
    tensors = [
        T(shape),
        T(q.shape, q, np.int8, quant=(scales, zeros, 0)),
        T(q.shape),
        T((cout,), rand((cout,), rng)),
        T((1, 6, 6, cout)),
    ]
    ops = [
        Op(Builtin.DEQUANTIZE, [1], [2], version=2),
        Op(Builtin.CONV_2D, [0, 2, 3], [4], ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})),
    ]
    check(tensors, ops, [0], [4], [rand(shape, rng)])


@EXAMPLES
@given(
    batch=st.sampled_from([(), (2,), (2, 3), (1, 3)]),
    mkn=st.tuples(st.integers(1, 7), st.integers(1, 9), st.integers(1, 9)),
    adj=st.tuples(st.booleans(), st.booleans()),
    constant=st.booleans(),
    seed=seeds,
)
def test_batch_matmul(batch, mkn, adj, constant, seed):
    rng = np.random.default_rng(seed)
    m, k, n = mkn
    lhs_shape = (*batch, k, m) if adj[0] else (*batch, m, k)
    rhs_batch = batch[-1:] if batch else ()
    rhs_shape = (*rhs_batch, n, k) if adj[1] else (*rhs_batch, k, n)
    a, b = rand(lhs_shape, rng), rand(rhs_shape, rng)
    out = (*batch, m, n)
    options = ("BatchMatMulOptions", {"AdjX": adj[0], "AdjY": adj[1]})
    if constant:
        check([T(lhs_shape), T(rhs_shape, b), T(out)], [Op(Builtin.BATCH_MATMUL, [0, 1], [2], options)], [0], [2], [a])
    else:
        check(
            [T(lhs_shape), T(rhs_shape), T(out)], [Op(Builtin.BATCH_MATMUL, [0, 1], [2], options)], [0, 1], [2], [a, b]
        )


@pytest.mark.parametrize(
    ("lhs_shape", "rhs_shape", "constant", "precision"),
    [
        ((1, 4, 128, 128), (1, 4, 128, 64), False, "F32"),  # attention's weights x V
        ((1, 3, 65, 64), (1, 3, 64, 65), False, "F32"),  # Q x K^T, K transposed by a node: M, N off the block
        ((1, 2, 13, 10), (1, 2, 10, 7), False, "F32"),  # K past whole slices
        ((1, 2, 33, 40), (1, 2, 40, 24), False, "F16"),
        ((3, 7, 6), (6, 9), False, "F32"),  # a rank-2 right operand: the same matrix for every batch
        ((1, 1, 8, 10), (1, 4, 10, 5), False, "F32"),  # the left operand broadcast
        ((1, 6, 12), (1, 12, 20), True, "F32"),  # a constant right operand
    ],
)
def test_batch_matmul_block_kernel(lhs_shape, rhs_shape, constant, precision):
    """Neither operand transposed, batch 1, 6 rows or more: blocks of 6 rows x 16 channels of N
    (selectors/batch_matmul.py), the last block of rows moved back over the one before."""
    rng = np.random.default_rng(lhs_shape[-2] + rhs_shape[-1])
    a, b = rand(lhs_shape, rng), rand(rhs_shape, rng)
    out = np.matmul(a, b).shape
    ops = [Op(Builtin.BATCH_MATMUL, [0, 1], [2], ("BatchMatMulOptions", {"AdjX": False, "AdjY": False}))]
    if constant:
        check([T(lhs_shape), T(rhs_shape, b), T(out)], ops, [0], [2], [a], precision)
    else:
        check([T(lhs_shape), T(rhs_shape), T(out)], ops, [0, 1], [2], [a, b], precision)


@pytest.mark.parametrize(
    ("lhs_shape", "rhs_shape", "tiny", "precision"),
    [
        ((64, 64), (1, 64, 128), False, "F32"),  # MLP-Mixer's token mixing, weights on the left
        ((13, 9), (1, 9, 21), False, "F32"),
        ((7, 30), (1, 30, 12), False, "F16"),
        ((8, 5), (1, 5, 6), True, "F16"),  # a weight half would flush: the constant kept in float32
    ],
)
def test_batch_matmul_block_kernel_constant_left(lhs_shape, rhs_shape, tiny, precision):
    """A constant left operand in the block kernel: its rows read one lane at a time from the
    constant's buffer (in float32 where half would not hold its values)."""
    rng = np.random.default_rng(lhs_shape[-1] + rhs_shape[-1])
    a, b = rand(lhs_shape, rng), rand(rhs_shape, rng)
    if tiny:
        a[0, 0] = 1e-9
    out = np.matmul(a, b).shape
    ops = [Op(Builtin.BATCH_MATMUL, [0, 1], [2], ("BatchMatMulOptions", {"AdjX": False, "AdjY": False}))]
    check([T(lhs_shape, a), T(rhs_shape), T(out)], ops, [1], [2], [b], precision)


@pytest.mark.parametrize(
    ("lhs_shape", "rhs_shape", "adj_y", "precision"),
    [
        ((1, 4, 128, 16), (1, 4, 128, 16), True, "F32"),  # attention scores: Q x K^T
        ((1, 4, 128, 128), (1, 4, 128, 16), False, "F32"),  # scores x V
        ((1, 4, 33, 16), (1, 4, 40, 16), True, "F16"),
        ((2, 3, 5, 13), (2, 3, 13, 6), False, "F32"),  # K and N past whole slices, rows past a block
        ((2, 3, 5, 13), (2, 3, 6, 13), True, "F32"),
        ((3, 7, 6), (6, 9), False, "F32"),  # a rank-2 right operand: the same matrix for every batch
        ((2, 1, 3, 10), (1, 4, 10, 5), False, "F32"),  # both operands broadcast
        ((1, 1, 2), (1, 2, 3), False, "F32"),  # a single row
    ],
)
def test_batch_matmul_row_kernel(lhs_shape, rhs_shape, adj_y, precision):
    rng = np.random.default_rng(len(lhs_shape) + lhs_shape[-1])
    a, b = rand(lhs_shape, rng), rand(rhs_shape, rng)
    out = np.matmul(a, np.swapaxes(b, -1, -2) if adj_y else b).shape
    options = ("BatchMatMulOptions", {"AdjX": False, "AdjY": adj_y})
    ops = [Op(Builtin.BATCH_MATMUL, [0, 1], [2], options)]
    check([T(lhs_shape), T(rhs_shape), T(out)], ops, [0, 1], [2], [a, b], precision)


@pytest.mark.parametrize(
    ("lhs_shape", "rhs_shape", "adj_y", "precision"),
    [
        ((1, 4, 16, 128), (1, 4, 16, 128), False, "F32"),  # Q^T x K: K a whole number of rows
        ((1, 4, 16, 128), (1, 4, 128, 16), True, "F32"),
        ((1, 2, 33, 40), (1, 2, 33, 24), False, "F16"),
        ((2, 3, 13, 5), (2, 3, 13, 6), False, "F32"),  # M past a slice, N past a slice
        ((2, 3, 13, 5), (2, 3, 6, 13), True, "F32"),  # K past whole slices of the right operand
        ((3, 6, 7), (9, 6), True, "F32"),  # a rank-2 right operand
        ((2, 1, 10, 3), (1, 4, 5, 10), True, "F32"),  # both operands broadcast
        ((1, 2, 1), (1, 2, 3), False, "F32"),  # a single row
    ],
)
def test_batch_matmul_slice_rows_kernel(lhs_shape, rhs_shape, adj_y, precision):
    """adj_x: the left operand's slices of channels are the output's rows (selectors/batch_matmul.py)."""
    rng = np.random.default_rng(len(lhs_shape) + lhs_shape[-1])
    a, b = rand(lhs_shape, rng), rand(rhs_shape, rng)
    out = np.matmul(np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2) if adj_y else b).shape
    options = ("BatchMatMulOptions", {"AdjX": True, "AdjY": adj_y})
    ops = [Op(Builtin.BATCH_MATMUL, [0, 1], [2], options)]
    check([T(lhs_shape), T(rhs_shape), T(out)], ops, [0, 1], [2], [a, b], precision)


def test_fully_connected_keep_num_dims():
    rng = np.random.default_rng(21)
    tensors = [T((2, 3, 17)), T((5, 17), rand((5, 17), rng)), T((5,), rand((5,), rng)), T((2, 3, 5))]
    options = ("FullyConnectedOptions", {"KeepNumDims": True})
    check(tensors, [Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], options)], [0], [3], [rand((2, 3, 17), rng)])


@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_large_spatial_sizes(precision):
    rng = np.random.default_rng(22)
    shape = (1, 96, 128, 8)
    tensors = [
        T(shape),
        T((12, 3, 3, 8), rand((12, 3, 3, 8), rng)),
        T((12,), rand((12,), rng)),
        T((1, 96, 128, 12)),
        T((1, 96, 128, 12)),
    ]
    ops = [
        Op(Builtin.CONV_2D, [0, 1, 2], [3], ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})),
        Op(Builtin.SOFTMAX, [3], [4], ("SoftmaxOptions", {"Beta": 1.0})),
    ]
    check(tensors, ops, [0], [4], [rand(shape, rng)], precision)
    wide = (1, 1, 1, 1000)
    check(
        [T(wide), T(wide)],
        [Op(Builtin.SOFTMAX, [0], [1], ("SoftmaxOptions", {"Beta": 1.0}))],
        [0],
        [1],
        [rand(wide, rng, -8, 8)],
        precision,
    )


@pytest.mark.parametrize("op", [Builtin.ADD, Builtin.MUL], ids=lambda o: o.name)
def test_binary_op_reading_one_tensor_twice(op):
    shape = (1, 5, 5, 6)
    check([T(shape), T(shape)], [Op(op, [0, 0], [1])], [0], [1], [rand(shape, np.random.default_rng(9))])


def _on_gpu() -> bool:
    from delegate.runtime.device import describe, select_device

    return describe(select_device()).is_gpu


def _add_residual(tensors: list, ops: list, feeds: list, out: int, shape: tuple, rng) -> tuple[list[int], int]:
    """Append a residual ADD of tensor ``out`` and a new model input of ``shape`` (fed from
    ``rng``) to a model whose input is tensor 0: (the model's inputs, the ADD's output tensor)."""
    addend = len(tensors)
    tensors += [T(shape), T(shape)]
    ops.append(Op(Builtin.ADD, [out, addend], [addend + 1], ("AddOptions", {"FusedActivationFunction": 0})))
    feeds.append(rand(shape, rng))
    return [0, addend], addend + 1


@pytest.mark.parametrize(
    ("src", "cout", "k", "stride", "padding", "acts", "residual", "paired"),
    [
        ((1, 16, 16, 10), 12, 3, 1, 1, (3, 0), False, True),  # 3 slices (an odd count), 12 outputs
        ((2, 29, 30, 16), 24, 3, 2, 1, (3, 0), False, True),  # stride 2, batch 2: 30 rows of 15
        ((1, 16, 17, 8), 8, 3, 1, 2, (1, 3), True, True),  # VALID (14 x 15), a residual ADD linked in
        ((1, 20, 21, 32), 40, 5, 1, 1, (3, 0), True, True),  # 5x5, rows of 21 (blocks of 8 and 5 end partial)
        ((1, 28, 29, 4), 19, 3, 2, 1, (0, 1), False, True),  # one slice, 19 outputs, 14 rows of 15
        ((1, 14, 14, 24), 16, 3, 2, 1, (3, 0), False, False),  # 7 x 7 output: two kernels (slower paired)
    ],
)  # fmt: skip
@pytest.mark.parametrize("precision", ["F32", "F32_F16", "F16"])
def test_depthwise_then_1x1_runs_as_one_kernel(src, cout, k, stride, padding, acts, residual, paired, precision):
    # MobileNet's "depthwise + projection" pair: on a CPU device both run in one kernel (the
    # depthwise row in local memory), against TFLite's own kernels; fuse=false keeps two kernels.
    rng = np.random.default_rng(cout * 100 + k * 10 + stride)
    b, h, w, c = src
    oh, ow = _out(h, k, stride, 1, padding), _out(w, k, stride, 1, padding)
    tensors = [
        T(src),
        T((1, k, k, c), rand((1, k, k, c), rng)),
        T((c,), rand((c,), rng)),
        T((b, oh, ow, c)),
        T((cout, 1, 1, c), rand((cout, 1, 1, c), rng, -0.5, 0.5)),
        T((cout,), rand((cout,), rng)),
        T((b, oh, ow, cout)),
    ]
    dw = {"Padding": padding - 1, "StrideW": stride, "StrideH": stride, "DepthMultiplier": 1,
          "FusedActivationFunction": acts[0]}  # fmt: skip
    conv = {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": acts[1]}
    ops = [
        Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 2], [3], ("DepthwiseConv2DOptions", dw)),
        Op(Builtin.CONV_2D, [3, 4, 5], [6], ("Conv2DOptions", conv)),
    ]
    inputs, feeds, out = [0], [rand(src, rng)], 6
    if residual:
        inputs, out = _add_residual(tensors, ops, feeds, out, (b, oh, ow, cout), rng)
    state = check(tensors, ops, inputs, [out], feeds, precision)
    # at half precision a RELU6 projection of an unbounded depthwise output keeps that output in
    # float32 (compiler/precision.py), which the pair's half local memory cannot hold
    mid_wide = precision != "F32" and acts[0] not in (2, 3) and acts[1] in (2, 3)
    expected = 1 if paired and not _on_gpu() and not mid_wide else 2
    assert [p.kernels for p in state.partitions] == [expected]
    plain = check(tensors, ops, inputs, [out], feeds, precision, fuse="false")
    assert [p.kernels for p in plain.partitions] == [len(ops)]


@pytest.mark.parametrize(
    ("src", "cout", "residual"),
    [
        ((1, 7, 9, 16), 24, False),  # 63 pixels: 15 items of 4 and a partial one
        ((2, 5, 5, 10), 17, True),  # 3 groups, the last one lane wide; a residual ADD linked in
        ((1, 4, 4, 12), 72, False),  # 9 groups: 3 items of 3 per pixel block
    ],
)  # fmt: skip
@pytest.mark.parametrize("precision", ["F32", "F32_F16", "F16"])
def test_1x1_convolution_in_items_of_three_groups(src, cout, residual, precision):
    # Outputs of an odd multiple of 3 groups of 8 channels take items of 4 pixels x 3 groups
    # (selectors/gemm.odd_thirds); as a pair's projection they are covered by the pair test's 24 and
    # 19 output channels.
    rng = np.random.default_rng(cout)
    b, h, w, c = src
    tensors = [T(src), T((cout, 1, 1, c), rand((cout, 1, 1, c), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, h, w, cout)))
    options = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 3})
    ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], options)]
    inputs, feeds, out = [0], [rand(src, rng)], 3
    if residual:
        inputs, out = _add_residual(tensors, ops, feeds, out, (b, h, w, cout), rng)
    state = check(tensors, ops, inputs, [out], feeds, precision)
    assert [p.kernels for p in state.partitions] == [1]


@pytest.mark.parametrize(
    ("src", "k", "stride", "padding"),
    [
        ((1, 13, 11, 3), 5, 2, 0),  # an image's first layer (one slice of 3 lanes), SAME: edge items
        ((2, 9, 10, 3), 3, 1, 1),  # VALID, two images
        ((1, 8, 9, 16), 3, 2, 0),  # several input slices
    ],
)  # fmt: skip
@pytest.mark.parametrize("cout", [24, 19])
@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_windowed_convolution_in_items_of_three_groups(src, k, stride, padding, cout, precision):
    # Windowed layers of 17-24 output channels take items of 4 pixels x 3 groups too (the rows
    # kernel; selectors/gemm.odd_thirds), with their interior and edge paths.
    rng = np.random.default_rng(cout + k)
    b, h, w, c = src
    same = 1 if padding == 0 else 0  # TFLite's Padding: 0 SAME, 1 VALID
    oh, ow = _out(h, k, stride, 1, same), _out(w, k, stride, 1, same)
    tensors = [T(src), T((cout, k, k, c), rand((cout, k, k, c), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, oh, ow, cout)))
    options = (
        "Conv2DOptions",
        {"Padding": padding, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": 1},
    )
    state = check(tensors, [Op(Builtin.CONV_2D, [0, 1, 2], [3], options)], [0], [3], [rand(src, rng)], precision)
    assert [p.kernels for p in state.partitions] == [1]


@pytest.mark.parametrize(
    ("src", "k", "stride", "padding", "cout", "block"),
    [
        ((1, 9, 17, 3), (3, 3), 2, 0, 32, (2, 4, "pixels")),  # an image's first layer, SAME: edge items
        ((1, 6, 16, 24), (1, 3), 1, 0, 48, (2, 6, "pixels")),  # a 16-pixel row, edges at both ends
        ((2, 7, 8, 40), (3, 1), 1, 1, 72, (2, 5, "pixels")),  # 9 groups in items of 5: a padding group
        ((1, 10, 29, 13), (3, 3), 1, 0, 16, (6, 2, "weights")),  # a partial last slice and block
        ((1, 5, 12, 1), (2, 2), 2, 1, 20, (3, 3, "pixels")),  # one input channel; a half-full group
    ],
)  # fmt: skip
@pytest.mark.parametrize("precision", ["F32", "F32_F16", "F16"])
def test_windowed_convolution_in_lane_order(src, k, stride, padding, cout, block, precision):
    # Windowed layers of more than one group of 8 channels read their input a lane at a time, in
    # blocks that selectors/gemm.row_blocking picks (the parameters pin the blocks each case takes,
    # so that a change of the estimate cannot leave one of them untested).
    from delegate.compiler.selectors.gemm import row_blocking

    rng = np.random.default_rng(cout + k[0] * 7 + k[1])
    b, h, w, c = src
    oh, ow = _out(h, k[0], stride, 1, padding + 1), _out(w, k[1], stride, 1, padding + 1)
    assert row_blocking(ow, -(-cout // 8)) == block
    tensors = [T(src), T((cout, *k, c), rand((cout, *k, c), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, oh, ow, cout)))
    conv = {"Padding": padding, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": 3}
    state = check(tensors, [Op(Builtin.CONV_2D, [0, 1, 2], [3], ("Conv2DOptions", conv))], [0], [3], [rand(src, rng)],
                  precision, vector_width="8")  # fmt: skip
    assert [p.kernels for p in state.partitions] == [1]


@pytest.mark.parametrize(
    ("src", "k", "stride", "padding", "cout", "block"),
    [
        ((1, 6, 4, 24), (3, 3), 1, 0, 64, (4, 4, "pixels")),  # rows of 4: one block each, SAME edges
        ((1, 9, 17, 3), (3, 3), 2, 0, 32, (3, 2, "weights")),  # an image's first layer, SAME: edge items
        ((1, 7, 7, 20), (3, 3), 1, 1, 130, (5, 5, "pixels")),  # 31 registers; a partial group, 9 in items of 5
        ((1, 10, 29, 13), (3, 3), 1, 0, 32, (6, 2, "weights")),  # a partial last slice and block
        ((1, 6, 8, 40), (1, 3), 1, 0, 40, (4, 3, "weights")),  # half a group of 16 padding
    ],
)  # fmt: skip
@pytest.mark.parametrize("precision", ["F32", "F32_F16", "F16"])
def test_windowed_convolution_in_wide_lane_order(src, k, stride, padding, cout, block, precision):
    # The same kernels in groups of 16 channels (vector_width 16), in the blocks row_blocking
    # picks within AVX-512's registers.
    from delegate.compiler.selectors.gemm import row_blocking

    if _device_vector_floats() != 16:
        pytest.skip("16-channel groups are built only for CPU devices compiling for AVX-512 (this one does not)")
    rng = np.random.default_rng(cout + k[0] * 5 + k[1])
    b, h, w, c = src
    oh, ow = _out(h, k[0], stride, 1, padding + 1), _out(w, k[1], stride, 1, padding + 1)
    assert row_blocking(ow, -(-cout // 16), 16) == block
    tensors = [T(src), T((cout, *k, c), rand((cout, *k, c), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, oh, ow, cout)))
    conv = {"Padding": padding, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": 1}
    state = check(tensors, [Op(Builtin.CONV_2D, [0, 1, 2], [3], ("Conv2DOptions", conv))], [0], [3], [rand(src, rng)],
                  precision, vector_width="16")  # fmt: skip
    assert [p.kernels for p in state.partitions] == [1]


@pytest.mark.parametrize(
    ("src", "cout", "residual"),
    [
        ((1, 7, 9, 16), 32, False),  # 63 pixels: 10 items of 6 and a partial one; 4 groups
        ((2, 5, 5, 10), 40, True),  # 5 groups (the last item half padding), a partial slice; a residual ADD
        ((1, 3, 4, 64), 96, False),  # 12 groups over 12 pixels: whole blocks only
    ],
)  # fmt: skip
@pytest.mark.parametrize("precision", ["F32", "F32_F16", "F16"])
def test_1x1_convolution_in_lane_order(src, cout, residual, precision):
    # 1x1 layers of an even number of groups (or any not an odd multiple of 3) over at least 6
    # pixels read their input a lane at a time in items of 6 pixels x 2 groups, weights first
    # (selectors/gemm.FLAT_PIXELS, FLAT_GROUPS).
    rng = np.random.default_rng(cout + src[3])
    b, h, w, c = src
    tensors = [T(src), T((cout, 1, 1, c), rand((cout, 1, 1, c), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, h, w, cout)))
    options = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 1})
    ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], options)]
    inputs, feeds, out = [0], [rand(src, rng)], 3
    if residual:
        inputs, out = _add_residual(tensors, ops, feeds, out, (b, h, w, cout), rng)
    state = check(tensors, ops, inputs, [out], feeds, precision)
    assert [p.kernels for p in state.partitions] == [1]


def _pair_model(rng, src: tuple[int, int, int, int], cout: int) -> tuple[list, list]:
    """Tensors and ops of a 3x3 stride-1 SAME depthwise convolution (ReLU6) of ``src`` and a 1x1
    convolution to ``cout`` channels: input tensor 0, output tensor 6."""
    b, h, w, c = src
    tensors = [
        T(src), T((1, 3, 3, c), rand((1, 3, 3, c), rng)), T((c,), rand((c,), rng)), T((b, h, w, c)),
        T((cout, 1, 1, c), rand((cout, 1, 1, c), rng)), T((cout,), rand((cout,), rng)), T((b, h, w, cout)),
    ]  # fmt: skip
    dw = {"Padding": 0, "StrideW": 1, "StrideH": 1, "DepthMultiplier": 1, "FusedActivationFunction": 3}
    ops = [
        Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 2], [3], ("DepthwiseConv2DOptions", dw)),
        Op(Builtin.CONV_2D, [3, 4, 5], [6], ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})),
    ]
    return tensors, ops


@pytest.mark.parametrize(("storage", "kernels"), [("IMAGE_BUFFER", 1), ("TEXTURE_2D", 2), ("TEXTURE_ARRAY", 2)])
def test_depthwise_then_1x1_on_other_storages(storage, kernels):
    # The pair kernel addresses tensors linearly: IMAGE_BUFFER pairs too; textures keep two kernels.
    rng = np.random.default_rng(11)
    src = (1, 15, 17, 20)
    tensors, ops = _pair_model(rng, src, 10)
    state = check(tensors, ops, [0], [6], [rand(src, rng)], storage_type=storage)
    assert [p.kernels for p in state.partitions] == [2 if _on_gpu() else kernels]


def _pair_context(folder) -> bytes:
    """A serialized context holding one depthwise + 1x1 pair kernel (16x16x12 -> 8 channels)."""
    from delegate._integrity import unseal

    rng = np.random.default_rng(3)
    src = (1, 16, 16, 12)
    tensors, ops = _pair_model(rng, src, 8)
    check(tensors, ops, [0], [6], [rand(src, rng)], serialization_dir=str(folder))
    (entry,) = folder.glob("*.ctx")
    return bytes(unseal(entry.read_bytes(), str(entry)))


def test_tuning_keeps_the_work_group_a_pair_kernel_requires(tmp_path):
    # The pair kernel declares reqd_work_group_size: tuning measures it but tries no other size
    # (one would fail to launch, or share one work-group's local row between two rows).
    if _on_gpu():
        pytest.skip("pairs run as one kernel on CPU devices only")
    from delegate.runtime import Runtime

    with Runtime.load(_pair_context(tmp_path), profiling=True) as rt:
        report = rt.tune("fast", repeats=1)
    (node,) = report.nodes
    assert node.name == "depthwise_conv_2d_0+conv_2d_1"
    assert node.before == node.after == (8, 1, 1) and node.tried == 1


def test_a_context_launching_a_pair_kernel_with_another_size_is_refused_at_load(tmp_path):
    # An edited context whose work-group size contradicts the kernel's reqd_work_group_size could
    # not run: it is refused when it loads, with what to do.
    if _on_gpu():
        pytest.skip("pairs run as one kernel on CPU devices only")
    from delegate.context import model
    from delegate.errors import ContextFormatError
    from delegate.runtime import Runtime

    with Runtime.load(_pair_context(tmp_path)) as rt:
        ctx = rt.model
    (node,) = ctx.nodes
    node.gpu_op.work_group_size = model.Int3(4, 1, 1)
    with pytest.raises(ContextFormatError, match=r"requires work-group size \(8, 1, 1\).*compile the model again"):
        Runtime.load(ctx)


# ------------------------------------------------------------------ vector widths of the matrix products


def _device_vector_floats() -> int:
    from delegate.runtime.device import describe, select_device
    from delegate.runtime.platforms.cpu_models import vector_floats

    info = describe(select_device())
    return 8 if info.is_gpu else vector_floats(info.compiler_cpu)


def _conv_model(src, cout, k, stride, act, rng, padding=1):
    b, h, w, cin = src
    oh, ow = _out(h, k, stride, 1, padding), _out(w, k, stride, 1, padding)
    tensors = [T(src), T((cout, k, k, cin), rand((cout, k, k, cin), rng)), T((cout,), rand((cout,), rng))]
    tensors.append(T((b, oh, ow, cout)))
    params = {"Padding": padding - 1, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": act}
    return tensors, [Op(Builtin.CONV_2D, [0, 1, 2], [3], ("Conv2DOptions", params))], [0], [3]


def _width_pair_model(src, cout, stride, rng):
    """A 3x3 depthwise convolution and the 1x1 convolution reading it: the pair kernel."""
    b, h, w, c = src
    oh, ow = -(-h // stride), -(-w // stride)
    tensors = [
        T(src),
        T((1, 3, 3, c), rand((1, 3, 3, c), rng)),
        T((c,), rand((c,), rng)),
        T((b, oh, ow, c)),
        T((cout, 1, 1, c), rand((cout, 1, 1, c), rng)),
        T((cout,), rand((cout,), rng)),
        T((b, oh, ow, cout)),
    ]
    dw = {"Padding": 0, "StrideW": stride, "StrideH": stride, "DepthMultiplier": 1, "FusedActivationFunction": 3}
    pw = {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 0}
    ops = [
        Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 2], [3], ("DepthwiseConv2DOptions", dw)),
        Op(Builtin.CONV_2D, [3, 4, 5], [6], ("Conv2DOptions", pw)),
    ]
    return tensors, ops, [0], [6]


def _width_dw_model(src, k, stride, dilation, padding, rng):
    """A depthwise convolution and the swish after it (EfficientNet's), linked into its kernel."""
    b, h, w, c = src
    oh, ow = _out(h, k, stride, dilation, padding), _out(w, k, stride, dilation, padding)
    tensors = [T(src), T((1, k, k, c), rand((1, k, k, c), rng)), T((c,), rand((c,), rng))]
    tensors += [T((b, oh, ow, c)), T((b, oh, ow, c)), T((b, oh, ow, c))]
    params = {
        "Padding": padding - 1,
        "StrideW": stride,
        "StrideH": stride,
        "DepthMultiplier": 1,
        "DilationWFactor": dilation,
        "DilationHFactor": dilation,
        "FusedActivationFunction": 0,
    }
    ops = [
        Op(Builtin.DEPTHWISE_CONV_2D, [0, 1, 2], [3], ("DepthwiseConv2DOptions", params)),
        Op(Builtin.LOGISTIC, [3], [4]),
        Op(Builtin.MUL, [3, 4], [5], ("MulOptions", {"FusedActivationFunction": 0})),
    ]
    return tensors, ops, [0], [5]


def _fc_model(rows, cin, cout, rng):
    tensors = [T((rows, cin)), T((cout, cin), rand((cout, cin), rng)), T((cout,), rand((cout,), rng)), T((rows, cout))]
    return tensors, [Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], ("FullyConnectedOptions", {}))], [0], [3]


_WIDTH_CASES = {
    # 1x1 convolutions (the flat kernel): whole groups of 16, a last partial pixel block, 24 channels
    # (groups of 8 in either width), 1000 channels (a partial group of 16), 48 channels (thirds)
    "1x1-64": lambda rng: _conv_model((1, 9, 7, 20), 64, 1, 1, 3, rng),
    "1x1-24": lambda rng: _conv_model((1, 6, 6, 16), 24, 1, 1, 0, rng),
    "1x1-48": lambda rng: _conv_model((2, 5, 5, 12), 48, 1, 1, 1, rng),
    "fc-1000": lambda rng: _fc_model(2, 40, 1000, rng),
    # windows (the row kernel), strides 1 and 2, rows ending in partial blocks, a first layer
    "3x3-32": lambda rng: _conv_model((1, 11, 13, 8), 32, 3, 1, 1, rng),
    "3x3s2-80": lambda rng: _conv_model((2, 9, 15, 3), 80, 3, 2, 3, rng),
    "5x5-valid-16": lambda rng: _conv_model((1, 12, 12, 5), 16, 5, 1, 0, rng, padding=2),
    # depthwise + 1x1 pairs (MIN_ROWS and MIN_WIDTH 14)
    "pair-32": lambda rng: _width_pair_model((1, 16, 17, 24), 32, 1, rng),
    "pair-s2-96": lambda rng: _width_pair_model((1, 30, 29, 40), 96, 2, rng),
    # depthwise rows (packs of 2 or 4 slices): a last pack of one slice and rows of 7-pixel blocks,
    # stride 2 with batch 2 and a 5x5 window (6-pixel blocks, a partial slice), a dilated window
    "dw-3x3-20": lambda rng: _width_dw_model((1, 9, 13, 20), 3, 1, 1, 1, rng),
    "dw-5x5s2-38": lambda rng: _width_dw_model((2, 11, 12, 38), 5, 2, 1, 1, rng),
    "dw-3x3d2-16": lambda rng: _width_dw_model((1, 8, 14, 16), 3, 1, 2, 2, rng),
}


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("case", sorted(_WIDTH_CASES))
@pytest.mark.parametrize("precision", ["F32", "F32_F16"])
def test_matrix_products_in_both_vector_widths(case, width, precision):
    """The matrix-product kernels (1x1, windowed, fully connected, depthwise pairs) and the depthwise
    row kernel in groups of 8 and of 16 output channels against TFLite; the default picks 16 only
    where the device compiles for AVX-512, which is also the only place it is allowed."""
    if width == 16 and _device_vector_floats() != 16:
        pytest.skip("16-channel groups are built only for CPU devices compiling for AVX-512 (this one does not)")
    rng = np.random.default_rng(len(case) * 7 + width)
    tensors, ops, inputs, outputs = _WIDTH_CASES[case](rng)
    feeds = [rand(tensors[i].shape, rng) for i in inputs]
    state = check(tensors, ops, inputs, outputs, feeds, precision, vector_width=str(width))
    if case.startswith("pair"):  # the two convolutions ran as one kernel
        assert [p.kernels for p in state.partitions] == [1]


def test_vector_width_16_is_refused_where_the_device_does_not_compile_for_avx512():
    if _device_vector_floats() == 16:
        pytest.skip("this device compiles for AVX-512, where vector_width=16 is allowed")
    rng = np.random.default_rng(3)
    tensors, ops, inputs, outputs = _WIDTH_CASES["1x1-64"](rng)
    model = build_model(tensors, ops, inputs, outputs)
    with pytest.raises(Exception, match="vector_width=16 needs a CPU device compiling for AVX-512"):
        run_both(model, [rand(tensors[0].shape, rng)], vector_width="16")
