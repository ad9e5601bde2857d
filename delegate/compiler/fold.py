"""Constant folding before partitioning: DEQUANTIZE of constant fp16 weights.

A DEQUANTIZE whose input is a constant float16 tensor (fp16-weight models) produces a constant:
its output is marked constant (valued when the input's value was read) so the consuming
convolutions take it as weights, and the node itself needs no kernel. The node is delegated only
when every consumer is, so the dequantized tensor never has to leave the partition.
"""

from __future__ import annotations

import numpy as np

from .graph import Builtin, Graph

FLOAT16 = 10  # kTfLiteFloat16


def fold_dequantize(graph: Graph) -> set[int]:
    """Mark the outputs of foldable DEQUANTIZE nodes constant; the indices of those nodes."""
    folded = set()
    for node in graph.nodes.values():
        if node.op != Builtin.DEQUANTIZE or len(node.inputs) != 1 or len(node.outputs) != 1:
            continue
        src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        if not src.is_constant or src.dtype != FLOAT16 or src.quantized:
            continue
        dst.is_constant = True
        if src.constant is not None:
            dst.constant = np.asarray(src.constant, np.float16).astype(np.float32)
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
