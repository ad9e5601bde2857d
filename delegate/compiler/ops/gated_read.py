"""A squeeze-excite block's gate read by the 1x1 convolution after it: MUL(x, g), x a batch-1
feature map [1, H, W, C] and g its per-channel gate [1, 1, 1, C] (EfficientNet's sigmoid,
MobileNetV3's hard sigmoid), is a broadcast product of its own kernel, whose full-size output
only the block's projection CONV_2D reads. The projection reads x and g instead and multiplies
each input slice by its gate as it reads it (kernels/cpu/gemm_blocks.slice_loop): the MUL's
kernel and its tensor are gone (fusion.GatedRead decides where; selectors/conv.reads_gated which
convolutions read so).

A quantized MUL's output is carried on its own grid (compiler/quant.py): the convolution
multiplies each input slice by its gate and rounds it onto that grid before the weights meet it
(GemmSpec.gate_grid), the MUL's kernel's values. Only where one work-item holds every output
channel of its pixels (selectors/conv.reads_gated): with several blocks of output channels the
rounding is redone for each, slower than the MUL's kernel."""

from __future__ import annotations

from dataclasses import dataclass

from ..graph import Builtin, Graph, Node


@dataclass(frozen=True)
class GatedInput:
    """A MUL's output read through its operands: ``source`` times ``gate``."""

    source: int
    gate: int


def gated_mul(node: Node, graph: Graph) -> tuple[int, int] | None:
    """(x, g) when ``node`` is MUL(x, g) or MUL(g, x) of runtime tensors, no fused activation,
    x [1, H, W, C] and g [1, 1, 1, C] with C of x's, the output x's shape; else None."""
    if node.op != Builtin.MUL or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    if node.params.get("activation", 0) or node.inputs[0] == node.inputs[1]:
        return None
    tensors = [graph.tensor(i) for i in node.inputs]
    if any(t.is_constant for t in tensors):
        return None
    out = graph.tensor(node.outputs[0]).shape
    for x, g in (tensors, tensors[::-1]):
        # x as small as g: an elementwise product, which links into its producer (fusion.py)
        if len(x.shape) == 4 and x.shape == out and x.shape[0] == 1 and g.shape == (1, 1, 1, x.shape[3]) != x.shape:
            return x.index, g.index
    return None
