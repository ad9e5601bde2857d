"""How a convolution's chosen kernel (a selector's KernelSpec, selectors/) becomes a Kernel: the
variant's template (kernels/), the node's weights and biases packed the way it reads them, and
its launch. The op families of ops/conv.py and ops/conv_pair.py render through these."""

from __future__ import annotations

import numpy as np

from ...context import model
from .. import layout
from ..graph import Graph, Node
from ..kernel import Kernel, Piece, RequiredWorkGroup
from ..kernels.common.pieces import buffer_object, linear_object, operation
from ..kernels.cpu.gemm_blocks import pack_gemm_biases, pack_gemm_weights, pack_integer_weights, source_names
from ..kernels.cpu.gemm_conv import flat_code, phases_code, rows_code, transposed_code
from ..kernels.gpu.gpu_conv import depthwise_body, pack_tile_weights, reduction_body, tiled_conv_body
from ..selectors.spec import REQUIRED_WORK_GROUP, KernelSpec, Variant
from .base import EmitContext

#: each matrix-product variant's template
_GEMM_CODE = {
    Variant.GEMM_FLAT: flat_code,
    Variant.GEMM_ROWS: rows_code,
    Variant.GEMM_TRANSPOSED: transposed_code,
    Variant.GEMM_PHASES: phases_code,
}


def constant_filters(node: Node, graph: Graph, position: int = 1) -> np.ndarray:
    """The node's constant filters (or weights), its input ``position``."""
    filters = graph.tensor(node.inputs[position]).constant
    assert filters is not None
    return filters


def bias_values(node: Node, graph: Graph, channels: int, ctx: EmitContext) -> bytes:
    """A convolution node's biases (its input 2, zeros when absent) as layout.linear lays them out."""
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] >= 0 else None
    return layout.linear(None if bias is None else graph.tensor(bias).constant, channels, ctx.dtype)


def launched(kernel: Kernel, spec: KernelSpec) -> Kernel:
    """``kernel`` with ``spec``'s grid and work-group, where it has its own."""
    op = kernel.operation
    if spec.grid is not None:
        op.tensor_to_grid = model.TensorToGrid.CUSTOM
        op.grid_size = model.Int3(*spec.grid)
    if spec.work_group is not None:
        op.work_group_size = model.Int3(*spec.work_group)
    return kernel


def weighted_operation(code: list[Piece], ctx: EmitContext, weights: bytes, biases: bytes, *,
                       ints: dict[str, int] | None = None, element_size: int = 4,
                       work_group: RequiredWorkGroup | None = None) -> Kernel:  # fmt: skip
    """A kernel reading ``src_tensor``, its ``weights`` a buffer and its ``biases`` a linear tensor
    (layout.linear's), ``ints`` its scalar arguments."""
    return operation(
        code,
        srcs=["src_tensor"],
        ints=ints,
        buffer_objects=[buffer_object("weights", weights, ctx.dtype, element_size)],
        tensor_linear_objects=[linear_object("biases", biases, ctx.dtype)],
        work_group=work_group,
    )


def product_operation(spec: KernelSpec, node: Node, ctx: EmitContext, filters: np.ndarray,
                      window: dict[str, int], biases: bytes) -> Kernel | None:  # fmt: skip
    """The kernel of a matrix product or gpu-family ``spec`` (None for the op's own variants) over
    OHWI ``filters`` (DEPTHWISE_CONV_2D's [1, KH, KW, C]) and ``window``, ``biases`` as
    layout.linear lays them out."""
    if spec.gemm is not None and spec.gemm.integer is not None:
        return _integer_operation(spec, node, ctx, window, biases)
    if spec.gemm is not None:
        return _gemm_operation(spec, ctx, filters, window, biases)
    if spec.variant in (Variant.GPU_DIRECT, Variant.GPU_REDUCTION, Variant.GPU_DEPTHWISE):
        return _gpu_operation(spec, node, ctx, filters, window, biases)
    return None


def _window_literals(spec: KernelSpec, window: dict[str, int]) -> dict[str, int]:
    """The row modes take the window's strides, dilations and padding as literals; the others none."""
    if spec.variant not in (Variant.GEMM_ROWS, Variant.GEMM_TRANSPOSED):
        return {}
    return {k: v for k, v in window.items() if k not in ("kernel_h", "kernel_w")}


