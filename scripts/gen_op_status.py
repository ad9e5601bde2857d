#!/usr/bin/env python3
"""Writes the op status table of docs/ops.md (between its op-status markers): every op the
compiler runs, with its float, int8 / uint8 and dynamic-range status, read from the compiler's own
tables: ``compiler.ops.OPS`` and ``CUSTOM_OPS`` (float), each op's traits (``Op.traits``,
compiler/ops/traits.py: its quantization for int8 / uint8, its hybrid weights for dynamic range)
and ``quant.output_grid_problem``. tests/test_op_status.py fails when the committed table is not what this writes:
then run ``python scripts/gen_op_status.py`` and commit the result.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from delegate.compiler.graph import Builtin, op_name  # noqa: E402
from delegate.compiler.int_ranges import ARITHMETIC  # noqa: E402
from delegate.compiler.ops import CUSTOM_OPS, OPS, Quantization, traits_of  # noqa: E402
from delegate.compiler.ops.comparison import Cast, Compare, Logical, Select  # noqa: E402

DOC = ROOT / "docs" / "ops.md"
BEGIN, END = "<!-- op-status:begin -->", "<!-- op-status:end -->"

#: folded at compile time, not run by a kernel of their own (claim.py, fold.py)
_FOLDED = {
    Builtin.DEQUANTIZE: "folded: fp16 / int8 weights become float constants",
    Builtin.DENSIFY: "folded: sparse weights become dense constants",
}
#: outputs on a grid TFLite's integer kernel assumes (quant.py ``output_grid_problem``)
_FIXED_GRID = {Builtin.LOGISTIC: "output scale 1/256", Builtin.SOFTMAX: "TFLite's output grid"}
_LOGIC = (Compare, Logical, Select, Cast)


def _float(code: int) -> str:
    if code in _FOLDED:
        return _FOLDED[code]
    if code == Builtin.QUANTIZE:
        return "n/a (its output is quantized: next column)"
    if isinstance(OPS.get(code), _LOGIC):
        return "delegate (bool / int32 tensors)"
    if code in ARITHMETIC:
        return "delegate (int32 too, results within 2^24)"
    return "delegate"


def _int8(code: int) -> str:
    if code == Builtin.DENSIFY:
        return "n/a (float weights)"
    quantization = traits_of(code).quantization
    if quantization is Quantization.NONE:
        return "CPU: no quantized form in the compiler"
    if quantization is Quantization.KEEPS_INTEGERS:
        return "delegate (one quantization in and out, as TFLite's kernel keeps the integers)"
    if code in _FIXED_GRID:
        return f"delegate ({_FIXED_GRID[code]})"
    return "delegate"


def _dynamic(code: int) -> str:
    if traits_of(code).hybrid_weights is not None:
        return "delegate (int8 weights dequantized at compile time)"
    return "n/a (no weights)"


def table() -> str:
    """The table, as docs/ops.md holds it between the markers."""
    codes = sorted({*(c for c in OPS if c >= 0), *_FOLDED}, key=op_name)  # < 0: compiler-internal ops
    rows = ["| op | float32 | int8 / uint8 | dynamic range |", "| --- | --- | --- | --- |"]
    rows += [f"| {op_name(code)} | {_float(code)} | {_int8(code)} | {_dynamic(code)} |" for code in codes]
    for name in sorted(CUSTOM_OPS):
        rows.append(f"| {name} (MediaPipe custom op) | delegate | CPU: float32 only, as MediaPipe's own kernel | n/a |")
    return "\n".join(rows) + "\n"


def written(doc: str) -> str:
    """``doc`` with the table between the markers replaced by ``table()``."""
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table()}{END}{tail}"


def main() -> int:
    DOC.write_text(written(DOC.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
