"""GATHER and EMBEDDING_LOOKUP (compiler/ops/gather.py) through the delegate against TFLite's
builtin kernels. The int32 indices are made inside the partition here (a CAST of a float input);
tests/test_int_edges.py feeds them as the model's int32 input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegate.compiler.graph import FLOAT32, INT32, Builtin, Graph, Node, Tensor
from delegate.compiler.partition import unsupported_reason

from .test_ops import EXAMPLES, check, precisions, rand, run_both, seeds
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

_CAST_TO_INT32 = ("CastOptions", {"InDataType": 0, "OutDataType": 2})


def gather(params: int, indices: int, out: int, axis: int = 0, batch_dims: int = 0) -> Op:
    return Op(Builtin.GATHER, [params, indices], [out], ("GatherOptions", {"Axis": axis, "BatchDims": batch_dims}))


@st.composite
def gathers(draw):
    """(params shape, indices shape, axis, batch_dims) with an output of rank <= 4."""
    p_rank = draw(st.integers(1, 4))
    params = tuple(draw(st.integers(1, 7)) for _ in range(p_rank))
    axis = draw(st.integers(0, p_rank - 1))
    batch_dims = draw(st.integers(0, min(axis, 1)))
    extra = draw(st.integers(0, 4 - (p_rank - 1) - batch_dims))
    indices = params[:batch_dims] + tuple(draw(st.integers(1, 6)) for _ in range(extra))
    return params, indices, axis, batch_dims


def _delegated(model: bytes) -> tuple:
    """An allocated interpreter of ``model`` with the delegate, and the delegate."""
    import delegate
    from delegate.api import host_runtime

    d = delegate.load_delegate(program_cache="default")
    interpreter = host_runtime().Interpreter(model_content=model, experimental_delegates=[d])
    interpreter.allocate_tensors()
    return interpreter, d


def _state(d):
    import delegate

    return delegate.delegate_state(d)


def _expected_shape(params, indices, axis, batch_dims) -> tuple[int, ...]:
    return params[:axis] + indices[batch_dims:] + params[axis + 1 :]


@EXAMPLES
@given(case=gathers(), seed=seeds, precision=precisions, negative_axis=st.booleans())
def test_gather_constant_table_runtime_indices(case, seed, precision, negative_axis):
    """An embedding: a constant table, indices computed in the partition (CAST of whole floats)."""
    params, indices, axis, batch_dims = case
    rng = np.random.default_rng(seed)
    table = rand(params, rng)
    ids = rng.integers(0, params[axis], size=indices).astype(np.float32)
    out = _expected_shape(params, indices, axis, batch_dims)
    tensors = [T(indices), T(indices, dtype=np.int32), T(params, table), T(out)]
    ops = [
        Op(Builtin.CAST, [0], [1], _CAST_TO_INT32),
        gather(2, 1, 3, axis - len(params) if negative_axis else axis, batch_dims),
    ]
    check(tensors, ops, [0], [3], [ids], precision)


@EXAMPLES
@given(case=gathers(), seed=seeds, precision=precisions)
def test_gather_runtime_table_constant_indices(case, seed, precision):
    """A reindex: the table is the model's input, the indices a constant."""
    params, indices, axis, batch_dims = case
    rng = np.random.default_rng(seed)
    x = rand(params, rng)
    ids = rng.integers(0, params[axis], size=indices).astype(np.int32)
    out = _expected_shape(params, indices, axis, batch_dims)
    tensors = [T(params), T(indices, ids, np.int32), T(out)]
    check(tensors, [gather(0, 1, 2, axis, batch_dims)], [0], [2], [x], precision)


@pytest.mark.parametrize("precision", ["F32", "F16", "F32_F16"])
def test_embedding_lookup(precision):
    rng = np.random.default_rng(7)
    table = rand((11, 3, 6), rng)
    ids = np.array([3, 0, 10, 10, 5], np.float32)
    tensors = [T((5,)), T((5,), dtype=np.int32), T((11, 3, 6), table), T((5, 3, 6))]
    ops = [Op(Builtin.CAST, [0], [1], _CAST_TO_INT32), Op(Builtin.EMBEDDING_LOOKUP, [1, 2], [3])]
    check(tensors, ops, [0], [3], [ids], precision)


