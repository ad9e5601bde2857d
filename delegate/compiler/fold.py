"""Constant folding before partitioning: DEQUANTIZE of constant fp16 or int8 weights.

A DEQUANTIZE whose input is a constant float16 tensor (fp16-weight models), or an int8 / uint8
tensor with affine (per-tensor or per-channel) scales, produces a constant:
its output is marked constant (valued when the input's value was read) so the consuming
convolutions take it as weights, and the node itself needs no kernel. The node is delegated only
when every consumer is, so the dequantized tensor never has to leave the partition.
"""

from __future__ import annotations

import numpy as np

from .graph import Builtin, Graph, Tensor

FLOAT16 = 10  # kTfLiteFloat16
INT8, UINT8 = 9, 3


def dequantized(t: Tensor) -> np.ndarray | None:
    """The float value of constant ``t`` (None until its value is read)."""
    if t.constant is None:
        return None
    if t.dtype == FLOAT16:
        return np.asarray(t.constant, np.float16).astype(np.float32)
    q = np.asarray(t.constant).astype(np.float32)
    shape = [1] * q.ndim
    if len(t.scales) > 1:
        shape[t.quant_axis] = len(t.scales)
    scales = np.asarray(t.scales, np.float32).reshape(shape)
    zero = np.asarray(t.zero_points or [0] * len(t.scales), np.float32).reshape(shape)
    return (q - zero) * scales


def _foldable(t: Tensor) -> bool:
    if not t.is_constant:
        return False
    if t.dtype == FLOAT16 and not t.quantized:
        return True
    return t.dtype in (INT8, UINT8) and len(t.scales) >= 1 and len(t.zero_points) in (0, 1, len(t.scales))


def fold_dequantize(graph: Graph) -> set[int]:
    """Mark the outputs of foldable DEQUANTIZE nodes constant; the indices of those nodes."""
    folded = set()
    for node in graph.nodes.values():
        if node.op != Builtin.DEQUANTIZE or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        if not _foldable(src):
            continue
        dst.is_constant = True
        dst.constant = dequantized(src)
        folded.add(node.index)
    return folded


def consumers(graph: Graph) -> dict[int, list[int]]:
    """Tensor index -> the nodes reading it."""
    readers: dict[int, list[int]] = {}
    for node in graph.nodes.values():
        for i in node.inputs:
            if i >= 0:
                readers.setdefault(i, []).append(node.index)
    return readers
