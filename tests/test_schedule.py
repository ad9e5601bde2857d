"""The schedule invariant (delegate/context/schedule.py): the compiler keeps it, the writer refuses a
context that breaks it and the runtime refuses to load one."""

from __future__ import annotations

import pytest

from delegate import ContextFormatError, Runtime, serialize_context
from delegate.compiler.graph import FLOAT32, Builtin, Graph, Node, Tensor
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.context import model
from delegate.context.schedule import schedule_violation
from delegate.context.synthetic import synthetic_mobilenet

SHAPE = (1, 4, 4, 8)


def _late_operand_graph() -> Graph:
    """t1 = RELU(x) first; t2 = ABS(TANH(x)) after it; y = ADD(t1, t2). The ADD links into RELU's kernel,
    which TFLite's order places before the kernel writing its other operand (MediaPipe's hand_recrop
    has this shape, with a pool and a convolution)."""
    tensors = {i: Tensor(i, FLOAT32, SHAPE, f"t{i}") for i in range(5)}
    nodes = {
        0: Node(0, Builtin.RELU, 1, (0,), (1,)),
        1: Node(1, Builtin.TANH, 1, (0,), (2,)),
        2: Node(2, Builtin.ABS, 1, (2,), (3,)),
        3: Node(3, Builtin.ADD, 1, (1, 3), (4,), {"activation": 0}),
    }
    return Graph(tensors, nodes)


def _node(name: str, inputs: list[int], outputs: list[int]) -> model.CLNode:
    op = model.GPUOperation(
        src_tensors_names=[f"s{i}" for i in range(len(inputs))],
        dst_tensors_names=[f"d{i}" for i in range(len(outputs))],
    )
    return model.CLNode(gpu_op=op, input_ids=inputs, output_ids=outputs, name=name)


def _context(nodes: list[model.CLNode], inputs: list[int], outputs: list[int]) -> model.InferenceContext:
    return model.InferenceContext(nodes=nodes, input_ids=inputs, output_ids=outputs)


@pytest.mark.parametrize("fuse", [True, False])
def test_compiler_schedules_a_linked_op_after_its_late_operand(fuse):
    ctx = compile_partition(_late_operand_graph(), [0, 1, 2, 3], [0], [4], CompileOptions(fuse=fuse))
    assert schedule_violation(ctx) is None
    names = [n.name for n in ctx.nodes]
    if fuse:  # the ADD is still linked, into a kernel that now runs after the TANH one
        assert names == ["tanh_1+abs_2", "relu_0+add_3"]


@pytest.mark.parametrize(
    ("nodes", "inputs", "outputs", "expected"),
    [
        ([_node("a", [0], [1]), _node("b", [1], [2])], [0], [2], None),
        ([_node("a", [2], [1]), _node("b", [0], [2])], [0], [1], "reads tensor 2 before node 1 (b) writes it"),
        ([_node("a", [7], [1])], [0], [1], "node 0 (a) reads tensor 7, which is neither a context input nor written"),
        ([_node("a", [0], [1]), _node("b", [0], [1])], [0], [1], "writes tensor 1, already written by node 0"),
        ([_node("a", [0], [0, 1])], [0], [1], "node 0 (a) writes tensor 0, a context input it does not hand back"),
        # a state updated in place and handed back (an LSTM's variable tensors)
        ([_node("a", [0], [1, 0])], [0], [1, 0], None),
        ([_node("a", [0], [1])], [0], [3], "output tensor 3 is written by no node"),
    ],
)
def test_schedule_violation_names_the_node_and_the_tensor(nodes, inputs, outputs, expected):
    problem = schedule_violation(_context(nodes, inputs, outputs))
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem


def test_variables_are_ready_from_the_start():
    ctx = _context([_node("a", [5], [1])], [0], [1])
    ctx.variable_ids_and_refs = [model.PairOfValueIds(5, 12)]
    assert schedule_violation(ctx) is None


def _out_of_order_mobilenet() -> model.InferenceContext:
    ctx = synthetic_mobilenet(image_size=32)
    ctx.nodes[1], ctx.nodes[2] = ctx.nodes[2], ctx.nodes[1]
    return ctx


def test_writer_refuses_a_context_read_before_written():
    with pytest.raises(ContextFormatError, match=r"reads tensor .* before node 2"):
        serialize_context(_out_of_order_mobilenet())


@pytest.mark.opencl
def test_runtime_refuses_to_load_a_context_read_before_written(tmp_path):
    data = serialize_context(_out_of_order_mobilenet(), check_schedule=False)
    with pytest.raises(ContextFormatError, match=r"node 1 \(.*\) reads tensor \d+ before node 2"):
        Runtime.load(data, cache_dir=tmp_path)
    with pytest.raises(ContextFormatError, match="before node 2"):
        Runtime.load(_out_of_order_mobilenet(), cache_dir=tmp_path)
