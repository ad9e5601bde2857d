"""SOFTMAX (beta) and LOG_SOFTMAX over the last axis, as kernels of their own (one linked into the
matrix-product kernel producing its input: pixel_softmax.py)."""

from __future__ import annotations

from typing import ClassVar

from ...context import model
from ..graph import Builtin, Graph, Node
from ..kernel import WRITE, Kernel, Piece
from ..kernels.common.math_code import exp_code
from ..kernels.common.pieces import HEAD, operation
from .base import EmitContext, Op, runtime_io
from .traits import Quantization, Traits

# One work-item per (b, Y, X) row: max, sum of exp, normalise; padded channels masked out.
_SOFTMAX = (
    HEAD
    + """  if (S != 0) return;
  int slices = args.src_tensor.Slices();
  int C = args.src_tensor.Channels();
  float beta = args.beta;
  float m = -INFINITY;
  for (int s = 0; s < slices; ++s) {
    float4 v = convert_float4(args.src_tensor.Read(X, Y, s, b));
    int left = C - s * 4;
    m = v.x > m ? v.x : m;
    if (left > 1) m = v.y > m ? v.y : m;
    if (left > 2) m = v.z > m ? v.z : m;
    if (left > 3) m = v.w > m ? v.w : m;
  }
  float sum = 0.0f;
  for (int s = 0; s < slices; ++s) {
    float4 e;
    {EXP_OF_READ}
    int left = C - s * 4;
    sum += e.x + (left > 1 ? e.y : 0.0f) + (left > 2 ? e.z : 0.0f) + (left > 3 ? e.w : 0.0f);
  }
  float inv = 1.0f / sum;
  float log_sum = log(sum);
  for (int s = 0; s < slices; ++s) {
    float4 v = (convert_float4(args.src_tensor.Read(X, Y, s, b)) - m) * beta;
    float4 e;
    {final}
    int left = C - s * 4;
    e.y = left > 1 ? e.y : 0.0f; e.z = left > 2 ? e.z : 0.0f; e.w = left > 3 ? e.w : 0.0f;
    {write}
  }
}
"""
)


# Four channels or fewer: one slice, read once, one exp per row.
_SOFTMAX_ONE_SLICE = (
    HEAD
    + """  if (S != 0) return;
  int C = args.src_tensor.Channels();
  float4 x = convert_float4(args.src_tensor.Read(X, Y, 0, b));
  float m = x.x;
  if (C > 1) m = x.y > m ? x.y : m;
  if (C > 2) m = x.z > m ? x.z : m;
  if (C > 3) m = x.w > m ? x.w : m;
  float4 v = (x - m) * args.beta;
  float4 e;
  {EXP_OF_V}
  e.y = C > 1 ? e.y : 0.0f; e.z = C > 2 ? e.z : 0.0f; e.w = C > 3 ? e.w : 0.0f;
  float sum = e.x + e.y + e.z + e.w;
  float inv = 1.0f / sum;
  float log_sum = log(sum);
  e = {final};
  e.y = C > 1 ? e.y : 0.0f; e.z = C > 2 ? e.z : 0.0f; e.w = C > 3 ? e.w : 0.0f;
  {write}
}
"""
)


# Rows of up to CACHED_SLICES slices (attention's rows over its tokens): the row is read once into
# private memory, and e^x computed once (the loop above reads the row three times and computes
# e^x twice, so as to hold no row).
_SOFTMAX_CACHED = (
    HEAD
    + """  if (S != 0) return;
  int slices = args.src_tensor.Slices();
  int C = args.src_tensor.Channels();
  float beta = args.beta;
  float4 row[{slices}];
  float4 high = (float4)(-INFINITY);
  for (int s = 0; s < slices; ++s) {
    float4 v = convert_float4(args.src_tensor.Read(X, Y, s, b));
    int left = C - s * 4;
    if (left < 4) { v.w = -INFINITY; if (left < 3) v.z = -INFINITY; if (left < 2) v.y = -INFINITY; }
    row[s] = v;
    high = fmax(high, v);
  }
  float m = fmax(fmax(high.x, high.y), fmax(high.z, high.w));
  float4 sums = (float4)(0.0f);
  for (int s = 0; s < slices; ++s) {
    float4 e;
    {EXP_OF_ROW}
    int left = C - s * 4;
    if (left < 4) { e.w = 0.0f; if (left < 3) e.z = 0.0f; if (left < 2) e.y = 0.0f; }
    row[s] = e;
    sums += e;
  }
  float inv = 1.0f / (sums.x + sums.y + sums.z + sums.w);
  for (int s = 0; s < slices; ++s) {
    float4 e = row[s] * inv;
    {write}
  }
}
"""
)
#: the longest row (in slices of 4) ``_SOFTMAX_CACHED`` holds: 1 KiB of private memory
CACHED_SLICES = 64

# e^x in arithmetic (math_code.py: PoCL calls exp one value at a time)
_SOFTMAX = _SOFTMAX.replace(
    "{EXP_OF_READ}", exp_code("e", "(convert_float4(args.src_tensor.Read(X, Y, s, b)) - m) * beta")
)
_SOFTMAX_ONE_SLICE = _SOFTMAX_ONE_SLICE.replace("{EXP_OF_V}", exp_code("e", "v"))
_SOFTMAX_CACHED = _SOFTMAX_CACHED.replace("{EXP_OF_ROW}", exp_code("e", "(row[s] - m) * beta"))


def _written(code: str, slice_var: str) -> list[Piece]:
    """``code`` with its write of ``e`` (slice ``slice_var``) through the write hook, so that ops
    (a quantized output's rounding, compiler/quant.py) can be linked in front of it."""
    head, tail = code.split("{write}")
    return [head + f"{{ int S = {slice_var}; FLT4 result = TO_FLT4(e);\n", WRITE, tail]


class Softmax(Op):
    """SOFTMAX (beta) and LOG_SOFTMAX over the last axis."""

    codes = (Builtin.SOFTMAX, Builtin.LOG_SOFTMAX)
    data_inputs = 1
    #: mostly run on a matrix product's accumulators (fusion.py): counted as no kernel of its own
    code_traits: ClassVar[dict[int, Traits]] = {
        Builtin.SOFTMAX: Traits(quantization=Quantization.REQUANTIZES, own_kernel=False),
        Builtin.LOG_SOFTMAX: Traits(own_kernel=False),
    }

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if graph.tensor(node.inputs[0]).shape != graph.tensor(node.outputs[0]).shape:
            return "input and output shapes differ"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        log = node.op == Builtin.LOG_SOFTMAX
        beta = node.params.get("beta", 1.0) if node.op == Builtin.SOFTMAX else 1.0
        channels = ctx.graph.tensor(node.inputs[0]).shape[-1]
        one_slice = channels <= 4
        slices = -(-channels // 4)
        if not log and not one_slice and slices <= CACHED_SLICES:
            code = _SOFTMAX_CACHED.replace("{slices}", str(slices))
        elif one_slice:
            code = _SOFTMAX_ONE_SLICE.replace("{final}", "v - (float4)(log_sum)" if log else "e * inv")
        else:
            final = "e = v - (float4)(log_sum);" if log else exp_code("e", "v") + "\n    e = e * inv;"
            code = _SOFTMAX.replace("{final}", final)
        kernel = operation(_written(code, "0" if one_slice else "s"), srcs=["src_tensor"], floats={"beta": beta})
        # One work-item per row: slices are looped inside.
        kernel.operation.tensor_to_grid = model.TensorToGrid.WB_TO_X_HD_TO_Y_Z_IS_1
        return kernel
