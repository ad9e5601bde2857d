"""Layer normalization over the last axis, one kernel: the op the layer-norm rewrite
(compiler/layer_norm.py) puts in place of the MEAN / SQUARED_DIFFERENCE / RSQRT / MUL / ADD chain
TensorFlow's and PyTorch's converters emit. Compiler-internal: no TFLite node has its code.

One work-item per pixel row (b, Y, X) loops over the slices three times: the mean, the variance
about it (two passes, as TFLite's separate ops compute it), then (x - mean) * rsqrt(var + eps),
times gamma and plus beta when the pattern had them; RMSNorm skips the mean (twice over the
slices). Sums run in float whatever the storage."""

from __future__ import annotations

from typing import ClassVar

from ...context import model
from ..graph import Graph, Node
from ..kernel import WRITE, Kernel
from ..kernels.common.pieces import HEAD, operation
from .base import EmitContext, Op, constant_tensor, runtime_io
from .traits import Traits

#: the compiler-internal code of the fused node (TFLite's codes are non-negative)
LAYER_NORM = -2

_MASK = "int left = C - s * 4; v.y = left > 1 ? v.y : 0.0f; v.z = left > 2 ? v.z : 0.0f; v.w = left > 3 ? v.w : 0.0f;"
_MEAN = f"""  float sum = 0.0f;
  for (int s = 0; s < slices; ++s) {{
    float4 v = convert_float4(args.src_tensor.Read(X, Y, s, b));
    {_MASK}
    sum += v.x + v.y + v.z + v.w;
  }}
  float mean = sum / (float)C;
"""
_CODE = (
    HEAD
    + f"""  if (S != 0) return;
  int slices = args.src_tensor.Slices();
  int C = args.src_tensor.Channels();
{{MEAN}}  float squares = 0.0f;
  for (int s = 0; s < slices; ++s) {{
    float4 v = convert_float4(args.src_tensor.Read(X, Y, s, b)) - (float4)(mean);
    {_MASK}
    squares += dot(v, v);
  }}
  float inv = rsqrt(squares / (float)C + args.epsilon);
  for (int s = 0; s < slices; ++s) {{
    float4 e = (convert_float4(args.src_tensor.Read(X, Y, s, b)) - (float4)(mean)) * inv;
"""
)


#: RMSNorm: the mean square about zero (no mean subtracted)
_NO_MEAN = "  const float mean = 0.0f;\n"


class LayerNorm(Op):
    """Inputs (x, gamma or -1, beta or -1); params ``epsilon``, and ``centred`` False for RMSNorm
    (x * rsqrt(mean(x^2) + eps): the statistics about zero)."""

    codes = (LAYER_NORM,)
    data_inputs = 1
    #: linked ops run in its write hook; its kernel is its own
    code_traits: ClassVar[dict[int, Traits]] = {}

    def check(self, node: Node, graph: Graph) -> str | None:
        return runtime_io(node, graph, constant_inputs=(1, 2), data_inputs=1)

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        objects = []
        scale = ""
        for name, index, apply in (("gamma", 1, " * {}"), ("beta", 2, " + {}")):
            if node.inputs[index] >= 0:
                objects.append(constant_tensor(name, ctx.graph.tensor(node.inputs[index]), ctx))
                scale += apply.format(f"convert_float4(args.{name}.Read(0, 0, s, 0))")
        code = _CODE.replace("{MEAN}", _MEAN if node.params.get("centred", True) else _NO_MEAN)
        head = code + f"    e = e{scale};\n" if scale else code
        body = [
            head + "    { int S = s; FLT4 result = TO_FLT4(e);\n",
            WRITE,
            "\n  }\n}\n",
        ]  # the write hook closes the block it opens
        kernel = operation(
            body, srcs=["src_tensor"], floats={"epsilon": node.params["epsilon"]}, tensor_objects=objects
        )
        kernel.operation.tensor_to_grid = model.TensorToGrid.WB_TO_X_HD_TO_Y_Z_IS_1  # slices looped inside
        return kernel


OP = LayerNorm()
