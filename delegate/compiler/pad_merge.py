"""Zero padding merged into the convolution that reads it, as upstream's GPU delegate merges a PAD
into the 2-D operation after it: the PAD needs no kernel of its own.

A PAD (or PADV2 whose value is a real zero) over height and width only, whose output is read
only by CONV_2D or DEPTHWISE_CONV_2D nodes of the same partition, as their data input, is
dropped from the partition's kernels; each of those convolutions reads the PAD's input instead, with the
PAD's leading rows and columns added to its own leading padding (``merged_pad`` in its params,
read by ops/conv.py's window arguments). The reads past the input's end count as zero in every
convolution kernel (they are bounds-checked for SAME padding already), which is what the PAD's
trailing rows and columns held. Quantized tensors qualify too: TFLite pads an integer tensor with
its zero point, the real zero the float-carried value reads as.

MediaPipe's models (pose and face detection, selfie segmentation) export TensorFlow's SAME padding
of a stride-2 layer as PAD + VALID: each of those PADs was a kernel copying the whole tensor.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .graph import Builtin, Graph, Node

#: the convolutions whose window arguments take ``merged_pad`` (ops/conv.py ``conv_window``)
_READERS = frozenset({Builtin.CONV_2D, Builtin.DEPTHWISE_CONV_2D})


def _is_real_zero(graph: Graph, index: int) -> bool:
    t = graph.tensor(index)
    if t.constant is None or np.asarray(t.constant).size != 1:
        return False
    value = np.asarray(t.constant).reshape(-1)[0]
    if t.quantized and t.zero_points:
        return int(value) == t.zero_points[0]
    return float(value) == 0.0


def spatial_pads(node: Node, graph: Graph) -> tuple[int, int, int, int] | None:
    """(top, bottom, left, right) of a 4-D zero PAD / PADV2 that pads only height and width, else None."""
    if node.op not in (Builtin.PAD, Builtin.PADV2) or len(node.outputs) != 1 or len(node.inputs) < 2:
        return None
    if len(graph.tensor(node.inputs[0]).shape) != 4:
        return None
    paddings = graph.tensor(node.inputs[1]).constant
    if paddings is None or np.asarray(paddings).shape != (4, 2):
        return None
    pads = np.asarray(paddings).astype(np.int64)
    if (pads < 0).any() or pads[0].any() or pads[3].any():
        return None
    if node.op == Builtin.PADV2 and len(node.inputs) > 2 and node.inputs[2] >= 0:
        if not _is_real_zero(graph, node.inputs[2]):
            return None
    src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
    if (src.scales, src.zero_points, src.carried) != (dst.scales, dst.zero_points, dst.carried):
        return None  # a PAD that moves its values onto another grid is more than padding
    return int(pads[1, 0]), int(pads[1, 1]), int(pads[2, 0]), int(pads[2, 1])


def _takes_padding(reader: Node, tensor: int) -> bool:
    """Does ``reader`` read ``tensor`` only as a convolution's data input?"""
    return reader.op in _READERS and reader.inputs[0] == tensor and tensor not in reader.inputs[1:]


@dataclass(frozen=True)
class MergedPads:
    """A partition after merging: its graph and nodes, and which reader's kernel names each PAD."""

    graph: Graph
    nodes: list[int]
    #: reader node index -> the PAD merged into it (its first reader's kernel carries the name)
    names: dict[int, str]


def merge_pads(graph: Graph, nodes: list[int], outputs: list[int]) -> MergedPads:
    """``graph`` with the readers of each mergeable PAD reading the PAD's input (their
    ``merged_pad`` set), and ``nodes`` without those PADs. The graph is a copy where anything
    changes; nodes are replaced, never edited."""
    readers_of: dict[int, list[Node]] = {}
    for index in nodes:
        for i in dict.fromkeys(graph.nodes[index].inputs):
            readers_of.setdefault(i, []).append(graph.nodes[index])
    replaced: dict[int, Node] = {}
    dropped: set[int] = set()
    names: dict[int, str] = {}
    for index in nodes:
        pad = graph.nodes[index]
        found = spatial_pads(pad, graph)
        out = pad.outputs[0] if found is not None else -1
        readers = readers_of.get(out, [])
        if found is None or not readers or out in outputs:
            continue  # a partition output is read outside it too
        if any(
            r.op not in _READERS or r.inputs[0] != out or out in r.inputs[1:] or r.index in replaced for r in readers
        ):
            continue
        for r in readers:
            params = {**r.params, "merged_pad": found}
            replaced[r.index] = dataclasses.replace(r, inputs=(pad.inputs[0], *r.inputs[1:]), params=params)
        dropped.add(index)
        names[readers[0].index] = pad.name
    if not replaced:
        return MergedPads(graph, nodes, {})
    merged = dataclasses.replace(graph, nodes={**graph.nodes, **replaced})
    return MergedPads(merged, [i for i in nodes if i not in dropped], names)
