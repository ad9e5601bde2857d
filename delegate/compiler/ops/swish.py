"""Swish, x * sigmoid(x), as one unary op: the op the swish rewrite (compiler/swish.py) puts in
place of the LOGISTIC and MUL that Keras models (EfficientNet) write for it. Compiler-internal: no
TFLite node has its code. A unary op like the others: linked into the kernel producing its input
(fusion.py), or one kernel of its own, where the two nodes took two kernels and a tensor between.

Params: ``gate_grid``, the quantization of the LOGISTIC's output when it was carried in float
(compiler/quant.py): the sigmoid is rounded onto that grid before the product, as TFLite's integer
LOGISTIC writes it (scale 1/256) and its MUL reads it. ``fused_names``: the two nodes' names."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..graph import Activation, Carried, Graph, Node
from ..kernels.common.pieces import activation_code
from ..quant_step import qdq_code
from ..quant_table import RealFunction, grid_values
from .elementwise import UnaryOp, UnarySpec, logistic
from .traits import Quantization, Traits

#: the compiler-internal code of the fused node (TFLite's codes are non-negative)
SWISH = -3


def swish_code(gate_grid: Carried | None, width: int = 4) -> str:
    """Statements turning FLT``width`` ``result`` into result * sigmoid(result): the LOGISTIC's
    code, its output's rounding when carried (FLT4 only), then the MUL's product, each as the
    unfused nodes compute it."""
    gate = qdq_code(gate_grid) if gate_grid is not None else ""
    return (
        f"{{ FLT{width} swish_x = result;\n    "
        + activation_code(Activation.SIGMOID, width=width)
        + "\n"
        + gate
        + "    result = swish_x * result; }"
    )


def swish_real(gate_grid: Carried | None) -> RealFunction:
    """x * sigmoid(x) on real values, the sigmoid rounded onto ``gate_grid`` when it was carried."""

    def real(x: np.ndarray) -> np.ndarray:
        gate = logistic(x)
        return x * (grid_values(gate, gate_grid) if gate_grid is not None else gate)

    return real


class Swish(UnaryOp):
    codes = (SWISH,)
    #: computed in real values and rounded onto its output's grid, like the MUL it ends with; small
    #: values stay small (x * sigmoid(x) is about x / 2 near 0), so half-precision storage treats
    #: its input as it treated the MUL's (precision.py)
    code_traits: ClassVar[dict[int, Traits]] = {SWISH: Traits(quantization=Quantization.REQUANTIZES, keeps_small=True)}

    def wide_link(self, node: Node, graph: Graph, width: int) -> str | None:
        """On a wider vector when nothing is rounded: no gate grid, no table (lookup)."""
        if node.params.get("gate_grid") is not None or self.lookup(node, graph) is not None:
            return None
        return "    " + swish_code(None, width) + "\n"

    def spec(self, node: Node) -> UnarySpec:
        gate_grid = node.params.get("gate_grid")
        return UnarySpec(swish_code(gate_grid), real=swish_real(gate_grid))


OP = Swish()
