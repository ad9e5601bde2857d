"""BATCH_MATMUL's kernels (selectors/batch_matmul.py picks one): [..., M, K] x [..., K, N] in the
runtime's 4-D view, M the width, K or N the channels, batch dims broadcast through
``Height() == 1`` / ``Batch() == 1``.

- ``rows_code``: ``rows`` consecutive output rows (M) per work-item and one slice of N, reading
  the left operand a whole slice of K at a time and each right-operand FLT4 once for all the
  rows: attention's Q x K^T (adj_y) and its weights x V. The last slice of K is masked, so
  padding lanes never enter a sum.
- ``slice_rows_code``: a transposed left operand (adj_x, [..., K, M]), whose slices of channels
  are 4 output rows each: a work-item computes those 4 rows x one slice of N, one FLT4 of the
  left operand and one of the right per k (with adj_y, four rows of the right operand per slice
  of K, turned into four rows of N).
"""

from __future__ import annotations

from ...kernel import LANE_MASK, WRITE, Piece
from .row_blocks import rows_head

#: operand rows and batches, broadcast where the operand has one
_BROADCAST = """  int yl = args.lhs.Height() == 1 ? 0 : Y, bl = args.lhs.Batch() == 1 ? 0 : b;
  int yr = args.rhs.Height() == 1 ? 0 : Y, br = args.rhs.Batch() == 1 ? 0 : b;
"""


def _masked(var: str, left: str) -> str:
    """Zero the lanes of FLT4 ``var`` from ``left`` on (the padding past K)."""
    return (
        f"      if ({left} < 4) {var}.w = (FLT)(0.0f);\n"
        f"      if ({left} < 3) {var}.z = (FLT)(0.0f);\n"
        f"      if ({left} < 2) {var}.y = (FLT)(0.0f);\n"
    )


def _row_writes(rows: int) -> list[Piece]:
    """The masked writes of accumulators ``a0`` .. of ``rows`` output rows from ``X0``: rows past M
    are not written."""
    parts: list[Piece] = [f"  FLT4 outs[{rows}];\n"]
    parts.append("".join(f"  outs[{p}] = TO_FLT4(a{p});\n" for p in range(rows)))
    parts.append(
        f"""  for (int i = 0; i < {rows}; ++i) {{
    int X = X0 + i;
    if (X >= W) break;
    FLT4 result = outs[i];
"""
    )
    return [*parts, LANE_MASK, WRITE, "}\n"]


def rows_code(rows: int, adj_y: bool) -> list[Piece]:
    """``rows`` output rows x one slice of N per work-item (adj_x false). Rows past M read row M - 1
    (their results are never written); with adj_y, right-operand rows past N read row N - 1
    (their lanes are masked at the write)."""
    parts: list[Piece] = [rows_head(rows, "S", "GLOBAL_ID_2"), _BROADCAST]
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
    return parts + _row_writes(rows)


#: output rows per work-item of ``slice_rows_code``: the lanes of one left-operand slice
SLICE_ROWS = 4


def slice_rows_code(adj_y: bool) -> list[Piece]:
    """The 4 output rows of one left-operand slice x one slice of N per work-item (adj_x true). The
    left operand's lanes past M feed only rows that are never written; with adj_y, right-operand
    rows past N read row N - 1 (their lanes are masked at the write)."""
    parts: list[Piece] = [rows_head(SLICE_ROWS, "S", "GLOBAL_ID_2"), _BROADCAST]
    parts.append("  int K = args.lhs.Width();\n  int xs = X0 / 4;\n")
    parts += [f"  ACCUM_FLT4 a{p} = INIT_ACCUM_FLT4(0.0f);\n" for p in range(SLICE_ROWS)]
    if adj_y:  # rhs is [..., N, K]: four of its rows per slice of K, transposed to rows k of N
        parts.append("  int last = args.rhs.Width() - 1;\n")
        parts.append("  for (int s = 0; s < (K + 3) / 4; ++s) {\n    int left = K - s * 4;\n")
        for j in range(4):
            parts.append(f"    FLT4 r{j} = args.rhs.Read(S * 4 + {j} < last ? S * 4 + {j} : last, yr, s, br);\n")
        parts.append("    if (left < 4) {\n" + "".join(_masked(f"r{j}", "left") for j in range(4)) + "    }\n")
        for q, lane in enumerate("xyzw"):
            parts.append(
                f"    {{\n      FLT4 l = {q} < left ? args.lhs.Read(s * 4 + {q}, yl, xs, bl) : INIT_FLT4(0.0f);\n"
                f"      FLT4 t = (FLT4)(r0.{lane}, r1.{lane}, r2.{lane}, r3.{lane});\n"
            )
            parts.append("".join(f"      a{p} += TO_ACCUM_FLT4(l.{c} * t);\n" for p, c in enumerate("xyzw")))
            parts.append("    }\n")
    else:  # rhs is [..., K, N]: row k of it is an FLT4 of N
        parts.append("  for (int k = 0; k < K; ++k) {\n")
        parts.append("    FLT4 l = args.lhs.Read(k, yl, xs, bl);\n    FLT4 r = args.rhs.Read(k, yr, S, br);\n")
        parts.append("".join(f"    a{p} += TO_ACCUM_FLT4(l.{c} * r);\n" for p, c in enumerate("xyzw")))
    parts.append("  }\n")
    return parts + _row_writes(SLICE_ROWS)


