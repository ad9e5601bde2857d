"""CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: one work-item per output pixel and slice."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ...context import model
from .. import layout
from ..graph import Builtin, Graph, Node, Tensor
from ..kernel import Kernel
from ..kernels.common.conv_blocked import blocked_conv_code
from ..kernels.common.conv_plain import CONV, DEPTHWISE, DEPTHWISE_MULTIPLIER, FULLY_CONNECTED, GROUPED, TRANSPOSE_CONV
from ..kernels.common.pieces import activation_code, buffer_object, linear_object, operation, written
from ..kernels.cpu.depthwise_rows import DEPTHWISE_MAX_TAPS, DEPTHWISE_PIXELS, depthwise_code, pack_depthwise_weights
from ..kernels.cpu.gemm_blocks import (
    FLAT_GROUPS,
    FLAT_PIXELS,
    GEMM_GROUPS,
    THIRDS_GROUPS,
    THIRDS_PIXELS,
    dot_outputs,
    gemm_groups,
    gemm_pixels,
    gemm_width,
    lane_order,
    odd_thirds,
    pack_gemm_biases,
    pack_gemm_weights,
    row_blocking,
    source_names,
)
from ..kernels.cpu.gemm_conv import GemmSpec, flat_code, phases_code, rows_code, transposed_code
from ..options import ConvKernels, KernelFamily
from . import costs, shape_rules
from .base import EmitContext, Link, Op, activation_check, runtime_io, same_padding
from .channel_affine import channel_affine_code, is_channel_affine
from .gpu_conv import GPU_MAX_TAPS, conv_kernel, depthwise_kernel
from .traits import MATRIX_PRODUCT, Quantization, Traits


def bias_values(node: Node, graph: Graph, channels: int, ctx: EmitContext) -> bytes:
    """A convolution node's biases (its input 2, zeros when absent) as layout.linear lays them out."""
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] >= 0 else None
    return layout.linear(None if bias is None else graph.tensor(bias).constant, channels, ctx.dtype)


