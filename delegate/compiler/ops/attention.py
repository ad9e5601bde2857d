"""Scaled-dot-product attention, one kernel: the op the attention rewrite (compiler/attention.py)
puts in place of BATCH_MATMUL(Q, K) -> [MUL by a scale] -> [mask] -> SOFTMAX -> BATCH_MATMUL(., V).
Compiler-internal: no TFLite node has its code.

In the runtime's 4-D view Q is (b, head, M, D), K (b, head, N, D) (``adj_y``) or (b, head, D, N),
V (b, head, N, Dv) and the output (b, head, M, Dv); batch and head broadcast where an operand has 1.
A work-item takes ``ROWS`` query rows of one (b, head): their scores over all N keys live in
private memory (N at most ``MAX_KEYS``), never in global memory. Per row: scores times the scale,
plus the mask (an added constant, or SELECT_V2's constant choice), then softmax as TFLite computes
it (exp((x - max) * beta), normalized), then the product with V, one slice of Dv at a time. Each
K and V read serves the work-item's rows. Arithmetic runs in float whatever the storage."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .. import layout
from ..graph import Graph, Node
from ..kernel import LANE_MASK, WRITE, Kernel, Piece
from ..kernels.common.math_code import exp_code
from ..kernels.common.pieces import operation
from ..kernels.common.row_blocks import rows_head
from ..options import CompileOptions
from ..selectors.spec import KernelSpec, Variant
from .base import EmitContext, Op, runtime_io, table_object
from .conv_render import launched
from .traits import Traits

#: the compiler-internal code of the fused node (TFLite's codes are non-negative)
ATTENTION = -6

#: the longest key sequence, and the longest query / value rows (D, Dv), the rewrite fuses. The
#: kernel holds ROWS x N scores in private memory; the bounds are where it stops paying on PoCL
#: (2 cores): about as fast as the three or four separate kernels up to 32 tokens of depth 16
#: (0.84 to 1.2 of their time, noise included), but 1.4x slower at 64 tokens of 32, 1.4x at 150
#: of 64 (whisper_encoder_small's), 2.3x at 256 of 64 (ROWS 4, 8 or 1 alike): there the separate
#: products' tuned kernels (BATCH_BLOCK) win over the fused one's serial rows
MAX_KEYS = 32
MAX_DEPTH = 16
#: query rows per work-item: each K and V read serves them all
ROWS = 4

#: how the mask enters the scores: none, an added constant, or SELECT_V2's (keep ? score : fill)
MASK_NONE, MASK_ADD, MASK_SELECT = "none", "add", "select"


def attention_dims(node: Node, graph: Graph) -> tuple[int, int, int, int, int, int]:
    """(B, H, M, N, D, Dv) of an attention node, in the runtime's 4-D view."""
    q, k = (layout.bhwc(graph.tensor(i).shape) for i in node.inputs[:2])
    b, h, m, dv = layout.bhwc(graph.tensor(node.outputs[0]).shape)
    n = k[2] if node.params.get("adj_y") else k[3]
    return b, h, m, n, q[3], dv


def mask_tables(node: Node, graph: Graph) -> list[tuple[str, np.ndarray]]:
    """The mask as float32 tables over (mask batch, mask head, M, N rounded up to slices): ``mask``
    (added), or ``keep`` (1 where the score stays) and ``fill`` (the value elsewhere). Keys past N
    get a fill of -inf, so they drop out of the softmax."""
    kind = node.params.get("mask", MASK_NONE)
    if kind == MASK_NONE:
        return []
    _, _, m, n, _, _ = attention_dims(node, graph)
    padded = layout.slices(n) * 4
    values = [np.asarray(graph.tensor(i).constant, np.float32) for i in node.params["mask_inputs"]]
    mb, mh = mask_heads(node, graph)

    def table(a: np.ndarray, pad: float) -> np.ndarray:
        full = np.broadcast_to(a.reshape(layout.bhwc(a.shape)), (mb, mh, m, n))
        return np.pad(full, ((0, 0), (0, 0), (0, 0), (0, padded - n)), constant_values=pad).astype(np.float32)

    if kind == MASK_ADD:
        return [("mask", table(values[0], -np.inf))]
    keep, fill = values
    keep = keep != 0 if node.params.get("keep_when", True) else keep == 0
    return [("keep", table(keep.astype(np.float32), 0.0)), ("fill", table(fill, -np.inf))]


def mask_heads(node: Node, graph: Graph) -> tuple[int, int]:
    """The batch and head counts of the mask tables: 1 where every mask input broadcasts there."""
    shapes = [layout.bhwc(graph.tensor(i).shape) for i in node.params.get("mask_inputs", [])]
    b, h, _, _ = layout.bhwc(graph.tensor(node.outputs[0]).shape)
    return (b if any(s[0] != 1 for s in shapes) else 1, h if any(s[1] != 1 for s in shapes) else 1)


