"""MediaPipe's custom ops MaxPoolingWithArgmax2D and MaxUnpooling2D (segmentation models).

Both take a flat TfLitePoolParams as custom options, as MediaPipe's converter writes it: int32
padding (TfLitePadding: 1 SAME, 2 VALID), stride_width, stride_height, filter_width,
filter_height, activation (what follows, TFLite's computed padding, is not read). MediaPipe's
kernels (mediapipe/util/tflite/operations/max_pool_argmax.cc, max_unpooling.cc) define them:

- MaxPoolingWithArgmax2D: input [B, H, W, C] -> (max, argmax), both [B, OH, OW, C] float32, OH
  ceil(H / s) for SAME and (H - K + s) / s for VALID, TFLite's pooling padding. The max over the
  window's taps inside the input, clamped by the fused activation; argmax is the first maximal
  tap in row-major window order as ``ky * filter_width + kx + 0.1`` (a float, so that truncation
  gives the tap back), 0 when no tap beats the lowest float.
- MaxUnpooling2D: (input, indices) [B, H, W, C] -> [B, H * filter_height, W * filter_width, C]:
  zeros, and each input value written at its window's tap ``int(index)``, window origin ``in *
  stride - pad`` with pad = max(((H - 1) * s + K - H * K) / 2, 0); a later input pixel (row-major)
  overwrites an earlier one.

The unpooling kernel gathers (each output pixel finds the last input pixel whose tap lands on it,
among those whose window covers it), which is the scatter's answer when every index is a tap of
the window: the delegate claims it only when its indices are a MaxPoolingWithArgmax2D's argmax with
the same window (MediaPipe's kernel sends any other index elsewhere, or nowhere).
"""

from __future__ import annotations

import struct

from ..graph import FLOAT32, Graph, Node, Padding
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, activation_code, operation, written
from ..window import same_padding
from .base import EmitContext, Op, activation_check

#: TfLitePoolParams' leading fields: padding, stride_width, stride_height, filter_width, filter_height, activation
_OPTIONS = struct.Struct("<6i")
_ARGMAX, _UNPOOL = "MaxPoolingWithArgmax2D", "MaxUnpooling2D"
_LANES = "xyzw"


def pool_options(options: bytes) -> dict[str, int]:
    """The TfLitePoolParams fields of a node's custom options; ValueError when they are not ones
    MediaPipe's kernels could read."""
    if len(options) < _OPTIONS.size:
        raise ValueError(
            f"custom options of {len(options)} bytes, at least {_OPTIONS.size} expected "
            "(TfLitePoolParams: padding, stride_width, stride_height, filter_width, filter_height, activation)"
        )
    padding, sw, sh, fw, fh, activation = _OPTIONS.unpack_from(options)
    if padding not in (Padding.SAME, Padding.VALID):
        raise ValueError(f"padding {padding} is neither SAME (1) nor VALID (2)")
    if min(sw, sh, fw, fh) < 1:
        raise ValueError(f"strides {sh}x{sw} and filter {fh}x{fw} must be positive")
    return {
        "padding": padding,
        "stride_w": sw,
        "stride_h": sh,
        "kernel_w": fw,
        "kernel_h": fh,
        "activation": activation,
    }


def _pooled(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + stride - 1) // stride if padding == Padding.SAME else (size - kernel + stride) // stride


def _float_4d(graph: Graph, tensors: tuple[int, ...]) -> str | None:
    for i in tensors:
        t = graph.tensor(i)
        if t.dtype != FLOAT32 or t.quantized or len(t.shape) != 4 or t.is_constant:
            return f"tensor {i} is not a 4-D float32 runtime tensor"
    return None


def _shape_check(op: Op, node: Node, graph: Graph) -> str | None:
    computed = op.output_shapes(node, graph)
    stored = [tuple(graph.tensor(o).shape) for o in node.outputs]
    return None if computed == stored else f"the model's output shapes {stored} are not the op's {computed}"


_MAX = """  float4 best = (float4)(-FLT_MAX);
  int4 tap = (int4)(0);
  for (int ky = 0; ky < args.kernel_h; ++ky) {
    int yc = Y * args.stride_h + ky - args.pad_h;
    if (yc < 0 || yc >= args.src_tensor.Height()) continue;
    for (int kx = 0; kx < args.kernel_w; ++kx) {
      int xc = X * args.stride_w + kx - args.pad_w;
      if (xc < 0 || xc >= args.src_tensor.Width()) continue;
      float4 v = convert_float4(args.src_tensor.Read(xc, yc, S, b));
      int t = ky * args.kernel_w + kx;
{updates}
    }
  }
"""
#: the first strict maximum of each lane wins, as in MediaPipe's loop (a NaN never does)
_UPDATE = "      if (v.{c} > best.{c}) {{ best.{c} = v.{c}; tap.{c} = t; }}"