def _gemm_operation(spec: KernelSpec, ctx: EmitContext, filters: np.ndarray, window: dict[str, int],
                    biases: bytes) -> Kernel:  # fmt: skip
    gemm = spec.gemm
    assert gemm is not None
    block = gemm.groups if gemm.order else 1  # lane order: a work-item's groups' weights interleaved
    kernel = operation(
        _GEMM_CODE[spec.variant](gemm),
        srcs=source_names(gemm.sources) + (["gate"] if gemm.gate else []),
        literals=_window_literals(spec, window),
        buffer_objects=[
            buffer_object("weights", pack_gemm_weights(filters, ctx.dtype, gemm.width, bool(gemm.dot), block),
                          ctx.dtype, gemm.width),
            buffer_object("biases", pack_gemm_biases(biases, ctx.dtype, gemm.width * block), ctx.dtype,
                          element_size=gemm.width),
        ],
    )  # fmt: skip
    # its output is written only through its write hooks: it may carry codes (compiler/codes.py)
    kernel.codes_writer = True
    return launched(kernel, spec)


def _integer_operation(spec: KernelSpec, node: Node, ctx: EmitContext, window: dict[str, int],
                       biases: bytes) -> Kernel:  # fmt: skip
    """The matrix product over integers (GemmSpec.integer): the weights' int8 codes and the
    channels' scales and corrections (gemm_blocks.pack_integer_weights), float32 whatever the
    precision, as they are bit patterns read through pointers."""
    gemm = spec.gemm
    assert gemm is not None and gemm.integer is not None
    codes = ctx.graph.tensor(node.inputs[1]).codes
    assert codes is not None
    cout = codes.values.shape[0]
    values = codes.values.reshape(cout, 1, 1, -1) if codes.values.ndim == 2 else codes.values  # FULLY_CONNECTED's
    scales = np.broadcast_to(np.asarray(codes.scales, np.float64), (cout,))
    weights, params = pack_integer_weights(values, scales, gemm.integer, gemm.width, rows=values.shape[1] > 1)
    kernel = operation(
        _GEMM_CODE[spec.variant](gemm),
        srcs=["src_tensor"] + (["gate"] if gemm.gate else []),
        literals=_window_literals(spec, window),
        buffer_objects=[
            buffer_object("weights", weights, np.dtype(np.float32), 16),
            buffer_object("params", params, np.dtype(np.float32), 16),
            buffer_object("biases", pack_gemm_biases(biases, ctx.dtype, gemm.width), ctx.dtype, gemm.width),
        ],
    )
    # its input is read only as codes (not a gated read's operands, which it multiplies) and its
    # output written only through its write hooks: either may carry codes (compiler/codes.py)
    kernel.codes_input, kernel.codes_writer = None if gemm.gate else gemm.integer, True
    return launched(kernel, spec)


def _gpu_operation(spec: KernelSpec, node: Node, ctx: EmitContext, filters: np.ndarray, window: dict[str, int],
                   biases: bytes) -> Kernel:  # fmt: skip
    g = ctx.graph
    _, ih, iw, _ = layout.bhwc(g.tensor(node.inputs[0]).shape)
    _, h, w, _ = layout.bhwc(g.tensor(node.outputs[0]).shape)
    act = node.params.get("activation", 0)
    assert spec.work_group is not None
    if spec.variant is Variant.GPU_DEPTHWISE:
        body = depthwise_body(window, ((ih, iw), (h, w)), act)
        weights = layout.depthwise_weights(filters, ctx.dtype)
    elif spec.variant is Variant.GPU_REDUCTION:
        body, weights = reduction_body(spec.work_group[0], act), layout.conv_weights(filters, ctx.dtype)
    else:
        assert spec.tile is not None
        group = spec.work_group[0] * spec.work_group[1]
        body = tiled_conv_body(spec.tile, window, ((ih, iw), (h, w)), group, act)
        weights = pack_tile_weights(filters, spec.tile.blocks, ctx.dtype)
    required = RequiredWorkGroup(spec.work_group) if spec.variant in REQUIRED_WORK_GROUP else None
    return launched(weighted_operation(body, ctx, weights, biases, work_group=required), spec)
