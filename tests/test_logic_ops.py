"""Comparisons, logical ops, SELECT / SELECT_V2 and CAST (compiler/ops/comparison.py) against TFLite's
builtin kernels, on shapes drawn by hypothesis. Bool and int32 tensors stay inside a partition,
so each model reads float32 and ends in float32 (a CAST or a SELECT); bool results are checked
exactly, through a CAST to float32."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate.compiler.claim import carries_non_float, edge_dtype_problems
from delegate.compiler.graph import BOOL, FLOAT32, INT32, INT64, Builtin, Graph, Node, Tensor
from delegate.compiler.partition import CompileOptions, compile_partition, unsupported_reason

from .helpers import delegate_and_builtin
from .test_ops import PROGRAM_CACHE
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

EXAMPLES = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
#: for tests parametrized over several ops (CI budget: the whole file in about 3 minutes on 2 cores)
FEW = settings(EXAMPLES, max_examples=3)
TOLERANCE = {"F32": 1e-4, "F32_F16": 1e-2, "F16": 1e-2}
_TYPES = {np.float32: 0, np.int32: 2, np.bool_: 6}  # schema TensorType of CastOptions

COMPARISONS = [
    Builtin.EQUAL,
    Builtin.NOT_EQUAL,
    Builtin.GREATER,
    Builtin.GREATER_EQUAL,
    Builtin.LESS,
    Builtin.LESS_EQUAL,
]
precisions = st.sampled_from(["F32", "F32", "F16", "F32_F16"])
seeds = st.integers(0, 2**31 - 1)
shapes = st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 6), st.integers(1, 9))


def cast(src: int, dst: int, frm: type, to: type) -> Op:
    return Op(Builtin.CAST, [src], [dst], ("CastOptions", {"InDataType": _TYPES[frm], "OutDataType": _TYPES[to]}))


def run(tensors, ops, inputs, outputs, feeds, precision="F32"):
    model = build_model(tensors, ops, inputs, outputs)
    return delegate_and_builtin(model, feeds, PROGRAM_CACHE, precision=precision)


def exact(tensors, ops, inputs, outputs, feeds, precision="F32", delegated=None):
    """Run both ways; every output must be equal, NaN for NaN, and ``delegated`` nodes (all) claimed."""
    got, want, state = run(tensors, ops, inputs, outputs, feeds, precision)
    assert len(state.delegated_nodes) == (len(ops) if delegated is None else delegated), state.unsupported
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    return state


def close(tensors, ops, inputs, outputs, feeds, precision="F32"):
    got, want, state = run(tensors, ops, inputs, outputs, feeds, precision)
    assert len(state.delegated_nodes) == len(ops), state.unsupported
    scale = max(max(float(np.abs(f).max()) for f in feeds), 1e-6)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        err = float(np.abs(g.astype(np.float64) - w).max())
        assert err <= TOLERANCE[precision] * scale, f"max abs error {err} vs scale {scale}"
    return state


def grid(shape, rng, steps: int = 4) -> np.ndarray:
    """Values on a coarse grid (multiples of 0.5 in [-2, 2]): ties for EQUAL and the ordered
    comparisons, and exact in half precision, so bool results must agree in every precision."""
    return (rng.integers(-steps, steps + 1, size=shape) / 2).astype(np.float32)


@st.composite
def broadcast_pair(draw):
    """An output shape and another operand's shape that broadcasts to it (fewer dims or ones)."""
    out = draw(shapes)
    other = tuple(d if draw(st.booleans()) else 1 for d in out)
    rank = draw(st.integers(0, 4))
    return out, other[4 - rank :]


# ------------------------------------------------------------------ comparisons


@pytest.mark.parametrize("op", COMPARISONS, ids=lambda o: o.name)
@FEW
@given(pair=broadcast_pair(), seed=seeds, constant=st.booleans(), swap=st.booleans(), precision=precisions)
def test_comparison_float_with_broadcasting(op, pair, seed, constant, swap, precision):
    rng = np.random.default_rng(seed)
    out, other = pair
    a, b = grid(out, rng), grid(other, rng)
    first, second = (1, 0) if swap else (0, 1)  # the broadcast operand on either side
    tensors = [T(out), T(other, b if constant else None), T(out, dtype=np.bool_), T(out)]
    ops = [Op(op, [first, second], [2]), cast(2, 3, np.bool_, np.float32)]
    exact(tensors, ops, [0] if constant else [0, 1], [3], [a] if constant else [a, b], precision)


