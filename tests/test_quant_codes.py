"""Tensors carrying int8 codes between integer matrix products (compiler/codes.py).

A carried tensor (compiler/quant.py) written by a matrix product and read only by integer
products on its grid is stored as its codes (marked model.CODES): the writer converts once, the
readers load the words. The device tests check which tensors carry codes in a compiled context and
that the outputs are TFLite's integer kernels' and, bit for bit, the ones the float tensors give;
the context tests check that a codes tensor survives the native parser and that the runtime
refuses one it could not run.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np
import pytest

from delegate import ContextFile, ContextFormatError, serialize_context
from delegate.compiler import partition
from delegate.compiler.concat_chains import ConcatChainRewrite
from delegate.compiler.graph import Builtin
from delegate.compiler.options import CompileOptions
from delegate.compiler.quant_step import qdq_code
from delegate.context import model
from delegate.context.model import DataType, TensorStorageType
from delegate.context.semantics import check_semantics

from .helpers import delegate_and_builtin
from .test_ops import PROGRAM_CACHE
from .test_quant import check_quant, int_bias, int_weights, qrand, qt
from .test_quant_integer import VNNI, _device_int8_dot
from .tflite_builder import Op, T, build_model

_SRC = (1, 9, 11, 37)


def _conv(src: int, dst: int, k: int, stride: int = 1) -> Op:
    window = {"Padding": 0, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": 0}
    return Op(Builtin.CONV_2D, [src, src + 1, src + 2], [dst], ("Conv2DOptions", window), version=3)


def _layer(tensors: list[T], src: int, cin: int, cout: int, k: int, shape: tuple[int, ...], scale: float,
           zero: int, rng: np.random.Generator) -> None:  # fmt: skip
    """Append a convolution's weights, biases and output (``shape``) reading tensor ``src``."""
    weights, scales = int_weights((cout, k, k, cin), 0, rng)
    in_scale = tensors[src].quant[0][0]
    tensors += [weights, int_bias(scales * np.float32(in_scale), rng), qt(shape, scale, zero)]


def chain(rng: np.random.Generator) -> tuple[list[T], list[Op]]:
    """conv 1x1 (37 -> 40) -> conv 3x3 (40 -> 24) -> conv 3x3 stride 2 (24 -> 20): tensors 3 and 6
    lie between integer products; 9 is the output."""
    tensors = [qt(_SRC, 0.05, -7)]
    _layer(tensors, 0, 37, 40, 1, (1, 9, 11, 40), 0.09, 3, rng)
    _layer(tensors, 3, 40, 24, 3, (1, 9, 11, 24), 0.3, -5, rng)
    _layer(tensors, 6, 24, 20, 3, (1, 5, 6, 20), 0.8, 2, rng)
    return tensors, [_conv(0, 3, 1), _conv(3, 6, 3), _conv(6, 9, 3, 2)]


def residual(rng: np.random.Generator) -> tuple[list[T], list[Op]]:
    """conv 1x1 (37 -> 40) -> conv 3x3 (40 -> 40), then ADD of the two: tensor 3 has a float
    reader (the ADD, linked into the second convolution's kernel or its own)."""
    tensors = [qt(_SRC, 0.05, -7)]
    _layer(tensors, 0, 37, 40, 1, (1, 9, 11, 40), 0.09, 3, rng)
    _layer(tensors, 3, 40, 40, 3, (1, 9, 11, 40), 0.3, -5, rng)
    tensors.append(qt((1, 9, 11, 40), 0.35, 1))
    return tensors, [_conv(0, 3, 1), _conv(3, 6, 3), Op(Builtin.ADD, [6, 3], [7], ("AddOptions", {}), version=2)]


def _contexts(monkeypatch: pytest.MonkeyPatch, graphs: list[Any] | None = None) -> list[model.InferenceContext]:
    """The contexts compiled from now on (the list fills as partitions compile); ``graphs``: a
    list that takes the graph each was compiled from."""
    from delegate.plugin.registry import REGISTRY
    from tests.plugin_testing import inject

    contexts: list[model.InferenceContext] = []
    real = REGISTRY.plan.loader.compiler.compile

    def spied(graph: Any, nodes: list[int], inputs: Any, outputs: Any, options: CompileOptions) -> Any:
        ctx = real(graph, nodes, inputs, outputs, options)
        contexts.append(ctx)
        if graphs is not None:
            graphs.append(graph)
        return ctx

    inject(monkeypatch, compile=spied)
    return contexts


