"""Unary ops on int8 / uint8 values carried in float (quant.py) as tables of their integers.

A unary op whose input and output are carried tensors sees at most 256 input values, those of
its input's grid. Where the op says what it computes on real values (``UnarySpec.real``:
LOGISTIC, TANH, HARD_SWISH, GELU, the fused swish), its result for each of them, rounded onto
the output's grid as the quantize-and-dequantize step rounds (``grid_values``), is computed once
at compile time in float64 (``table``), and the kernel looks it up by the input's integer
(``lookup_code``): an index and one load per lane, in place of the op's arithmetic and of the
rounding step after it, which the values are on already. TFLite's integer LOGISTIC, TANH and GELU
are tables of the real function too; an int8 swish in a kernel took three rounding steps and a
sigmoid per value, twice the time of the float model's (EfficientNet).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .graph import Carried

#: how close to a tie (in steps) a value is taken for the tie: float32's error on a result of a
#: few hundred steps summed from a few thousand terms stays below it
TIE = 1.0 / 1024

#: an op's function on real values (float64 in and out), elementwise
RealFunction = Callable[[np.ndarray], np.ndarray]


def literal(v: float) -> str:
    """``v`` as a float32 OpenCL literal."""
    return f"{float(np.float32(v))!r}f"


def grid_values(values: np.ndarray, grid: Carried) -> np.ndarray:
    """Real ``values`` rounded onto ``grid`` as quant_step.qdq_code rounds them (over the scale,
    clamped to the type's range, half away from zero within TIE, NaN to the low bound), in float32."""
    low, high = grid.low - grid.zero_point, grid.high - grid.zero_point
    v = np.asarray(values, np.float64) / grid.scale
    v = np.clip(np.where(np.isnan(v), low, v), low, high)
    steps = np.trunc(v + np.copysign(0.5 + TIE, v))
    return steps.astype(np.float32) * np.float32(grid.scale)


def carried_inputs(grid: Carried) -> np.ndarray:
    """Every value a tensor carried on ``grid`` holds, in its integers' order (float32 as the
    kernels hold them, in float64)."""
    q = np.arange(grid.low, grid.high + 1, dtype=np.float64)
    return ((q - grid.zero_point).astype(np.float32) * np.float32(grid.scale)).astype(np.float64)


def table(real: RealFunction, src: Carried, dst: Carried) -> np.ndarray:
    """``real`` at each value of ``src``'s grid, on ``dst``'s grid: the float32 table ``lookup_code`` reads."""
    with np.errstate(all="ignore"):
        return grid_values(real(carried_inputs(src)), dst)


def lanes(width: int) -> list[str]:
    """The lane names of a vector of ``width`` (4: x, y, z, w; else s0, s1, ...)."""
    return list("xyzw") if width == 4 else [f"s{lane:x}" for lane in range(width)]


def lookup_code(src: Carried, entries: str, width: int = 4) -> str:
    """Statements replacing FLT``width`` ``result``, a value on ``src``'s grid, by its entry in the
    table whose element i is read by ``entries``'s ``Read(i)`` (a buffer object of ``table``'s values)."""
    last = src.high - src.low
    # result / scale is the integer less the zero point to within float32's error (far under a
    # half step): adding the offset of the grid's low end and a half, the truncation is the index.
    # Clamped, so that no value (a NaN, an input not on the grid) reads outside the table.
    offset = literal(src.zero_point - src.low + 0.5)
    scaled = f"convert_float{width}(result) * {literal(1.0 / src.scale)} + {offset}"
    read = ", ".join(f"{entries}.Read(lut_i.{lane})" for lane in lanes(width))
    return (
        "  {\n"
        f"    int{width} lut_i = convert_int{width}({scaled});\n"
        "    lut_i = lut_i > 0 ? lut_i : 0;\n"
        f"    lut_i = lut_i < {last} ? lut_i : {last};\n"
        f"    result = (FLT{width})({read});\n"
        "  }\n"
    )
