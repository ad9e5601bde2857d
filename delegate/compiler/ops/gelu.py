"""GELU, x * P(X <= x) for a standard normal X, as TFLite's builtin computes it: the exact form
0.5 x (1 + erf(x / sqrt 2)), or with option ``approximate`` the tanh form
0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))). A unary op: a kernel of its own, or linked
into its producer's (fusion.py)."""

from __future__ import annotations

from typing import ClassVar

from ..graph import Builtin, Node
from .elementwise import UnaryOp, UnarySpec
from .traits import Quantization, Traits

_EXACT = UnarySpec("result = INIT_FLT4(0.5f) * result * (INIT_FLT4(1.0f) + erf(result * INIT_FLT4(0.70710678f)));")
# x^3 as products: PoCL calls pow (ops/elementwise.py, SQUARE)
_TANH = UnarySpec(
    "result = INIT_FLT4(0.5f) * result * (INIT_FLT4(1.0f) + tanh(INIT_FLT4(0.79788456f) * "
    "(result + INIT_FLT4(0.044715f) * result * result * result)));"
)


class Gelu(UnaryOp):
    codes = (Builtin.GELU,)
    #: TFLite's int8 / uint8 GELU looks up the real value rounded onto the output's grid
    code_traits: ClassVar[dict[int, Traits]] = {Builtin.GELU: Traits(quantization=Quantization.REQUANTIZES)}

    def spec(self, node: Node) -> UnarySpec:
        return _TANH if node.params.get("approximate") else _EXACT


OP = Gelu()