def _codes_tensors(contexts: list[model.InferenceContext]) -> set[int]:
    return {t.id for ctx in contexts for t in ctx.tensors if model.holds_codes(t.desc)}


def _needs_int8_dot() -> None:
    if not _device_int8_dot():
        pytest.skip("the device does not compile AVX512-VNNI's dot product (a GPU, or a CPU model without it)")


@pytest.mark.opencl
def test_a_chain_of_integer_products_carries_codes_with_tflites_values(monkeypatch):
    """Tensors 3 and 6 carry codes (the 1x1 product writes them, the 3x3 products load them), the
    input and output stay float; the outputs are TFLite's, and the bytes the float tensors give."""
    _needs_int8_dot()
    rng = np.random.default_rng(3)
    tensors, ops = chain(rng)
    feeds = [qrand(_SRC, rng)]
    contexts = _contexts(monkeypatch)
    # a step off at a tie in one layer (TFLite's double rounding, test_quant.check_quant) moves
    # the next layer's sums: three layers deep, outputs within two steps
    check_quant(tensors, ops, [0], [9], feeds, steps=2, exact=0.85)
    assert _codes_tensors(contexts) == {3, 6}
    codes = [n.gpu_op.code for ctx in contexts for n in ctx.nodes if n.gpu_op is not None]
    assert sum("src_tensor.CodesAt(" in c for c in codes) == 2 and all(VNNI in c for c in codes)
    with_codes, _, _ = delegate_and_builtin(build_model(tensors, ops, [0], [9]), feeds, PROGRAM_CACHE)

    monkeypatch.setattr("delegate.compiler.partition.carry_codes", lambda *args: set())
    del contexts[:]
    floats, _, _ = delegate_and_builtin(build_model(tensors, ops, [0], [9]), feeds, PROGRAM_CACHE)
    assert contexts and not _codes_tensors(contexts)
    assert with_codes[0].tobytes() == floats[0].tobytes()


@pytest.mark.opencl
def test_a_tensor_with_a_float_reader_stays_float(monkeypatch):
    """Tensor 3 is read by the 3x3 product and by the ADD: it stays float, as does the partition's
    output; the values are TFLite's."""
    _needs_int8_dot()
    rng = np.random.default_rng(4)
    tensors, ops = residual(rng)
    contexts = _contexts(monkeypatch)
    check_quant(tensors, ops, [0], [7], [qrand(_SRC, rng)], steps=2, exact=0.85)  # two layers deep, as above
    assert contexts and not _codes_tensors(contexts)
    assert {t.id for ctx in contexts for t in ctx.tensors} >= {0, 3, 7}


def swish(rng: np.random.Generator) -> tuple[list[T], list[Op]]:
    """conv 1x1 (37 -> 40) -> LOGISTIC and MUL (a swish, its table linked into the product) ->
    conv 3x3 (40 -> 24): tensor 5, the swish's output, lies between integer products."""
    tensors = [qt(_SRC, 0.05, -7)]
    _layer(tensors, 0, 37, 40, 1, (1, 9, 11, 40), 0.09, 3, rng)
    tensors += [qt((1, 9, 11, 40), 1 / 256, -128), qt((1, 9, 11, 40), 0.045, -122)]
    _layer(tensors, 5, 40, 24, 3, (1, 9, 11, 24), 0.3, -5, rng)
    logistic = Op(Builtin.LOGISTIC, [3], [4])
    mul = Op(Builtin.MUL, [3, 4], [5], ("MulOptions", {}), version=2)
    return tensors, [_conv(0, 3, 1), logistic, mul, _conv(5, 8, 3)]


@pytest.mark.opencl
def test_a_table_ending_on_the_grid_writes_codes(monkeypatch):
    """A swish's table (its values on the output's grid, quant_table.py) linked into the product
    ends the kernel on the grid, as a rounding step does: its output, tensor 5, carries codes to
    the next product; the values are TFLite's."""
    _needs_int8_dot()
    rng = np.random.default_rng(6)
    tensors, ops = swish(rng)
    contexts = _contexts(monkeypatch)
    check_quant(tensors, ops, [0], [8], [qrand(_SRC, rng)], steps=2, exact=0.85)  # two layers deep, as above
    assert _codes_tensors(contexts) == {5}