class MaxPoolingWithArgmax2D(Op):
    """MediaPipe's MaxPoolingWithArgmax2D: one kernel for the max, one for the argmax (per_output)."""

    custom_names = (_ARGMAX,)
    data_inputs = 1
    per_output = True

    def output_shapes(self, node: Node, graph: Graph) -> list[tuple[int, ...]] | None:
        if len(node.inputs) != 1 or len(node.outputs) != 2 or node.inputs[0] < 0:
            return None
        src = graph.tensor(node.inputs[0]).shape
        if len(src) != 4:
            return None
        p = pool_options(node.custom_options)
        shape = (
            src[0],
            _pooled(src[1], p["kernel_h"], p["stride_h"], p["padding"]),
            _pooled(src[2], p["kernel_w"], p["stride_w"], p["padding"]),
            src[3],
        )
        return [shape, shape]

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) != 1 or len(node.outputs) != 2 or min(*node.inputs, *node.outputs) < 0:
            return f"{len(node.inputs)} inputs and {len(node.outputs)} outputs (input -> max, argmax expected)"
        problem = _float_4d(graph, (*node.inputs, *node.outputs)) or _shape_check(self, node, graph)
        return problem or activation_check(pool_options(node.custom_options)["activation"])

    def emit_many(self, node: Node, ctx: EmitContext) -> list[tuple[Kernel, int]]:
        p = pool_options(node.custom_options)
        src, dst = ctx.graph.tensor(node.inputs[0]).shape, ctx.graph.tensor(node.outputs[0]).shape
        ints = {k: p[k] for k in ("kernel_h", "kernel_w", "stride_h", "stride_w")}
        for axis, name in ((1, "h"), (2, "w")):
            kernel, stride = p[f"kernel_{name}"], p[f"stride_{name}"]
            ints[f"pad_{name}"] = same_padding(src[axis], dst[axis], kernel, stride, 1, p["padding"])
        search = HEAD + _MAX.replace("{updates}", "\n".join(_UPDATE.format(c=c) for c in _LANES))
        value = search + "  FLT4 result = TO_FLT4(best);\n  " + activation_code(p["activation"]) + "\n"
        index = search + "  FLT4 result = TO_FLT4(convert_float4(tap) + (float4)(0.1f));\n"
        return [
            (operation(written(code), srcs=["src_tensor"], literals=ints), output)
            for code, output in zip((value, index), node.outputs, strict=True)
        ]


_GATHER = """  int oy = Y, ox = X;
  int ny = oy + args.pad_h - args.kernel_h + 1, nx = ox + args.pad_w - args.kernel_w + 1;
  int y0 = ny <= 0 ? 0 : (ny + args.stride_h - 1) / args.stride_h;
  int x0 = nx <= 0 ? 0 : (nx + args.stride_w - 1) / args.stride_w;
  int y1 = (oy + args.pad_h) / args.stride_h, x1 = (ox + args.pad_w) / args.stride_w;
  y1 = y1 < args.src_tensor.Height() ? y1 : args.src_tensor.Height() - 1;
  x1 = x1 < args.src_tensor.Width() ? x1 : args.src_tensor.Width() - 1;
  FLT4 result = INIT_FLT4(0.0f);
  for (int iy = y0; iy <= y1; ++iy) {
    for (int ix = x0; ix <= x1; ++ix) {
      FLT4 v = args.src_tensor.Read(ix, iy, S, b);
      int4 tap = convert_int4(convert_float4(args.indices.Read(ix, iy, S, b)));
      int4 ty = tap / args.kernel_w;
      int4 dy = ty + iy * args.stride_h - args.pad_h - oy;
      int4 dx = tap - ty * args.kernel_w + ix * args.stride_w - args.pad_w - ox;
{updates}
    }
  }
"""
#: a later input pixel overwrites an earlier one, as MediaPipe's scatter does
_PLACE = "      if (dy.{c} == 0 && dx.{c} == 0) result.{c} = v.{c};"


def _argmax_producer(graph: Graph, tensor: int) -> Node | None:
    for node in graph.nodes.values():
        if node.custom_name == _ARGMAX and len(node.outputs) == 2 and node.outputs[1] == tensor:
            return node
    return None


class MaxUnpooling2D(Op):
    """MediaPipe's MaxUnpooling2D: inputs (input, indices from MaxPoolingWithArgmax2D)."""

    custom_names = (_UNPOOL,)
    data_inputs = 2

    def output_shapes(self, node: Node, graph: Graph) -> list[tuple[int, ...]] | None:
        if len(node.inputs) != 2 or len(node.outputs) != 1 or min(node.inputs) < 0:
            return None
        src = graph.tensor(node.inputs[0]).shape
        if len(src) != 4:
            return None
        p = pool_options(node.custom_options)
        return [(src[0], src[1] * p["kernel_h"], src[2] * p["kernel_w"], src[3])]

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) != 2 or len(node.outputs) != 1 or min(*node.inputs, *node.outputs) < 0:
            return f"{len(node.inputs)} inputs and {len(node.outputs)} outputs (input, indices -> output expected)"
        problem = _float_4d(graph, (*node.inputs, *node.outputs)) or _shape_check(self, node, graph)
        if problem:
            return problem
        if graph.tensor(node.inputs[0]).shape != graph.tensor(node.inputs[1]).shape:
            return "input and indices differ in shape"
        pool = _argmax_producer(graph, node.inputs[1])
        window = ("kernel_h", "kernel_w")
        p = pool_options(node.custom_options)
        if pool is None or any(pool_options(pool.custom_options)[k] != p[k] for k in window):
            return f"its indices are not the argmax of a {_ARGMAX} with the same window (only then are they taps)"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        p = pool_options(node.custom_options)
        src = ctx.graph.tensor(node.inputs[0]).shape
        ints = {k: p[k] for k in ("kernel_h", "kernel_w", "stride_h", "stride_w")}
        for axis, name in ((1, "h"), (2, "w")):
            size, kernel, stride = src[axis], p[f"kernel_{name}"], p[f"stride_{name}"]
            ints[f"pad_{name}"] = max(((size - 1) * stride + kernel - size * kernel) // 2, 0)
        code = HEAD + _GATHER.replace("{updates}", "\n".join(_PLACE.format(c=c) for c in _LANES))
        return operation(written(code), srcs=["src_tensor", "indices"], literals=ints)
