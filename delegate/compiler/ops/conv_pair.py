"""A depthwise convolution and the 1x1 convolution reading it as one kernel (the "depthwise +
projection" pair of MobileNet-style blocks, for CPU-like OpenCL devices): the kernel of the
``PairSpec`` selectors/pair.py chose (its template: kernels/cpu/conv_pair.py)."""

from __future__ import annotations

from ...context import model
from ..graph import Node
from ..kernel import Kernel
from ..kernels.common.pieces import buffer_object, operation
from ..kernels.cpu.conv_pair import LOCAL, WORK_GROUP, PairSpec, pair_code
from ..kernels.cpu.depthwise_rows import pack_depthwise_weights
from ..kernels.cpu.gemm_blocks import pack_gemm_biases, pack_gemm_weights
from .base import EmitContext
from .conv_render import bias_values, constant_filters


def pair_operation(dw: Node, conv: Node, ctx: EmitContext, spec: PairSpec) -> Kernel:
    """The kernel of the pair ``dw`` -> ``conv`` that selectors/pair.select_pair gave ``spec``."""
    g = ctx.graph
    mid = g.tensor(dw.outputs[0]).shape
    b, h, _, c = g.tensor(conv.outputs[0]).shape
    dw_biases = pack_gemm_biases(bias_values(dw, g, mid[3], ctx), ctx.dtype, spec.dw)
    dw_weights = pack_depthwise_weights(constant_filters(dw, g), ctx.dtype, spec.dw)
    biases = pack_gemm_biases(bias_values(conv, g, c, ctx), ctx.dtype, spec.width)
    weights = pack_gemm_weights(constant_filters(conv, g), ctx.dtype, spec.width)
    kernel = operation(
        pair_code(spec),
        srcs=["src_tensor"],
        work_group=WORK_GROUP,
        buffer_objects=[
            buffer_object("dw_weights", dw_weights, ctx.dtype, element_size=spec.dw),
            buffer_object("dw_biases", dw_biases, ctx.dtype, element_size=spec.dw),
            buffer_object("weights", weights, ctx.dtype, element_size=spec.width),
            buffer_object("biases", biases, ctx.dtype, element_size=spec.width),
        ],
    )
    kernel.operation.tensor_to_grid = model.TensorToGrid.CUSTOM
    kernel.operation.grid_size = model.Int3(LOCAL, h * b, 1)
    return kernel
