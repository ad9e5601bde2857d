"""GELU, exact (erf) and approximate (tanh), through the delegate against TFLite's builtin kernel:
alone, and linked into the kernel of the op before it (fusion.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from delegate.compiler.graph import Builtin

from .test_ops import EXAMPLES, check, precisions, rand, seeds, shapes
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
