"""int32 ADD, SUB, MUL, MAXIMUM and MINIMUM (compiler/int_ranges.py, the int32 path of
ops/elementwise.py's Binary) against TFLite's builtin integer kernels, exactly.

The device holds int32 values as float32, exact up to 2^24: a model input may hold anything up to
2^24 (csrc/plugin.c refuses more), so these models bound theirs first with MINIMUM / MAXIMUM
against constants (exact whatever the size: they pick an input), and the arithmetic after is
claimed when its range stays within 2^24: at the bound exactly, and left on CPU one past it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate.compiler.graph import Builtin

from .helpers import delegate_and_builtin
from .test_ops import PROGRAM_CACHE
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

EXAMPLES = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
I32 = np.int32
EXACT = 1 << 24
ARITHMETIC = [Builtin.ADD, Builtin.SUB, Builtin.MUL, Builtin.MAXIMUM, Builtin.MINIMUM]
_OPTIONS = {Builtin.ADD: "AddOptions", Builtin.SUB: "SubOptions", Builtin.MUL: "MulOptions"}
shapes = st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 5), st.integers(1, 9))


def binary(op: Builtin, inputs: list[int], output: int, act: int = 0) -> Op:
    return Op(op, inputs, [output], (_OPTIONS[op], {"FusedActivationFunction": act}) if op in _OPTIONS else None)


def scalar(value: int) -> T:
    return T((), np.array(value, I32), I32)


def run_both(tensors, ops, inputs, outputs, feeds, precision="F32"):
    model = build_model(tensors, ops, inputs, outputs)
    return delegate_and_builtin(model, feeds, PROGRAM_CACHE, precision=precision)


def exact(tensors, ops, inputs, outputs, feeds, precision="F32"):
    """Every output equal to TFLite's, in type too, and every node delegated."""
    got, want, state = run_both(tensors, ops, inputs, outputs, feeds, precision)
    assert len(state.delegated_nodes) == len(ops), state.unsupported
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype == I32 and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
    return state


def bounded(shape: tuple[int, ...], low: int, high: int, tensors: list[T], ops: list[Op], source: int) -> int:
    """Append MAXIMUM(MINIMUM(source, high), low) to the model: the tensor's index, in [low, high]."""
    first = len(tensors)
    tensors += [scalar(high), T(shape, dtype=I32), scalar(low), T(shape, dtype=I32)]
    ops += [
        binary(Builtin.MINIMUM, [source, first], first + 1),
        binary(Builtin.MAXIMUM, [first + 1, first + 2], first + 3),
    ]
    return first + 3


@st.composite
def broadcast_pair(draw):
    """An output shape and another operand's shape that broadcasts to it (fewer dims or ones)."""
    out = draw(shapes)
    other = tuple(d if draw(st.booleans()) else 1 for d in out)
    return out, other[4 - draw(st.integers(0, 4)) :]


@pytest.mark.parametrize("op", ARITHMETIC, ids=lambda o: o.name)
@EXAMPLES
@given(pair=broadcast_pair(), seed=st.integers(0, 2**31 - 1), constant=st.booleans(), swap=st.booleans())
def test_int32_binary_with_broadcasting(op, pair, seed, constant, swap):
    """Tensor-tensor and tensor-constant, the broadcast operand on either side, negative values,
    operands bounded so that the result's bound is 2^24 (MUL: 2^12 x 2^12)."""
    rng = np.random.default_rng(seed)
    out, other = pair
    limit = 1 << 12 if op == Builtin.MUL else 1 << 23
    a = rng.integers(-(limit + 5), limit + 6, size=out).astype(I32)  # a few past the bound: clamped
    a.reshape(-1)[0] = limit  # the bound itself
    b = rng.integers(-limit, limit + 1, size=other).astype(I32)
    if constant:
        tensors, ops = [T(out, dtype=I32)], []
        x = bounded(out, -limit, limit, tensors, ops, 0)
        tensors.append(T(other, b, I32))
        y, feeds = len(tensors) - 1, [a]
    else:
        tensors, ops = [T(out, dtype=I32), T(other, dtype=I32)], []
        x = bounded(out, -limit, limit, tensors, ops, 0)
        y = bounded(other, -limit, limit, tensors, ops, 1)
        feeds = [a, b]
    tensors.append(T(out, dtype=I32))
    first, second = (y, x) if swap else (x, y)
    ops.append(binary(op, [first, second], len(tensors) - 1))
    exact(tensors, ops, list(range(len(feeds))), [len(tensors) - 1], feeds)


