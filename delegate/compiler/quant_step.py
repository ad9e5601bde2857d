"""The rounding step of carried tensors (quant.py) as kernel code: a float result put on its
int8 / uint8 grid as TFLite's integer kernels round it, and that step followed by a table of the
grid's integers (quant_table.py). Kernel code only: the op tables, fusion and the matrix-product
kernels import it, and it imports neither them nor quant.py's graph passes."""

from __future__ import annotations

import numpy as np

from .graph import Carried
from .quant_table import TIE, ByteTable, literal, table_read_code


def codes_code(real: str, grid: Carried) -> str:
    """An int4 expression: the codes of float4 ``real`` (values on ``grid``), offset by
    ``zero_point - low`` to make them unsigned (kernels/cpu/gemm_blocks.pack_integer_weights); each
    lane's low byte is its code (convert_uchar4 keeps it), and a padding lane's 0 meets the real
    zero's. The integer matrix products take their input's codes so, and a tensor carrying codes
    (codes.py) is written so: the same arithmetic, so the same codes."""
    inverse = f"{float(np.float32(1.0 / grid.scale))!r}f"
    # the code is a whole number within float rounding: the half added, the truncating conversion
    # rounds it (saturating, rounding conversions are library calls on PoCL: 6x the kernel's time)
    offset = f"{float(grid.zero_point - grid.low) + 0.5!r}f"
    return f"convert_int4({real} * {inverse} + {offset})"


def _rounded_steps(params: Carried, with_zero_point: bool, width: int, value: str = "result") -> tuple[str, str]:
    """Statements setting float``width`` ``q`` to FLT``width`` ``value`` over ``params``' scale,
    clamped to the type's range and rounded half away from zero (a whole number in float: steps
    from the zero point, or with ``with_zero_point`` the integer itself), and the expression
    adding the half that a truncation then rounds with (``qdq_code``)."""
    zero = literal(params.zero_point)
    # times the reciprocal rather than over the scale: a division's throughput is a fifth of a
    # product's, and the ulp it may differ by is far inside TIE
    scaled = f"convert_float{width}({value}) * {literal(1.0 / params.scale)}"
    scaled += f" + {zero}" if with_zero_point else ""
    # Clamped before rounding: the bounds are whole steps, so rounding cannot leave them, and
    # ordered so that NaN takes the low bound (TFLite's integers hold no NaN). Rounding half away
    # from zero is a truncation of q + copysign(1/2, q), not round() / floor(), which are
    # out-of-line calls on PoCL; TIE added to the half takes a value within float rounding of a
    # tie (x.5) for the tie, which TFLite's exact integer arithmetic (pooling, equal scales)
    # rounds away from zero.
    shift = 0.0 if with_zero_point else float(params.zero_point)
    low, high = literal(params.low - shift), literal(params.high - shift)
    half = literal(0.5 + TIE)
    # A grid whose low end is at or above zero (a ReLU's output, zero point at the type's low end;
    # uint8 counted with its zero point) leaves no negative q after the clamp (NaN and -0 take
    # +0): the half is added as it is, without the sign's two operations (a third of the step).
    # Else the half takes q's sign by a float comparison, not by q's bits (as_uint): an integer
    # view of q turns the clamps' selects into integer compare-and-blend pairs, two operations
    # each, where the float ones are one max / min (same values: -0 and +0 both round to 0, and
    # the clamp left no NaN).
    if params.low - shift >= 0:
        rounded = f"q + {half}"
    else:
        rounded = f"q + (q < 0.0f ? (float{width})(-{half}) : (float{width})({half}))"
    statements = f"    float{width} q = {scaled};\n    q = q > {low} ? q : {low};\n    q = q < {high} ? q : {high};\n"
    return statements, rounded


def qdq_code(params: Carried, with_zero_point: bool = False, width: int = 4) -> str:
    """Statements putting FLT``width`` ``result`` on ``params``' grid: TFLite rounds half away
    from zero, the real value over the scale (requantization, QUANTIZE), or ``with_zero_point``
    that plus the zero point (``Traits.rounds_with_zero_point``). A function of each lane alone:
    a kernel with wider vectors (kernel.WideOps) runs it once per vector."""
    statements, rounded = _rounded_steps(params, with_zero_point, width)
    zero = literal(params.zero_point)
    return (
        "  {\n" + statements + f"    q = convert_float{width}(convert_int{width}({rounded}));\n"
        f"    result = TO_FLT{width}(({'q - ' + zero if with_zero_point else 'q'}) * {literal(params.scale)});\n"
        "  }\n"
    )


def rounded_codes_code(value: str, grid: Carried, width: int, name: str) -> str:
    """A block setting int``width // 4`` ``name`` to the codes of FLT``width`` ``value`` rounded onto
    ``grid`` as ``qdq_code`` rounds it (clamped, half away from zero), made unsigned and packed four
    to an int as ``codes_code`` packs them: the codes of the value ``qdq_code`` would have written,
    for a product that takes a value off its grid as codes (a gated read, gated_read.py)."""
    statements, rounded = _rounded_steps(grid, False, width, value)
    packed = f"int{width // 4}" if width > 4 else "int"
    offset = grid.zero_point - grid.low
    return (
        f"  {packed} {name};\n  {{\n{statements}"
        f"    {name} = as_{packed}(convert_uchar{width}(convert_int{width}({rounded}) + {offset}));\n  }}\n"
    )


def rounded_lookup_code(params: Carried, entries: str, width: int = 4, codes: ByteTable | None = None) -> str:
    """``qdq_code`` onto ``params``' grid followed by a table of that grid's integers
    (quant_table.lookup_code, element i read by ``entries``'s ``Read(i)``), as one step: the
    rounded integer is the table's index, without going back to a real value and over the scale
    again. The same entries: the lookup recovers that integer from the real value exactly.
    ``codes``: the same table as codes (quant_table.table_read_code)."""
    statements, rounded = _rounded_steps(params, False, width)
    # the clamp kept q within the type's range less the zero point: the index is in the table
    return (
        "  {\n"
        + statements
        + f"    int{width} lut_i = convert_int{width}({rounded}) + {params.zero_point - params.low};\n"
        + table_read_code(entries, width, codes)
        + "  }\n"
    )
