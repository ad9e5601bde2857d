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

On devices with AVX512-VBMI (CompileOptions.byte_lookup) a kernel's 16-wide vectors read the
table's codes instead (``ByteTable``): two byte permutes look up 64 lanes, where 16 loads and the
inserts gathering them took a fifth of the int8 EfficientNet-B0's time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ByteTable:
    """A table's entries as the codes of their grid (``byte_table``), for devices that look bytes up
    64 at a time (CompileOptions.byte_lookup): ``entries``, the expression of its buffer object."""

    entries: str
    grid: Carried


#: the lanes of a 16-lane vector, in order (a shuffle's selector)
_LANES16 = ", ".join(str(lane) for lane in range(16))


def byte_table(values: np.ndarray, grid: Carried) -> bytes | None:
    """The 256 codes (integer less ``grid``'s low end) of a table's ``values``, on ``grid``, padded
    with zeros, where ``byte_read_code`` recovers every value exactly from its code; else None."""
    values = np.asarray(values, np.float32)
    codes = np.rint(values.astype(np.float64) / grid.scale) + (grid.zero_point - grid.low)
    if values.size > 256 or np.isnan(codes).any() or codes.min(initial=0) < 0 or codes.max(initial=0) > 255:
        return None
    steps = (codes - (grid.zero_point - grid.low)).astype(np.float32)
    if not np.array_equal(steps * np.float32(grid.scale), values):
        return None
    return np.pad(codes.astype(np.uint8), (0, 256 - values.size)).tobytes()


def byte_read_code(table: ByteTable) -> str:
    """A block setting FLT16 ``result`` to entry ``lut_i`` (an int16 of indices in 0..255) of the
    table whose codes ``table`` holds: two 128-byte permutes (AVX512-VBMI, one instruction per 64
    lanes) in place of 16 loads and the 15 inserts that gather them, and the code's value as
    ``grid_values`` makes it (whole steps times the scale), so the same float."""
    grid = table.grid
    return (
        "    {\n"
        "      typedef char dlg_char64 __attribute__((ext_vector_type(64)));\n"
        "      typedef dlg_char64 dlg_char64_u __attribute__((aligned(1)));\n"
        f"      __global const dlg_char64_u* lut_t = (__global const dlg_char64_u*){table.entries}.GetPtr();\n"
        "      char16 lut_b = as_char16(convert_uchar16(lut_i));\n"
        f"      dlg_char64 lut_w = __builtin_shufflevector(lut_b, lut_b, {', '.join([_LANES16] * 4)});\n"
        "      dlg_char64 lut_lo = __builtin_ia32_vpermi2varqi512(lut_t[0], lut_w, lut_t[1]);\n"
        "      dlg_char64 lut_hi = __builtin_ia32_vpermi2varqi512(lut_t[2], lut_w, lut_t[3]);\n"
        "      dlg_char64 lut_s = lut_w < (dlg_char64)(0) ? lut_hi : lut_lo;\n"
        f"      uchar16 lut_c = as_uchar16(__builtin_shufflevector(lut_s, lut_s, {_LANES16}));\n"
        f"      result = TO_FLT16(convert_float16(convert_int16(lut_c) - {grid.zero_point - grid.low})"
        f" * {literal(grid.scale)});\n"
        "    }\n"
    )


def table_read_code(entries: str, width: int, codes: ByteTable | None = None) -> str:
    """A statement setting FLT``width`` ``result`` to the entries at int``width`` ``lut_i`` of the
    table read by ``entries``'s ``Read(i)``; at width 16 through ``codes`` where given."""
    if codes is not None and width == 16:
        return byte_read_code(codes)
    read = ", ".join(f"{entries}.Read(lut_i.{lane})" for lane in lanes(width))
    return f"    result = (FLT{width})({read});\n"


def lookup_code(src: Carried, entries: str, width: int = 4, codes: ByteTable | None = None) -> str:
    """Statements replacing FLT``width`` ``result``, a value on ``src``'s grid, by its entry in the
    table whose element i is read by ``entries``'s ``Read(i)`` (a buffer object of ``table``'s values);
    ``codes``: the same table as codes (``table_read_code``)."""
    last = src.high - src.low
    # result / scale is the integer less the zero point to within float32's error (far under a
    # half step): adding the offset of the grid's low end and a half, the truncation is the index.
    # Clamped, so that no value (a NaN, an input not on the grid) reads outside the table.
    offset = literal(src.zero_point - src.low + 0.5)
    scaled = f"convert_float{width}(result) * {literal(1.0 / src.scale)} + {offset}"
    return (
        "  {\n"
        f"    int{width} lut_i = convert_int{width}({scaled});\n"
        "    lut_i = lut_i > 0 ? lut_i : 0;\n"
        f"    lut_i = lut_i < {last} ? lut_i : {last};\n" + table_read_code(entries, width, codes) + "  }\n"
    )
