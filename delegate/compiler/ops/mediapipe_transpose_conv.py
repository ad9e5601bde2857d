"""MediaPipe's custom op Convolution2DTransposeBias: TRANSPOSE_CONV with the bias as an input.

MediaPipe (mediapipe/util/tflite/operations/transpose_conv_bias.cc) defines it: inputs (input
NHWC, weights [O, KH, KW, I], bias [O]), one output; its custom options are a flat
TfLiteTransposeConvParams as MediaPipe's converter writes it: int32 padding (TfLitePadding: 1
SAME, 2 VALID), stride_width, stride_height, little-endian. Its output is [B, s*(H-1) + K - p,
..., O] per axis, where SAME pads p = max(0, K - (H-1) % s - 1) in all and p // 2 before; VALID
pads nothing. That is TRANSPOSE_CONV's arithmetic on that output shape, so the node is compiled as
the TRANSPOSE_CONV it amounts to (ops/conv.py), with no activation.

TFLite's CPU kernels do not implement the op (the model loads with it unresolved); the delegate
claims it, so that a model using it runs with no other CPU kernel.
"""

from __future__ import annotations

import struct

from ..graph import FLOAT32, Builtin, Graph, Node, Padding
from ..kernel import Kernel
from .base import EmitContext, Op
from .conv import TransposeConv

#: TfLiteTransposeConvParams' fields MediaPipe writes (newer TFLite appends an activation, never set here)
_OPTIONS = struct.Struct("<iii")
_TRANSPOSE_CONV = TransposeConv()


def transpose_conv_options(options: bytes) -> tuple[int, int, int]:
    """(padding, stride_width, stride_height) from the node's custom options; ValueError when they
    are not a TfLiteTransposeConvParams MediaPipe's kernel could read."""
    if len(options) < _OPTIONS.size:
        raise ValueError(
            f"custom options of {len(options)} bytes, {_OPTIONS.size} expected "
            "(TfLiteTransposeConvParams: padding, stride_width, stride_height)"
        )
    padding, stride_w, stride_h = _OPTIONS.unpack_from(options)
    if padding not in (Padding.SAME, Padding.VALID):
        raise ValueError(f"padding {padding} is neither SAME (1) nor VALID (2)")
    if stride_w < 1 or stride_h < 1:
        raise ValueError(f"strides {stride_h}x{stride_w} are not positive")
    return padding, stride_w, stride_h


def _out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    pad = max(0, kernel - (size - 1) % stride - 1) if padding == Padding.SAME else 0
    return stride * (size - 1) + kernel - pad


def as_transpose_conv(node: Node) -> Node:
    """The TRANSPOSE_CONV node (output_shape omitted, weights, input, bias) ``node`` computes."""
    padding, stride_w, stride_h = transpose_conv_options(node.custom_options)
    src, weights, bias = node.inputs
    params = {"padding": padding, "stride_width": stride_w, "stride_height": stride_h, "activation": 0}
    return Node(node.index, Builtin.TRANSPOSE_CONV, 1, (-1, weights, src, bias), node.outputs, params)


class Convolution2DTransposeBias(Op):
    """MediaPipe's Convolution2DTransposeBias: inputs (input, weights [O, KH, KW, I], bias [O])."""

    custom_names = ("Convolution2DTransposeBias",)
    data_inputs = 1

    def output_shapes(self, node: Node, graph: Graph) -> list[tuple[int, ...]] | None:
        if len(node.inputs) != 3 or len(node.outputs) != 1 or min(node.inputs) < 0:
            return None
        src, weights = graph.tensor(node.inputs[0]).shape, graph.tensor(node.inputs[1]).shape
        if len(src) != 4 or len(weights) != 4:
            return None
        padding, stride_w, stride_h = transpose_conv_options(node.custom_options)
        height = _out_size(src[1], weights[1], stride_h, padding)
        width = _out_size(src[2], weights[2], stride_w, padding)
        return [(src[0], height, width, weights[0])]

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) != 3 or min(node.inputs) < 0 or len(node.outputs) != 1:
            counts = f"{len(node.inputs)} inputs and {len(node.outputs)} outputs"
            return f"{counts} (input, weights, bias -> output expected)"
        weights, bias = graph.tensor(node.inputs[1]), graph.tensor(node.inputs[2])
        if not weights.is_constant or not bias.is_constant:
            return "weights and bias must be constants"
        if bias.dtype != FLOAT32 or len(bias.shape) != 1 or len(weights.shape) != 4 or bias.shape != weights.shape[:1]:
            return f"bias {bias.shape} does not match weights {weights.shape} (one float32 value per output channel)"
        shapes = self.output_shapes(node, graph)
        model_shape = graph.tensor(node.outputs[0]).shape
        if shapes is None or shapes[0] != tuple(model_shape):
            return f"the model's output shape {tuple(model_shape)} is not the op's {shapes and shapes[0]}"
        return _TRANSPOSE_CONV.check(as_transpose_conv(node), graph)

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        return _TRANSPOSE_CONV.emit(as_transpose_conv(node), ctx)
