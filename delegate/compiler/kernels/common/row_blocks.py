"""Kernels whose work-item computes consecutive output pixels of one row (the depthwise and pooling
row kernels, and the matrix products' row kernels): their opening and the loads of one window row's input columns."""

from __future__ import annotations

from collections.abc import Callable


def rows_head(pixels: int, slice_var: str, slice_init: str) -> str:
    """Opening of a kernel whose work-item computes ``pixels`` consecutive output pixels (rows of
    a matrix product) of one row: ``B``, ``W``, ``X0`` (the first pixel), ``Y``, ``b`` and the
    slice ``slice_var`` (= ``slice_init``). Work-items past the output return."""
    return f"""
MAIN_FUNCTION($0) {{
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int {slice_var} = {slice_init};
  if (gx >= ((W + {pixels - 1}) / {pixels}) * B || Y >= args.dst_tensor.Height()) return;
  if ({slice_var} >= args.dst_tensor.Slices()) return;
  int X0 = gx * {pixels}, b = 0;
  if (B != 1) {{ X0 = (gx / B) * {pixels}; b = gx % B; }}
"""


def row_block_head(pixels: int, sw: int, pw: int, slice_var: str, slice_init: str) -> str:
    """``rows_head``, then the input's ``iw`` / ``ih`` and ``xi``, the input column of the block's
    window (stride ``sw``, padding ``pw``)."""
    return rows_head(pixels, slice_var, slice_init) + (
        f"  int iw = args.src_tensor.Width(); int ih = args.src_tensor.Height();\n  long xi = X0 * {sw} - {pw};\n"
    )


def window_row_loads(columns: list[int], load: Callable[[int], str], vtype: str, outside: str) -> list[str]:
    """Declare and load ``r{j}`` for every input column ``xi + j`` one window row needs (``row``:
    the row's linear offset). Work-items away from the left and right edges (most of them) load
    without checks; the others take ``outside`` for columns outside the input."""
    parts = ["      " + vtype + " " + ", ".join(f"r{j}" for j in columns) + ";\n"]
    parts.append(f"      if (xi >= 0 && xi + {columns[-1]} < iw) {{\n")
    parts += [f"        r{j} = {load(j)};\n" for j in columns]
    parts.append("      } else {\n")
    parts += [f"        r{j} = (xi + {j} >= 0 && xi + {j} < iw) ? {load(j)} : {outside};\n" for j in columns]
    parts.append("      }\n")
    return parts


def streamed_row_loads(columns: list[int], load: Callable[[int], str], vtype: str,
                       taps: dict[int, list[tuple[int, int]]]) -> list[str]:  # fmt: skip
    """Load every input column ``xi + j`` one window row needs and multiply it at once into the
    accumulators it feeds: ``a{p} += r * k{t}`` for (p, t) in ``taps[j]``. Only the weights, the
    accumulators and one column are live, rather than the whole row of columns
    (``window_row_loads``): a depthwise row of 8 pixels x 16 channels ran 15-20% faster so. Work-items
    away from the left and right edges load without checks; the others take zero outside the input."""

    def row(checked: bool) -> list[str]:
        out = []
        for j in columns:
            value = load(j)
            if checked:
                value = f"((xi + {j} >= 0 && xi + {j} < iw) ? {value} : ({vtype})(0.0f))"
            out.append(f"        {{\n        {vtype} r = {value};\n")
            out += [f"        a{p} += r * k{t};\n" for p, t in taps[j]]
            out.append("        }\n")
        return out

    return [
        f"      if (xi >= 0 && xi + {columns[-1]} < iw) {{\n",
        *row(False),
        "      } else {\n",
        *row(True),
        "      }\n",
    ]
