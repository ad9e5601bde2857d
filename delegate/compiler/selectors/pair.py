"""Which depthwise + 1x1 pairs run as one kernel (kernels/cpu/conv_pair.py), and that kernel's
``PairSpec``: the fusion pass (fusion.DepthwisePair) asks ``select_pair``."""

from __future__ import annotations

from ..graph import Builtin, Graph, Node
from ..kernels.cpu.conv_pair import PairSpec, mid_row_bytes
from ..kernels.cpu.depthwise_rows import dw_width
from ..kernels.cpu.gemm_blocks import gemm_groups
from ..options import CompileOptions
from ..window import conv_window
from .conv import use_gemm
from .gemm import gemm_width, odd_thirds

#: Largest depthwise window the pair kernel is generated for.
MAX_TAPS = 25
#: Smallest output height x batch and width paired: below them the pair was slower than the two
#: kernels on PoCL (MobileNetV2's 7x7 blocks: 7 work-groups for the cores, 5-pixel blocks over
#: 7-pixel rows).
MIN_ROWS = 14
MIN_WIDTH = 14
#: Local memory the plugin lets a pair kernel hold on a CPU device: about one core's L1 data
#: cache (MobileNetV2's largest row, 56 pixels x 144 channels, takes 31.5 KiB).
PAIR_LOCAL_BYTES = 32 * 1024


def select_pair(dw: Node, conv: Node, graph: Graph, options: CompileOptions) -> PairSpec | None:
    """The pair kernel of DEPTHWISE_CONV_2D ``dw`` and CONV_2D ``conv``, whose input is ``dw``'s
    output (and its only reader: the caller checks), holding at most
    ``options.pair_local_bytes`` of local memory; None where they stay two kernels. A pair is a
    depth multiplier 1, undilated depthwise convolution of up to MAX_TAPS taps and strides 1 or
    2, followed by a 1x1, stride 1 convolution over all its channels, on buffer storage, with at
    least MIN_ROWS rows and MIN_WIDTH columns of output."""
    if dw.op != Builtin.DEPTHWISE_CONV_2D or conv.op != Builtin.CONV_2D or not use_gemm(options):
        return None
    if conv.inputs[0] != dw.outputs[0] or dw.outputs[0] in conv.inputs[1:]:
        return None
    if len(conv.outputs) != 1 or len(dw.outputs) != 1:
        return None
    src, mid = graph.tensor(dw.inputs[0]).shape, graph.tensor(dw.outputs[0]).shape
    ints = conv_window(dw, graph)
    kh, kw = ints["kernel_h"], ints["kernel_w"]
    if mid[3] != src[3] or kh * kw > MAX_TAPS or ints["dilation_h"] != 1 or ints["dilation_w"] != 1:
        return None
    if ints["stride_h"] not in (1, 2) or ints["stride_w"] not in (1, 2):
        return None
    dst, filters = graph.tensor(conv.outputs[0]).shape, graph.tensor(conv.inputs[1]).shape
    conv_ints = conv_window(conv, graph)
    if tuple(filters[1:]) != (1, 1, mid[3]) or conv_ints["stride_h"] != 1 or conv_ints["stride_w"] != 1:
        return None
    if conv_ints["pad_h"] or conv_ints["pad_w"]:  # a zero PAD merged into it (pad_merge.py)
        return None
    b, h, w, c = dst
    dw_vector = dw_width(mid[3], options.vector_width)
    local_bytes = options.pair_local_bytes
    if b * h < MIN_ROWS or w < MIN_WIDTH or mid_row_bytes(w, mid[3], dw_vector) > local_bytes:
        return None
    width = gemm_width(c, options.vector_width)
    groups = gemm_groups(c, width)
    return PairSpec(
        dw_act=dw.params["activation"], act=conv.params["activation"], local_bytes=local_bytes,
        kernel=(kh, kw), stride=(ints["stride_h"], ints["stride_w"]), pad=(ints["pad_h"], ints["pad_w"]),
        thirds=odd_thirds(groups), width=width, dw=dw_vector, single_group=groups == 1, batch=b,
    )  # fmt: skip