@pytest.mark.opencl
def test_a_table_after_a_table_on_the_grid_keeps_both():
    """A LOGISTIC linked after the swish's table: the swish's table ends on its grid but is no
    rounding step, which the LOGISTIC's table could take as its index in its place; the values
    are TFLite's."""
    rng = np.random.default_rng(7)
    tensors, ops = swish(rng)
    tensors, ops = tensors[:6], ops[:3]
    tensors.append(qt((1, 9, 11, 40), 1 / 256, -128))
    ops.append(Op(Builtin.LOGISTIC, [5], [6]))
    # a step off at a tie before the swish moves the LOGISTIC by up to 4 steps (its slope, 1/4,
    # times 0.045 / (1/256) steps per step of its input, with the swish's own rounding)
    check_quant(tensors, ops, [0], [6], [qrand(_SRC, rng)], steps=4, exact=0.9)


_BLOCK = (1, 7, 9, 16)
_GROWTH = 8


def _small_layer(tensors: list[T], src: int, shape: tuple[int, ...], k: int, grid: tuple[float, int],
                 rng: np.random.Generator) -> Op:  # fmt: skip
    """A convolution (``k`` x ``k``, SAME) reading tensor ``src`` into ``shape``, its weights at
    most 0.64 in magnitude: a step off at a tie in its input moves an output by under a step or two,
    where test_quant's weights (up to 2.5) make the block's loop of layers amplify it."""
    cin, cout = tensors[src].shape[3], shape[3]
    scales = rng.uniform(0.001, 0.005, size=cout).astype(np.float32)
    q = rng.integers(-127, 128, size=(cout, k, k, cin)).astype(np.int8)
    weights = T(q.shape, q, np.int8, quant=([float(v) for v in scales], [0] * cout, 0))
    tensors += [weights, int_bias(scales * np.float32(tensors[src].quant[0][0]), rng), qt(shape, *grid)]
    return _conv(src, len(tensors) - 1, k)


def dense_block(rng: np.random.Generator, layers: int = 3) -> tuple[list[T], list[Op], list[int]]:
    """A DenseNet block of int8 layers: x_k = CONCATENATION(x_k-1, y_k), all on x_0's grid, where
    y_k is conv 3x3 (24 -> 8) of conv 1x1 (-> 24) of MUL(x_k-1, per-channel scale, RELU). Each x_k
    but the last is read by its MUL and the next concatenation. Returns the tensors, the ops and
    the MULs' outputs."""
    grid = (0.5, -7)
    tensors = [qt(_BLOCK, *grid)]
    ops: list[Op] = []
    muls: list[int] = []
    x = 0
    for k in range(layers):
        channels = _BLOCK[3] + k * _GROWTH
        q = rng.integers(30, 127, size=(1, 1, 1, channels)).astype(np.int8)
        # scales whose products are no power of two: a power of two puts many MUL results on a tie
        tensors += [T(q.shape, q, np.int8, quant=([0.0081], [0], 0)), qt((*_BLOCK[:3], channels), 0.47, -128)]
        relu = ("MulOptions", {"FusedActivationFunction": 1})
        ops.append(Op(Builtin.MUL, [x, len(tensors) - 2], [len(tensors) - 1], relu, version=2))
        muls.append(len(tensors) - 1)
        ops.append(_small_layer(tensors, len(tensors) - 1, (*_BLOCK[:3], 24), 1, (0.31, 3), rng))
        ops.append(_small_layer(tensors, len(tensors) - 1, (*_BLOCK[:3], _GROWTH), 3, grid, rng))
        tensors.append(qt((*_BLOCK[:3], channels + _GROWTH), *grid))
        concat = ("ConcatenationOptions", {"Axis": 3, "FusedActivationFunction": 0})
        ops.append(Op(Builtin.CONCATENATION, [x, len(tensors) - 2], [len(tensors) - 1], concat, version=2))
        x = len(tensors) - 1
    return tensors, ops, muls


