"""The compile stages one at a time: the graph rewrites (pad_merge.PadMerge), the fusion passes over
the kernel graph (fusion.py: each one's merge is there with it and gone without it) and the
scheduler (scheduler.py). Compile only: no device."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from delegate.compiler import fusion, partition
from delegate.compiler.concat_chains import ConcatChainRewrite
from delegate.compiler.graph import FLOAT32, Builtin, Carried, Graph, Node, Tensor
from delegate.compiler.kernel import Kernel, KernelNode
from delegate.compiler.ops.concatenation import MAX_INPUTS
from delegate.compiler.pad_merge import PadMerge
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.compiler.rewrites import make_site, rewrite
from delegate.compiler.scheduler import schedule
from delegate.compiler.swish import SwishRewrite
from delegate.context import model
from delegate.context.schedule import schedule_violation

_INT8 = 9  # kTfLiteInt8
_CONV = {"stride_height": 1, "stride_width": 1, "padding": 2, "activation": 0}  # VALID


def _graph(tensors: list[tuple[tuple[int, ...], np.ndarray | None]], nodes: list[Node]) -> Graph:
    table = {
        i: Tensor(i, FLOAT32, shape, f"t{i}", is_constant=data is not None, constant=data)
        for i, (shape, data) in enumerate(tensors)
    }
    return Graph(table, {n.index: n for n in nodes})


def _chain() -> tuple[Graph, list[int], list[int], list[int]]:
    """RELU then TANH: the TANH links into the RELU's kernel."""
    graph = _graph(
        [((1, 4, 4, 8), None)] * 3, [Node(0, Builtin.RELU, 1, (0,), (1,)), Node(1, Builtin.TANH, 1, (1,), (2,))]
    )
    return graph, [0, 1], [0], [2]


def _concat_conv() -> tuple[Graph, list[int], list[int], list[int]]:
    """Two 4-channel tensors concatenated and read by a 1x1 convolution (the matrix product)."""
    rng = np.random.default_rng(0)
    tensors = [
        ((1, 3, 5, 4), None),
        ((1, 3, 5, 4), None),
        ((1, 3, 5, 8), None),
        ((6, 1, 1, 8), rng.standard_normal((6, 1, 1, 8)).astype(np.float32)),
        ((6,), np.zeros(6, np.float32)),
        ((1, 3, 5, 6), None),
    ]
    nodes = [
        Node(0, Builtin.CONCATENATION, 1, (0, 1), (2,), {"axis": 3, "activation": 0}),
        Node(1, Builtin.CONV_2D, 1, (2, 3, 4), (5,), _CONV),
    ]
    return _graph(tensors, nodes), [0, 1], [0, 1], [5]


def _softmax_after_fc() -> tuple[Graph, list[int], list[int], list[int]]:
    """A fully connected layer of 8 outputs, then SOFTMAX over them (pixel ops of the product)."""
    rng = np.random.default_rng(1)
    tensors = [
        ((1, 16), None),
        ((8, 16), rng.standard_normal((8, 16)).astype(np.float32)),
        ((8,), np.zeros(8, np.float32)),
        ((1, 8), None),
        ((1, 8), None),
    ]
    nodes = [
        Node(0, Builtin.FULLY_CONNECTED, 1, (0, 1, 2), (3,), {"activation": 0, "keep_num_dims": False}),
        Node(1, Builtin.SOFTMAX, 1, (3,), (4,), {"beta": 1.0}),
    ]
    return _graph(tensors, nodes), [0, 1], [0], [4]


def _names(case, passes=None, monkeypatch=None) -> list[str]:
    if passes is not None:
        monkeypatch.setattr(partition, "FUSIONS", passes)
    graph, nodes, inputs, outputs = case()
    ctx = compile_partition(graph, nodes, inputs, outputs, CompileOptions())
    assert schedule_violation(ctx) is None
    return [n.name for n in ctx.nodes]


@pytest.mark.parametrize(
    ("case", "name", "fused"),
    [
        (_chain, "ElementwiseLink", ["relu_0+tanh_1"]),
        (_concat_conv, "ConcatReadInPlace", ["conv_2d_1+concatenation_0"]),
        (_softmax_after_fc, "PixelSoftmax", ["fully_connected_0+softmax_1"]),
    ],
)
def test_each_fusion_pass_makes_its_merge(case, name, fused, monkeypatch):
    assert _names(case) == fused
    without = [p for p in fusion.FUSIONS if type(p).__name__ != name]
    assert len(without) == len(fusion.FUSIONS) - 1
    assert len(_names(case, without, monkeypatch)) == 2  # one kernel per op without it


def test_fusion_off_keeps_one_kernel_per_op():
    graph, nodes, inputs, outputs = _chain()
    ctx = compile_partition(graph, nodes, inputs, outputs, CompileOptions(fuse=False))
    assert [n.name for n in ctx.nodes] == ["relu_0", "tanh_1"]


