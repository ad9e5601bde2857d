"""A convolution's window as its kernels take it: the window's size, strides, dilations and leading
padding (TFLite's SAME rule, plus a zero PAD merged into the node, pad_merge.py), as the scalar
arguments ``kernel_h/w``, ``stride_h/w``, ``dilation_h/w``, ``pad_h/w`` in that order (the order
they are written into the kernel's arguments). Op semantics both the selectors and the ops read."""

from __future__ import annotations

from typing import Any

from .graph import Graph, Node, Padding


def same_padding(in_size: int, out_size: int, kernel: int, stride: int, dilation: int, padding: int) -> int:
    """Leading padding TFLite uses for SAME (half the total, rounded down) or 0 for VALID."""
    if padding != Padding.SAME:
        return 0
    effective = (kernel - 1) * dilation + 1
    total = max((out_size - 1) * stride + effective - in_size, 0)
    return total // 2


def window_args(p: dict[str, Any], src: tuple[int, ...], dst: tuple[int, ...], kh: int, kw: int) -> dict[str, int]:
    """The window of a convolution with parameters ``p`` (TFLite's names) and a ``kh`` x ``kw``
    filter from NHWC ``src`` to ``dst``."""
    dh, dw = p.get("dilation_height_factor", 1) or 1, p.get("dilation_width_factor", 1) or 1
    # a zero PAD merged into this node (pad_merge.py): the window is placed on the padded input
    top, bottom, left, right = p.get("merged_pad", (0, 0, 0, 0))
    padded_h, padded_w = src[1] + top + bottom, src[2] + left + right
    return {
        "kernel_h": kh,
        "kernel_w": kw,
        "stride_h": p["stride_height"],
        "stride_w": p["stride_width"],
        "dilation_h": dh,
        "dilation_w": dw,
        "pad_h": top + same_padding(padded_h, dst[1], kh, p["stride_height"], dh, p["padding"]),
        "pad_w": left + same_padding(padded_w, dst[2], kw, p["stride_width"], dw, p["padding"]),
    }


def conv_window(node: Node, graph: Graph) -> dict[str, int]:
    """The window of CONV_2D or DEPTHWISE_CONV_2D ``node`` (filters [O or 1, KH, KW, I], input 1)."""
    src, dst = graph.tensor(node.inputs[0]).shape, graph.tensor(node.outputs[0]).shape
    _, kh, kw, _ = graph.tensor(node.inputs[1]).shape
    return window_args(node.params, src, dst, kh, kw)


def unit_window() -> dict[str, int]:
    """A 1x1 window, stride 1, unpadded: FULLY_CONNECTED's, for the kernels that take a window."""
    return window_args({"stride_height": 1, "stride_width": 1, "padding": 0}, (1, 1, 1, 1), (1, 1, 1, 1), 1, 1)


def transpose_window(node: Node, graph: Graph) -> dict[str, int]:
    """The window of TRANSPOSE_CONV ``node`` (inputs output_shape, weights [O, KH, KW, I], input):
    its size, strides and the padding of the forward convolution it transposes (output -> input).
    No dilations."""
    p = node.params
    src, dst = graph.tensor(node.inputs[2]).shape, graph.tensor(node.outputs[0]).shape
    _, kh, kw, _ = graph.tensor(node.inputs[1]).shape
    sh, sw = p["stride_height"], p["stride_width"]
    return {
        "kernel_h": kh,
        "kernel_w": kw,
        "stride_h": sh,
        "stride_w": sw,
        "pad_h": same_padding(dst[1], src[1], kh, sh, 1, p["padding"]),
        "pad_w": same_padding(dst[2], src[2], kw, sw, 1, p["padding"]),
    }
