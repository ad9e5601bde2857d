"""A model whose declared output shape disagrees with what its op computes: the node stays on CPU
(where TFLite computes the right shape) instead of a kernel sized for the wrong one."""

from __future__ import annotations

import numpy as np

from delegate.compiler.graph import FLOAT32, Builtin, Graph, Node, Padding, Tensor
from delegate.compiler.shape_check import declared_shape_problem


def _graph(tensors: list[tuple[tuple[int, ...], np.ndarray | None]], node: Node) -> Graph:
    table = {
        i: Tensor(i, FLOAT32, shape, f"t{i}", is_constant=data is not None, constant=data)
        for i, (shape, data) in enumerate(tensors)
    }
    return Graph(table, {node.index: node})


def _conv(out: tuple[int, ...], padding: int, stride: int = 2) -> str | None:
    weights = np.zeros((6, 3, 3, 4), np.float32)
    params = {"stride_height": stride, "stride_width": stride, "padding": padding, "activation": 0}
    node = Node(0, Builtin.CONV_2D, 1, (0, 1, 2), (3,), params)
    tensors = [((1, 9, 10, 4), None), ((6, 3, 3, 4), weights), ((6,), np.zeros(6, np.float32)), (out, None)]
    return declared_shape_problem(node, _graph(tensors, node))


def test_convolution_shapes_follow_tflite_padding_rules():
    assert _conv((1, 5, 5, 6), Padding.SAME) is None  # ceil(9 / 2), ceil(10 / 2)
    assert _conv((1, 4, 4, 6), Padding.VALID) is None  # (9 - 3) // 2 + 1, (10 - 3) // 2 + 1
    problem = _conv((1, 5, 6, 6), Padding.SAME)
    assert problem is not None and "[1, 5, 6, 6]" in problem and "[1, 5, 5, 6]" in problem


def test_concatenation_and_broadcasting_shapes():
    concat = Node(0, Builtin.CONCATENATION, 1, (0, 1), (2,), {"axis": -1, "activation": 0})
    assert (
        declared_shape_problem(concat, _graph([((1, 2, 3), None), ((1, 2, 5), None), ((1, 2, 8), None)], concat))
        is None
    )
    assert declared_shape_problem(concat, _graph([((1, 2, 3), None), ((1, 2, 5), None), ((1, 2, 9), None)], concat))
    add = Node(0, Builtin.ADD, 1, (0, 1), (2,), {"activation": 0})
    assert declared_shape_problem(add, _graph([((1, 4, 1), None), ((3,), None), ((1, 4, 3), None)], add)) is None
    assert declared_shape_problem(add, _graph([((1, 4, 1), None), ((3,), None), ((1, 4, 4), None)], add))


def test_placeholder_shapes_known_only_at_run_time_are_not_called_corrupt():
    """A WHILE body's TensorList elements (Keras 3 LSTM): stored shapes are placeholders, marked -1
    in the shape signature. The node stays on CPU, said as what it is, not as a corrupt file."""
    concat = Node(0, Builtin.CONCATENATION, 1, (0, 1), (2,), {"axis": 0, "activation": 0})
    tensors = {
        0: Tensor(0, FLOAT32, (1, 1, 1), "t0", signature=(-1, -1, -1)),
        1: Tensor(1, FLOAT32, (2, 1, 16), "t1"),
        2: Tensor(2, FLOAT32, (12, 1, 16), "t2"),
    }
    problem = declared_shape_problem(concat, Graph(tensors, {0: concat}))
    assert problem is not None and "corrupt" not in problem
    assert problem.startswith("tensor 0's shape is only known at run time: the model stores [1, 1, 1]")


def test_a_pad_declared_too_wide_stays_on_cpu_and_the_result_is_tflites(tmp_path):
    from tests.helpers import delegate_and_builtin
    from tests.tflite_builder import Op, T, build_model

    paddings = np.array([[0, 0], [0, 0], [1, 1], [0, 0]], np.int32)
    tensors = [
        T((1, 8, 5, 2)),
        T((4, 2), data=paddings, dtype=np.int32),
        T((1, 8, 9, 2)),  # the model says 9 columns; PAD computes 5 + 1 + 1 = 7
        T((2,), data=np.array([4, 4], np.int32), dtype=np.int32),
        T((1, 4, 4, 2)),
    ]
    ops = [Op(Builtin.PAD, [0, 1], [2]), Op(Builtin.RESIZE_BILINEAR, [2, 3], [4], ("ResizeBilinearOptions", {}))]
    model = build_model(tensors, ops, [0], [4])
    feeds = [np.random.default_rng(0).uniform(-1, 1, (1, 8, 5, 2)).astype(np.float32)]
    (got,), (want,), state = delegate_and_builtin(model, feeds, str(tmp_path))
    assert state.delegated_nodes == [1]
    assert "declares output shape [1, 8, 9, 2]" in state.unsupported["pad_0"]
    np.testing.assert_allclose(got, want, atol=1e-5)
