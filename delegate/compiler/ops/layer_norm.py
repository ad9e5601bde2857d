"""Layer normalization over the last axis, one kernel: the op the layer-norm rewrite
(compiler/layer_norm.py) puts in place of the MEAN / SQUARED_DIFFERENCE / RSQRT / MUL / ADD chain
TensorFlow's and PyTorch's converters emit. Compiler-internal: no TFLite node has its code.

One work-item per pixel row (b, Y, X) loops over the slices three times: the mean, the variance
about it (two passes, as TFLite's separate ops compute it), then (x - mean) * rsqrt(var + eps),
times gamma and plus beta when the pattern had them; RMSNorm skips the mean (twice over the
slices). Sums run in float whatever the storage, each lane of a slice in its own accumulator
(one chain of additions per slice, not four).

On a CPU device with buffer storage (``block_pixels``) a work-item takes BLOCK_PIXELS consecutive
pixels of the flat pixel order instead, whose FLT4s of one slice are one FLT16 (adjacent in the
buffer): its sums, differences and products run on 16 lanes, a quarter of the instructions
(MLP-Mixer's 64 x 128 layer norms on PoCL, 2 cores: 12.6-13.5 -> 7.1-8.8 us of device time a kernel)."""

from __future__ import annotations

from typing import ClassVar

from ...context import model
from .. import layout
from ..graph import Graph, Node
from ..kernel import WRITE, WRITE_AT, Kernel, Piece
from ..kernels.common.pieces import HEAD, operation
from ..options import CompileOptions, KernelFamily
from .base import EmitContext, Op, constant_tensor, runtime_io
from .traits import Traits

#: the compiler-internal code of the fused node (TFLite's codes are non-negative)
LAYER_NORM = -2

_MASK = "int left = C - s * 4; v.y = left > 1 ? v.y : 0.0f; v.z = left > 2 ? v.z : 0.0f; v.w = left > 3 ? v.w : 0.0f;"
_MEAN = f"""  float4 sums = (float4)(0.0f);
  for (int s = 0; s < slices; ++s) {{
    float4 v = convert_float4(args.src_tensor.Read(X, Y, s, b));
    {_MASK}
    sums += v;
  }}
  float mean = ((sums.x + sums.y) + (sums.z + sums.w)) / (float)C;
"""
_CODE = (
    HEAD
    + f"""  if (S != 0) return;
  int slices = args.src_tensor.Slices();
  int C = args.src_tensor.Channels();
{{MEAN}}  float4 squares = (float4)(0.0f);
  for (int s = 0; s < slices; ++s) {{
    float4 v = convert_float4(args.src_tensor.Read(X, Y, s, b)) - (float4)(mean);
    {_MASK}
    squares += v * v;
  }}
  float inv = rsqrt(((squares.x + squares.y) + (squares.z + squares.w)) / (float)C + args.epsilon);
  for (int s = 0; s < slices; ++s) {{
    float4 e = (convert_float4(args.src_tensor.Read(X, Y, s, b)) - (float4)(mean)) * inv;
"""
)


#: RMSNorm: the mean square about zero (no mean subtracted)
_NO_MEAN = "  const float mean = 0.0f;\n"

#: pixels per work-item of the block kernel: four FLT4s, one FLT16
BLOCK_PIXELS = 4

