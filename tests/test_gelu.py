"""GELU, exact (erf) and approximate (tanh), through the delegate against TFLite's builtin kernel:
alone, and linked into the kernel of the op before it (fusion.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegate.compiler.graph import Builtin

from .test_ops import EXAMPLES, check, precisions, rand, seeds, shapes
from .test_swish import _kernel_codes
from .tflite_builder import Op, T

pytestmark = pytest.mark.opencl


def _gelu(approximate: bool, inputs: list[int], outputs: list[int]) -> Op:
    return Op(Builtin.GELU, inputs, outputs, ("GeluOptions", {"Approximate": approximate}))


@EXAMPLES
@given(shape=shapes, seed=seeds, precision=precisions, approximate=st.booleans())
def test_gelu(shape, seed, precision, approximate):
    x = rand(shape, np.random.default_rng(seed), -5.0, 5.0)
    check([T(shape), T(shape)], [_gelu(approximate, [0], [1])], [0], [1], [x], precision)


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_linked_after_add(approximate):
    """ADD then GELU: one kernel, the GELU linked into the ADD's, still TFLite's answer."""
    shape = (1, 5, 7, 10)
    rng = np.random.default_rng(3)
    x, y = rand(shape, rng, -4.0, 4.0), rand(shape, rng, -4.0, 4.0)
    ops = [Op(Builtin.ADD, [0, 1], [2]), _gelu(approximate, [2], [3])]
    state = check([T(shape)] * 4, ops, [0, 1], [3], [x, y])
    assert len(state.delegated_nodes) == 2


#: a GELU computed on a whole wide vector of a matrix product's accumulators (kernel.WideOps)
WIDE_GELU = re.compile(r"float(8|16) gelu_x = convert_float(8|16)\(result\)")


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize(
    ("rows", "cin", "cout", "precision"), [(64, 24, 40, "F32"), (13, 16, 16, "F32"), (13, 16, 16, "F16")]
)
def test_gelu_after_fully_connected_runs_once_on_each_whole_vector(
    monkeypatch, approximate, rows, cin, cout, precision
):
    """A FULLY_CONNECTED then GELU (a transformer's or MLP-Mixer's channel MLP): the GELU runs on the
    product's whole FLT8 / FLT16 vectors before their FLT4 parts are written, not on each part
    (its polynomials and division a quarter as many instructions at 16 lanes), still TFLite's
    answer, edge blocks and a part-padding last group included."""
    rng = np.random.default_rng(rows + cout)
    weights = rand((cout, cin), rng, -0.5, 0.5)
    tensors = [T((1, rows, cin)), T((cout, cin), weights), T((cout,), rand((cout,), rng))]
    tensors += [T((1, rows, cout)), T((1, rows, cout))]
    options = ("FullyConnectedOptions", {"FusedActivationFunction": 0, "KeepNumDims": True})
    ops = [Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], options), _gelu(approximate, [3], [4])]
    codes = _kernel_codes(monkeypatch)
    state = check(tensors, ops, [0], [4], [rand((1, rows, cin), rng, -3.0, 3.0)], precision)
    assert sum(p.kernels for p in state.partitions) == 1
    assert any(WIDE_GELU.search(code) for code in codes), codes
