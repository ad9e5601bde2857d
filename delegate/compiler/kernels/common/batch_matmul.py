"""BATCH_MATMUL's kernels (selectors/batch_matmul.py picks one): [..., M, K] x [..., K, N] in the
runtime's 4-D view, M the width, K or N the channels, batch dims broadcast through
``Height() == 1`` / ``Batch() == 1``.

- ``plain_code``: one output FLT4 per work-item, each lane's dot product read one component at a
  time; any transposition (adj_x, adj_y).
- ``rows_code``: ``rows`` consecutive output rows (M) per work-item and one slice of N, reading
  the left operand a whole slice of K at a time and each right-operand FLT4 once for all the
  rows: attention's Q x K^T (adj_y) and its weights x V. The last slice of K is masked, so
  padding lanes never enter a sum.
"""

from __future__ import annotations

from ...kernel import LANE_MASK, WRITE, Piece
from .pieces import HEAD, LANES, written

#: operand rows and batches, broadcast where the operand has one
_BROADCAST = """  int yl = args.lhs.Height() == 1 ? 0 : Y, bl = args.lhs.Batch() == 1 ? 0 : b;
  int yr = args.rhs.Height() == 1 ? 0 : Y, br = args.rhs.Batch() == 1 ? 0 : b;
"""


def plain_code(adj_x: bool, adj_y: bool) -> list[Piece]:
    """One output FLT4 per work-item, component by component."""
    lhs = (
        "dlg_component(args.lhs.Read(kk, yl, X / 4, bl), X % 4)"
        if adj_x
        else "dlg_component(args.lhs.Read(X, yl, kk / 4, bl), kk % 4)"
    )
    rhs = (
        "dlg_component(args.rhs.Read(n, yr, kk / 4, br), kk % 4)"
        if adj_y
        else "dlg_component(args.rhs.Read(kk, yr, n / 4, br), n % 4)"
    )
    depth = "args.lhs.Width()" if adj_x else "args.lhs.Channels()"
    return written(
        LANES
        + HEAD
        + _BROADCAST
        + f"""  FLT4 result = INIT_FLT4(0.0f);
  for (int k = 0; k < 4; ++k) {{
    int n = S * 4 + k;
    if (n >= args.dst_tensor.Channels()) break;
    float acc = 0.0f;
    for (int kk = 0; kk < {depth}; ++kk) {{
      acc += (float){lhs} * (float){rhs};
    }}
    result = dlg_set(result, k, (FLT)acc);
  }}
"""
    )


def _head(rows: int) -> str:
    return f"""
MAIN_FUNCTION($0) {{
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  if (gx >= ((W + {rows - 1}) / {rows}) * B || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  int X0 = gx * {rows}, b = 0;
  if (B != 1) {{ X0 = (gx / B) * {rows}; b = gx % B; }}
"""


def _masked(var: str, left: str) -> str:
    """Zero the lanes of FLT4 ``var`` from ``left`` on (the padding past K)."""
    return (
        f"      if ({left} < 4) {var}.w = (FLT)(0.0f);\n"
        f"      if ({left} < 3) {var}.z = (FLT)(0.0f);\n"
        f"      if ({left} < 2) {var}.y = (FLT)(0.0f);\n"
    )


def rows_code(rows: int, adj_y: bool) -> list[Piece]:
    """``rows`` output rows x one slice of N per work-item (adj_x false). Rows past M read row M - 1
    (their results are never written); with adj_y, right-operand rows past N read row N - 1
    (their lanes are masked at the write)."""
    parts: list[Piece] = [_head(rows), _BROADCAST]
    parts.append("  int K = args.lhs.Channels();\n  int slices = (K + 3) / 4;\n")
    parts += [f"  int x{p} = X0 + {p} < W ? X0 + {p} : W - 1;\n" for p in range(rows)]
    parts += [f"  ACCUM_FLT4 a{p} = INIT_ACCUM_FLT4(0.0f);\n" for p in range(rows)]
    parts.append("  for (int s = 0; s < slices; ++s) {\n    int left = K - s * 4;\n")
    if adj_y:  # rhs is [..., N, K]: four rows of it, each a slice of K
        parts.append("    int last = args.rhs.Width() - 1;\n")
        for j in range(4):
            parts.append(f"    FLT4 r{j} = args.rhs.Read(S * 4 + {j} < last ? S * 4 + {j} : last, yr, s, br);\n")
        parts.append("    if (left < 4) {\n" + "".join(_masked(f"r{j}", "left") for j in range(4)) + "    }\n")
        for p in range(rows):
            parts.append(f"    {{\n      FLT4 l = args.lhs.Read(x{p}, yl, s, bl);\n")
            parts.append("      if (left < 4) {\n" + _masked("l", "left") + "      }\n")
            dots = [f"l.x * r{j}.x + l.y * r{j}.y + l.z * r{j}.z + l.w * r{j}.w" for j in range(4)]
            parts.append(f"      a{p} += TO_ACCUM_FLT4((FLT4)({', '.join(dots)}));\n    }}\n")
    else:  # rhs is [..., K, N]: the rows of this slice of K, each an FLT4 of N
        for j in range(4):
            parts.append(f"    FLT4 r{j} = {j} < left ? args.rhs.Read(s * 4 + {j}, yr, S, br) : INIT_FLT4(0.0f);\n")
        for p in range(rows):
            parts.append(f"    {{\n      FLT4 l = args.lhs.Read(x{p}, yl, s, bl);\n")
            parts.append("      if (left < 4) {\n" + _masked("l", "left") + "      }\n")
            parts.append(f"      a{p} += TO_ACCUM_FLT4(l.x * r0 + l.y * r1 + l.z * r2 + l.w * r3);\n    }}\n")
    parts.append("  }\n")
    parts.append(f"  FLT4 outs[{rows}];\n")
    parts.append("".join(f"  outs[{p}] = TO_FLT4(a{p});\n" for p in range(rows)))
    parts.append(
        f"""  for (int i = 0; i < {rows}; ++i) {{
    int X = X0 + i;
    if (X >= W) break;
    FLT4 result = outs[i];
"""
    )
    parts += [LANE_MASK, WRITE, "}\n"]
    return parts