#: the block kernel's opening: its pixels p0 .. p0 + 3 of the flat order (the last block moved
#: back to end on the last pixel: the pixels it shares with the block before are written twice,
#: with the same values), and ``load``: slice s of the four pixels, its lanes past C zero
_BLOCK_HEAD = """
MAIN_FUNCTION($0) {
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int npix = W * args.dst_tensor.Height() * B;
  int p0 = GLOBAL_ID_0 * 4;
  if (p0 >= npix) return;
  p0 = p0 + 4 <= npix ? p0 : npix - 4;
  int slices = args.src_tensor.Slices();
  int C = args.src_tensor.Channels();
  int sstride = args.src_tensor.Offset(0, 0, 1, 0);
  int dstride = args.dst_tensor.Offset(0, 0, 1, 0);
  const int16 lane = (int16)(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3);
"""
_BLOCK_LOAD = (
    "convert_float16((FLT16)(args.src_tensor.ReadAt(p0 + s * sstride), args.src_tensor.ReadAt(p0 + 1 + s * sstride), "
    "args.src_tensor.ReadAt(p0 + 2 + s * sstride), args.src_tensor.ReadAt(p0 + 3 + s * sstride)))"
)
#: the four pixels' sums of the 16 lanes of ``{v}``, one per pixel
_QUARTERS = "(({v}.s048c + {v}.s159d) + ({v}.s26ae + {v}.s37bf))"
_BLOCK_MEAN = f"""  float16 sums = (float16)(0.0f);
  for (int s = 0; s < slices; ++s) {{
    float16 v = select((float16)(0.0f), {_BLOCK_LOAD}, lane < (int16)(C - s * 4));
    sums += v;
  }}
  float4 mean4 = {_QUARTERS.format(v="sums")} / (float)C;
"""
_BLOCK_CODE = (
    _BLOCK_HEAD
    + """{MEAN}  float16 mean = (float16)(mean4.xxxx, mean4.yyyy, mean4.zzzz, mean4.wwww);
  float16 squares = (float16)(0.0f);
  for (int s = 0; s < slices; ++s) {
    float16 v = select((float16)(0.0f), """
    + _BLOCK_LOAD
    + f""" - mean, lane < (int16)(C - s * 4));
    squares += v * v;
  }}
  float4 inv4 = rsqrt({_QUARTERS.format(v="squares")} / (float)C + args.epsilon);
  float16 inv = (float16)(inv4.xxxx, inv4.yyyy, inv4.zzzz, inv4.wwww);
  for (int s = 0; s < slices; ++s) {{
    float16 e = ({_BLOCK_LOAD} - mean) * inv;
"""
)
_BLOCK_NO_MEAN = "  const float4 mean4 = (float4)(0.0f);\n"


def block_pixels(graph: Graph, node: Node, options: CompileOptions) -> bool:
    """Does ``node`` take the block kernel (BLOCK_PIXELS pixels per work-item)? On buffer storage
    (linear addresses) of a CPU kernel family, over at least BLOCK_PIXELS pixels."""
    b, h, w, _ = layout.bhwc(graph.tensor(node.outputs[0]).shape)
    cpu_buffers = options.linear_storage and options.kernel_family is not KernelFamily.GPU
    return cpu_buffers and b * h * w >= BLOCK_PIXELS


def _block_writes() -> list[Piece]:
    """Slice ``s`` of the four pixels, FLT16 ``e``, written a pixel at a time (linked ops see each
    pixel's X, Y and b, which the compiler drops where nothing reads them)."""
    parts: list[Piece] = []
    for k in range(BLOCK_PIXELS):
        parts.append(
            f"    {{ int S = s; int at = p0 + {k} + s * dstride; int q = p0 + {k};\n"
            f"    int b = q % B; int X = (q / B) % W; int Y = q / (B * W);\n"
            f"    FLT4 result = TO_FLT4(e.s{'0123456789abcdef'[4 * k : 4 * k + 4]});\n"
        )
        parts.append(WRITE_AT)
    return [*parts, "  }\n}\n"]


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
        block = block_pixels(ctx.graph, node, ctx.options)
        for name, index, apply in (("gamma", 1, " * {}"), ("beta", 2, " + {}")):
            if node.inputs[index] >= 0:
                objects.append(constant_tensor(name, ctx.graph.tensor(node.inputs[index]), ctx))
                read = f"convert_float4(args.{name}.Read(0, 0, s, 0))"
                scale += apply.format(f"(float16)({name}, {name}, {name}, {name})" if block else read)
        centred = node.params.get("centred", True)
        if block:
            reads = "".join(
                f"    float4 {name} = convert_float4(args.{name}.Read(0, 0, s, 0));\n"
                for name, index in (("gamma", 1), ("beta", 2))
                if node.inputs[index] >= 0
            )
            code = _BLOCK_CODE.replace("{MEAN}", _BLOCK_MEAN if centred else _BLOCK_NO_MEAN)
            body = [code + reads + (f"    e = e{scale};\n" if scale else ""), *_block_writes()]
            kernel = operation(
                body, srcs=["src_tensor"], floats={"epsilon": node.params["epsilon"]}, tensor_objects=objects
            )
            b, h, w, _ = layout.bhwc(ctx.graph.tensor(node.outputs[0]).shape)
            kernel.operation.tensor_to_grid = model.TensorToGrid.CUSTOM
            kernel.operation.grid_size = model.Int3(-(-(b * h * w) // BLOCK_PIXELS), 1, 1)
            kernel.operation.work_group_size = model.Int3(8, 1, 1)
            return kernel
        code = _CODE.replace("{MEAN}", _MEAN if centred else _NO_MEAN)
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
