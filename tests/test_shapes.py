"""Shapes known before the graph runs (delegate/compiler/shapes.py): shape arithmetic folded at
compile time, and nodes touching shapes only known at run time left on TFLite's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import FLOAT32, INT32, Builtin, Graph, Node, Tensor
from delegate.compiler.shapes import fold_values, resolve

from .helpers import delegate_and_builtin
from .tflite_builder import Op, T, build_model

SHAPE = (1, 4, 6, 2)


def _shape_arithmetic_graph(flat: int = 48) -> Graph:
    """x -> SHAPE -> STRIDED_SLICE (the batch) -> PACK with a constant -> RESHAPE(x) -> ADD."""
    tensors = {
        0: Tensor(0, FLOAT32, SHAPE),
        1: Tensor(1, INT32, (4,)),
        2: Tensor(2, INT32, (1,), is_constant=True, constant=np.array([0], np.int32)),
        3: Tensor(3, INT32, (1,), is_constant=True, constant=np.array([1], np.int32)),
        4: Tensor(4, INT32, ()),
        5: Tensor(5, INT32, (), is_constant=True, constant=np.array(flat, np.int32)),
        6: Tensor(6, INT32, (2,)),
        7: Tensor(7, FLOAT32, (1, 48)),
        8: Tensor(8, FLOAT32, (1, 48)),
    }
    nodes = {
        0: Node(0, Builtin.SHAPE, 1, (0,), (1,)),
        1: Node(1, Builtin.STRIDED_SLICE, 1, (1, 2, 3, 3), (4,), {"shrink_axis_mask": 1}),
        2: Node(2, Builtin.PACK, 1, (4, 5), (6,), {"values_count": 2, "axis": 0}),
        3: Node(3, Builtin.RESHAPE, 1, (0, 6), (7,)),
        4: Node(4, Builtin.ABS, 1, (7,), (8,)),
    }
    return Graph(tensors, nodes)


def test_shape_arithmetic_is_folded():
    graph = _shape_arithmetic_graph()
    found = resolve(graph, list(graph.nodes))
    assert found.dynamic == {}
    assert found.values[1].tolist() == [1, 4, 6, 2]
    assert found.values[4].tolist() == 1 and found.values[6].tolist() == [1, 48]
    assert fold_values(graph, found) == {0, 1, 2}
    assert graph.tensor(6).is_constant and graph.tensor(6).constant.dtype == np.int32


@pytest.mark.parametrize(
    ("op", "params", "args", "out", "want"),
    [
        (Builtin.PACK, {"axis": 0}, [[2], [3]], (2, 1), [[2], [3]]),
        (Builtin.CONCATENATION, {"axis": 0}, [[1, 2], [3]], (3,), [1, 2, 3]),
        (Builtin.RESHAPE, {}, [[4, 5], [2]], (2,), [4, 5]),
        (Builtin.EXPAND_DIMS, {}, [[4, 5], [0]], (1, 2), [[4, 5]]),
        (Builtin.CAST, {}, [[7, 8]], (2,), [7, 8]),
        (Builtin.ADD, {}, [[1, 2], [10]], (2,), [11, 12]),
        (Builtin.ADD, {"activation": 1}, [[1, 2], [10]], (2,), None),  # a fused activation: TFLite's to do
        (Builtin.MUL, {}, [[1, 2], [10]], (2,), None),  # not folded: left to TFLite
        (Builtin.MINIMUM, {}, [[1, 9], [5]], (2,), [1, 5]),
        (Builtin.REDUCE_PROD, {"keep_dims": False}, [[2, 3, 4], [0]], (), 24),
        (Builtin.SUM, {}, [[2, 3, 4], [0]], (), None),
        (Builtin.SLICE, {}, [[5, 6, 7, 8], [1], [2]], (2,), [6, 7]),
        (Builtin.STRIDED_SLICE, {"shrink_axis_mask": 1}, [[5, 6, 7], [2], [3], [1]], (), 7),
        (Builtin.GATHER, {"axis": 0}, [[5, 6, 7, 8], [3, 1]], (2,), [8, 6]),
        (Builtin.GATHER, {"axis": 0}, [[5, 6, 7, 8], [4]], (1,), None),  # out of range: TFLite reports it
    ],
    ids=lambda v: getattr(v, "name", None),
)
def test_each_op_folds_its_own_shape_arithmetic(op, params, args, out, want):
    from delegate.compiler.ops import OPS

    node = Node(0, op, 1, tuple(range(len(args))), (len(args),), params)
    got = OPS[op].fold(node, [np.asarray(a, np.int64) for a in args], out)
    assert (got is None) if want is None else np.asarray(got).tolist() == want


def test_a_computed_shape_that_disagrees_with_the_model_is_not_trusted():
    graph = _shape_arithmetic_graph(flat=24)  # PACK computes [1, 24]; the model says (1, 48)
    found = resolve(graph, list(graph.nodes))
    assert "computed shape [1, 24] is not the model's [1, 48]" in found.dynamic[7]
    assert 8 in found.dynamic  # and what is computed from it
    assert "reshape_3" in found.reason(graph.nodes[4])


@pytest.mark.parametrize(
    ("op", "inputs", "expected"),
    [
        (Builtin.RESHAPE, (0, 1), "takes its output shape from tensor 1, computed at run time"),
        (109, (0,), "computes its output shapes when it runs"),  # WHERE
        (32, (0,), "not known before it runs"),  # a custom op
    ],
)
def test_run_time_shapes_name_the_node_that_makes_them(op, inputs, expected):
    tensors = {0: Tensor(0, FLOAT32, SHAPE), 1: Tensor(1, INT32, (2,)), 2: Tensor(2, FLOAT32, (1, 48))}
    tensors[3] = Tensor(3, FLOAT32, (1, 48))
    graph = Graph(tensors, {0: Node(0, op, 1, inputs, (2,)), 1: Node(1, Builtin.RELU, 1, (2,), (3,))})
    found = resolve(graph, [0, 1])
    assert expected in found.dynamic[2] and found.dynamic[3] == found.dynamic[2]
    assert found.reason(graph.nodes[1]).startswith("tensor 2's shape is only known at run time")


# ----------------------------------------------------------------- through TFLite


def _run(model: bytes, feeds: list[np.ndarray], programs) -> tuple:
    return delegate_and_builtin(model, feeds, str(programs))


@pytest.fixture(scope="module")
def programs() -> str:
    """The default program cache, as users have it (tests/test_ops.py: PROGRAM_CACHE)."""
    return "default"


def _stride_options() -> tuple[str, dict]:
    return ("StridedSliceOptions", {"BeginMask": 0, "EndMask": 0, "ShrinkAxisMask": 1})


@pytest.mark.opencl
def test_a_reshape_to_a_computed_shape_is_delegated(programs):
    """Keras' reshape keeping the batch, as converters write it: SHAPE -> STRIDED_SLICE -> PACK ->
    RESHAPE. TFLite only knows that shape when it runs; the compiler folds it."""
    tensors = [
        T(SHAPE),
        T((4,), dtype=np.int32),
        T((1,), np.array([0], np.int32), np.int32),
        T((1,), np.array([1], np.int32), np.int32),
        T((), dtype=np.int32),
        T((), np.array(48, np.int32), np.int32),
        T((2,), dtype=np.int32),
        T((1, 48)),
        T((1, 48)),
    ]
    ops = [
        Op(Builtin.SHAPE, [0], [1], ("ShapeOptions", {"OutType": 2})),
        Op(Builtin.STRIDED_SLICE, [1, 2, 3, 3], [4], _stride_options()),
        Op(Builtin.PACK, [4, 5], [6], ("PackOptions", {"ValuesCount": 2, "Axis": 0})),
        Op(Builtin.RESHAPE, [0, 6], [7]),
        Op(Builtin.TANH, [7], [8]),
    ]
    x = np.random.default_rng(0).uniform(-2, 2, SHAPE).astype(np.float32)
    got, want, state = _run(build_model(tensors, ops, [0], [8]), [x], programs)
    assert state.unsupported == {} and len(state.delegated_nodes) == 5
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)


@pytest.mark.opencl
def test_nodes_after_a_shape_known_only_at_run_time_stay_on_cpu(programs):
    """RESHAPE to a shape given as a graph input: its output, and the TANH reading it, have shapes
    TFLite computes when it runs. They stay on CPU with that reason; the RELU before is delegated."""
    tensors = [T(SHAPE), T((2,), dtype=np.int32), T(SHAPE), T((1, 48)), T((1, 48))]
    ops = [Op(Builtin.RELU, [0], [2]), Op(Builtin.RESHAPE, [2, 1], [3]), Op(Builtin.TANH, [3], [4])]
    x = np.random.default_rng(1).uniform(-2, 2, SHAPE).astype(np.float32)
    got, want, state = _run(build_model(tensors, ops, [0, 1], [4]), [x, np.array([1, 48], np.int32)], programs)
    assert len(state.delegated_nodes) == 1
    assert "computed at run time" in state.unsupported["reshape_1"]
    assert "only known at run time" in state.unsupported["tanh_2"]
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)


# ----------------------------------------------------------------- constants of any type


def _causal_mask(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n), np.bool_))


def test_a_select_of_constants_folds_into_the_mask_it_picks():
    """A causal mask as litert-torch writes it: SELECT_V2 of a constant bool pattern between 0 and
    -inf, reshaped for the attention scores. Both fold into float32 constants, with no kernel."""
    tensors = {
        0: Tensor(0, 6, (4, 4), is_constant=True, constant=_causal_mask(4)),
        1: Tensor(1, FLOAT32, (), is_constant=True, constant=np.array(0.0, np.float32)),
        2: Tensor(2, FLOAT32, (), is_constant=True, constant=np.array(-np.inf, np.float32)),
        3: Tensor(3, FLOAT32, (4, 4)),
        4: Tensor(4, INT32, (4,), is_constant=True, constant=np.array([1, 1, 4, 4], np.int32)),
        5: Tensor(5, FLOAT32, (1, 1, 4, 4)),
    }
    nodes = {
        0: Node(0, Builtin.SELECT_V2, 1, (0, 1, 2), (3,)),
        1: Node(1, Builtin.RESHAPE, 1, (3, 4), (5,)),
    }
    graph = Graph(tensors, nodes)
    found = resolve(graph, [0, 1])
    want = np.where(_causal_mask(4), np.float32(0), np.float32(-np.inf))
    np.testing.assert_array_equal(found.values[3], want)
    assert found.values[5].dtype == np.float32 and found.values[5].shape == (1, 1, 4, 4)
    assert fold_values(graph, found) == {0, 1}


@pytest.mark.parametrize(
    ("op", "cond", "x", "y", "out", "want"),
    [
        (Builtin.SELECT_V2, [[1], [0]], [1.0, 2.0], [[5.0, 6.0]], (2, 2), [[1.0, 2.0], [5.0, 6.0]]),
        (Builtin.SELECT, [1, 0], [[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]], (2, 2), [[1, 2], [7, 8]]),
        (Builtin.SELECT, [[1, 0]], [[1.0, 2.0]], [[5.0, 6.0]], (1, 2), [[1, 6]]),
        (Builtin.SELECT, [[1, 0]], [1.0, 2.0], [[5.0, 6.0]], (1, 2), None),  # SELECT does not broadcast
    ],
    ids=["v2_broadcast", "rank_one", "same_shape", "no_broadcast"],
)
def test_select_folds_as_tflite_picks(op, cond, x, y, out, want):
    from delegate.compiler.ops import OPS

    node = Node(0, op, 1, (0, 1, 2), (3,))
    args = [np.asarray(cond, np.bool_), np.asarray(x, np.float32), np.asarray(y, np.float32)]
    got = OPS[op].fold(node, args, out)
    assert (got is None) if want is None else np.asarray(got).tolist() == want


@pytest.mark.opencl
@pytest.mark.parametrize("n", [4, 160])  # 160 tokens: a 100 KiB mask, past what Prepare reads of other constants
def test_a_constant_causal_mask_leaves_the_attention_in_one_partition(programs, n):
    """scores + mask -> SOFTMAX, the mask a SELECT_V2 of constants reshaped: folded, every node is
    the delegate's (a mask left on CPU would sit between two partitions) and -inf masks as TFLite's."""
    tensors = [
        T((1, 2, n, n)),
        T((n, n), _causal_mask(n), np.bool_),
        T((n, n), np.zeros((n, n), np.float32)),  # 100 KiB at 160 tokens: read whole for the fold
        T((), np.array(-np.inf, np.float32)),
        T((n, n)),
        T((4,), np.array([1, 1, n, n], np.int32), np.int32),
        T((1, 1, n, n)),
        T((1, 2, n, n)),
        T((1, 2, n, n)),
        T((1, 2, n, n)),
    ]
    ops = [
        Op(Builtin.RELU, [0], [7]),
        Op(Builtin.SELECT_V2, [1, 2, 3], [4]),
        Op(Builtin.RESHAPE, [4, 5], [6]),
        Op(Builtin.ADD, [7, 6], [8], ("AddOptions", {})),
        Op(Builtin.SOFTMAX, [8], [9], ("SoftmaxOptions", {"Beta": 1.0})),
    ]
    x = np.random.default_rng(2).uniform(-2, 2, (1, 2, n, n)).astype(np.float32)
    got, want, state = _run(build_model(tensors, ops, [0], [9]), [x], programs)
    assert state.unsupported == {} and len(state.delegated_nodes) == 5 and len(state.partitions) == 1
    np.testing.assert_allclose(got[0], want[0], atol=1e-6)
    assert np.all(got[0][..., 0, 1:] == 0)  # masked: exp(-inf)


@pytest.mark.opencl
def test_a_folded_mask_read_on_cpu_stays_there_with_why(programs):
    """The mask's readers: a delegated ADD and a FLOOR the compiler does not run. The folded value
    would have to leave the partition, so SELECT_V2 runs on CPU, saying why."""
    tensors = [
        T((1, 4)),
        T((1, 4), np.array([[True, False, True, False]]), np.bool_),
        T((1, 4), np.full((1, 4), 0.5, np.float32)),
        T((1, 4), np.full((1, 4), -2.25, np.float32)),
        T((1, 4)),
        T((1, 4)),
        T((1, 4)),
    ]
    ops = [
        Op(Builtin.SELECT_V2, [1, 2, 3], [4]),
        Op(Builtin.ADD, [0, 4], [5], ("AddOptions", {})),
        Op(8, [4], [6]),  # FLOOR: not in this compiler
    ]
    x = np.random.default_rng(3).uniform(-2, 2, (1, 4)).astype(np.float32)
    got, want, state = _run(build_model(tensors, ops, [0], [5, 6]), [x], programs)
    assert state.delegated_nodes == [1]
    assert state.unsupported["select_v2_0"] == "SELECT_V2 folded only when every consumer is delegated"
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, atol=1e-6)