@pytest.mark.parametrize("op", COMPARISONS, ids=lambda o: o.name)
@FEW
@given(pair=broadcast_pair(), seed=seeds, constant=st.booleans(), precision=precisions)
def test_comparison_int32(op, pair, seed, constant, precision):
    """int32 operands made inside the partition by CAST (float -> int32 truncates), against an
    int32 constant or another cast."""
    rng = np.random.default_rng(seed)
    out, other = pair
    a, b = grid(out, rng, 8), grid(other, rng, 8)
    if constant:
        c = rng.integers(-3, 4, size=other).astype(np.int32)
        tensors = [T(out), T(out, dtype=np.int32), T(other, c, np.int32), T(out, dtype=np.bool_), T(out)]
        ops = [cast(0, 1, np.float32, np.int32), Op(op, [1, 2], [3]), cast(3, 4, np.bool_, np.float32)]
        exact(tensors, ops, [0], [4], [a], precision)
        return
    tensors = [T(out), T(other), T(out, dtype=np.int32), T(other, dtype=np.int32), T(out, dtype=np.bool_), T(out)]
    ops = [
        cast(0, 2, np.float32, np.int32),
        cast(1, 3, np.float32, np.int32),
        Op(op, [2, 3], [4]),
        cast(4, 5, np.bool_, np.float32),
    ]
    exact(tensors, ops, [0, 1], [5], [a, b], precision)


@pytest.mark.parametrize("op", [Builtin.EQUAL, Builtin.NOT_EQUAL, Builtin.GREATER, Builtin.LESS_EQUAL], ids=str)
def test_comparison_of_nan_and_infinities(op):
    """IEEE semantics as in TFLite: NaN is unequal to everything, itself included, and unordered."""
    values = np.array([np.nan, 1.0, np.inf, -np.inf, 0.0, -0.0, np.nan, 2.0], np.float32)
    other = np.array([np.nan, np.nan, np.inf, np.inf, -0.0, 0.0, 1.0, -np.inf], np.float32)
    tensors = [T((8,)), T((8,)), T((8,), dtype=np.bool_), T((8,))]
    exact(tensors, [Op(op, [0, 1], [2]), cast(2, 3, np.bool_, np.float32)], [0, 1], [3], [values, other])


@pytest.mark.parametrize("op", [Builtin.EQUAL, Builtin.NOT_EQUAL], ids=lambda o: o.name)
def test_comparison_of_bools(op):
    shape = (2, 3, 5)
    rng = np.random.default_rng(7)
    a, b = grid(shape, rng), grid((5,), rng)
    tensors = [T(shape), T((5,)), T(shape, dtype=np.bool_), T((5,), dtype=np.bool_), T(shape, dtype=np.bool_)]
    tensors += [T(shape)]
    ops = [
        Op(Builtin.LESS_EQUAL, [0, 1], [2]),
        Op(Builtin.GREATER, [1, 1], [3]),  # all false
        Op(op, [2, 3], [4]),
        cast(4, 5, np.bool_, np.float32),
    ]
    exact(tensors, ops, [0, 1], [5], [a, b])


# ------------------------------------------------------------------ logical ops


