"""Constant folding before partitioning: DENSIFY of sparse constants, DEQUANTIZE of constant fp16
or int8 weights.

A DENSIFY whose input is a constant (a sparse tensor, which the plugin reads densified) produces
that constant, of the same type. A DEQUANTIZE whose input is a constant float16 tensor
(fp16-weight models), or an int8 / uint8 tensor with affine (per-tensor or per-channel) scales,
produces a constant. Chains fold in execution order (sparse fp16 -> DENSIFY -> DEQUANTIZE ->
CONV_2D: the convolution gets float weights). A folded node's output is marked constant (valued
when its input's value was read) so the consuming convolutions take it as weights, and the node
itself needs no kernel. The node is delegated only when every consumer is, so the folded tensor
never has to leave the partition.

Dynamic-range (hybrid) models keep int8 weights as the direct input of a float op (CONV_2D,
DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV, BATCH_MATMUL with float activations): those
weights are dequantized once here, per tensor or per channel, into the float32 constant the float
kernels take (``hybrid_weights``). TFLite's hybrid kernels quantize the activations on the fly, so
their results differ from this float computation by that rounding (tests/test_quant.py bounds it).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .graph import FLOAT32, Builtin, Graph, Tensor
from .ops import traits_of
from .quant import carry_quantized

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


#: ops whose node folds into a constant: no kernel when delegated
FOLDED_OPS = frozenset({Builtin.DEQUANTIZE, Builtin.DENSIFY})


def _hybrid_weight(graph: Graph, node_index: int) -> int | None:
    """The int8 constant weights of a hybrid node (float activations in and out), else None."""
    node = graph.nodes[node_index]
    positions = traits_of(node.op).hybrid_weights  # (weights, activations) in TFLite's hybrid kernel
    if positions is None or max(positions) >= len(node.inputs) or len(node.outputs) != 1:
        return None
    weights, data = (node.inputs[p] for p in positions)
    if weights < 0 or data < 0 or node.outputs[0] < 0:
        return None
    for i in (data, node.outputs[0]):
        if graph.tensor(i).dtype != FLOAT32 or graph.tensor(i).carried is not None:
            return None
    return weights if _foldable(graph.tensor(weights)) and graph.tensor(weights).dtype != FLOAT16 else None


def hybrid_weights(graph: Graph) -> set[int]:
    """Dequantize the int8 weights of hybrid nodes in place (float32, unquantized; valued when the
    int8 value was read), when every reader of the tensor is such a node; their tensor indices."""
    readers = consumers(graph)
    done = set()
    for index in {w for n in graph.nodes if (w := _hybrid_weight(graph, n)) is not None}:
        if not all(_hybrid_weight(graph, r) == index for r in readers.get(index, [])):
            continue  # a reader that is not hybrid (an integer op) needs the int8 tensor as it is
        t = graph.tensor(index)
        t.constant = dequantized(t)
        t.dtype, t.quantized, t.scales, t.zero_points, t.quant_axis = FLOAT32, False, (), (), 0
        done.add(index)
    return done


def _densify_foldable(src: Tensor, dst: Tensor) -> bool:
    return src.is_constant and src.dtype == dst.dtype and src.shape == dst.shape


def fold_constants(graph: Graph, dequantize: bool = True) -> set[int]:
    """Mark the outputs of foldable DENSIFY (and, with ``dequantize``, DEQUANTIZE) nodes constant,
    in node (execution) order so that chains fold; the indices of those nodes. With
    ``dequantize``, quantized activations are carried in float (quant.py) and hybrid nodes' int8
    weights become float32 constants too (``hybrid_weights``)."""
    if dequantize:
        carry_quantized(graph)
        hybrid_weights(graph)
    folded = set()
    for node in graph.nodes.values():
        if node.op not in FOLDED_OPS or len(node.inputs) != 1 or len(node.outputs) != 1 or node.inputs[0] < 0:
            continue
        src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        if node.op == Builtin.DENSIFY and _densify_foldable(src, dst):
            dst.constant = src.constant
        elif node.op == Builtin.DEQUANTIZE and dequantize and _foldable(src):
            dst.constant = dequantized(src)
        else:
            continue
        dst.is_constant = True
        folded.add(node.index)
    return folded


def folded_sources(graph: Graph, tensors: Iterable[int]) -> set[int]:
    """``tensors`` and those folding takes their values from: back through folding nodes
    (DENSIFY, DEQUANTIZE) to the model's constants."""
    producers = {o: n for n in graph.nodes.values() for o in n.outputs}
    seen: set[int] = set()
    todo = list(tensors)
    while todo:
        i = todo.pop()
        if i < 0 or i in seen:
            continue
        seen.add(i)
        producer = producers.get(i)
        if producer is not None and producer.op in FOLDED_OPS:
            todo.extend(producer.inputs)
    return seen


def consumers(graph: Graph) -> dict[int, list[int]]:
    """Tensor index -> the nodes reading it."""
    readers: dict[int, list[int]] = {}
    for node in graph.nodes.values():
        for i in node.inputs:
            if i >= 0:
                readers.setdefault(i, []).append(node.index)
    return readers