@pytest.mark.opencl
def test_a_dense_block_reads_its_concatenations_inputs_and_carries_codes(monkeypatch):
    """The second concatenation reads x_0, y_1 and y_2 (concat_chains.py), so the first one's only
    reader is its MUL, linked into its kernel: x_1 is never written. The MULs' outputs carry codes
    to the 1x1 products, written by the first MUL's kernel and by the concatenation's. The values
    are TFLite's, and bit for bit those of the block compiled without the rewrite and the codes."""
    _needs_int8_dot()
    rng = np.random.default_rng(8)
    tensors, ops, muls = dense_block(rng, layers=2)
    out = len(tensors) - 1
    feeds = [qrand(_BLOCK, rng)]
    contexts = _contexts(monkeypatch)
    # a step off at a tie in a MUL or a 1x1 layer moves the sums of the 3x3 layer after it (216
    # inputs): two layers deep, outputs within two steps
    check_quant(tensors, ops, [0], [out], feeds, steps=2, exact=0.85)
    assert set(muls) <= _codes_tensors(contexts)
    nodes = [n for ctx in contexts for n in ctx.nodes]
    concats = [n for n in nodes if "concatenation" in n.name]
    assert [n.name.count("+mul") for n in concats] == [1, 0]
    assert [len(n.input_ids) for n in concats] == [2, 3]
    assert ops[3].outputs[0] not in {i for n in nodes for i in n.output_ids}
    model = build_model(tensors, ops, [0], [out])
    rewritten, _, _ = delegate_and_builtin(model, feeds, PROGRAM_CACHE)

    plain = [r for r in partition.REWRITES if not isinstance(r, ConcatChainRewrite)]
    monkeypatch.setattr("delegate.compiler.partition.REWRITES", plain)
    monkeypatch.setattr("delegate.compiler.partition.carry_codes", lambda *args: set())
    del contexts[:]
    floats, _, _ = delegate_and_builtin(model, feeds, PROGRAM_CACHE)
    assert contexts and not _codes_tensors(contexts)
    assert sum("concatenation" in n.name for ctx in contexts for n in ctx.nodes) == 2
    assert rewritten[0].tobytes() == floats[0].tobytes()


@pytest.mark.opencl
@pytest.mark.parametrize("scale, rounds", [(0.5, False), (0.375, True)])
def test_a_concatenation_rounds_only_an_input_off_its_grid(monkeypatch, scale, rounds):
    """A concatenation whose inputs are on its output's grid copies values on the grid, with no
    rounding step after them (Op.writes_grid: its output may carry codes as it is); one input on
    another grid is requantized, the step in place. The values are TFLite's."""
    graphs: list[Any] = []
    contexts = _contexts(monkeypatch, graphs)
    rng = np.random.default_rng(9)
    # uint8: TFLite's int8 kernel takes inputs on the output's grid only
    tensors = [qt((1, 5, 6, 8), 0.5, 121, np.uint8), qt((1, 5, 6, 12), scale, 121, np.uint8)]
    tensors.append(qt((1, 5, 6, 20), 0.5, 121, np.uint8))
    concat = Op(Builtin.CONCATENATION, [0, 1], [2], ("ConcatenationOptions", {"Axis": 3}))
    feeds = [qrand((1, 5, 6, 8), rng, np.uint8), qrand((1, 5, 6, 12), rng, np.uint8)]
    check_quant(tensors, [concat], [0, 1], [2], feeds)
    codes = [n.gpu_op.code for ctx in contexts for n in ctx.nodes if "concatenation" in n.name]
    assert len(graphs) == len(codes) == 1 and (qdq_code(graphs[0].tensor(2).carried) in codes[0]) == rounds


# ---------------------------------------------------------------- the context format


def _descriptor(codes: bool) -> model.TensorDescriptor:
    desc = model.TensorDescriptor(data_type=DataType.FLOAT32, storage_type=TensorStorageType.BUFFER,
                                  layout=model.Layout.BHWC, shape=model.BHWDC(1, 2, 3, 1, 8))  # fmt: skip
    return model.codes_descriptor(desc) if codes else desc


def _codes_context() -> model.InferenceContext:
    """Tensor 1, between two nodes, holds codes."""
    op = model.GPUOperation(code="MAIN_FUNCTION($0) { }", grid_size=model.Int3(1, 1, 1),
                            work_group_size=model.Int3(1, 1, 1), src_tensors_names=["src_tensor"],
                            dst_tensors_names=["dst_tensor"])  # fmt: skip
    return model.InferenceContext(
        nodes=[
            model.CLNode(gpu_op=op, input_ids=[0], output_ids=[1], name="n"),
            model.CLNode(gpu_op=copy.deepcopy(op), input_ids=[1], output_ids=[2], name="m"),
        ],
        tensors=[model.TensorDescWithId(_descriptor(codes), i) for i, codes in enumerate((False, True, False))],
        input_ids=[0],
        output_ids=[2],
    )


def test_a_codes_tensor_round_trips_through_the_native_parser():
    """The mark (a state variable of the descriptor, model.CODES) is read back from the file, and
    the runtime's element size follows it: one byte per channel, a word per slice element."""
    from delegate.runtime.memory import storage_bytes

    ctx = _codes_context()
    check_semantics(ctx)
    back = ContextFile(serialize_context(ctx)).to_model()
    check_semantics(back)
    assert [model.holds_codes(t.desc) for t in back.tensors] == [False, True, False]
    assert storage_bytes(back.tensors[1].desc) * 4 == storage_bytes(back.tensors[0].desc) == 6 * 8 * 4