@pytest.mark.parametrize("op", [Builtin.LOGICAL_AND, Builtin.LOGICAL_OR], ids=lambda o: o.name)
@FEW
@given(pair=broadcast_pair(), seed=seeds, constant=st.booleans(), precision=precisions)
def test_logical_binary_with_broadcasting(op, pair, seed, constant, precision):
    rng = np.random.default_rng(seed)
    out, other = pair
    a, b = grid(out, rng), grid(other, rng)
    zero = T((), np.zeros((), np.float32))
    bools = [T(out, dtype=np.bool_), T(other, dtype=np.bool_), T(out, dtype=np.bool_), T(out)]
    if constant:  # a bool constant as the second operand
        flags = rng.integers(0, 2, size=other).astype(np.bool_)
        tensors = [T(out), zero, T(out, dtype=np.bool_), T(other, flags, np.bool_), T(out, dtype=np.bool_), T(out)]
        ops = [Op(Builtin.GREATER, [0, 1], [2]), Op(op, [2, 3], [4]), cast(4, 5, np.bool_, np.float32)]
        exact(tensors, ops, [0], [5], [a], precision)
        return
    tensors = [T(out), T(other), zero, *bools]
    ops = [
        Op(Builtin.GREATER, [0, 2], [3]),
        Op(Builtin.LESS, [1, 2], [4]),
        Op(op, [3, 4], [5]),
        cast(5, 6, np.bool_, np.float32),
    ]
    exact(tensors, ops, [0, 1], [6], [a, b], precision)


@EXAMPLES
@given(shape=shapes, seed=seeds, precision=precisions)
def test_logical_not(shape, seed, precision):
    a = grid(shape, np.random.default_rng(seed))
    tensors = [T(shape), T((), np.zeros((), np.float32)), T(shape, dtype=np.bool_), T(shape, dtype=np.bool_)]
    tensors += [T(shape)]
    ops = [Op(Builtin.GREATER_EQUAL, [0, 1], [2]), Op(Builtin.LOGICAL_NOT, [2], [3]), cast(3, 4, np.bool_, np.float32)]
    exact(tensors, ops, [0], [4], [a], precision)


# ------------------------------------------------------------------ SELECT_V2 and SELECT


@st.composite
def three_broadcast(draw):
    out = draw(shapes)

    def operand():
        shape = tuple(d if draw(st.booleans()) else 1 for d in out)
        return shape[4 - draw(st.integers(0, 4)) :]

    return out, operand(), operand(), operand()


@EXAMPLES
@given(case=three_broadcast(), seed=seeds, constant=st.sampled_from([None, 1, 2]), precision=precisions)
def test_select_v2_broadcasts_every_operand(case, seed, constant, precision):
    rng = np.random.default_rng(seed)
    _, c_shape, x_shape, y_shape = case
    out = tuple(np.broadcast_shapes(c_shape, x_shape, y_shape))  # what TFLite makes of them
    c, x = grid(c_shape, rng), rng.uniform(-2, 2, x_shape).astype(np.float32)
    y = rng.uniform(-2, 2, y_shape).astype(np.float32)
    zero = T((), np.zeros((), np.float32))
    tensors = [
        T(c_shape),
        T(x_shape, x if constant == 1 else None),
        T(y_shape, y if constant == 2 else None),
        zero,
        T(c_shape, dtype=np.bool_),
        T(out),
    ]
    ops = [Op(Builtin.GREATER, [0, 3], [4]), Op(Builtin.SELECT_V2, [4, 1, 2], [5])]
    inputs = [0, *(i for i in (1, 2) if i != constant)]
    feeds = [c, *(v for i, v in ((1, x), (2, y)) if i != constant)]
    close(tensors, ops, inputs, [5], feeds, precision)


@pytest.mark.parametrize("cond_kind", ["same", "scalar", "first_dim"])
@FEW
@given(shape=shapes, rank=st.integers(1, 4), seed=seeds, precision=precisions)
def test_select_v1(cond_kind, shape, rank, seed, precision):
    """SELECT (v1): no broadcasting of x and y; the condition is x's shape, a scalar, or of rank 1
    along x's first dimension (TFLite's RankOneSelect), which SELECT_V2 would broadcast otherwise."""
    rng = np.random.default_rng(seed)
    x_shape = shape[4 - rank :]
    c_shape = {"same": x_shape, "scalar": (), "first_dim": x_shape[:1]}[cond_kind]
    c, x, y = grid(c_shape, rng), rng.uniform(-2, 2, x_shape).astype(np.float32), grid(x_shape, rng)
    tensors = [T(c_shape), T(x_shape), T(x_shape), T((), np.zeros((), np.float32)), T(c_shape, dtype=np.bool_)]
    tensors += [T(x_shape)]
    ops = [Op(Builtin.LESS, [0, 3], [4]), Op(Builtin.SELECT, [4, 1, 2], [5])]
    close(tensors, ops, [0, 1, 2], [5], [c, x, y], precision)


