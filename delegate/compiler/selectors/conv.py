"""Which kernel a CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED or TRANSPOSE_CONV node gets, from its
shapes and the CompileOptions: pure decisions, no kernel text (the op's ``emit`` renders the
KernelSpec returned, ops/conv_render.py).

- CONV_2D: in the gpu family GPU_DIRECT or GPU_REDUCTION (selectors/gpu.py) for windows of up
  to GPU_MAX_TAPS taps; else a matrix product on buffer storage (GEMM_FLAT for a 1x1 / stride 1 /
  unpadded window, GEMM_ROWS otherwise; selectors/gemm.py); else the generic kernels, BLOCKED or
  (conv_kernels ``plain``) PLAIN. One whose input channels split into groups takes the matrix
  products where each group's inputs and outputs are whole slices (``grouped_product``), else
  GROUPED.
- DEPTHWISE_CONV_2D: DEPTHWISE_MULTIPLIER for a depth multiplier > 1; GPU_DEPTHWISE in the gpu
  family (up to GPU_MAX_TAPS taps); DEPTHWISE_ROWS on buffer storage (up to DEPTHWISE_MAX_TAPS);
  else PLAIN.
- FULLY_CONNECTED: the gpu family's kernels, else GEMM_FLAT, else PLAIN.
- TRANSPOSE_CONV: GEMM_PHASES (kernel = stride, unpadded, output = input x stride) or
  GEMM_TRANSPOSED, else PLAIN.
"""

from __future__ import annotations

from .. import layout
from ..graph import Builtin, Graph, Node
from ..kernels.common.conv_blocked import PIXELS as BLOCKED_PIXELS
from ..kernels.common.conv_blocked import SLICES as BLOCKED_SLICES
from ..kernels.cpu.depthwise_rows import depthwise_pixels, dw_width
from ..options import CompileOptions, ConvKernels, KernelFamily
from ..window import conv_window, transpose_window, unit_window
from .gemm import select_gemm
from .gpu import GPU_MAX_TAPS, select_gpu_conv, select_gpu_depthwise
from .spec import KernelSpec, Variant

#: Largest depthwise window the unrolled row kernel is generated for.
DEPTHWISE_MAX_TAPS = 49


def use_gemm(options: CompileOptions) -> bool:
    """The matrix-product kernels run on buffer-backed storage unless CompileOptions.conv_kernels
    picks the generic ones (``blocked`` or ``plain``, for comparisons)."""
    return options.linear_storage and options.conv_kernels is ConvKernels.GEMM