def select_attention(node: Node, graph: Graph, options: CompileOptions) -> KernelSpec:
    """A work-item per ROWS query rows of each (b, head), one to a work-group (on PoCL, 0.7 ms
    against 1.0 ms in groups of 8 x 4 for 4 heads of 150 tokens of 64)."""
    b, h, m, _, _, _ = attention_dims(node, graph)
    return KernelSpec(Variant.BATCH_ROWS, grid=(-(-m // ROWS) * b, h, 1), rows=ROWS, work_group=(1, 1, 1))


def _operand_rows(name: str) -> str:
    return f"  int y{name} = args.{name}.Height() == 1 ? 0 : Y, b{name} = args.{name}.Batch() == 1 ? 0 : b;\n"


def _scores(adj_y: bool, d: int, n: int) -> list[str]:
    """Accumulate ``p[r][ns]``, the scores of the slice ``ns`` of keys for each row, as Q x K."""
    ds, ns = layout.slices(d), layout.slices(n)
    parts = [f"  for (int ns = 0; ns < {ns}; ++ns) {{\n"]
    parts += [f"    float4 a{r} = (float4)(0.0f);\n" for r in range(ROWS)]
    if adj_y:  # K is [N, D]: four key rows, each read a slice of D at a time
        parts += [f"    int n{j} = ns * 4 + {j} < {n} ? ns * 4 + {j} : {n - 1};\n" for j in range(4)]
        parts.append(f"    for (int s = 0; s < {ds}; ++s) {{\n")
        parts += [f"      float4 k{j} = convert_float4(args.key.Read(n{j}, ykey, s, bkey));\n" for j in range(4)]
        for r in range(ROWS):
            dots = ", ".join(f"dot(q[{r}][s], k{j})" for j in range(4))
            parts.append(f"      a{r} += (float4)({dots});\n")
        parts.append("    }\n")
    else:  # K is [D, N]: row d of it holds a slice of keys
        parts.append(f"    for (int s = 0; s < {ds}; ++s) {{\n")
        for j in range(4):
            parts.append(f"      int d{j} = s * 4 + {j} < {d} ? s * 4 + {j} : {d - 1};\n")
            parts.append(f"      float4 k{j} = convert_float4(args.key.Read(d{j}, ykey, ns, bkey));\n")
        for r in range(ROWS):
            parts.append(f"      {{ float4 l = q[{r}][s]; a{r} += l.x * k0 + l.y * k1 + l.z * k2 + l.w * k3; }}\n")
        parts.append("    }\n")
    parts += [f"    p[{r}][ns] = a{r};\n" for r in range(ROWS)]
    parts.append("  }\n")
    return parts


def attention_code(node: Node, graph: Graph) -> list[Piece]:
    """The kernel of attention ``node`` (its shapes and parameters written in as constants)."""
    adj_y = bool(node.params.get("adj_y"))
    _, _, _, n, d, dv = attention_dims(node, graph)
    ds, ns, dvs = layout.slices(d), layout.slices(n), layout.slices(dv)
    scale, beta = float(node.params.get("scale", 1.0)), float(node.params.get("beta", 1.0))
    kind = node.params.get("mask", MASK_NONE)
    mb, mh = mask_heads(node, graph)
    parts: list[Piece] = [
        rows_head(ROWS, "S", "0"),
        _operand_rows("query"),
        _operand_rows("key"),
        _operand_rows("value"),
    ]
    # the query rows (rows past M repeat row M - 1; they are never written), padding lanes zeroed
    parts.append(f"  float4 q[{ROWS}][{ds}];\n  float4 p[{ROWS}][{ns}];\n")
    for r in range(ROWS):
        parts.append(f"  {{ int x = X0 + {r} < W ? X0 + {r} : W - 1;\n")
        parts.append(
            f"    for (int s = 0; s < {ds}; ++s) q[{r}][s] = convert_float4(args.query.Read(x, yquery, s, bquery));\n"
        )
        if d % 4:
            lanes = ", ".join("1.0f" if lane < d % 4 else "0.0f" for lane in range(4))
            parts.append(f"    q[{r}][{ds - 1}] *= (float4)({lanes});\n")
        parts.append("  }\n")
    parts += _scores(adj_y, d, n)
    # scale, mask, softmax per row
    mask_row = f"(({'b' if mb > 1 else '0'} * {mh} + {'Y' if mh > 1 else '0'}) * args.dst_tensor.Width() + x)"
    parts.append(f"  for (int r = 0; r < {ROWS}; ++r) {{\n    int x = X0 + r < W ? X0 + r : W - 1;\n")
    parts.append(f"    int row = {mask_row} * {ns * 4};\n" if kind != MASK_NONE else "")
    parts.append("    float4 high = (float4)(-INFINITY);\n")
    parts.append(f"    for (int s = 0; s < {ns}; ++s) {{\n      float4 x4 = p[r][s] * {scale!r}f;\n")
    if kind == MASK_ADD:
        reads = ", ".join(f"args.mask.Read(row + s * 4 + {j})" for j in range(4))
        parts.append(f"      x4 += (float4)({reads});\n")
    elif kind == MASK_SELECT:
        for j, lane in enumerate("xyzw"):
            at = f"row + s * 4 + {j}"
            parts.append(f"      x4.{lane} = args.keep.Read({at}) != 0.0f ? x4.{lane} : args.fill.Read({at});\n")
    if n % 4 and kind == MASK_NONE:  # keys past N (the mask tables' padding does this otherwise)
        parts.append(f"      if (s == {ns - 1}) {{\n")
        parts += [f"        x4.{lane} = -INFINITY;\n" for lane in "xyzw"[n % 4 :]]
        parts.append("      }\n")
    parts.append("      p[r][s] = x4;\n      high = fmax(high, x4);\n    }\n")
    parts.append("    float m = fmax(fmax(high.x, high.y), fmax(high.z, high.w));\n")
    parts.append("    float4 sums = (float4)(0.0f);\n")
    parts.append(f"    for (int s = 0; s < {ns}; ++s) {{\n      float4 e;\n")
    parts.append(f"      {exp_code('e', f'(p[r][s] - m) * {beta!r}f')}\n")
    parts.append("      p[r][s] = e;\n      sums += e;\n    }\n")
    parts.append("    float inv = 1.0f / (sums.x + sums.y + sums.z + sums.w);\n")
    parts.append(f"    for (int s = 0; s < {ns}; ++s) p[r][s] *= inv;\n  }}\n")
    # the product with V, a slice of Dv at a time; weights past N are zero, their rows clamped
    parts.append(f"  for (int S = 0; S < {dvs}; ++S) {{\n")
    parts += [f"    float4 o{r} = (float4)(0.0f);\n" for r in range(ROWS)]
    parts.append(f"    for (int s = 0; s < {ns}; ++s) {{\n")
    for j in range(4):
        parts.append(
            f"      int n{j} = s * 4 + {j} < {n} ? s * 4 + {j} : {n - 1};\n"
            f"      float4 v{j} = convert_float4(args.value.Read(n{j}, yvalue, S, bvalue));\n"
        )
    for r in range(ROWS):
        parts.append(f"      {{ float4 w = p[{r}][s]; o{r} += w.x * v0 + w.y * v1 + w.z * v2 + w.w * v3; }}\n")
    parts.append("    }\n")
    parts.append(f"    float4 outs[{ROWS}];\n")
    parts += [f"    outs[{r}] = o{r};\n" for r in range(ROWS)]
    parts.append(
        f"""    for (int i = 0; i < {ROWS}; ++i) {{
      int X = X0 + i;
      if (X >= W) break;
      FLT4 result = TO_FLT4(outs[i]);
"""
    )
    return [*parts, LANE_MASK, WRITE, "  }\n}\n"]  # the write hook closes the loop over rows


class Attention(Op):
    """Inputs (Q, K, V, then the mask's constants); params ``adj_y`` (K as [.., N, D]), ``scale``,
    ``beta`` (the SOFTMAX's), ``mask`` (MASK_NONE / MASK_ADD / MASK_SELECT), ``mask_inputs`` (the
    mask's constant tensors: the added one, or SELECT_V2's condition and fill) and ``keep_when``
    (SELECT_V2 keeps the score where its condition is true)."""

    codes = (ATTENTION,)
    data_inputs = 3
    #: its kernel is its own; ops are linked in at its write hook
    code_traits: ClassVar[dict[int, Traits]] = {}

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph, data_inputs=3)
        if problem:
            return problem
        if any(graph.tensor(i).constant is not None for i in node.inputs[:3]):
            return "a constant Q, K or V"
        _, _, _, n, d, dv = attention_dims(node, graph)
        if n > MAX_KEYS or max(d, dv) > MAX_DEPTH:
            return f"{n} keys of depth {d} (at most {MAX_KEYS} of {MAX_DEPTH})"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        objects = [table_object(name, values.tobytes()) for name, values in mask_tables(node, ctx.graph)]
        kernel = operation(attention_code(node, ctx.graph), srcs=["query", "key", "value"], buffer_objects=objects)
        return launched(kernel, select_attention(node, ctx.graph, ctx.options))


OP = Attention()
