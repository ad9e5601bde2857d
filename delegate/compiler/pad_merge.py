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

A PAD that only appends channels, read only by binary elementwise ops (ADD, MUL, ...) of the same
partition at the op's own shape, is dropped too (upstream merges such a PAD into its ADD): each op
reads the PAD's input with the channels past its own as zeros (``zero_extended`` in its params,
ops/elementwise.py ``read_broadcast``), linked into another kernel or not.

A zero PAD over height and width read only by VALID MAX_POOL_2D nodes is dropped too, where every
value it pads is at least zero (its producer's activation is a ReLU, or its int8 / uint8 grid
starts at zero) and no window can lie wholly in the padding: the pooling kernels skip cells past
the input, and a window's maximum over cells at least zero is the maximum with the PAD's zeros
too (ResNet's and DenseNet's ZeroPadding2D before their stem's max pooling).

MediaPipe's models export TensorFlow's SAME padding of a stride-2 layer as PAD + VALID (pose
detection, selfie segmentation), and BlazeFace-style residual blocks add a channel-padded
shortcut (face detection: 10 such PADs); each of those PADs was a kernel copying the whole tensor.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .graph import Activation, Builtin, Graph, Node, Padding
from .ops.elementwise import BINARY
from .rewrites import Match, Site, replace_nodes

#: the convolutions whose window arguments take ``merged_pad`` (window.py ``conv_window``)
_READERS = frozenset({Builtin.CONV_2D, Builtin.DEPTHWISE_CONV_2D})
#: the params a merge adds to a reader
_EDITS = frozenset({"merged_pad", "zero_extended"})


def _is_real_zero(graph: Graph, index: int) -> bool:
    t = graph.tensor(index)
    if t.constant is None or np.asarray(t.constant).size != 1:
        return False
    value = np.asarray(t.constant).reshape(-1)[0]
    if t.quantized and t.zero_points:
        return int(value) == t.zero_points[0]
    return float(value) == 0.0


def _zero_pads(node: Node, graph: Graph) -> np.ndarray | None:
    """The [4, 2] paddings of a PAD / PADV2 of a 4-D runtime tensor that pads with a real zero and
    keeps its input's quantization, else None."""
    if node.op not in (Builtin.PAD, Builtin.PADV2) or len(node.outputs) != 1 or len(node.inputs) < 2:
        return None
    src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
    if len(src.shape) != 4 or src.is_constant:
        return None
    paddings = graph.tensor(node.inputs[1]).constant
    if paddings is None or np.asarray(paddings).shape != (4, 2):
        return None
    pads = np.asarray(paddings).astype(np.int64)
    if (pads < 0).any():
        return None
    if node.op == Builtin.PADV2 and len(node.inputs) > 2 and node.inputs[2] >= 0:
        if not _is_real_zero(graph, node.inputs[2]):
            return None
    if (src.scales, src.zero_points, src.carried) != (dst.scales, dst.zero_points, dst.carried):
        return None  # a PAD that moves its values onto another grid is more than padding
    return pads


def _spatial(pads: np.ndarray) -> tuple[int, int, int, int] | None:
    """(top, bottom, left, right) of paddings over height and width only, else None."""
    if pads[0].any() or pads[3].any():
        return None
    return int(pads[1, 0]), int(pads[1, 1]), int(pads[2, 0]), int(pads[2, 1])


def _appends_channels_only(pads: np.ndarray) -> bool:
    """Do the paddings only append channels?"""
    return not pads[:3].any() and not pads[3, 0] and bool(pads[3, 1])


def _takes_padding(reader: Node, tensor: int) -> bool:
    """Does ``reader`` read ``tensor`` only as a convolution's data input?"""
    return reader.op in _READERS and reader.inputs[0] == tensor and tensor not in reader.inputs[1:]


def _non_negative(tensor: int, site: Site) -> bool:
    """Is every value of ``tensor`` at least zero? Its producer ends in a ReLU (fused or a node),
    or it is carried on a grid whose lowest integer is its zero point."""
    carried = site.graph.tensor(tensor).carried
    if carried is not None and carried.low >= carried.zero_point:
        return True
    producer = site.producer.get(tensor)
    if producer is None:
        return False
    if producer.op in (Builtin.RELU, Builtin.RELU6):
        return True
    return producer.params.get("activation") in (Activation.RELU, Activation.RELU6)


def _pools_padding(reader: Node, tensor: int, spatial: tuple[int, int, int, int]) -> bool:
    """Can MAX_POOL_2D ``reader`` read ``tensor``'s spatial zero PAD from the PAD's input (its input
    known to be at least zero)? VALID padding, and each side's padding shorter than the window,
    so that every window holds a cell of the input."""
    if reader.op != Builtin.MAX_POOL_2D or reader.inputs[0] != tensor:
        return False
    p = reader.params
    top, bottom, left, right = spatial
    fits = max(top, bottom) < p["filter_height"] and max(left, right) < p["filter_width"]
    return p["padding"] == Padding.VALID and fits


def _zero_extends(reader: Node, tensor: int, source: int, graph: Graph) -> bool:
    """Can ``reader`` read ``tensor``, a channel PAD's output, from the PAD's input ``source`` with the
    missing channels as zeros? A binary elementwise op reading it once, at the op's own shape (no
    broadcasting of it), whose other operand is another tensor than ``source``."""
    if reader.op not in BINARY or len(reader.inputs) != 2 or reader.inputs.count(tensor) != 1:
        return False
    if source in reader.inputs:
        return False  # the op would read one tensor two ways
    return graph.tensor(tensor).shape == graph.tensor(reader.outputs[0]).shape


def _merged_readers(pad: Node, readers: list[Node], site: Site) -> list[Node] | None:
    """``readers`` of ``pad``'s output rewritten to read its input, or None when it cannot merge."""
    graph = site.graph
    out, source = pad.outputs[0], pad.inputs[0]
    pads = _zero_pads(pad, graph)
    if pads is None:
        return None
    spatial = _spatial(pads)
    pools = (
        spatial is not None and _non_negative(source, site) and all(_pools_padding(r, out, spatial) for r in readers)
    )
    if spatial is not None and (pools or all(_takes_padding(r, out) for r in readers)):
        return [
            dataclasses.replace(r, inputs=(source, *r.inputs[1:]), params={**r.params, "merged_pad": spatial})
            for r in readers
        ]
    if _appends_channels_only(pads) and all(_zero_extends(r, out, source, graph) for r in readers):
        return [
            dataclasses.replace(
                r,
                inputs=tuple(source if i == out else i for i in r.inputs),
                params={**r.params, "zero_extended": (*r.params.get("zero_extended", ()), source)},
            )
            for r in readers
        ]
    return None


class PadMerge:
    """The rewrite pass (rewrites.py): ``match`` at a mergeable PAD, ``apply`` drops it and puts its
    readers, edited to read its input, in their places. A reader takes one PAD at most; the first
    reader's kernel carries the PAD's name."""

    def match(self, pad: Node, site: Site) -> Match | None:
        if pad.op not in (Builtin.PAD, Builtin.PADV2) or len(pad.outputs) != 1:
            return None
        readers = site.readers.get(pad.outputs[0], [])
        if not readers or pad.outputs[0] in site.outputs:
            return None  # a partition output is read outside it too
        if any(_EDITS & r.params.keys() for r in readers):
            return None  # a reader that took a PAD already
        merged = _merged_readers(pad, readers, site)
        if merged is None:
            return None
        return Match((pad.index,), None, tuple(merged), ((readers[0].index, pad.name),))

    def apply(self, site: Site, found: Match) -> Site:
        return replace_nodes(site, found)