def test_select_of_int32_and_bool_values():
    """x and y int32 (from casts, and an int32 constant), then bool, each cast back to float32."""
    shape = (3, 4, 5)
    rng = np.random.default_rng(3)
    c, x = grid(shape, rng), (rng.uniform(-50, 50, shape)).astype(np.float32)
    ints = rng.integers(-(2**24), 2**24 + 1, size=(5,)).astype(np.int32)
    i32, b = np.int32, np.bool_
    tensors = [
        T(shape),  # 0 condition source
        T(shape),  # 1 x
        T((), np.zeros((), np.float32)),  # 2
        T(shape, dtype=b),  # 3 condition
        T(shape, dtype=i32),  # 4 int x
        T((5,), ints, i32),  # 5 int constant y
        T(shape, dtype=i32),  # 6 selected ints
        T(shape),  # 7 output: ints as floats
        T(shape, dtype=b),  # 8 x > 0
        T(shape, dtype=b),  # 9 selected bools
        T(shape),  # 10 output: bools as floats
    ]
    ops = [
        Op(Builtin.GREATER, [0, 2], [3]),
        cast(1, 4, np.float32, i32),
        Op(Builtin.SELECT_V2, [3, 4, 5], [6]),
        cast(6, 7, i32, np.float32),
        Op(Builtin.GREATER, [1, 2], [8]),
        Op(Builtin.SELECT, [3, 8, 3], [9]),
        cast(9, 10, b, np.float32),
    ]
    exact(tensors, ops, [0, 1], [7, 10], [c, x])


# ------------------------------------------------------------------ CAST


_EDGE_VALUES = np.array(
    [0.0, -0.0, 0.5, -0.5, 1.99, -1.99, 2.5e9, -2.5e9, 2147483520.0, -2147483648.0, np.nan, np.inf, -np.inf, 1e-40],
    np.float32,
)


@pytest.mark.parametrize("to", [np.int32, np.bool_], ids=lambda t: np.dtype(t).name)
def test_cast_from_float_at_the_edges(to):
    """Toward zero; beyond int32's range saturated and NaN to INT_MAX, as TFLite's kernel does
    here (exact in F32, INT_MAX held as 2^31, the float32 it converts to); to bool as != 0."""
    n = len(_EDGE_VALUES)
    tensors = [T((n,)), T((n,), dtype=to), T((n,))]
    exact(tensors, [cast(0, 1, np.float32, to), cast(1, 2, to, np.float32)], [0], [2], [_EDGE_VALUES])


@EXAMPLES
@given(shape=shapes, seed=seeds, precision=precisions)
def test_cast_round_trips(shape, seed, precision):
    """float -> int32 -> bool -> float, float -> bool -> int32 -> float, float -> float."""
    rng = np.random.default_rng(seed)
    x = (rng.integers(-6, 7, size=shape) / 4).astype(np.float32)  # quarters: ties at zero and integers
    i32, b, f32 = np.int32, np.bool_, np.float32
    tensors = [T(shape), T(shape, dtype=i32), T(shape, dtype=b), T(shape), T(shape, dtype=b), T(shape, dtype=i32)]
    tensors += [T(shape), T(shape), T(shape)]
    ops = [
        cast(0, 1, f32, i32),
        cast(1, 2, i32, b),
        cast(2, 3, b, f32),
        cast(0, 4, f32, b),
        cast(4, 5, b, i32),
        cast(5, 6, i32, f32),
        cast(0, 7, f32, f32),
        cast(1, 8, i32, f32),
    ]
    exact(tensors, ops, [0], [3, 6, 7, 8], [x], precision)


