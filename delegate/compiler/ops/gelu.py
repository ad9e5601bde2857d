"""GELU, x * P(X <= x) for a standard normal X, as TFLite's builtin computes it: the exact form
0.5 x (1 + erf(x / sqrt 2)), or with option ``approximate`` the tanh form
0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). A unary op: a kernel of its own, or linked
into its producer's (fusion.py)."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from ..graph import Builtin, Node
from ..kernels.common.math_code import erf_code, tanh_code
from .elementwise import UnaryOp, UnarySpec
from .traits import Quantization, Traits

_ERF = np.vectorize(math.erf, otypes=[np.float64])


def _exact(x: np.ndarray) -> np.ndarray:
    """The exact form on real values (an int8 / uint8 table's, quant_table.py)."""
    return 0.5 * x * (1.0 + _ERF(x / math.sqrt(2.0)))


def _tanh_form(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def _exact_code(width: int = 4) -> str:
    """The exact form on FLT``width`` ``result``, in float``width``."""
    return (
        f"{{ float{width} gelu_x = convert_float{width}(result), gelu_e;\n    "
        + erf_code("gelu_e", "gelu_x * 0.70710678f", width)
        + f"\n    result = TO_FLT{width}(0.5f * gelu_x * (1.0f + gelu_e)); }}"
    )


def _tanh_form_code(width: int = 4) -> str:
    """The tanh form on FLT``width`` ``result``; x^3 as products: PoCL calls pow (ops/elementwise.py,
    SQUARE)."""
    return (
        f"{{ float{width} gelu_x = convert_float{width}(result), gelu_t;\n    "
        + tanh_code("gelu_t", "0.79788456f * (gelu_x + 0.044715f * gelu_x * gelu_x * gelu_x)", width)
        + f"\n    result = TO_FLT{width}(0.5f * gelu_x * (1.0f + gelu_t)); }}"
    )


# in float, with math_code's arithmetic erf and tanh: PoCL calls erf and tanh one value at a time;
# ``wide``: a matrix product's whole FLT16 (FLT8) accumulators take it once per vector (fusion.py),
# the division and polynomials a quarter (half) as many instructions as per FLT4 slice
_EXACT = UnarySpec(_exact_code(), real=_exact, wide=_exact_code)
_TANH = UnarySpec(_tanh_form_code(), real=_tanh_form, wide=_tanh_form_code)


class Gelu(UnaryOp):
    codes = (Builtin.GELU,)
    #: TFLite's int8 / uint8 GELU looks up the real value rounded onto the output's grid
    code_traits: ClassVar[dict[int, Traits]] = {Builtin.GELU: Traits(quantization=Quantization.REQUANTIZES)}

    def spec(self, node: Node) -> UnarySpec:
        return _TANH if node.params.get("approximate") else _EXACT


OP = Gelu()
