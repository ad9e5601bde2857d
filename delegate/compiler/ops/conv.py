"""CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV: their semantics (checks, shape
rules, costs, links); each ``emit`` asks its selector (selectors/conv.py) for the kernel and
renders the KernelSpec it gets (ops/conv_render.py, templates in kernels/)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .. import layout
from ..graph import Builtin, Graph, Node
from ..kernel import Kernel
from ..kernels.common.conv_blocked import blocked_conv_code
from ..kernels.common.conv_plain import CONV, DEPTHWISE, DEPTHWISE_MULTIPLIER, FULLY_CONNECTED, GROUPED, TRANSPOSE_CONV
from ..kernels.common.pieces import activation_code, buffer_object, operation, written
from ..kernels.cpu.depthwise_rows import DEPTHWISE_PIXELS, depthwise_code, pack_depthwise_weights
from ..kernels.cpu.gemm_blocks import pack_gemm_biases
from ..selectors.conv import select_conv, select_depthwise, select_fully_connected, select_transpose_conv
from ..selectors.spec import KernelSpec, Variant
from ..window import conv_window, transpose_window, unit_window
from . import costs, shape_rules
from .base import EmitContext, Link, Op, activation_check, runtime_io
from .channel_affine import channel_affine_code, is_channel_affine
from .conv_render import bias_values, constant_filters, launched, product_operation, weighted_operation
from .traits import MATRIX_PRODUCT, Quantization, Traits


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
        g = ctx.graph
        sources = len(ctx.concat_sources.get(node.inputs[0], [])) or 1
        spec = select_conv(node, g, ctx.options, sources, node.inputs[0] in ctx.gated_reads)
        filters, window = constant_filters(node, g), conv_window(node, g)
        biases = bias_values(node, g, g.tensor(node.outputs[0]).shape[3], ctx)
        if spec.variant is Variant.GROUPED:
            return self._grouped(node, ctx, filters, window, biases)
        product = product_operation(spec, node, ctx, filters, window, biases)
        if product is not None:
            return product
        activation = activation_code(node.params["activation"])
        if spec.variant is Variant.BLOCKED:
            code = blocked_conv_code(activation)
        else:
            code = written(CONV.replace("{activation}", activation))
        kernel = weighted_operation(code, ctx, layout.conv_weights(filters, ctx.dtype), biases, ints=window)
        return launched(kernel, spec)

    def _grouped(
        self, node: Node, ctx: EmitContext, filters: np.ndarray, ints: dict[str, int], biases: bytes
    ) -> Kernel:
        """Grouped convolution, one output lane at a time; weights stay in TFLite's OHWI order."""
        g = ctx.graph
        cin_group = filters.shape[3]
        ints |= {
            "cin_group": cin_group,
            "cout_group": filters.shape[0] // (g.tensor(node.inputs[0]).shape[3] // cin_group),
        }
        code = written(GROUPED.replace("{activation}", activation_code(node.params["activation"])))
        weights = np.ascontiguousarray(filters, np.float32).astype(ctx.dtype).tobytes()
        return weighted_operation(code, ctx, weights, biases, ints=ints, element_size=1)


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
        g = ctx.graph
        spec = select_depthwise(node, g, ctx.options)
        filters, window = constant_filters(node, g), conv_window(node, g)
        src, dst = g.tensor(node.inputs[0]).shape, g.tensor(node.outputs[0]).shape
        biases = bias_values(node, g, dst[3], ctx)
        product = product_operation(spec, node, ctx, filters, window, biases)
        if product is not None:
            return product
        if spec.variant is Variant.DEPTHWISE_ROWS:
            return self._rows(spec, node, ctx, filters, window, biases)
        template = DEPTHWISE
        if spec.variant is Variant.DEPTHWISE_MULTIPLIER:
            window["multiplier"] = dst[3] // src[3]
            template = DEPTHWISE_MULTIPLIER
        code = written(template.replace("{activation}", activation_code(node.params["activation"])))
        return weighted_operation(code, ctx, layout.depthwise_weights(filters, ctx.dtype), biases, ints=window)

    def _rows(self, spec: KernelSpec, node: Node, ctx: EmitContext, filters: np.ndarray, ints: dict[str, int],
              biases: bytes) -> Kernel:  # fmt: skip
        pack = spec.pack or 8
        code = depthwise_code(
            node.params["activation"],
            kernel=(ints["kernel_h"], ints["kernel_w"]),
            stride=(ints["stride_h"], ints["stride_w"]),
            dilation=(ints["dilation_h"], ints["dilation_w"]),
            pad=(ints["pad_h"], ints["pad_w"]),
            pixels=spec.rows or DEPTHWISE_PIXELS,
            width=pack,
            batch=ctx.graph.tensor(node.outputs[0]).shape[0],
        )
        kernel = operation(
            code,
            srcs=["src_tensor"],
            buffer_objects=[
                buffer_object(
                    "weights", pack_depthwise_weights(filters, ctx.dtype, pack), ctx.dtype, element_size=pack
                ),
                buffer_object("biases", pack_gemm_biases(biases, ctx.dtype, pack), ctx.dtype, element_size=pack),
            ],
        )
        return launched(kernel, spec)


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
        g = ctx.graph
        spec = select_fully_connected(node, g, ctx.options)
        weights = constant_filters(node, g)
        filters = np.asarray(weights, np.float32).reshape(weights.shape[0], 1, 1, weights.shape[1])
        biases = bias_values(node, g, g.tensor(node.outputs[0]).shape[-1], ctx)
        product = product_operation(spec, node, ctx, filters, unit_window(), biases)
        if product is not None:
            return product
        code = written(FULLY_CONNECTED.replace("{activation}", activation_code(node.params["activation"])))
        return weighted_operation(code, ctx, layout.conv_weights(filters, ctx.dtype), biases)


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
        g = ctx.graph
        spec = select_transpose_conv(node, g, ctx.options)
        filters, window = constant_filters(node, g), transpose_window(node, g)
        bias = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] >= 0 else None
        channels = g.tensor(node.outputs[0]).shape[3]
        biases = layout.linear(None if bias is None else g.tensor(bias).constant, channels, ctx.dtype)
        product = product_operation(spec, node, ctx, filters, window, biases)
        if product is not None:
            return product
        code = written(TRANSPOSE_CONV.replace("{activation}", activation_code(node.params.get("activation", 0))))
        return weighted_operation(code, ctx, layout.conv_weights(filters, ctx.dtype), biases, ints=window)