#: ``block_code``'s block: output rows x groups of 8 output channels (2 slices), the flat matrix
#: product's 6 x 2 (kernels/cpu/gemm_blocks.py), which fits AVX2's 16 registers
BLOCK_ROWS, BLOCK_GROUPS = 6, 2


def block_code() -> list[Piece]:
    """BLOCK_ROWS consecutive output rows x BLOCK_GROUPS groups of 8 channels of N per work-item
    (adj_x and adj_y false, output batch 1, M >= BLOCK_ROWS, buffer storage): per row k of the
    right operand, FLT8s of N, each met by a lane of the left operand's rows, loaded one float at
    a time at one offset plus constants (as the flat matrix product does). The last block of rows
    is moved back to end on row M - 1 (its rows shared with the block before are written twice,
    with the same values); groups past N read the last slice and are not written."""
    rows, groups = BLOCK_ROWS, BLOCK_GROUPS
    parts: list[Piece] = [
        f"""
MAIN_FUNCTION($0) {{
  int W = args.dst_tensor.Width();
  int slices = args.dst_tensor.Slices();
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S0 = GLOBAL_ID_2 * {2 * groups};
  if (gx * {rows} >= W || Y >= args.dst_tensor.Height() || S0 >= slices) return;
  int b = 0;
  int X0 = gx * {rows} + {rows} <= W ? gx * {rows} : W - {rows};
  int yl = args.lhs.Height() == 1 ? 0 : Y, yr = args.rhs.Height() == 1 ? 0 : Y;
  int K = args.lhs.Channels();
  long o0 = args.lhs.Offset(X0, yl, 0, 0);
  int sstride = args.lhs.Offset(0, 0, 1, 0);
"""
    ]
    parts += [f"  int n{q} = S0 + {q} < slices ? S0 + {q} : slices - 1;\n" for q in range(2 * groups)]
    parts += [f"  ACCUM_FLT8 a{g}{p} = (ACCUM_FLT8)(0.0f);\n" for g in range(groups) for p in range(rows)]
    parts.append("  #pragma unroll 1\n  for (int s = 0; s < args.lhs.Slices(); ++s) {\n    int left = K - s * 4;\n")
    for lane in range(4):
        # rows of the right operand past K do not exist: the left operand's lanes there are padding
        parts.append(f"    if ({lane} < left) {{\n" if lane else "    {\n")
        for g in range(groups):
            read = ", ".join(f"args.rhs.Read(s * 4 + {lane}, yr, n{2 * g + h}, 0)" for h in range(2))
            parts.append(f"      ACCUM_FLT8 r{g} = TO_ACCUM_FLT8((FLT8)({read}));\n")
        for p in range(rows):
            parts.append(
                f"      {{ ACCUM_FLT x = TO_ACCUM_FLT(args.lhs.ReadLaneAt((o0 + {p}) + s * sstride, {lane}));\n"
            )
            parts.append("".join(f"        a{g}{p} += x * r{g};\n" for g in range(groups)))
            parts.append("      }\n")
        parts.append("    }\n")
    parts.append("  }\n")
    outs = [f"TO_FLT4(a{g}{p}.{half})" for g in range(groups) for half in ("lo", "hi") for p in range(rows)]
    parts.append(f"  FLT4 outs[{len(outs)}];\n")
    parts.append("".join(f"  outs[{i}] = {value};\n" for i, value in enumerate(outs)))
    parts.append(
        f"""  for (int q = 0; q < {2 * groups}; ++q) {{
    int S = S0 + q;
    if (S >= slices) break;
    for (int i = 0; i < {rows}; ++i) {{
      int X = X0 + i;
      FLT4 result = outs[q * {rows} + i];
"""
    )
    return [*parts, LANE_MASK, WRITE, "  }\n}\n"]
