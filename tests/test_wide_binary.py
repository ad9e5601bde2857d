"""Binary ops linked after a matrix product on its whole accumulators (Binary.wide_operand_link):
the operand read slice by slice into one FLT8 / FLT16 where the product writes whole blocks
(gemm_blocks.block_write), then one vector op; still TFLite's answer, in the block writes and the
edge writes, for runtime and constant operands, broadcast or not, either operand order, float and
int8 models."""

from __future__ import annotations

import re

import numpy as np
import pytest

from delegate.compiler.graph import Builtin

from .test_ops import check, rand
from .test_quant import check_quant, int_bias, qrand, qt
from .test_swish import _kernel_codes
from .tflite_builder import Op, T

#: the operand gathered into a whole vector at a wide point (kernel.WideOps)
WIDE_OPERAND = re.compile(r"FLT(8|16) link\d+_w;")

CONV = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1, "FusedActivationFunction": 0})


@pytest.mark.parametrize(
    ("op", "operand", "first", "act"),
    [
        (Builtin.ADD, "full", False, 1),  # a residual ADD with its ReLU
        (Builtin.SUB, "full", True, 0),  # the operand first: its order kept
        (Builtin.MUL, "pixel", False, 0),  # (1, 1, 1, C): every pixel's channels
        (Builtin.MAXIMUM, "row", True, 0),  # (1, H, 1, 1): one value per row
        (Builtin.ADD, "constant", False, 3),  # a constant (C,), RELU6
        (Builtin.SQUARED_DIFFERENCE, "full", False, 0),
    ],
)  # fmt: skip
@pytest.mark.parametrize(("src", "cout"), [((1, 6, 7, 24), 48), ((2, 3, 5, 16), 64), ((1, 5, 3, 8), 40)])
@pytest.mark.parametrize("precision", ["F32", "F16"])
def test_binary_op_linked_after_a_product_runs_on_whole_vectors(monkeypatch, op, operand, first, act, src, cout,
                                                                precision):  # fmt: skip
    rng = np.random.default_rng(cout + int(op))
    b, h, w, c = src
    out = (b, h, w, cout)
    shape = {"full": out, "pixel": (1, 1, 1, cout), "row": (1, h, 1, 1), "constant": (cout,)}[operand]
    tensors = [T(src), T((cout, 1, 1, c), rand((cout, 1, 1, c), rng)), T((cout,), rand((cout,), rng)), T(out)]
    value = rand(shape, rng)
    tensors.append(T(shape, value) if operand == "constant" else T(shape))
    tensors.append(T(out))
    pair = [4, 3] if first else [3, 4]
    options = ("AddOptions", {"FusedActivationFunction": act}) if op in (Builtin.ADD, Builtin.SUB) else None
    ops = [Op(Builtin.CONV_2D, [0, 1, 2], [3], CONV), Op(op, pair, [5], options)]
    inputs, feeds = ([0], [rand(src, rng)]) if operand == "constant" else ([0, 4], [rand(src, rng), value])
    codes = _kernel_codes(monkeypatch)
    state = check(tensors, ops, inputs, [5], feeds, precision)
    assert [p.kernels for p in state.partitions] == [1]
    assert any(WIDE_OPERAND.search(code) for code in codes), codes


@pytest.mark.parametrize("src", [(1, 9, 11, 32), (1, 4, 4, 64)])
def test_int8_residual_add_after_a_product_runs_on_whole_vectors(monkeypatch, src):
    """An int8 1x1 product then a residual ADD (ResNet's block end): the ADD and both rounding steps
    on the whole accumulators, TFLite's integer kernels' values."""
    rng = np.random.default_rng(src[1])
    b, h, w, c = src
    cout = 64
    out = (b, h, w, cout)
    wq = rng.integers(-127, 128, size=(cout, 1, 1, c)).astype(np.int8)
    w_scales = rng.uniform(0.002, 0.02, size=cout).astype(np.float32)
    weights = T(wq.shape, wq, np.int8, quant=([float(s) for s in w_scales], [0] * cout, 0))
    conv_scale = 0.05 * float(w_scales.mean()) * 64 * np.sqrt(c) / 4
    tensors = [qt(src, 0.05, -7, np.int8), weights, int_bias(w_scales * np.float32(0.05), rng)]
    tensors += [qt(out, conv_scale, 3, np.int8), qt(out, 0.04, -2, np.int8), qt(out, conv_scale * 1.3, -20, np.int8)]
    ops = [
        Op(Builtin.CONV_2D, [0, 1, 2], [3], CONV, version=3),
        Op(Builtin.ADD, [3, 4], [5], ("AddOptions", {"FusedActivationFunction": 1})),
    ]
    codes = _kernel_codes(monkeypatch)
    check_quant(tensors, ops, [0, 4], [5], [qrand(src, rng, np.int8), qrand(out, rng, np.int8)], exact=0.99)
    assert any(WIDE_OPERAND.search(code) for code in codes), codes