def test_rows_past_half_integers_are_exact():
    """Indices above 2048 (half's last exact integer) pick their own rows (in F32 here: in half
    precisions the float input this CAST reads is half; tests/test_int_edges.py feeds int32)."""
    rows = 5000
    r = np.arange(rows)
    table = np.stack([r % 1024, r // 1024, -(r % 1024), r % 7], axis=1).astype(np.float32)  # exact in half
    ids = np.array([[2049, 4097, 4099, 4999, 0, 2051]], np.float32)
    tensors = [T((1, 6)), T((1, 6), dtype=np.int32), T((rows, 4), table), T((1, 6, 4))]
    ops = [Op(Builtin.CAST, [0], [1], _CAST_TO_INT32), gather(2, 1, 3)]
    got, want, state = run_both(build_model(tensors, ops, [0], [3]), [ids])
    assert len(state.delegated_nodes) == 2, state.unsupported
    np.testing.assert_array_equal(got[0][..., 0] + 1024 * got[0][..., 1], ids)
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("axis", [0, 1])
def test_indices_out_of_range_are_clamped(axis):
    """TFLite's kernel fails the invoke on an index out of range; the delegate never reads outside
    the table: below 0 reads the first row, past the end the last."""
    rng = np.random.default_rng(9)
    table = rand((5, 6), rng)
    ids = np.array([-3, 0, 4, 5, 1000, 2**31 - 1, -(2**31)], np.float32)  # CAST saturates the last two
    out = (7, 6) if axis == 0 else (5, 7)
    tensors = [T((7,)), T((7,), dtype=np.int32), T((5, 6), table), T(out)]
    ops = [Op(Builtin.CAST, [0], [1], _CAST_TO_INT32), gather(2, 1, 3, axis)]
    interpreter, d = _delegated(build_model(tensors, ops, [0], [3]))
    assert len(_state(d).delegated_nodes) == 2
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], ids)
    interpreter.invoke()
    got = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    clamped = np.clip(ids.astype(np.int64), 0, table.shape[axis] - 1)
    np.testing.assert_array_equal(got, np.take(table, clamped, axis=axis))


def test_constant_indices_out_of_range_stay_with_tflite():
    tensors = [T((4, 3)), T((2,), np.array([1, 4], np.int32), np.int32), T((2, 3))]
    interpreter, d = _delegated(build_model(tensors, [gather(0, 1, 2)], [0], [2]))
    assert "out of range [0, 4)" in _state(d).unsupported["gather_0"]
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], rand((4, 3), np.random.default_rng(1)))
    with pytest.raises(RuntimeError, match="gather index out of bounds"):
        interpreter.invoke()


def test_checks_give_reasons():
    tensors = {
        0: Tensor(0, FLOAT32, (4, 3)),
        1: Tensor(1, INT32, (2,)),
        2: Tensor(2, FLOAT32, (2, 3)),
        3: Tensor(3, FLOAT32, (2,)),
        4: Tensor(4, FLOAT32, (4, 3), is_constant=True, constant=np.zeros((4, 3), np.float32)),
        5: Tensor(5, INT32, (2,), is_constant=True, constant=np.array([0, 1], np.int32)),
        6: Tensor(6, FLOAT32, (4, 3, 2, 2, 2)),
        7: Tensor(7, INT32, (2, 2)),
    }
    graph = Graph(tensors, {})
    cases = [
        (Node(0, Builtin.GATHER, 1, (0, 3), (2,)), "tensor 3 is not int32"),
        (Node(1, Builtin.GATHER, 1, (4, 5), (2,)), "every input is a constant"),
        (Node(2, Builtin.GATHER, 1, (6, 1), (2,)), "tensor 6 has rank 5"),
        (Node(3, Builtin.EMBEDDING_LOOKUP, 1, (7, 4), (2,)), "the ids are not of rank 1"),
        (Node(4, Builtin.GATHER, 1, (0, 1), (2,), params={"axis": 2}), "do not fit"),
        (Node(5, Builtin.GATHER, 1, (0, 7), (2,), params={"axis": 1}), "declares output shape"),
    ]
    for node, why in cases:
        assert why in (unsupported_reason(node, graph) or ""), (node.name, unsupported_reason(node, graph))