def _refused(ctx: model.InferenceContext, match: str) -> None:
    """``ctx`` refused as built and as read back from its file (the runtime checks both so)."""
    with pytest.raises(ContextFormatError, match=match):
        check_semantics(ctx)
    with pytest.raises(ContextFormatError, match=match):
        check_semantics(ContextFile(serialize_context(ctx, check_schedule=False)).to_model())


def test_malformed_codes_tensors_are_rejected():
    """A codes tensor typed as floats, in another storage than BUFFER, at the context's edges or as
    a constant object is refused; a data type past the schema's never parses."""
    ctx = _codes_context()
    ctx.tensors[1].desc.data_type = DataType.FLOAT32
    _refused(ctx, r"tensor 1: desc.data_type is FLOAT32; a tensor holding codes .* has data type UNKNOWN")
    ctx = _codes_context()
    ctx.tensors[1].desc.storage_type = TensorStorageType.IMAGE_BUFFER
    _refused(ctx, r"tensor 1: desc.storage_type is IMAGE_BUFFER; a tensor holding codes .* is a BUFFER")
    ctx = _codes_context()
    ctx.output_ids = [1, 2]
    _refused(ctx, r"output_ids\[0\] is 1; a tensor holding codes is internal")
    ctx = _codes_context()
    ctx.nodes[0].gpu_op.arguments = model.Arguments(
        tensor_objects=[model.TensorDescriptorMapValue("w", _descriptor(True))]
    )
    _refused(ctx, r"never an object's")
    ctx = _codes_context()
    ctx.tensors[1].desc.data_type = 3  # type: ignore[assignment]
    with pytest.raises(ContextFormatError, match=r"data_type: enum value 3"):
        ContextFile(serialize_context(ctx, check_schedule=False))


def _assembled(code: str, codes: bool) -> str:
    from delegate.runtime.device import DeviceInfo
    from delegate.runtime.source import assemble

    info = DeviceInfo("p", "d", "v", "1", "OpenCL 3.0", True, True, True, True, 256, (256, 256, 64),
                      1 << 30, 1 << 32, 1 << 16, 128, (16384, 16384), (2048, 2048, 2048), 2048, 1 << 27)  # fmt: skip
    tensors = {"src_tensor": _descriptor(codes), "dst_tensor": _descriptor(False)}
    op = model.GPUOperation(code=code, src_tensors_names=["src_tensor"], dst_tensors_names=["dst_tensor"])
    return assemble(op, tensors, info, model.CalculationsPrecision.F32).text


def test_a_codes_tensor_is_read_as_codes_only():
    """A codes tensor's words are read as one int each (CodesAt); a float read of it, or CodesAt
    of a float tensor, is refused when the kernel is assembled, before any compiler sees it."""
    from delegate.runtime.source import SourceError

    codes = "MAIN_FUNCTION($0) {\n  int u = args.src_tensor.CodesAt(3);\n}\n"
    assert "as_int(((__global uchar4*)" in _assembled(codes, True)
    with pytest.raises(SourceError, match="holds no codes"):
        _assembled(codes, False)
    with pytest.raises(SourceError, match="holds codes, which ReadAt cannot read"):
        _assembled("MAIN_FUNCTION($0) {\n  FLT4 v = args.src_tensor.ReadAt(3);\n}\n", True)


def test_a_codes_tensor_takes_one_byte_per_channel_in_memory_and_summary():
    """The arena and ``delegate inspect`` size a tensor from one element size (model.element_bytes)."""
    from delegate.context.summary import tensor_bytes
    from delegate.runtime import memory

    shape = model.BHWDC(1, 3, 5, 1, 6)  # 6 channels: 2 slices, 8 padded channels
    float32 = model.TensorDescriptor(
        data_type=DataType.FLOAT32, storage_type=TensorStorageType.BUFFER, layout=model.Layout.HWC, shape=shape
    )
    float16 = dataclasses.replace(float32, data_type=DataType.FLOAT16)
    codes = model.codes_descriptor(float32)
    unknown = dataclasses.replace(float32, data_type=DataType.UNKNOWN)
    for desc, element in ((float32, 4), (float16, 2), (codes, 1)):
        assert memory.element_bytes(desc) == element
        assert tensor_bytes(desc) == 3 * 5 * 8 * element
    assert tensor_bytes(unknown) is None
    with pytest.raises(ValueError, match="UNKNOWN"):
        memory.element_bytes(unknown)
