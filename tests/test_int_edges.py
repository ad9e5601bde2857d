"""Integer and bool tensors at a partition's edges: csrc/plugin.c converts int32, int64 and bool
inputs into the floats the partition holds them in (exact up to 2^24, larger values fail the
invoke) and int32 and bool outputs back, so a model's int32 token ids feed a delegated GATHER."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import FLOAT32, INT32, Builtin, Graph, Node, Tensor
from delegate.compiler.precision import wide_tensors
from delegate.context.model import CalculationsPrecision

from .test_gather import gather
from .test_ops import TOLERANCE, rand, run_both
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

_TYPES = {np.float32: 0, np.int32: 2, np.bool_: 6}  # schema TensorType of CastOptions


def _cast(src: int, dst: int, frm: type, to: type) -> Op:
    return Op(Builtin.CAST, [src], [dst], ("CastOptions", {"InDataType": _TYPES[frm], "OutDataType": _TYPES[to]}))


def _delegated(model: bytes, feeds: list[np.ndarray], precision: str = "F32") -> tuple:
    """Run both ways; the delegate's outputs, TFLite's, and the state (one partition asserted)."""
    got, want, state = run_both(model, feeds, precision)
    assert len(state.partitions) == 1, state.unsupported
    return got, want, state


@pytest.mark.parametrize("precision", ["F32", "F16", "F32_F16"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_int_token_ids_feed_a_delegated_embedding(dtype, precision):
    """The model's int32 (or int64) ids -> GATHER of a constant table -> ADD: one partition, TFLite's
    answer; ids past half's last exact integer (2048) pick their own rows in half precisions too."""
    rows, width = 5000, 8
    rng = np.random.default_rng(11)
    r = np.arange(rows)
    table = np.concatenate([np.stack([r % 1024, r // 1024], 1), rng.integers(-8, 8, (rows, width - 2))], 1)
    table = table.astype(np.float32)  # every value exact in half
    ids = np.array([[2049, 4097, 4099, 4999, 0, 2051, 17]], dtype)
    bias = rand((1, 7, width), rng)
    tensors = [
        T((1, 7), dtype=dtype),
        T((rows, width), table),
        T((1, 7, width)),
        T((1, 7, width), bias),
        T((1, 7, width)),
    ]
    ops = [gather(1, 0, 2), Op(Builtin.ADD, [2, 3], [4])]
    got, want, state = _delegated(build_model(tensors, ops, [0], [2, 4]), [ids], precision)
    assert len(state.delegated_nodes) == 2
    np.testing.assert_array_equal(got[0][..., 0] + 1024 * got[0][..., 1], ids)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=TOLERANCE[precision], atol=TOLERANCE[precision] * 8)


def test_int32_ids_feed_embedding_lookup():
    rng = np.random.default_rng(12)
    table = rand((50, 3, 4), rng)
    ids = np.array([49, 0, 7, 7, 21], np.int32)
    tensors = [T((5,), dtype=np.int32), T((50, 3, 4), table), T((5, 3, 4))]
    got, want, _ = _delegated(build_model(tensors, [Op(Builtin.EMBEDDING_LOOKUP, [0, 1], [2])], [0], [2]), [ids])
    np.testing.assert_array_equal(got[0], want[0])


def test_int32_mask_and_bool_and_int32_outputs():
    """A BERT-like mask chain over the model's int32 input (CAST to bool, LESS against a constant,
    SELECT of int32 values) and its bool and int32 tensors handed out: all in one partition."""
    mask = np.array([[1, 1, 0, -7, 16777216, -16777216]], np.int32)
    zero = np.zeros((), np.int32)
    tensors = [
        T((1, 6), dtype=np.int32),  # 0 mask
        T((1, 6), dtype=np.bool_),  # 1 mask != 0
        T((), zero, np.int32),  # 2
        T((1, 6), dtype=np.bool_),  # 3 mask < 0
        T((1, 6), dtype=np.int32),  # 4 mask < 0 ? 0 : mask
        T((1, 6)),  # 5 float
    ]
    ops = [
        _cast(0, 1, np.int32, np.bool_),
        Op(Builtin.LESS, [0, 2], [3]),
        Op(Builtin.SELECT_V2, [3, 2, 0], [4]),
        _cast(4, 5, np.int32, np.float32),
    ]
    got, want, state = _delegated(build_model(tensors, ops, [0], [1, 3, 4, 5]), [mask])
    assert len(state.delegated_nodes) == 4
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_saturated_int32_outputs_come_back_as_tflite_gives_them():
    """CAST float32 -> int32 saturates (INT_MAX held as 2^31 in the partition): the C kernel hands
    out INT_MAX and INT_MIN, as TFLite does."""
    x = np.array([3e9, -3e9, 2147483520.0, -2.5, 7.9, 0.0], np.float32)
    tensors = [T((6,)), T((6,), dtype=np.int32)]
    got, want, _ = _delegated(build_model(tensors, [_cast(0, 1, np.float32, np.int32)], [0], [1]), [x])
    assert got[0].dtype == np.int32
    np.testing.assert_array_equal(got[0], want[0])


def test_int32_input_beyond_float_precision_fails_the_invoke():
    """2^24 + 1 has no float32: the invoke fails naming the value rather than round it."""
    import delegate
    from delegate.api import host_runtime

    tensors = [T((3,), dtype=np.int32), T((3,))]
    model = build_model(tensors, [_cast(0, 1, np.int32, np.float32)], [0], [1])
    d = delegate.load_delegate(program_cache="default")
    interpreter = host_runtime().Interpreter(model_content=model, experimental_delegates=[d])
    interpreter.allocate_tensors()
    assert len(delegate.delegate_state(d).delegated_nodes) == 1
    index = interpreter.get_input_details()[0]["index"]
    interpreter.set_tensor(index, np.array([1, -(2**24), 2**24], np.int32))
    interpreter.invoke()
    np.testing.assert_array_equal(
        interpreter.get_tensor(interpreter.get_output_details()[0]["index"]), [1, -(2**24), 2**24]
    )
    interpreter.set_tensor(index, np.array([1, 2**24 + 1, 0], np.int32))
    with pytest.raises(RuntimeError, match=r"int32 input tensor 0 holds 16777217 at element 1, beyond the 2\^24"):
        interpreter.invoke()


def test_integer_partition_inputs_keep_float32_storage_in_half():
    """Token ids entering a half-precision partition are stored in float32 (half's integers stop at 2048)."""
    tensors = {
        0: Tensor(0, INT32, (1, 7)),
        1: Tensor(1, FLOAT32, (50, 4), is_constant=True, constant=np.zeros((50, 4), np.float32)),
        2: Tensor(2, FLOAT32, (1, 7, 4)),
    }
    graph = Graph(tensors, {0: Node(0, Builtin.GATHER, 1, (1, 0), (2,))})
    assert wide_tensors(graph, [0], CalculationsPrecision.F16) == {0}
    assert wide_tensors(graph, [0], CalculationsPrecision.F32) == frozenset()
