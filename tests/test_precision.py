"""Which tensors a half-precision partition stores in float32 (compiler/precision.py): the rule on
graphs built by hand, and its effect on a model through TFLite against TFLite's builtin kernels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from delegate.compiler import precision
from delegate.compiler.graph import FLOAT32, Builtin, Graph, Node, Padding, Tensor
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.compiler.selectors.pair import PAIR_LOCAL_BYTES
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
    from delegate.plugin.registry import REGISTRY
    from tests.helpers import delegate_and_builtin
    from tests.plugin_testing import inject
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
    real = REGISTRY.plan.loader.compiler.options
    for widen in (False, True):
        inject(monkeypatch, compile_options=lambda *a, wide=widen: dataclasses.replace(real(*a), widen_sensitive=wide))
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


def test_small_value_readers_widen_their_chains():
    """A LOG's input is widened with what it is computed from through products, squares, sums and
    matrix products; an RSQRT's chain stops at a matrix product; unrelated tensors stay half."""
    g = _Graph()
    x = g.tensor((1, 4, 4, 4))
    conv = g.conv(x, scale=1.0)
    squared = g.node(Builtin.SQUARE, [conv], (1, 4, 4, 4))
    eps = g.tensor((1,), np.full((1,), 1e-10, np.float32))
    shifted = g.node(Builtin.ADD, [squared, eps], (1, 4, 4, 4))
    logged = g.node(Builtin.LOG, [shifted], (1, 4, 4, 4))
    wide = g.wide()
    assert {x, conv, squared, shifted} <= wide and logged not in wide

    g = _Graph()
    x = g.tensor((1, 4, 4, 4))
    conv = g.conv(x, scale=1.0)
    mean = g.node(Builtin.MEAN, [conv], (1, 1, 1, 4))
    root = g.node(Builtin.RSQRT, [mean], (1, 1, 1, 4))
    tanh = g.node(Builtin.TANH, [x], (1, 4, 4, 4))
    wide = g.wide()
    assert {conv, mean} <= wide and x not in wide and root not in wide and tanh not in wide
    assert not g.wide(CalculationsPrecision.F32)


def test_constants_half_cannot_hold_are_uploaded_in_float32():
    from delegate.compiler.ops.base import fits_half

    assert fits_half(np.array([0.0, 1e-4, -3.0, 65504.0], np.float32))
    assert not fits_half(np.array([1e-10], np.float32))  # half's zero
    assert not fits_half(np.array([1e5], np.float32))  # half's infinity


def test_log_of_small_magnitudes_within_the_f16_tolerance(tmp_path, monkeypatch):
    """log(sum(x^2) + 1e-10) over x around 1e-4 (a log-power spectrum): in half the sum (4e-8)
    and the epsilon are zero and the log is -inf; stored and uploaded in float32 they are within
    F16's tolerance of TFLite's."""
    from delegate.plugin.registry import REGISTRY
    from tests.helpers import delegate_and_builtin
    from tests.plugin_testing import inject
    from tests.tflite_builder import Op, T, build_model

    tensors = [
        T((1, 4, 8, 4)),
        T((1, 4, 8, 4)),
        T((1,), data=np.array([3], np.int32), dtype=np.int32),
        T((1, 4, 8, 1)),
        T((1,), data=np.full((1,), 1e-10, np.float32)),
        T((1, 4, 8, 1)),
        T((1, 4, 8, 1)),
    ]
    ops = [
        Op(Builtin.SQUARE, [0], [1]),
        Op(Builtin.SUM, [1, 2], [3], ("ReducerOptions", {"KeepDims": True})),
        Op(Builtin.ADD, [3, 4], [5], ("AddOptions", {})),
        Op(Builtin.LOG, [5], [6]),
    ]
    model = build_model(tensors, ops, [0], [6])
    x = (np.random.default_rng(3).uniform(0.5, 2.0, (1, 4, 8, 4)) * 1e-4).astype(np.float32)
    errors = {}
    real = REGISTRY.plan.loader.compiler.options
    for widen in (False, True):
        inject(monkeypatch, compile_options=lambda *a, wide=widen: dataclasses.replace(real(*a), widen_sensitive=wide))
        (got,), (want,), state = delegate_and_builtin(model, [x], str(tmp_path), precision="F16")
        assert state.delegated_nodes == [0, 1, 2, 3]
        errors[widen] = float(np.abs(got - want).max()) / float(np.abs(want).max())
    assert errors[True] <= 1e-2 < errors[False], errors


def test_basic_pitch_in_f16_on_silence_and_quiet_audio(tmp_path):
    """basic-pitch (a log-magnitude spectrogram front end): on silence and on quiet noise every
    output is finite and within F16's tolerance of TFLite's builtin kernels (it read NaN
    everywhere before its log's chain kept float32 storage)."""
    import delegate
    from delegate.api import host_runtime
    from tests.helpers import shared_path

    path = str(shared_path("models", "real", "basic-pitch__nmp.tflite"))
    host = host_runtime()
    d = delegate.load_delegate(program_cache=str(tmp_path), precision="F16")
    gpu = host.Interpreter(model_path=path, experimental_delegates=[d])
    cpu = host.Interpreter(
        model_path=path, experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    for interpreter in (gpu, cpu):
        interpreter.allocate_tensors()
    detail = gpu.get_input_details()[0]
    quiet = np.random.default_rng(0).uniform(-0.1, 0.1, detail["shape"]).astype(np.float32)
    for name, audio in (("silence", np.zeros(detail["shape"], np.float32)), ("quiet", quiet)):
        outputs = []
        for interpreter in (gpu, cpu):
            interpreter.set_tensor(detail["index"], audio)
            interpreter.invoke()
            outputs.append([interpreter.get_tensor(o["index"]) for o in interpreter.get_output_details()])
        for got, want in zip(*outputs, strict=True):
            assert np.isfinite(got).all(), name
            assert float(np.abs(got - want).max()) <= 1e-2 * float(np.abs(want).max()), name