def select_conv(node: Node, graph: Graph, options: CompileOptions, sources: int = 1,
                gate: bool = False) -> KernelSpec:  # fmt: skip
    """CONV_2D ``node``'s kernel; ``sources``: how many tensors its input is concatenated from,
    read in place (EmitContext.concat_sources; only the matrix products take more than one);
    ``gate``: its input read times a squeeze-excite gate (GemmSpec.gate; ``reads_gated`` said yes)."""
    src, dst = graph.tensor(node.inputs[0]).shape, graph.tensor(node.outputs[0]).shape
    filters = graph.tensor(node.inputs[1]).shape
    _, kh, kw, cin = filters
    window = conv_window(node, graph)
    strides, pads = (window["stride_h"], window["stride_w"]), (window["pad_h"], window["pad_w"])
    flat = kh == kw == 1 and strides == (1, 1) and pads == (0, 0)
    product = Variant.GEMM_FLAT if flat else Variant.GEMM_ROWS
    if cin != src[3]:
        conv_groups = src[3] // cin
        if not grouped_product(cin, dst[3] // conv_groups, options):
            return KernelSpec(Variant.GROUPED)
        return select_gemm(
            node, graph, product, (kh, kw), options.vector_width, int8_dot=options.int8_dot, conv_groups=conv_groups
        )
    if options.kernel_family is KernelFamily.GPU and kh * kw <= GPU_MAX_TAPS:
        return select_gpu_conv(dst, filters, window, options.gpu_work_group)
    if use_gemm(options):
        return select_gemm(node, graph, product, (kh, kw), options.vector_width, sources, gate, options.int8_dot)
    if options.conv_kernels is ConvKernels.PLAIN:
        return KernelSpec(Variant.PLAIN)
    b, h, w, c = dst
    grid = (-(-w // BLOCKED_PIXELS) * b, h, -(-layout.slices(c) // BLOCKED_SLICES))
    return KernelSpec(Variant.BLOCKED, grid=grid, work_group=(4, 4, 2))


def grouped_product(group_inputs: int, group_outputs: int, options: CompileOptions) -> bool:
    """Does a grouped CONV_2D with these input and output channels per group take the matrix
    product (GemmSpec.group_slices)? On buffers (in either family, as the windows the gpu family
    leaves), when both are whole slices: each group's input is then a run of slices and its
    outputs whole blocks. Others take GROUPED, one output lane at a time."""
    return use_gemm(options) and group_inputs % 4 == 0 and group_outputs % 4 == 0


def select_depthwise(node: Node, graph: Graph, options: CompileOptions) -> KernelSpec:
    """DEPTHWISE_CONV_2D ``node``'s kernel."""
    src, dst = graph.tensor(node.inputs[0]).shape, graph.tensor(node.outputs[0]).shape
    _, kh, kw, _ = graph.tensor(node.inputs[1]).shape
    if dst[3] // src[3] != 1:
        return KernelSpec(Variant.DEPTHWISE_MULTIPLIER)
    if options.kernel_family is KernelFamily.GPU and kh * kw <= GPU_MAX_TAPS:
        return select_gpu_depthwise(dst, options.gpu_work_group)
    if options.linear_storage and kh * kw <= DEPTHWISE_MAX_TAPS:
        b, h, w, c = dst
        pack = dw_width(c, options.vector_width)
        pixels = depthwise_pixels(w, conv_window(node, graph)["stride_w"])
        grid = (-(-w // pixels) * b, h, -(-layout.slices(c) // (pack // 4)))
        # a column of row blocks: the small outputs' grids are only 1-2 blocks wide
        # (benchmarks/RESULTS.md, "Kernel choices")
        return KernelSpec(Variant.DEPTHWISE_ROWS, grid=grid, work_group=(1, h, 1), pack=pack, rows=pixels)
    return KernelSpec(Variant.PLAIN)


def select_fully_connected(node: Node, graph: Graph, options: CompileOptions) -> KernelSpec:
    """FULLY_CONNECTED ``node``'s kernel (weights [units, input size]: a 1x1 convolution)."""
    if options.kernel_family is KernelFamily.GPU:
        units, depth = graph.tensor(node.inputs[1]).shape
        dst = graph.tensor(node.outputs[0]).shape
        return select_gpu_conv(dst, (units, 1, 1, depth), unit_window(), options.gpu_work_group)
    if use_gemm(options):
        return select_gemm(node, graph, Variant.GEMM_FLAT, (1, 1), options.vector_width, int8_dot=options.int8_dot)
    return KernelSpec(Variant.PLAIN)


def select_transpose_conv(node: Node, graph: Graph, options: CompileOptions) -> KernelSpec:
    """TRANSPOSE_CONV ``node``'s kernel (inputs output_shape, weights, input)."""
    if not use_gemm(options):
        return KernelSpec(Variant.PLAIN)
    window = transpose_window(node, graph)
    src, dst = graph.tensor(node.inputs[2]).shape, graph.tensor(node.outputs[0]).shape
    kernel, stride = (window["kernel_h"], window["kernel_w"]), (window["stride_h"], window["stride_w"])
    # kernel = stride without padding: each output pixel has exactly one tap
    phases = kernel == stride and window["pad_h"] == window["pad_w"] == 0
    phases = phases and tuple(dst[1:3]) == (src[1] * stride[0], src[2] * stride[1])
    variant = Variant.GEMM_PHASES if phases else Variant.GEMM_TRANSPOSED
    return select_gemm(node, graph, variant, kernel, options.vector_width)


def reads_concat_in_place(node: Node, concat: Node, graph: Graph, options: CompileOptions) -> bool:
    """Can CONV_2D ``node`` read the inputs of CONCATENATION ``concat`` (its input 0) in place?
    Yes for the cpu family's float matrix products when the concatenation joins runtime tensors of
    one batch, height and width along channels, every one but the last a whole number of slices;
    not where ``node`` would take the integer product (GemmSpec.integer) over the one tensor."""
    out = concat.outputs[0]
    if node.op != Builtin.CONV_2D or node.inputs[0] != out or out in node.inputs[1:] or not use_gemm(options):
        return False
    if options.kernel_family is KernelFamily.GPU or "merged_pad" in node.params:
        return False  # one input tensor; no padding of pieces
    shapes = [graph.tensor(i).shape for i in concat.inputs]
    if concat.params.get("activation", 0) or any(graph.tensor(i).is_constant for i in concat.inputs):
        return False
    if any(len(s) != 4 for s in shapes):
        return False
    axis = concat.params.get("axis", 0)
    if axis not in (3, -1) or len({tuple(s[:3]) for s in shapes}) != 1 or any(s[3] % 4 for s in shapes[:-1]):
        return False
    filters = graph.tensor(node.inputs[1]).shape
    if len(filters) != 4 or filters[3] != graph.tensor(out).shape[3] or len(concat.inputs) > 8:
        return False
    # the integer product reads one tensor: read in place, the concatenation would leave it the
    # float product over the carried values (an int8 YOLO-style FPN's two 3x3 layers over a
    # concatenation: the model 1.12x slower than with the concatenation's own kernel)
    alone = select_conv(node, graph, options).gemm
    return alone is None or alone.integer is None


def reads_gated(node: Node, gated: int, graph: Graph, options: CompileOptions) -> bool:
    """Can CONV_2D ``node`` read its input ``gated`` (a MUL's output: a feature map times a
    per-channel gate) as the feature map times the gate (GemmSpec.gate)? Yes for the cpu family's
    flat matrix product (1x1, stride 1, unpadded) over a batch-1 input of at least one whole slice.
    A carried MUL output (compiler/quant.py), whose product is rounded onto its grid as it is read
    (GemmSpec.gate_grid), where the product multiplies integers (its input's conversion to codes
    takes the rounding, gemm_blocks.gated_codes) or where a float one's work-item holds every output
    channel of its pixels and reads FLT4 slices: with several blocks of channels the float rounding
    is redone for each, which measured slower than the MUL's own kernel (EfficientNet-B0 int8,
    1.33x the model's time)."""
    if node.op != Builtin.CONV_2D or node.inputs[0] != gated or gated in node.inputs[1:] or not use_gemm(options):
        return False
    if options.kernel_family is KernelFamily.GPU or "merged_pad" in node.params:
        return False
    src, filters = graph.tensor(gated).shape, graph.tensor(node.inputs[1]).shape
    if len(src) != 4 or len(filters) != 4 or src[0] != 1 or src[3] < 4 or filters[3] != src[3]:
        return False  # batch 1: a flat block's pixels all read one gate; < 4 channels: no slice loop
    spec = select_conv(node, graph, options, gate=True)
    if spec.variant is not Variant.GEMM_FLAT or spec.gemm is None:
        return False
    gemm = spec.gemm
    return graph.tensor(gated).carried is None or gemm.integer is not None or (gemm.whole_pixels and not gemm.order)