def test_bool_and_int32_through_reshapes():
    """RESHAPE, EXPAND_DIMS and SQUEEZE move bool and int32 values between the ops that make and
    read them, in one partition."""
    rng = np.random.default_rng(4)
    x = (rng.uniform(-9, 9, (2, 6)) * 1.5).astype(np.float32)
    i32, b = np.int32, np.bool_
    tensors = [
        T((2, 6)),  # 0
        T((2, 6), dtype=i32),  # 1
        T((3,), np.array([3, 2, 2], np.int32), i32),  # 2 new shape
        T((3, 2, 2), dtype=i32),  # 3
        T((3, 2, 2)),  # 4
        T((), np.array(0.0, np.float32)),  # 5
        T((2, 6), dtype=b),  # 6
        T((), np.array(0, np.int32), i32),  # 7 axis
        T((1, 2, 6), dtype=b),  # 8
        T((2, 6), dtype=b),  # 9
        T((2, 6)),  # 10
    ]
    ops = [
        cast(0, 1, np.float32, i32),
        Op(Builtin.RESHAPE, [1, 2], [3]),
        cast(3, 4, i32, np.float32),
        Op(Builtin.GREATER, [0, 5], [6]),
        Op(Builtin.EXPAND_DIMS, [6, 7], [8]),
        Op(Builtin.SQUEEZE, [8], [9], ("SqueezeOptions", {"SqueezeDims": [0]})),
        Op(Builtin.SELECT_V2, [9, 0, 5], [10]),
    ]
    exact(tensors, ops, [0], [4, 10], [x])


# ------------------------------------------------------------------ bool tensors at a partition's edges


def test_bool_graph_output_is_delegated():
    """A comparison whose bool result leaves the graph: the C kernel hands it out as bool."""
    shape = (2, 3, 4)
    x = grid(shape, np.random.default_rng(1))
    tensors = [T(shape), T(shape), T((), np.zeros((), np.float32)), T(shape, dtype=np.bool_)]
    ops = [Op(Builtin.ABS, [0], [1]), Op(Builtin.GREATER, [1, 2], [3])]
    exact(tensors, ops, [0], [1, 3], [x])


def test_bool_graph_input_is_delegated():
    """A SELECT whose condition is the model's bool input: the C kernel takes it in as 0.0 / 1.0."""
    shape = (4, 5)
    rng = np.random.default_rng(2)
    c = rng.integers(0, 2, size=shape).astype(np.bool_)
    x, y = grid(shape, rng), grid(shape, rng)
    tensors = [T(shape, dtype=np.bool_), T(shape), T(shape), T(shape), T(shape)]
    ops = [Op(Builtin.SELECT_V2, [0, 1, 2], [3]), Op(Builtin.NEG, [3], [4])]
    exact(tensors, ops, [0, 1, 2], [4], [c, x, y])


def test_int32_constant_beyond_float_precision_stays_on_cpu():
    shape = (6,)
    x = np.array([1, 2, 3, 16777216, 16777217, -5], np.float32)
    big = np.array([16777217], np.int32)
    tensors = [T(shape), T(shape, dtype=np.int32), T((1,), big, np.int32), T(shape, dtype=np.bool_), T(shape)]
    ops = [cast(0, 1, np.float32, np.int32), Op(Builtin.EQUAL, [1, 2], [3]), cast(3, 4, np.bool_, np.float32)]
    got, want, state = run(tensors, ops, [0], [4], [x])
    assert "beyond 2^24" in state.unsupported["equal_1"]
    np.testing.assert_array_equal(got[0], want[0])


# ------------------------------------------------------------------ patterns of real models


