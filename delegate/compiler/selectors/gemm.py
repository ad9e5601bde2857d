"""The matrix products' choices (kernels/cpu/gemm_conv.py): a work-item's block of pixels x groups
of output channels, the vector width, the lane order, the dot-product outputs, the grid and the
work-group of each mode, given the node's shapes. ``select_gemm`` returns them as a KernelSpec
whose ``gemm`` is the template's GemmSpec; the rest are its rules, measured on PoCL's CPU targets
(benchmarks/RESULTS.md, "Kernel choices", "Lane-order matrix products")."""

from __future__ import annotations

from .. import layout
from ..graph import Carried, Graph, Node
from ..kernels.cpu.gemm_blocks import (
    GEMM_GROUPS,
    GEMM_PIXELS,
    PIXELS_FIRST,
    PREFETCH_SLICES,
    THIRDS_GROUPS,
    THIRDS_PIXELS,
    WEIGHTS_FIRST,
    gemm_groups,
)
from ..kernels.cpu.gemm_conv import GemmSpec
from ..window import conv_window
from .spec import GEMM_VARIANTS, KernelSpec, Variant

#: Groups of 16 output channels per work-item of the integer product (GemmSpec.integer), whose
#: accumulators with GEMM_PIXELS pixels' codes fill 30 of AVX-512's 32 registers.
INTEGER_GROUPS = 4
#: The most pixels a work-item of the integer rows mode takes: 7 x INTEGER_GROUPS accumulators
#: and the two vectors a product streams fill 30 of AVX-512's 32 registers.
INTEGER_MAX_PIXELS = 7