def test_the_pad_merge_rewrite_drops_the_pad_and_edits_its_reader():
    tensors = [
        ((1, 4, 4, 3), None),
        ((4, 2), np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)),
        ((1, 6, 6, 3), None),
        ((5, 3, 3, 3), np.ones((5, 3, 3, 3), np.float32)),
        ((5,), np.zeros(5, np.float32)),
        ((1, 4, 4, 5), None),
    ]
    pad = Node(0, Builtin.PAD, 1, (0, 1), (2,))
    conv = Node(1, Builtin.CONV_2D, 1, (2, 3, 4), (5,), _CONV)
    graph = _graph(tensors, [pad, conv])
    found = PadMerge().match(pad, make_site(graph, [0, 1], [5]))
    assert found is not None and found.nodes == (0,)
    site = rewrite(graph, [0, 1], [5], [PadMerge()])
    assert site.nodes == [1] and site.names == {1: "pad_0"}
    assert site.graph.nodes[1].inputs[0] == 0 and site.graph.nodes[1].params["merged_pad"] == (1, 1, 1, 1)
    # a PAD the host also wants stays
    assert PadMerge().match(pad, make_site(graph, [0, 1], [5, 2])) is None


def _swish_after_conv(order: tuple[int, int] = (2, 3)) -> tuple[Graph, list[int], list[int], list[int]]:
    """A 1x1 convolution y (tensor 2), then MUL(y, LOGISTIC(y)) in ``order`` (tensor 3 the sigmoid)."""
    tensors = [
        ((1, 3, 3, 4), None),
        ((6, 1, 1, 4), np.ones((6, 1, 1, 4), np.float32)),
        ((1, 3, 3, 6), None),
        ((1, 3, 3, 6), None),
        ((1, 3, 3, 6), None),
        ((6,), np.zeros(6, np.float32)),
    ]
    nodes = [
        Node(0, Builtin.CONV_2D, 1, (0, 1, 5), (2,), _CONV),
        Node(1, Builtin.LOGISTIC, 1, (2,), (3,)),
        Node(2, Builtin.MUL, 1, order, (4,), {"activation": 0}),
    ]
    return _graph(tensors, nodes), [0, 1, 2], [0], [4]


@pytest.mark.parametrize("order", [(2, 3), (3, 2)])
def test_the_swish_rewrite_makes_one_unary_node_that_links(order, monkeypatch):
    graph, nodes, _, outputs = _swish_after_conv(order)
    site = rewrite(graph, nodes, outputs, [SwishRewrite()])
    fused = site.graph.nodes[2]
    assert site.nodes == [0, 2] and fused.inputs == (2,) and fused.params["fused_names"] == ["logistic_1", "mul_2"]
    # the kernel names every node it runs; without the rewrite y has two readers and stays written
    assert _names(lambda: _swish_after_conv(order)) == ["conv_2d_0+logistic_1+mul_2"]
    monkeypatch.setattr(partition, "REWRITES", [r for r in partition.REWRITES if not isinstance(r, SwishRewrite)])
    assert _names(lambda: _swish_after_conv(order)) == ["conv_2d_0", "logistic_1+mul_2"]


def test_a_swish_whose_sigmoid_is_wanted_stays_two_nodes():
    graph, nodes, _, outputs = _swish_after_conv()
    assert rewrite(graph, nodes, [*outputs, 3], [SwishRewrite()]).nodes == nodes  # a partition output
    graph.nodes[3] = Node(3, Builtin.ADD, 1, (3, 4), (6,), {"activation": 0})  # another reader
    graph.tensors[6] = Tensor(6, FLOAT32, (1, 3, 3, 6), "t6")
    assert rewrite(graph, [*nodes, 3], [6], [SwishRewrite()]).nodes == [*nodes, 3]


def _kernel(name: str, inputs: list[int], outputs: list[int], position: int) -> KernelNode:
    op = model.GPUOperation(src_tensors_names=[f"s{i}" for i in inputs], dst_tensors_names=["d"])
    return KernelNode(Kernel(op, []), inputs, outputs, [name], position=position)


def test_the_scheduler_moves_a_kernel_only_for_a_late_operand():
    # a (position 0) writes 1 and had an op linked at position 3 reading tensor 2, which b
    # (position 1) writes: a runs at position 3, after b. c (position 2) reads a partition input.
    a, b, c = _kernel("a", [0], [3], 0), _kernel("b", [0], [2], 1), _kernel("c", [0], [4], 2)
    a.joins.append((3, [2]))
    assert [k.nodes[0] for k in schedule([a, b, c], [0])] == ["b", "c", "a"]
    # an operand that is a partition input does not move it
    a.joins[0] = (3, [0])
    assert [k.nodes[0] for k in schedule([a, b, c], [0])] == ["a", "b", "c"]
    # nor one written by a kernel before it
    a.position, b.position = 1, 0
    a.joins[0] = (3, [2])
    assert [k.nodes[0] for k in schedule([a, b, c], [0])] == ["b", "a", "c"]