@pytest.mark.parametrize("precision", ["F32", "F16"])
@pytest.mark.parametrize("all_zero", [False, True])
def test_normalize_unless_zero(precision, all_zero):
    """basic-pitch's normalisation: x / max(x), or 0 where the max is 0 (REDUCE_MAX, EQUAL, DIV,
    SELECT_V2 with a scalar constant), in one partition."""
    shape = (1, 7, 9)
    rng = np.random.default_rng(5)
    x = np.zeros(shape, np.float32) if all_zero else rng.uniform(0.1, 3, shape).astype(np.float32)
    tensors = [
        T(shape),
        T((1,), np.array([2], np.int32), np.int32),
        T((1, 7, 1)),
        T((), np.zeros((), np.float32)),
        T((1, 7, 1), dtype=np.bool_),
        T(shape),
        T(shape),
    ]
    ops = [
        Op(Builtin.REDUCE_MAX, [0, 1], [2], ("ReducerOptions", {"KeepDims": True})),
        Op(Builtin.EQUAL, [2, 3], [4]),
        Op(Builtin.DIV, [0, 2], [5]),
        Op(Builtin.SELECT_V2, [4, 3, 5], [6]),
    ]
    got, want, state = run(tensors, ops, [0], [6], [x], precision)
    assert len(state.delegated_nodes) == 4, state.unsupported
    assert len(state.partitions) == 1
    if all_zero:  # TFLite's DIV makes NaN there, the SELECT a 0
        np.testing.assert_array_equal(got[0], want[0])
    else:
        assert float(np.abs(got[0] - want[0]).max()) <= TOLERANCE[precision] * 3


@pytest.mark.parametrize("precision", ["F32", "F16"])
@pytest.mark.parametrize("scores_as", ["x", "y"])
@pytest.mark.parametrize("mask_shape", [(1, 1, 1, 9), (1, 2, 5, 9)])
def test_runtime_mask_select_runs_in_the_scores_kernel(precision, scores_as, mask_shape):
    """Attention's mask built at run time (BERT's ``attention_mask``): scores from a BATCH_MATMUL,
    then SELECT_V2(mask > 0, scores, fill) (or the fill as x): the select runs in the product's
    kernel, one kernel for both, with TFLite's values; the mask broadcast or whole."""
    rng = np.random.default_rng(3)
    scores_shape = (1, 2, 5, 9)
    a, b = rng.uniform(-2, 2, (1, 2, 5, 7)).astype(np.float32), rng.uniform(-2, 2, (1, 2, 7, 9)).astype(np.float32)
    mask = grid(mask_shape, rng)
    tensors = [
        T((1, 2, 5, 7)),  # 0
        T((1, 2, 7, 9)),  # 1
        T(mask_shape),  # 2
        T(scores_shape),  # 3 scores
        T((), np.zeros((), np.float32)),  # 4
        T(mask_shape, dtype=np.bool_),  # 5
        T((), np.array(-1e4, np.float32)),  # 6 fill
        T(scores_shape),  # 7
    ]
    picked = [5, 3, 6] if scores_as == "x" else [5, 6, 3]
    ops = [
        Op(Builtin.BATCH_MATMUL, [0, 1], [3], ("BatchMatMulOptions", {"AdjX": False, "AdjY": False})),
        Op(Builtin.GREATER, [2, 4], [5]),
        Op(Builtin.SELECT_V2, picked, [7]),
    ]
    got, want, state = run(tensors, ops, [0, 1, 2], [7], [a, b, mask], precision)
    assert len(state.delegated_nodes) == 3, state.unsupported
    # the comparison's kernel and the product's, the select linked into the latter
    assert sum(p.kernels for p in state.partitions) == 2
    scale = float(np.abs(want[0]).max())
    assert float(np.abs(got[0] - want[0]).max()) <= TOLERANCE[precision] * scale


def test_range_mask_pattern():
    """A metadata model's masking (BirdNET's range model pattern): scores kept where inside a
    range (GREATER_EQUAL, LESS, LOGICAL_AND), an int32 count cast from the scores, 0 elsewhere."""
    shape = (1, 12)
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 2, shape).astype(np.float32)
    i32, b = np.int32, np.bool_
    tensors = [
        T(shape),  # 0
        T((), np.array(0.0, np.float32)),  # 1 low
        T((), np.array(1.0, np.float32)),  # 2 high
        T(shape, dtype=b),  # 3
        T(shape, dtype=b),  # 4
        T(shape, dtype=b),  # 5 inside
        T(shape),  # 6 logistic
        T((), np.array(0.0, np.float32)),  # 7
        T(shape),  # 8 masked
        T(shape, dtype=i32),  # 9
        T(shape),  # 10
    ]
    ops = [
        Op(Builtin.GREATER_EQUAL, [0, 1], [3]),
        Op(Builtin.LESS, [0, 2], [4]),
        Op(Builtin.LOGICAL_AND, [3, 4], [5]),
        Op(Builtin.LOGISTIC, [0], [6]),
        Op(Builtin.SELECT_V2, [5, 6, 7], [8]),
        cast(5, 9, b, i32),
        cast(9, 10, i32, np.float32),
    ]
    close(tensors, ops, [0], [8, 10], [x])