@pytest.mark.parametrize("precision", ["F16", "F32_F16"])
def test_int32_arithmetic_at_the_bound_in_half_precision(precision):
    """int32 tensors keep float32 storage in half precisions (compiler/precision.py)."""
    shape = (2, 5)
    a = np.array([[EXACT // 2, -(EXACT // 2), 3, -7, 0], [12345, -12345, 2047, 2049, 4097]], I32)
    tensors, ops = [T(shape, dtype=I32)], []
    x = bounded(shape, -(EXACT // 2), EXACT // 2, tensors, ops, 0)
    tensors += [T(shape, np.full(shape, EXACT // 2, I32), I32), T(shape, dtype=I32)]
    ops.append(binary(Builtin.ADD, [x, len(tensors) - 2], len(tensors) - 1))
    exact(tensors, ops, [0], [len(tensors) - 1], [a], precision)


@pytest.mark.parametrize("op", [Builtin.ADD, Builtin.SUB, Builtin.MUL], ids=lambda o: o.name)
@pytest.mark.parametrize("act", range(7), ids=["NONE", "RELU", "RELU_N1_TO_1", "RELU6", "TANH", "SIGN_BIT", "SIGMOID"])
def test_int32_fused_activation(op, act):
    """TFLite's int32 kernels clamp for RELU, RELU6 and RELU_N1_TO_1 and ignore the others."""
    shape = (3, 4)
    a = np.arange(-6, 6, dtype=I32).reshape(shape) * 3
    b = np.array([[1, -2, 3, 0]] * 3, I32)
    tensors, ops = [T(shape, dtype=I32), T(shape, dtype=I32)], []
    x = bounded(shape, -100, 100, tensors, ops, 0)
    y = bounded(shape, -100, 100, tensors, ops, 1)
    tensors.append(T(shape, dtype=I32))
    ops.append(binary(op, [x, y], len(tensors) - 1, act))
    exact(tensors, ops, [0, 1], [len(tensors) - 1], [a, b])


@pytest.mark.parametrize(
    ("op", "limit", "constant"),
    [
        (Builtin.ADD, EXACT // 2, EXACT // 2 + 1),
        (Builtin.SUB, EXACT // 2, -(EXACT // 2) - 1),
        (Builtin.MUL, 4096, 4097),
    ],
    ids=["ADD", "SUB", "MUL"],
)
def test_int32_result_past_the_bound_stays_on_cpu(op, limit, constant):
    """One past 2^24 the result is left to TFLite, saying why; its value is TFLite's (2^24 + 1,
    which float32 would round)."""
    shape = (4,)
    a = np.array([limit, -limit, 1, 0], I32)
    tensors, ops = [T(shape, dtype=I32)], []
    x = bounded(shape, -limit, limit, tensors, ops, 0)
    tensors += [scalar(constant), T(shape, dtype=I32)]
    ops.append(binary(op, [x, len(tensors) - 2], len(tensors) - 1))
    got, want, state = run_both(tensors, ops, [0], [len(tensors) - 1], [a])
    reason = state.unsupported[f"{op.name.lower()}_{len(ops) - 1}"]
    assert "beyond the 2^24" in reason, reason
    assert len(state.delegated_nodes) == len(ops) - 1
    np.testing.assert_array_equal(got[0], want[0])
    assert int(np.abs(want[0].astype(np.int64)).max()) > EXACT  # float32 would not hold it all


def test_int32_arithmetic_of_a_model_input_stays_on_cpu():
    """A model input may hold up to 2^24: input + 1 may not be held, so it runs on CPU."""
    shape = (3,)
    tensors = [T(shape, dtype=I32), scalar(1), T(shape, dtype=I32)]
    ops = [binary(Builtin.ADD, [0, 1], 2)]
    got, want, state = run_both(tensors, ops, [0], [2], [np.array([EXACT, -5, 7], I32)])
    assert "beyond the 2^24" in state.unsupported["add_0"]
    np.testing.assert_array_equal(got[0], want[0])


def test_int32_of_a_cast_from_float_stays_on_cpu():
    """CAST float -> int32 gives integers up to 2^31 (held exactly as floats), so arithmetic on them
    is left to TFLite; the CAST itself runs on the device."""
    shape = (3,)
    x = np.array([3e9, 16777216.0, -2.5], np.float32)
    tensors = [T(shape), T(shape, dtype=I32), scalar(1), T(shape, dtype=I32)]
    cast = Op(Builtin.CAST, [0], [1], ("CastOptions", {"InDataType": 0, "OutDataType": 2}))
    ops = [cast, binary(Builtin.ADD, [1, 2], 3)]
    got, want, state = run_both(tensors, ops, [0], [3], [x])
    assert "beyond the 2^24" in state.unsupported["add_1"], state.unsupported
    assert want[0][1] == EXACT + 1  # which float32 would round to 2^24
    np.testing.assert_array_equal(got[0], want[0])


# ------------------------------------------------------------------ negative token ids

VOCAB = 30522
#: ids around both ends of what a partition input may hold, and around 0 (TFLite wraps negative
#: ids into the vocabulary): ids + VOCAB passes 2^24 where ids is near it, where the SELECT picks ids
IDS = np.array([[-EXACT, -EXACT + 1, -VOCAB, -1, 0, 1, VOCAB - 1, EXACT - VOCAB + 1, EXACT - 1, EXACT]], I32)
#: ids whose sum stays within 2^24: where the ADD runs on CPU, its result enters a partition
SMALL_IDS = np.array([[-5, 0, 7, 1000]], I32)


@pytest.mark.parametrize(
    "form",
    ["ids < 0 ? ids + v : ids", "ids >= 0 ? ids : ids + v", "0 > ids ? v + ids : ids", "ids <= -1 ? ids + v : ids"],
)
def test_negative_token_ids_wrapped_under_a_guard(form):
    """TensorFlow's SELECT(LESS(ids, 0), ADD(ids, vocab), ids) before an embedding lookup (BERT):
    the ADD passes 2^24 only where the SELECT takes ids, so it is exact wherever it is used."""
    shape = IDS.shape
    compare = {"<": Builtin.LESS, ">=": Builtin.GREATER_EQUAL, ">": Builtin.GREATER, "<=": Builtin.LESS_EQUAL}
    relation = form.split()[1]
    k = -1 if relation == "<=" else 0
    picks_sum_first = form.split("?")[1].strip().startswith(("ids +", "v +"))
    tensors = [T(shape, dtype=I32), scalar(k), scalar(VOCAB), T(shape, dtype=np.bool_), T(shape, dtype=I32)]
    tensors.append(T(shape, dtype=I32))
    compare_inputs = [1, 0] if form.startswith("0") else [0, 1]
    add_inputs = [2, 0] if "v + ids" in form else [0, 2]
    choices = [4, 0] if picks_sum_first else [0, 4]
    ops = [
        Op(compare[relation], compare_inputs, [3]),
        binary(Builtin.ADD, add_inputs, 4),
        Op(Builtin.SELECT, [3, *choices], [5]),
    ]
    exact(tensors, ops, [0], [5], [IDS])


def test_guarded_sum_read_elsewhere_stays_on_cpu():
    """The same ADD also read unguarded (a CAST to float): its values past 2^24 would be seen."""
    shape = SMALL_IDS.shape
    tensors = [T(shape, dtype=I32), scalar(0), scalar(VOCAB), T(shape, dtype=np.bool_), T(shape, dtype=I32)]
    tensors += [T(shape, dtype=I32), T(shape)]
    ops = [
        Op(Builtin.LESS, [0, 1], [3]),
        binary(Builtin.ADD, [0, 2], 4),
        Op(Builtin.SELECT, [3, 4, 0], [5]),
        Op(Builtin.CAST, [4], [6], ("CastOptions", {"InDataType": 2, "OutDataType": 0})),
    ]
    got, want, state = run_both(tensors, ops, [0], [5, 6], [SMALL_IDS])
    assert "beyond the 2^24" in state.unsupported["add_1"], state.unsupported
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_guarded_sum_that_is_a_model_output_stays_on_cpu():
    """The guarded ADD's result also a model output: every element is seen, so it stays on CPU
    (exact there), and so does its guard, which would read values past 2^24; LESS runs on the delegate."""
    shape = IDS.shape
    tensors = [T(shape, dtype=I32), scalar(0), scalar(VOCAB), T(shape, dtype=np.bool_), T(shape, dtype=I32)]
    tensors.append(T(shape, dtype=I32))
    ops = [Op(Builtin.LESS, [0, 1], [3]), binary(Builtin.ADD, [0, 2], 4), Op(Builtin.SELECT, [3, 4, 0], [5])]
    model = build_model(tensors, ops, [0], [5, 4])
    got, want, state = delegate_and_builtin(model, [IDS], PROGRAM_CACHE, cpu_when_faster="false")
    assert "leaves the partition" in state.unsupported["add_1"], state.unsupported
    assert "may pass 2^24" in state.unsupported["select_2"], state.unsupported
    assert len(state.delegated_nodes) == 1, state.unsupported
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_guard_on_the_wrong_side_stays_on_cpu():
    """SELECT(ids < 0, ids, ids + vocab) picks the sum where ids is large: not exact, on CPU."""
    shape = SMALL_IDS.shape
    tensors = [T(shape, dtype=I32), scalar(0), scalar(VOCAB), T(shape, dtype=np.bool_), T(shape, dtype=I32)]
    tensors.append(T(shape, dtype=I32))
    ops = [Op(Builtin.LESS, [0, 1], [3]), binary(Builtin.ADD, [0, 2], 4), Op(Builtin.SELECT, [3, 0, 4], [5])]
    got, want, state = run_both(tensors, ops, [0], [5], [SMALL_IDS])
    assert "beyond the 2^24" in state.unsupported["add_1"], state.unsupported
    np.testing.assert_array_equal(got[0], want[0])


# ------------------------------------------------------------------ the bounds themselves


def test_value_ranges_follow_how_each_tensor_is_made():
    """int_ranges.value_range: inputs 2^24, constants their values, CAST from float int32's range,
    from bool [0, 1], moves and SELECT their inputs', arithmetic its intervals clipped to 2^24."""
    from delegate.compiler.graph import BOOL, FLOAT32, INT32, Graph, Node, Tensor
    from delegate.compiler.int_ranges import EXACT_INT, INT32_RANGE, value_range

    def constant(index: int, values: list[int]) -> Tensor:
        return Tensor(index, INT32, (len(values),), is_constant=True, constant=np.array(values, I32))

    tensors = {
        0: Tensor(0, INT32, (3,)),
        1: constant(1, [-7, 40, 3]),
        2: Tensor(2, FLOAT32, (3,)),
        3: Tensor(3, INT32, (3,)),  # CAST float -> int32
        4: Tensor(4, BOOL, (3,)),
        5: Tensor(5, INT32, (3,)),  # CAST bool -> int32
        6: Tensor(6, INT32, (3,)),  # MUL(5, 1)
        7: Tensor(7, INT32, (1, 3)),  # RESHAPE(6)
        8: Tensor(8, INT32, (3,)),  # SELECT(4, 5, 1)
        9: Tensor(9, INT32, (3,)),  # ADD(0, 1): past 2^24, clipped
        10: constant(10, [1, 3]),
    }
    nodes = {
        0: Node(0, Builtin.CAST, 1, (2,), (3,)),
        1: Node(1, Builtin.CAST, 1, (4,), (5,)),
        2: Node(2, Builtin.MUL, 1, (5, 1), (6,)),
        3: Node(3, Builtin.RESHAPE, 1, (6, 10), (7,)),
        4: Node(4, Builtin.SELECT, 1, (4, 5, 1), (8,)),
        5: Node(5, Builtin.ADD, 1, (0, 1), (9,)),
    }
    graph = Graph(tensors, nodes)
    assert value_range(graph, 0) == (-EXACT_INT, EXACT_INT)
    assert value_range(graph, 1) == (-7, 40)
    assert value_range(graph, 3) == INT32_RANGE
    assert value_range(graph, 5) == (0, 1)
    assert value_range(graph, 6) == (-7, 40)
    assert value_range(graph, 7) == (-7, 40)
    assert value_range(graph, 8) == (-7, 40)
    assert value_range(graph, 9) == (-EXACT_INT, EXACT_INT)
