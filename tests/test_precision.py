"""Which tensors a half-precision partition stores in float32 (compiler/precision.py): the rule on
graphs built by hand, and its effect on a model through TFLite against TFLite's builtin kernels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from delegate.compiler import precision
from delegate.compiler.graph import FLOAT32, Builtin, Graph, Node, Padding, Tensor
from delegate.compiler.ops.conv_pair import PAIR_LOCAL_BYTES
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.context.model import CalculationsPrecision, DataType

F16 = CalculationsPrecision.F16
SAME = {"stride_height": 1, "stride_width": 1, "padding": Padding.SAME}


class _Graph:
    def __init__(self) -> None:
        self.tensors: dict[int, Tensor] = {}
        self.nodes: dict[int, Node] = {}

    def tensor(self, shape: tuple[int, ...], data: np.ndarray | None = None) -> int:
        index = len(self.tensors)
        self.tensors[index] = Tensor(index, FLOAT32, shape, f"t{index}", is_constant=data is not None, constant=data)
        return index

    def node(self, op: int, inputs: list[int], shape: tuple[int, ...], **params: object) -> int:
        out = self.tensor(shape)
        self.nodes[len(self.nodes)] = Node(len(self.nodes), op, 1, tuple(inputs), (out,), dict(params))
        return out

    def depthwise(self, x: int, scale: float, activation: int = 3) -> int:
        shape = self.tensors[x].shape
        filters = self.tensor((1, 3, 3, shape[3]), np.full((1, 3, 3, shape[3]), scale / 9, np.float32))
        bias = self.tensor((shape[3],), np.zeros(shape[3], np.float32))
        return self.node(
            Builtin.DEPTHWISE_CONV_2D, [x, filters, bias], shape, depth_multiplier=1, activation=activation, **SAME
        )

    def conv(self, x: int, scale: float, activation: int = 0) -> int:
        b, h, w, c = self.tensors[x].shape
        filters = self.tensor((c, 1, 1, c), np.full((c, 1, 1, c), scale / c, np.float32))
        bias = self.tensor((c,), np.zeros(c, np.float32))
        return self.node(Builtin.CONV_2D, [x, filters, bias], (b, h, w, c), activation=activation, **SAME)

    def graph(self) -> Graph:
        return Graph(self.tensors, self.nodes)

    def wide(self, at: CalculationsPrecision = F16) -> frozenset[int]:
        return precision.wide_tensors(self.graph(), list(self.nodes), at)


def test_a_high_gain_consumer_widens_its_input_and_what_it_copies():
    g = _Graph()
    x = g.tensor((1, 8, 8, 8))
    bounded = g.depthwise(x, scale=1.0)  # RELU6: bounded, gain 1
    padded = g.node(Builtin.PAD, [bounded, g.tensor((4, 2), np.zeros((4, 2), np.int32))], (1, 8, 8, 8))
    y = g.depthwise(padded, scale=500.0)  # gain 500 > GAIN_LIMIT
    assert precision.weight_gain(g.nodes[2], g.graph()) == pytest.approx(500.0)
    # the pad's source too (its rounding reaches y unscaled), and the partition input, whose range
    # nothing bounds, read by the first RELU6 depthwise
    assert g.wide() == {padded, bounded, x}
    assert y not in g.wide()
    assert g.wide(CalculationsPrecision.F32) == frozenset()


def test_a_bounded_output_widens_an_unbounded_input():
    g = _Graph()
    x = g.tensor((1, 8, 8, 8))
    stream = g.conv(g.depthwise(x, scale=1.0), scale=2.0)  # no activation: unbounded
    clamped = g.conv(stream, scale=2.0, activation=3)  # RELU6 output, gain 2
    g.conv(clamped, scale=2.0, activation=3)  # bounded in, bounded out, low gain: stays half
    assert g.wide() == {stream, x}  # and the partition input feeding the first RELU6 depthwise


def test_low_gain_unclamped_chains_stay_half():
    g = _Graph()
    x = g.tensor((1, 8, 8, 8))
    g.conv(g.conv(x, scale=3.0), scale=3.0)
    assert g.wide() == frozenset()


def test_the_context_stores_wide_tensors_in_float32_and_pairs_nothing_through_them():
    g = _Graph()
    x = g.tensor((1, 16, 16, 32))
    mid = g.depthwise(g.conv(x, scale=1.0, activation=3), scale=1.0)
    out = g.conv(mid, scale=500.0, activation=3)
    options = CompileOptions(precision=F16, pair_local_bytes=PAIR_LOCAL_BYTES)
    ctx = compile_partition(g.graph(), list(g.nodes), [x], [out], options)
    types = {t.id: t.desc.data_type for t in ctx.tensors}
    assert types[mid] == DataType.FLOAT32 and types[out] == DataType.FLOAT16
    assert len(ctx.nodes) == 3  # the depthwise + 1x1 pair would hold ``mid`` in half local memory
    unwidened = compile_partition(
        g.graph(), list(g.nodes), [x], [out], dataclasses.replace(options, widen_sensitive=False)
    )
    assert {t.desc.data_type for t in unwidened.tensors} == {DataType.FLOAT16}
    assert len(unwidened.nodes) == 2


def test_widening_brings_an_amplifying_model_within_the_f16_tolerance(tmp_path, monkeypatch):
    """A 1x1 convolution's unclamped output, about 100 and rising by 0.01 a column, read by a RELU6
    depthwise that takes 50 x the difference of its left and right neighbours (plus 3): exactly 4
    inside the image. Stored in half (steps of 1/16 at 100) the difference is 0 or 1/16, so the
    output is 3 or 6; stored in float32 it is within F16's stated tolerance of TFLite's."""
    from delegate.plugin import callbacks
    from tests.helpers import delegate_and_builtin
    from tests.tflite_builder import Op, T, build_model

    c, w = 8, 16
    taps = np.zeros((1, 3, 3, c), np.float32)
    taps[0, 1, 0, :], taps[0, 1, 2, :] = -50.0, 50.0
    tensors = [
        T((1, 4, w, c)),
        T((c, 1, 1, c), data=(np.eye(c, dtype=np.float32) * 100).reshape(c, 1, 1, c)),
        T((c,), data=np.zeros(c, np.float32)),
        T((1, 4, w, c)),
        T((1, 3, 3, c), data=taps),
        T((c,), data=np.full(c, 3.0, np.float32)),
        T((1, 4, w, c)),
    ]
    same = {"Padding": 0, "StrideW": 1, "StrideH": 1}
    depthwise = {**same, "DepthMultiplier": 1, "FusedActivationFunction": 3}
    ops = [
        Op(Builtin.CONV_2D, [0, 1, 2], [3], ("Conv2DOptions", same)),
        Op(Builtin.DEPTHWISE_CONV_2D, [3, 4, 5], [6], ("DepthwiseConv2DOptions", depthwise)),
    ]
    model = build_model(tensors, ops, [0], [6])
    ramp = 1.0 + 1e-4 * np.arange(w, dtype=np.float32)
    feeds = [np.broadcast_to(ramp[None, None, :, None], (1, 4, w, c)).astype(np.float32)]
    errors = {}
    real = callbacks._compile_options
    for widen in (False, True):
        monkeypatch.setattr(
            callbacks, "_compile_options", lambda *a, wide=widen: dataclasses.replace(real(*a), widen_sensitive=wide)
        )
        (got,), (want,), state = delegate_and_builtin(model, feeds, str(tmp_path), precision="F16")
        assert state.delegated_nodes == [0, 1]
        assert np.allclose(want[:, :, 1:-1], 4.0, atol=1e-3)  # the exact values the docstring says
        errors[widen] = float(np.abs(got - want).max()) / float(np.abs(want).max())
    assert errors[True] <= 1e-2 < errors[False], errors


def test_int32_tensors_keep_float32_storage():
    from delegate.compiler.graph import INT32

    g = _Graph()
    x = g.tensor((1, 4, 4, 4))
    as_int = g.node(Builtin.CAST, [x], (1, 4, 4, 4))
    g.tensors[as_int] = dataclasses.replace(g.tensors[as_int], dtype=INT32)
    back = g.node(Builtin.CAST, [as_int], (1, 4, 4, 4))
    assert as_int in g.wide() and back not in g.wide()  # half holds integers exactly only to 2048