# ------------------------------------------------------------------ the compiler's edge rule, without TFLite


def _graph() -> Graph:
    """x (float) -> GREATER(x, 0) -> b (bool) -> SELECT_V2(b, x, 0) -> y (float)."""
    f, bl = FLOAT32, BOOL
    tensors = {
        0: Tensor(0, f, (2, 3)),
        1: Tensor(1, f, (), is_constant=True, constant=np.zeros((), np.float32)),
        2: Tensor(2, bl, (2, 3)),
        3: Tensor(3, f, (2, 3)),
    }
    nodes = {0: Node(0, Builtin.GREATER, 1, (0, 1), (2,)), 1: Node(1, Builtin.SELECT_V2, 1, (2, 0, 1), (3,))}
    return Graph(tensors, nodes)


def test_edge_rule_lets_bool_tensors_cross():
    graph = _graph()
    assert not carries_non_float(graph, [0, 1])
    assert edge_dtype_problems(graph, [0], [0], [2]) == {} and edge_dtype_problems(graph, [1], [0, 2], [3]) == {}


def test_edge_rule_names_a_node_writing_int64_across():
    """int64 comes in (gather indices) but never goes out: the C kernel converts int32 and bool only."""
    graph = _graph()
    graph.tensors[4] = Tensor(4, INT64, (2, 3))
    graph.nodes[2] = Node(2, Builtin.CAST, 1, (0,), (4,))
    assert carries_non_float(graph, [2])
    problems = edge_dtype_problems(graph, [2], [0], [4])
    assert problems.keys() == {2} and problems[2].startswith("writes int64 tensor 4 across the partition's edge")
    assert edge_dtype_problems(graph, [2], [0], []) == {}


def test_compile_partition_takes_bool_edges_and_refuses_int64_outputs():
    graph = _graph()
    ctx = compile_partition(graph, [0, 1], [0], [3], CompileOptions())
    assert [n.name for n in ctx.nodes] == ["greater_0", "select_v2_1"] and ctx.output_ids == [3]
    assert compile_partition(graph, [0], [0], [2], CompileOptions()).output_ids == [2]
    assert compile_partition(graph, [1], [0, 2], [3], CompileOptions()).input_ids == [0, 2]
    graph.tensors[2] = Tensor(2, INT64, (2, 3))
    with pytest.raises(ValueError, match="tensor 2 is of a type the delegate does not convert"):
        compile_partition(graph, [0], [0], [2], CompileOptions())


def test_checks_give_reasons():
    graph = _graph()
    graph.tensors[4] = Tensor(4, INT32, (2, 3))
    graph.tensors[5] = Tensor(5, INT32, (3,), is_constant=True, constant=np.array([1, -(2**24) - 1, 0], np.int32))
    graph.tensors[6] = Tensor(6, BOOL, (3,))
    cases = [
        (Node(2, Builtin.GREATER, 1, (0, 4), (2,)), "operands of different types (float32, int32)"),
        (Node(3, Builtin.LESS, 1, (4, 5), (2,)), "int32 constant 5 holds values beyond 2^24"),
        (Node(4, Builtin.LOGICAL_AND, 1, (2, 0), (2,)), "tensor 0 is not bool"),
        (Node(5, Builtin.SELECT, 1, (6, 0, 0), (3,)), "neither x's shape (2, 3), a scalar, nor x's first dimension"),
        (Node(6, Builtin.SELECT_V2, 1, (0, 0, 0), (3,)), "the condition is not bool"),
        (Node(7, Builtin.CAST, 1, (1,), (3,)), "every input is a constant"),
        (Node(8, Builtin.GREATER, 1, (0, 3), (0,)), "tensor 0 is not bool"),
    ]
    for node, why in cases:
        assert why in (unsupported_reason(node, graph) or ""), (node.name, unsupported_reason(node, graph))