def integer_groups(groups: int) -> int:
    """Groups of 16 channels per work-item of the integer product for an output of ``groups``:
    INTEGER_GROUPS, or one fewer where that computes fewer padding groups (an item past the output
    repeats its last group: 96 channels in items of 4 would compute 8 groups for 6)."""
    most = min(groups, INTEGER_GROUPS)
    return min((most, most - 1) if most > 2 else (most,), key=lambda per: -(-groups // per) * per)


#: The other pixel count ``gemm_pixels`` may pick.
GEMM_PIXELS_ALT = 5


def gemm_pixels(pixels: int) -> int:
    """Pixels per work-item for a row (or flat run) of ``pixels``: GEMM_PIXELS, unless its last
    block pads more than 2% over what GEMM_PIXELS_ALT's would (49 pixels: 9 x 6 = 54 slots
    against 10 x 5 = 50), or 1 for rows shorter than a block."""
    if pixels < GEMM_PIXELS_ALT:
        return 1
    if pixels < GEMM_PIXELS:
        return GEMM_PIXELS_ALT
    slots, alt_slots = (-(-pixels // p) * p for p in (GEMM_PIXELS, GEMM_PIXELS_ALT))
    return GEMM_PIXELS_ALT if slots > 1.02 * alt_slots else GEMM_PIXELS


def gemm_width(channels: int, vector_width: int, narrow: bool = False) -> int:
    """Output channels per group of a matrix-product kernel writing ``channels``: 16 when the
    device wants 16-wide vectors (``CompileOptions.vector_width``) and there are more than 8 channels,
    else 8: padding costs less than half-width vectors (benchmarks/RESULTS.md, "Kernel choices").
    ``narrow`` (kernels that take it): 4 for outputs of up to 4 channels, a single slice, which
    the whole-block write then covers."""
    if narrow and channels <= 4:
        return 4
    if vector_width < 16:
        return 8
    return 16 if channels > 8 else 8


def dot_outputs(channels: int, width: int, lanes: int) -> int:
    """Output channels a matrix-product kernel computes as dot products (0: none). An output of 1
    or 2 channels (a mask, a detection head) from whole input slices takes, per input slice and
    pixel, one FLT4 product per output channel, summed across lanes at the end, instead of a
    broadcast and a product per input channel for 4 output lanes mostly padding."""
    return channels if width == 4 and channels <= 2 and lanes == 4 else 0


def odd_thirds(groups: int) -> bool:
    """Does an output of ``groups`` groups of 8 channels take items of THIRDS_PIXELS (4) pixels x
    THIRDS_GROUPS (3) groups (12 accumulators) instead of GEMM_PIXELS x GEMM_GROUPS? Yes for an
    odd multiple of 3 (24 channels: 2 groups per item would compute a fourth, padding group, a
    third more work; 5 x 3 would not fit AVX2's 16 registers)."""
    return groups % 2 == 1 and groups % 3 == 0


#: The fewest work-groups a GEMM_ROWS grid is split into where its rows allow: PoCL runs a
#: work-group on one core, so a layer in one work-group runs on one core.
MIN_WORK_GROUPS = 4


#: Vector registers a lane-order block may hold (``row_blocking``): AVX2 has 16, and blocks that
#: need all 16 were measured to spill an accumulator through the stack inside the loop.
VECTOR_REGISTERS = 15
#: The most pixels a lane-order block takes (more measured no faster on one group of channels).
ROW_MAX_PIXELS = 8
#: The same two for 16-float vectors (``vector_width`` 16: AVX-512's 32 registers, one kept free
#: alike); blocks of 8 pixels x 2 groups measured 1.2x the time of 4 x 2 there (DenseNet121's
#: 3x3 layers, 128 -> 32 channels over rows of 32 and of 16 pixels).
WIDE_VECTOR_REGISTERS, WIDE_ROW_MAX_PIXELS = 31, 6
#: The most pixels a lane-order block takes over an input of fewer than 4 channels (an image's
#: first layer, whose taps are a few products per pixel): blocks of 4 measured 0.93-0.97x the time
#: of 6 (3x3, stride 2, 224 -> 112 x 24 channels: one-layer model, conversions included), the
#: same as 5 or 6 elsewhere (160 -> 80 x 32; 7x7, 128 -> 64 x 64); 8 and 10 1.25-1.45x of 5.
LANES_ROW_MAX_PIXELS = 4


#: The lane-order block of a 1x1 convolution over the flat pixel order: 6 pixels x 2 groups,
#: the weights first (each weight vector meets 6 pixels). Blocks of 2 pixels x 4-6 groups, the
#: windowed layers' choice, measured slower there (MobileNetV2's 1x1 layers: 1.01-1.02 of the
#: FLT4-per-pixel kernel's time, against 0.93; benchmarks/RESULTS.md, "Lane-order matrix products").
FLAT_PIXELS, FLAT_GROUPS = 6, 2


def lane_order(pixels: int, groups: int) -> str:
    """The ``lane_step`` order of a block: hold the smaller of one lane's pixel inputs and its
    weight vectors, and stream the other one at a time."""
    return PIXELS_FIRST if pixels <= groups else WEIGHTS_FIRST


def lane_registers(pixels: int, groups: int) -> int:
    """FLT8 registers a ``lane_step`` block holds: its accumulators, one lane's inputs or weights
    (``lane_order``) and the one value streamed."""
    return pixels * groups + min(pixels, groups) + 1


def row_blocking(row: int, groups: int, width: int = 8, most_groups: int = 0,
                 most_pixels: int = 0, divides: int = 0) -> tuple[int, int, str]:  # fmt: skip
    """Pixels, groups (of ``width`` channels) and ``lane_step`` order of a work-item of the
    lane-order row kernel, for output rows of ``row`` pixels and ``groups`` groups: of the blocks within
    VECTOR_REGISTERS and ROW_MAX_PIXELS (WIDE_... for 16-wide groups; ``most_pixels`` where it is
    not 0), the one with the least
    estimated time. The estimate counts the products a block computes, padding included (a last
    block past the row, groups past the output), each with its share of the loads: an input
    broadcast per ``groups`` products, weighed half again a weight vector per ``pixels`` products (2
    pixels x 4 groups measured faster than 4 x 2), plus a block's setup and write, about one
    product's worth per output vector. Blocks of one pixel load a weight vector per product and
    measured slower than blocks of two (the weights of many groups leave the L1 cache), so they
    serve rows of one pixel only. ``most_groups`` (0: no limit) caps the groups (``cached_groups``);
    ``divides`` (0: any) takes only group counts that divide it (a grouped convolution's blocks per
    group: a work-item's blocks then lie in one group). The layers measured are in
    benchmarks/RESULTS.md, "Lane-order matrix products"."""
    wide = width == 16
    registers = WIDE_VECTOR_REGISTERS if wide else VECTOR_REGISTERS
    most = most_pixels or (WIDE_ROW_MAX_PIXELS if wide else ROW_MAX_PIXELS)
    best: tuple[float, int, int] | None = None
    for g in range(1, (most_groups or groups) + 1):
        if divides and divides % g:
            continue
        for p in range(min(2, row), min(row, most) + 1):
            if lane_registers(p, g) > registers:
                continue
            work = -(-row // p) * p * -(-groups // g) * g
            cost = work * (1 + 1.5 / g + 1 / p + 1 / (p * g))
            if best is None or cost < best[0] - 1e-9:
                best = (cost, p, g)
    assert best is not None  # a block of one group fits
    return best[1], best[2], lane_order(best[1], best[2])


#: Bytes of weights a work-item of the lane-order rows mode may read (``cached_groups``): three
#: quarters of a core's 2 MiB L2 cache, the rest left to the input rows. Blocks of 2 groups of 16
#: (1.4 MiB) measured 0.8-0.97x the time of 4 (2.8 MiB; median 0.93) on a 5x5 output from 1280
#: channels through 3x3 taps; 1 group (0.7 MiB) 1.1-1.3x: a weight load per 5 products is too many.
ITEM_WEIGHT_BYTES = 3 << 19


def cached_groups(kernel: tuple[int, int], slices: int, width: int) -> int:
    """The most groups of ``width`` float channels a rows-mode work-item may take so that its
    weights (every tap and input slice) fit ITEM_WEIGHT_BYTES: the work-items of a work-group,
    which run one after another on one core, then read them from the L2 cache for each output row
    after the first, instead of from beyond it (at least 1)."""
    return max(1, ITEM_WEIGHT_BYTES // (kernel[0] * kernel[1] * slices * 4 * width * 4))


def integer_row_pixels(row: int) -> int:
    """Pixels per work-item of the integer rows mode for rows of ``row`` pixels: of 4 to
    INTEGER_MAX_PIXELS, the one whose blocks pad the row least, the larger on a tie (rows of 7,
    14, 28, 56 take 7: blocks of GEMM_PIXELS padded rows of 7 to 10 pixels); rows shorter than 4
    take themselves."""
    if row < 4:
        return row
    return min(range(4, INTEGER_MAX_PIXELS + 1), key=lambda p: (-(-row // p) * p, -p))


def integer_input(node: Node, graph: Graph) -> Carried | None:
    """The grid of ``node``'s input where its matrix product can multiply integers (GemmSpec.integer):
    the input carried int8 / uint8 (compiler/quant.py), the weights symmetric int8 (their codes
    kept, Tensor.codes) per tensor or per output channel; else None."""
    grid = graph.tensor(node.inputs[0]).carried
    codes = graph.tensor(node.inputs[1]).codes
    if grid is None or codes is None:
        return None
    if len(codes.scales) != 1 and (codes.axis != 0 or len(codes.scales) != codes.values.shape[0]):
        return None
    return grid


def grouped_width(group_outputs: int, vector_width: int) -> int:
    """Output channels per block of a grouped convolution's matrix product with ``group_outputs``
    output channels per group (a multiple of 4): ``gemm_width``'s choice for them, narrowed until
    it divides them, so that no block spans two groups."""
    width = gemm_width(group_outputs, vector_width, narrow=True)
    while group_outputs % width:
        width //= 2
    return width


def largest_divisor(limit: int, blocks: int) -> int:
    """The most blocks of a grouped convolution's group (``blocks``) a work-item may take, at most
    ``limit``: the largest divisor of ``blocks`` up to it, so that a work-item's blocks all read
    one group's input slices."""
    return max(d for d in range(1, min(limit, blocks) + 1) if blocks % d == 0)


def select_gemm(node: Node, graph: Graph, variant: Variant, kernel: tuple[int, int], vector_width: int,
                sources: int = 1, gate: bool = False, int8_dot: bool = False,
                conv_groups: int = 1) -> KernelSpec:  # fmt: skip
    """The matrix product ``variant`` (GEMM_FLAT: CONV_2D 1x1 or FULLY_CONNECTED; GEMM_ROWS: CONV_2D;
    GEMM_TRANSPOSED / GEMM_PHASES: TRANSPOSE_CONV, whose input is its input 2) of ``node`` with a
    ``kernel`` (KH, KW) window, for a device of ``vector_width`` floats per vector; ``sources``:
    how many tensors the input is concatenated from (EmitContext.concat_sources); ``gate``:
    GEMM_FLAT's input read times a squeeze-excite gate (GemmSpec.gate); ``int8_dot``: the device
    has the 16-lane integer dot product (CompileOptions.int8_dot); ``conv_groups`` > 1: a grouped
    CONV_2D of that many groups (GemmSpec.group_slices; ``grouped_product`` says which take it)."""
    assert variant in GEMM_VARIANTS
    flat, rows = variant is Variant.GEMM_FLAT, variant is Variant.GEMM_ROWS
    phases = variant is Variant.GEMM_PHASES
    b, h, w, c = layout.bhwc(graph.tensor(node.outputs[0]).shape)
    transposed = variant in (Variant.GEMM_TRANSPOSED, Variant.GEMM_PHASES)
    _, ih, iw, cin = layout.bhwc(graph.tensor(node.inputs[2 if transposed else 0]).shape)
    grouped = conv_groups > 1
    if grouped:
        c_group, cin = c // conv_groups, cin // conv_groups  # from here on, one group's input
        width = grouped_width(c_group, vector_width)
        group_blocks = c_group // width
    else:
        width, group_blocks = gemm_width(c, vector_width, narrow=True), 0
    fit = (lambda most: largest_divisor(most, group_blocks)) if grouped else (lambda most: most)
    npix, groups = b * h * w, gemm_groups(c, width)
    pixels = gemm_pixels(npix if flat else iw if phases else w)
    per_item = fit(GEMM_GROUPS) if groups >= GEMM_GROUPS else 1
    if not transposed and pixels > 1 and odd_thirds(groups) and fit(THIRDS_GROUPS) == THIRDS_GROUPS:
        pixels, per_item = THIRDS_PIXELS, THIRDS_GROUPS
    lanes = cin if sources == 1 and cin < 4 else 4
    dot = 0 if grouped else dot_outputs(c, width, lanes)
    # the integer product: one input slice is four 8-bit codes, one int32 lane per output channel
    # of a 16-wide group (kernels/cpu/gemm_blocks.integer_slice_loop); an input of fewer than 4
    # channels too, its padding lanes meeting zero codes; a gated read's in the flat mode; a
    # grouped convolution's 8-wide groups too (the 256-bit form), as its groups' outputs come
    integer_width = width == 16 or (grouped and width == 8)
    takes_integer = (flat or (rows and not gate)) and int8_dot and integer_width and sources == 1 and not dot
    integer = integer_input(node, graph) if takes_integer else None
    order, shared_columns = "", 0
    if integer is not None:
        # the products are a quarter of the float kernel's instructions, so the inputs' conversion
        # to codes weighs more: blocks of 4 groups share it (measured 0.75x the time of 2 groups
        # on a 56x56 64 -> 256 product, 0.2x on a 28x28 512 -> 128 one)
        pixels, per_item = gemm_pixels(npix) if flat else integer_row_pixels(w), fit(integer_groups(groups))
        window = conv_window(node, graph) if rows else {}
        if rows and window["dilation_w"] == 1 and kernel[1] > window["stride_w"]:
            shared_columns = window["stride_w"]
    elif rows and width > 4 and not dot and groups > 1:
        most_pixels = LANES_ROW_MAX_PIXELS if lanes < 4 else 0
        most_groups = cached_groups(kernel, layout.slices(cin), width)
        pixels, per_item, order = row_blocking(w, groups, width, most_groups, most_pixels, group_blocks)
    elif (
        flat and width == 8 and groups > 1 and not odd_thirds(groups) and npix >= FLAT_PIXELS
        and fit(FLAT_GROUPS) == FLAT_GROUPS
    ):  # fmt: skip
        pixels, per_item, order = FLAT_PIXELS, FLAT_GROUPS, lane_order(FLAT_PIXELS, FLAT_GROUPS)
    # the slice planes lie a plane apart, further than the hardware prefetchers look: hints
    # measured 0.80-0.85x the time of MobileNetV2's 1x1 projections (10x10 and 5x5 pixels, 192 to
    # 960 input channels); an input of no more slices than the hints reach ahead has none
    flt4_slices = integer is None and sources == 1 and not order and lanes == 4
    prefetch = flat and flt4_slices and layout.slices(cin) > PREFETCH_SLICES
    spec = GemmSpec(
        node.params.get("activation", 0),
        kernel=kernel,
        pixels=pixels,
        groups=per_item,
        width=width,
        sources=sources,
        lanes=lanes,
        whole_pixels=per_item >= groups,
        dot=dot,
        order=order,
        one_slice=sources == 1 and cin <= 4,
        gate=gate,
        # a carried MUL's output (compiler/quant.py): the product is rounded onto its grid
        gate_grid=graph.tensor(node.inputs[0]).carried if gate else None,
        integer=integer,
        shared_columns=shared_columns,
        prefetch=prefetch,
        group_slices=layout.slices(cin) if grouped else 0,
        group_blocks=group_blocks,
    )
    item_groups = -(-groups // per_item)
    if flat:
        return KernelSpec(variant, grid=(-(-npix // pixels), item_groups, 1), work_group=(8, 1, 1), gemm=spec)
    if phases:  # a work-item per input pixels x tap
        grid = (-(-iw // pixels) * b, ih, item_groups * kernel[0] * kernel[1])
        return KernelSpec(variant, grid=grid, work_group=(8, 1, 1), gemm=spec)
    blocks = -(-w // pixels) * b
    local_x = min(8, 1 << (blocks - 1).bit_length())
    local_y = max(1, min(8 // local_x, 1 << (h - 1).bit_length()))
    # a small grid in fewer work-groups than MIN_WORK_GROUPS leaves cores idle: narrow the columns
    while local_y > 1 and -(-blocks // local_x) * -(-h // local_y) * item_groups < MIN_WORK_GROUPS:
        local_y //= 2
    return KernelSpec(variant, grid=(blocks, h, item_groups), work_group=(local_x, local_y, 1), gemm=spec)