def _dense_chain(layers: int, growth: int = 4) -> tuple[Graph, list[int], list[int]]:
    """x_k = CONCATENATION(x_k-1, y_k) along channels, each x_k also read by a RELU; x_0 and the
    y_k are partition inputs (tensor 0, then y_k = 3k - 2, x_k = 3k - 1, relu_k = 3k). Returns
    the graph, its nodes and its outputs (the RELUs')."""
    tensors: list[tuple[tuple[int, ...], np.ndarray | None]] = [((1, 2, 2, 4), None)]
    nodes = []
    for k in range(1, layers + 1):
        tensors += [((1, 2, 2, growth), None), ((1, 2, 2, 4 + k * growth), None), ((1, 2, 2, 4 + k * growth), None)]
        x = 0 if k == 1 else 3 * k - 4
        nodes.append(Node(2 * k - 2, Builtin.CONCATENATION, 1, (x, 3 * k - 2), (3 * k - 1,), {"axis": 3}))
        nodes.append(Node(2 * k - 1, Builtin.RELU, 1, (3 * k - 1,), (3 * k,)))
    return _graph(tensors, nodes), [n.index for n in nodes], [3 * k for k in range(1, layers + 1)]


def test_concatenations_of_concatenations_read_the_inner_inputs_up_to_the_kernels_limit():
    """Each x_k reads x_0 and y_1 .. y_k, so no concatenation reads another, until the inputs would
    pass MAX_INPUTS: x_16 reads x_15 and y_16, and x_17 starts again from there."""
    graph, nodes, outputs = _dense_chain(18)
    site = rewrite(graph, nodes, outputs, [ConcatChainRewrite()])
    concat = [site.graph.nodes[2 * k - 2].inputs for k in range(1, 19)]
    for k in range(1, 16):
        assert concat[k - 1] == (0, *(3 * j - 2 for j in range(1, k + 1)))
    assert len(concat[14]) == MAX_INPUTS
    assert concat[15] == (3 * 15 - 1, 3 * 16 - 2) and concat[16] == (3 * 15 - 1, 3 * 16 - 2, 3 * 17 - 2)
    assert site.nodes == nodes  # every x_k has its RELU
    ctx = compile_partition(graph, nodes, [0, *(3 * k - 2 for k in range(1, 19))], outputs, CompileOptions())
    # x_15 is written, read by its own RELU kernel and by x_16 and x_17
    assert [n.name.count("+relu") for n in ctx.nodes] == [1] * 14 + [0, 0, 1, 1, 1]


def test_a_concatenation_alone_in_its_reader_is_dropped_and_one_that_moves_values_stays():
    """An inner concatenation read only by the outer one is dropped; one whose inputs are on other
    grids (it requantizes them) or are part slices along channels (the outer copy would go lane by
    lane) stays in the outer one's inputs."""
    graph, nodes, _ = _dense_chain(2)
    site = rewrite(graph, [0, 2, 3], [6], [ConcatChainRewrite()])  # x_1's RELU is not in the partition
    assert site.graph.nodes[2].inputs == (0, 1, 4) and site.nodes == [2, 3]
    ctx = compile_partition(graph, [0, 2, 3], [0, 1, 4], [6], CompileOptions())
    assert [n.name for n in ctx.nodes] == ["concatenation_2+concatenation_0+relu_3"]
    # read twice where the limit lets only one read be replaced: it stays, as does its node
    site = make_site(graph, [0, 2], [5])
    doubled = dataclasses.replace(graph.nodes[2], inputs=(2,) * (MAX_INPUTS - 1))
    found = ConcatChainRewrite().match(doubled, site)
    assert found is not None and found.nodes == (2,) and found.edited[0].inputs == (0, 1, *(2,) * (MAX_INPUTS - 2))
    grid = Carried(0.5, -7, -128, 127, _INT8)
    for t in (2, 5):
        graph.tensors[t].carried = grid
    graph.tensors[0].carried = graph.tensors[1].carried = grid
    assert rewrite(graph, nodes, [6], [ConcatChainRewrite()]).graph.nodes[2].inputs == (0, 1, 4)
    graph.tensors[1].carried = Carried(0.25, -7, -128, 127, _INT8)
    assert rewrite(graph, nodes, [6], [ConcatChainRewrite()]).graph.nodes[2].inputs == (2, 4)
    graph, nodes, _ = _dense_chain(2, growth=6)
    assert rewrite(graph, nodes, [6], [ConcatChainRewrite()]).graph.nodes[2].inputs == (2, 4)