class Conv2D(Op):
    codes = (Builtin.CONV_2D,)
    code_traits: ClassVar[dict[int, Traits]] = {Builtin.CONV_2D: MATRIX_PRODUCT}

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.convolution(node, graph)

    def macs(self, node: Node, graph: Graph) -> int:
        return costs.conv_macs(node, graph)

    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph, constant_inputs=(1, 2))
        if problem:
            return problem
        filters = graph.tensor(node.inputs[1])
        src = graph.tensor(node.inputs[0])
        if len(filters.shape) != 4 or len(src.shape) != 4:
            return "CONV_2D needs 4-D input and filters"
        groups, rem = divmod(src.shape[3], filters.shape[3])
        if rem or groups < 1 or filters.shape[0] % groups:
            return f"{src.shape[3]} input channels do not split into groups of {filters.shape[3]}"
        return activation_check(node.params["activation"])

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g, p = ctx.graph, node.params
        src, dst, filters, ints = conv_window(node, ctx)
        _, kh, kw, _ = filters.shape
        if filters.shape[3] != src.shape[3]:
            return self._grouped(node, ctx, filters, ints)
        if ctx.options.kernel_family is KernelFamily.GPU and kh * kw <= GPU_MAX_TAPS:
            biases = bias_values(node, g, dst.shape[3], ctx)
            gpu = conv_kernel(node, ctx, filters, ints, biases)
            if gpu is not None:
                return gpu
        if use_gemm(ctx):
            flat = kh == kw == 1 and ints["stride_h"] == ints["stride_w"] == 1 and ints["pad_h"] == ints["pad_w"] == 0
            sources = len(ctx.concat_sources.get(node.inputs[0], [])) or 1
            return gemm_operation(node, ctx, filters, ints, flat, sources=sources)
        blocked = ctx.options.conv_kernels is not ConvKernels.PLAIN
        code = (
            blocked_conv_code(activation_code(p["activation"]))
            if blocked
            else written(CONV.replace("{activation}", activation_code(p["activation"])))
        )
        kernel = operation(
            code,
            srcs=["src_tensor"],
            ints=ints,
            buffer_objects=[buffer_object("weights", layout.conv_weights(filters, ctx.dtype), ctx.dtype)],
            tensor_linear_objects=[linear_object("biases", bias_values(node, g, dst.shape[3], ctx), ctx.dtype)],
        )
        if blocked:  # one work-item per 4 pixels x 2 slices
            b, h, w, c = dst.shape
            op = kernel.operation
            op.tensor_to_grid = model.TensorToGrid.CUSTOM
            op.grid_size = model.Int3(-(-w // 4) * b, h, -(-layout.slices(c) // 2))
            op.work_group_size = model.Int3(4, 4, 2)
        return kernel

    def _grouped(self, node: Node, ctx: EmitContext, filters: np.ndarray, ints: dict[str, int]) -> Kernel:
        """Grouped convolution, one output lane at a time; weights stay in TFLite's OHWI order."""
        g = ctx.graph
        dst = g.tensor(node.outputs[0])
        cin_group = filters.shape[3]
        ints |= {
            "cin_group": cin_group,
            "cout_group": filters.shape[0] // (g.tensor(node.inputs[0]).shape[3] // cin_group),
        }
        code = written(GROUPED.replace("{activation}", activation_code(node.params["activation"])))
        weights = np.ascontiguousarray(filters, np.float32).astype(ctx.dtype).tobytes()
        return operation(
            code,
            srcs=["src_tensor"],
            ints=ints,
            buffer_objects=[buffer_object("weights", weights, ctx.dtype, element_size=1)],
            tensor_linear_objects=[linear_object("biases", bias_values(node, g, dst.shape[3], ctx), ctx.dtype)],
        )


def reads_concat_in_place(node: Node, concat: Node, ctx: EmitContext) -> bool:
    """Can CONV_2D ``node`` read the inputs of CONCATENATION ``concat`` (its input 0) in place?
    Yes for the matrix-product kernel when the concatenation joins runtime tensors of one batch,
    height and width along channels, every one but the last a whole number of slices."""
    g = ctx.graph
    out = concat.outputs[0]
    if node.op != Builtin.CONV_2D or node.inputs[0] != out or out in node.inputs[1:] or not use_gemm(ctx):
        return False
    if ctx.options.kernel_family is KernelFamily.GPU or "merged_pad" in node.params:
        return False  # one input tensor; no padding of pieces
    shapes = [g.tensor(i).shape for i in concat.inputs]
    if concat.params.get("activation", 0) or any(g.tensor(i).is_constant for i in concat.inputs):
        return False
    if any(len(s) != 4 for s in shapes):
        return False
    axis = concat.params.get("axis", 0)
    if axis not in (3, -1) or len({tuple(s[:3]) for s in shapes}) != 1 or any(s[3] % 4 for s in shapes[:-1]):
        return False
    filters = g.tensor(node.inputs[1]).shape
    return len(filters) == 4 and filters[3] == g.tensor(out).shape[3] and len(concat.inputs) <= 8


def use_gemm(ctx: EmitContext) -> bool:
    """The matrix-product kernels run on buffer-backed storage unless CompileOptions.conv_kernels picks
    the generic ones (``blocked`` or ``plain``, for comparisons)."""
    return ctx.linear_storage and ctx.options.conv_kernels is ConvKernels.GEMM


def gemm_operation(node: Node, ctx: EmitContext, filters: np.ndarray, ints: dict[str, int], flat: bool,
                   biases: bytes | None = None, transposed: bool = False, phases: bool = False,
                   sources: int = 1) -> Kernel:  # fmt: skip
    """CONV_2D (OHWI ``filters``), FULLY_CONNECTED (1x1 filters, ``flat``) or TRANSPOSE_CONV
    (``transposed``; ``phases`` when kernel = stride, see gemm_conv.phases_code) as the matrix-product
    kernel; ``biases`` as layout.linear lays them out (default: the node's input 2); ``sources``:
    how many tensors the input is concatenated from (EmitContext.concat_sources)."""
    g = ctx.graph
    dst = g.tensor(node.outputs[0])
    b, h, w, c = layout.bhwc(dst.shape)
    width = gemm_width(c, ctx.options.vector_width, narrow=True)
    npix, groups = b * h * w, gemm_groups(c, width)
    _, ih, iw, cin = layout.bhwc(g.tensor(node.inputs[2 if transposed else 0]).shape)
    pixels = gemm_pixels(npix if flat else iw if phases else w)
    per_item = GEMM_GROUPS if groups >= GEMM_GROUPS else 1
    if not (transposed or phases) and pixels > 1 and odd_thirds(groups):
        pixels, per_item = THIRDS_PIXELS, THIRDS_GROUPS
    lanes = cin if sources == 1 and cin < 4 else 4
    dot = dot_outputs(c, width, lanes)
    order = ""
    if not (flat or transposed or phases) and width == 8 and not dot and groups > 1:
        pixels, per_item, order = row_blocking(w, groups)
    elif flat and width == 8 and groups > 1 and not odd_thirds(groups) and npix >= FLAT_PIXELS:
        pixels, per_item, order = FLAT_PIXELS, FLAT_GROUPS, lane_order(FLAT_PIXELS, FLAT_GROUPS)
    spec = GemmSpec(
        node.params.get("activation", 0),
        kernel=(filters.shape[1], filters.shape[2]),
        pixels=pixels,
        groups=per_item,
        width=width,
        sources=sources,
        lanes=lanes,
        whole_pixels=per_item >= groups,
        dot=dot,
        order=order,
        one_slice=sources == 1 and cin <= 4,
    )
    mode = flat_code if flat else phases_code if phases else transposed_code if transposed else rows_code
    window = {} if flat or phases else {k: v for k, v in ints.items() if k not in ("kernel_h", "kernel_w")}
    block = per_item if order else 1  # lane order: a work-item's groups' weights interleaved
    biases = pack_gemm_biases(bias_values(node, g, c, ctx) if biases is None else biases, ctx.dtype, width * block)
    weights = pack_gemm_weights(filters, ctx.dtype, width, bool(dot), block)
    kernel = operation(
        mode(spec),
        srcs=source_names(sources),
        literals=window,
        buffer_objects=[
            buffer_object("weights", weights, ctx.dtype, width),
            buffer_object("biases", biases, ctx.dtype, element_size=width),
        ],
    )
    op = kernel.operation
    op.tensor_to_grid = model.TensorToGrid.CUSTOM
    if flat:
        op.grid_size = model.Int3(-(-npix // pixels), -(-groups // per_item), 1)
        op.work_group_size = model.Int3(8, 1, 1)
    elif phases:
        op.grid_size = model.Int3(
            -(-iw // pixels) * b, ih, -(-groups // per_item) * filters.shape[1] * filters.shape[2]
        )
        op.work_group_size = model.Int3(8, 1, 1)
    else:
        blocks = -(-w // pixels) * b
        op.grid_size = model.Int3(blocks, h, -(-groups // per_item))
        local_x = min(8, 1 << (blocks - 1).bit_length())
        op.work_group_size = model.Int3(local_x, max(1, min(8 // local_x, 1 << (h - 1).bit_length())), 1)
    return kernel


def conv_window(node: Node, ctx: EmitContext) -> tuple[Tensor, Tensor, np.ndarray, dict[str, int]]:
    """A convolution node's input and output, its constant filters and its window arguments."""
    g = ctx.graph
    src, dst = g.tensor(node.inputs[0]), g.tensor(node.outputs[0])
    filters = g.tensor(node.inputs[1]).constant
    assert filters is not None
    _, kh, kw, _ = filters.shape
    return src, dst, filters, _window_args(node.params, src.shape, dst.shape, kh, kw)


def _window_args(p: dict, src: tuple[int, ...], dst: tuple[int, ...], kh: int, kw: int) -> dict[str, int]:
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


class DepthwiseConv2D(Op):
    codes = (Builtin.DEPTHWISE_CONV_2D,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = {Builtin.DEPTHWISE_CONV_2D: MATRIX_PRODUCT}

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.convolution(node, graph)

    def macs(self, node: Node, graph: Graph) -> int:
        return costs.depthwise_macs(node, graph)

    def links(self, node: Node, graph: Graph, fused_input: int) -> bool:
        return is_channel_affine(node, graph)

    def link(self, node: Node, fused_input: int, link: Link) -> str:
        return channel_affine_code(node, link)

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph, constant_inputs=(1, 2))
        if problem:
            return problem
        filters, src = graph.tensor(node.inputs[1]), graph.tensor(node.inputs[0])
        dst = graph.tensor(node.outputs[0])
        if len(filters.shape) != 4 or filters.shape[0] != 1 or len(src.shape) != 4:
            return "DEPTHWISE_CONV_2D needs 4-D input and [1, KH, KW, C] filters"
        if dst.shape[3] % src.shape[3] != 0:
            return "output channels are not a multiple of input channels"
        return activation_check(node.params["activation"])

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        p = node.params
        src, dst, filters, ints = conv_window(node, ctx)
        _, kh, kw, _ = filters.shape
        multiplier = dst.shape[3] // src.shape[3]
        if multiplier == 1 and ctx.options.kernel_family is KernelFamily.GPU and kh * kw <= GPU_MAX_TAPS:
            return depthwise_kernel(node, ctx, filters, ints, bias_values(node, ctx.graph, dst.shape[3], ctx))
        if multiplier == 1 and ctx.linear_storage and kh * kw <= DEPTHWISE_MAX_TAPS:
            return self._unrolled(node, ctx, filters, ints)
        template = DEPTHWISE
        if multiplier != 1:
            ints["multiplier"] = multiplier
            template = DEPTHWISE_MULTIPLIER
        return operation(
            written(template.replace("{activation}", activation_code(p["activation"]))),
            srcs=["src_tensor"],
            ints=ints,
            buffer_objects=[buffer_object("weights", layout.depthwise_weights(filters, ctx.dtype), ctx.dtype)],
            tensor_linear_objects=[linear_object("biases", bias_values(node, ctx.graph, dst.shape[3], ctx), ctx.dtype)],
        )

    def _unrolled(self, node: Node, ctx: EmitContext, filters: np.ndarray, ints: dict[str, int]) -> Kernel:
        g = ctx.graph
        dst = g.tensor(node.outputs[0])
        code = depthwise_code(
            node.params["activation"],
            kernel=(ints["kernel_h"], ints["kernel_w"]),
            stride=(ints["stride_h"], ints["stride_w"]),
            dilation=(ints["dilation_h"], ints["dilation_w"]),
            pad=(ints["pad_h"], ints["pad_w"]),
        )
        kernel = operation(
            code,
            srcs=["src_tensor"],
            buffer_objects=[
                buffer_object("weights", pack_depthwise_weights(filters, ctx.dtype), ctx.dtype, element_size=8),
                buffer_object("biases", pack_gemm_biases(bias_values(node, g, dst.shape[3], ctx), ctx.dtype), ctx.dtype,
                              element_size=8),
            ],
        )  # fmt: skip
        b, h, w, c = dst.shape
        op = kernel.operation
        op.tensor_to_grid = model.TensorToGrid.CUSTOM
        op.grid_size = model.Int3(-(-w // DEPTHWISE_PIXELS) * b, h, -(-layout.slices(c) // 2))
        # a column of row blocks: the small outputs' grids are only 1-2 blocks wide
        # (benchmarks/RESULTS.md, "Kernel choices")
        op.work_group_size = model.Int3(1, h, 1)
        return kernel


class FullyConnected(Op):
    codes = (Builtin.FULLY_CONNECTED,)
    code_traits: ClassVar[dict[int, Traits]] = {Builtin.FULLY_CONNECTED: MATRIX_PRODUCT}

    def macs(self, node: Node, graph: Graph) -> int:
        return costs.fully_connected_macs(node, graph)

    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph, constant_inputs=(1, 2))
        if problem:
            return problem
        if node.params.get("weights_format", 0) != 0:
            return "shuffled weights format"
        src, dst = graph.tensor(node.inputs[0]), graph.tensor(node.outputs[0])
        weights = graph.tensor(node.inputs[1])
        if len(weights.shape) != 2 or weights.shape[1] != layout.bhwc(src.shape)[3]:
            return "the input's last dimension is not the weights' input size (flattening FC)"
        if layout.bhwc(src.shape)[:3] != layout.bhwc(dst.shape)[:3]:
            return "input rows do not map onto output rows"
        return activation_check(node.params["activation"])

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g, p = ctx.graph, node.params
        dst = g.tensor(node.outputs[0])
        weights = g.tensor(node.inputs[1]).constant
        assert weights is not None
        filters = np.asarray(weights, np.float32).reshape(weights.shape[0], 1, 1, weights.shape[1])
        if ctx.options.kernel_family is KernelFamily.GPU:
            window = _window_args(
                {"stride_height": 1, "stride_width": 1, "padding": 0}, (1, 1, 1, 1), (1, 1, 1, 1), 1, 1
            )
            gpu = conv_kernel(node, ctx, filters, window, bias_values(node, g, dst.shape[-1], ctx))
            assert gpu is not None  # a 1x1 window always fits
            return gpu
        if use_gemm(ctx):
            return gemm_operation(node, ctx, filters, {}, flat=True)
        return operation(
            written(FULLY_CONNECTED.replace("{activation}", activation_code(p["activation"]))),
            srcs=["src_tensor"],
            buffer_objects=[buffer_object("weights", layout.conv_weights(filters, ctx.dtype), ctx.dtype)],
            tensor_linear_objects=[linear_object("biases", bias_values(node, g, dst.shape[-1], ctx), ctx.dtype)],
        )


class TransposeConv(Op):
    """TRANSPOSE_CONV: inputs (output_shape, weights [O, KH, KW, I], input[, bias])."""

    codes = (Builtin.TRANSPOSE_CONV,)
    data_inputs = 3
    code_traits: ClassVar[dict[int, Traits]] = {
        Builtin.TRANSPOSE_CONV: Traits(
            quantization=Quantization.REQUANTIZES, matrix_product=(2, 1), product=True, hybrid_weights=(1, 2)
        )
    }

    def macs(self, node: Node, graph: Graph) -> int:
        return costs.transpose_conv_macs(node, graph)

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) < 3:
            return "TRANSPOSE_CONV needs output_shape, weights and input"
        for position in (0, 1, 3):
            if position < len(node.inputs) and node.inputs[position] >= 0:
                if not graph.tensor(node.inputs[position]).is_constant:
                    return f"input {position} is not a constant"
        src, weights = graph.tensor(node.inputs[2]), graph.tensor(node.inputs[1])
        dst = graph.tensor(node.outputs[0])
        for t in (src, weights, dst):
            if t.dtype != 1 or t.quantized or len(t.shape) != 4:
                return f"tensor {t.index} is not a 4-D float32 tensor"
        if weights.shape[3] != src.shape[3] or weights.shape[0] != dst.shape[3]:
            return "weights do not match input and output channels"
        return activation_check(node.params.get("activation", 0))

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g, p = ctx.graph, node.params
        src, dst = g.tensor(node.inputs[2]), g.tensor(node.outputs[0])
        filters = g.tensor(node.inputs[1]).constant
        assert filters is not None
        _, kh, kw, _ = filters.shape
        sh, sw = p["stride_height"], p["stride_width"]
        bias = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] >= 0 else None
        ints = {
            "kernel_h": kh,
            "kernel_w": kw,
            "stride_h": sh,
            "stride_w": sw,
            # The padding of the forward convolution this one transposes (output -> input).
            "pad_h": same_padding(dst.shape[1], src.shape[1], kh, sh, 1, p["padding"]),
            "pad_w": same_padding(dst.shape[2], src.shape[2], kw, sw, 1, p["padding"]),
        }
        biases = layout.linear(None if bias is None else g.tensor(bias).constant, dst.shape[3], ctx.dtype)
        if use_gemm(ctx):
            # Kernel = stride without padding: each output pixel has exactly one tap.
            phases = (kh, kw) == (sh, sw) and ints["pad_h"] == ints["pad_w"] == 0
            phases = phases and tuple(dst.shape[1:3]) == (src.shape[1] * sh, src.shape[2] * sw)
            return gemm_operation(node, ctx, filters, ints, flat=False, biases=biases, transposed=True, phases=phases)
        return operation(
            written(TRANSPOSE_CONV.replace("{activation}", activation_code(p.get("activation", 0)))),
            srcs=["src_tensor"],
            ints=ints,
            buffer_objects=[buffer_object("weights", layout.conv_weights(filters, ctx.dtype), ctx.dtype)],
            tensor_linear_objects=[linear_object("biases", biases, ctx.dtype)],
        )
