"""The kernel selectors (delegate/compiler/selectors/) as pure decisions: small graphs in, the
KernelSpec a node gets out, without generating any kernel text; then that ``emit`` renders the
launch its selector chose."""

from __future__ import annotations

import math

import numpy as np
import pytest

from delegate.compiler.graph import FLOAT32, Builtin, Graph, Node, Padding, Tensor
from delegate.compiler.kernels.common.batch_matmul import SLICE_ROWS
from delegate.compiler.kernels.cpu.gemm_blocks import PIXELS_FIRST, THIRDS_GROUPS, THIRDS_PIXELS, WEIGHTS_FIRST
from delegate.compiler.kernels.cpu.gemm_conv import GemmSpec
from delegate.compiler.kernels.gpu.gpu_conv import GpuTile
from delegate.compiler.ops.upsample import UPSAMPLE_NEAREST
from delegate.compiler.options import CompileOptions, ConvKernels, KernelFamily
from delegate.compiler.partition import compile_partition
from delegate.compiler.selectors.batch_matmul import ROWS, select_batch_matmul
from delegate.compiler.selectors.conv import (
    reads_concat_in_place,
    select_conv,
    select_depthwise,
    select_fully_connected,
    select_transpose_conv,
)
from delegate.compiler.selectors.gemm import (
    FLAT_GROUPS,
    FLAT_PIXELS,
    ITEM_WEIGHT_BYTES,
    LANES_ROW_MAX_PIXELS,
    MIN_WORK_GROUPS,
    VECTOR_REGISTERS,
    WIDE_ROW_MAX_PIXELS,
    WIDE_VECTOR_REGISTERS,
    lane_registers,
    odd_thirds,
    row_blocking,
)
from delegate.compiler.selectors.pair import PAIR_LOCAL_BYTES, select_pair
from delegate.compiler.selectors.pointwise import (
    POOL_MAX_TAPS,
    POOL_PIXELS,
    ROW_PIXELS,
    select_copy,
    select_elementwise,
    select_pool,
)
from delegate.compiler.selectors.spec import KernelSpec, Variant
from delegate.context.model import TensorStorageType

CPU = CompileOptions()
GPU = CompileOptions(kernel_family=KernelFamily.GPU, gpu_work_group=64)
TEXTURE = CompileOptions(storage=TensorStorageType.TEXTURE_2D)


class _Graph:
    """A graph of shapes (constants hold zeros): selectors read shapes and parameters only."""

    def __init__(self) -> None:
        self.tensors: dict[int, Tensor] = {}
        self.nodes: dict[int, Node] = {}

    def tensor(self, shape: tuple[int, ...], constant: bool = False) -> int:
        index = len(self.tensors)
        data = np.zeros(shape, np.float32) if constant else None
        self.tensors[index] = Tensor(index, FLOAT32, shape, f"t{index}", is_constant=constant, constant=data)
        return index

    def node(self, op: int, inputs: list[int], shape: tuple[int, ...], **params: object) -> Node:
        out = self.tensor(shape)
        node = Node(len(self.nodes), op, 1, tuple(inputs), (out,), dict(params))
        self.nodes[node.index] = node
        return node

    def conv(self, src: tuple[int, int, int, int], cout: int, kernel: int = 1, stride: int = 1,
             cin_group: int | None = None, padding: int = Padding.SAME) -> Node:  # fmt: skip
        b, h, w, cin = src
        out = (b, -(-h // stride), -(-w // stride), cout)
        filters = self.tensor((cout, kernel, kernel, cin_group or cin), constant=True)
        params = {"stride_height": stride, "stride_width": stride, "padding": padding, "activation": 0}
        return self.node(Builtin.CONV_2D, [self.tensor(src), filters, self.tensor((cout,), True)], out, **params)

    def depthwise(self, src: tuple[int, int, int, int], kernel: int = 3, multiplier: int = 1,
                  on: int | None = None, stride: int = 1) -> Node:  # fmt: skip
        b, h, w, c = src
        filters = self.tensor((1, kernel, kernel, c * multiplier), constant=True)
        params = {"stride_height": stride, "stride_width": stride, "padding": Padding.SAME, "activation": 3}
        x = self.tensor(src) if on is None else on
        dst = (b, -(-h // stride), -(-w // stride), c * multiplier)
        return self.node(Builtin.DEPTHWISE_CONV_2D, [x, filters, self.tensor((c * multiplier,), True)],
                         dst, depth_multiplier=multiplier, **params)  # fmt: skip

    def fully_connected(self, rows: int, depth: int, units: int) -> Node:
        inputs = [self.tensor((rows, depth)), self.tensor((units, depth), True), self.tensor((units,), True)]
        return self.node(Builtin.FULLY_CONNECTED, inputs, (rows, units), activation=0, weights_format=0)

    def transpose_conv(self, src: tuple[int, int, int, int], cout: int, kernel: int, stride: int,
                       padding: int) -> Node:  # fmt: skip
        b, h, w, cin = src
        shape = self.tensor((4,), True)
        weights = self.tensor((cout, kernel, kernel, cin), True)
        params = {"stride_height": stride, "stride_width": stride, "padding": padding, "activation": 0}
        out = (b, h * stride, w * stride, cout)
        return self.node(Builtin.TRANSPOSE_CONV, [shape, weights, self.tensor(src)], out, **params)

    @property
    def graph(self) -> Graph:
        return Graph(self.tensors, self.nodes)


def _conv(src: tuple[int, int, int, int], cout: int, options: CompileOptions, **kwargs: int) -> KernelSpec:
    g = _Graph()
    node = g.conv(src, cout, **kwargs)
    return select_conv(node, g.graph, options)


def test_grouped_convolutions_of_whole_slices_take_the_matrix_products_on_buffers():
    wide = CompileOptions(vector_width=16)
    # 8 groups of 4 -> 24: blocks of 8 channels (16 would span two groups), 3 per group
    spec = _conv((1, 8, 8, 32), 192, wide, kernel=3, cin_group=4)
    assert spec.variant is Variant.GEMM_ROWS and spec.gemm is not None
    assert (spec.gemm.width, spec.gemm.group_slices, spec.gemm.group_blocks) == (8, 1, 3)
    assert 3 % spec.gemm.groups == 0  # a work-item's blocks lie in one group
    flat = _conv((1, 8, 8, 64), 64, wide, kernel=1, cin_group=16)  # 4 groups of 16 -> 16
    assert flat.variant is Variant.GEMM_FLAT and flat.gemm is not None
    assert (flat.gemm.width, flat.gemm.group_slices, flat.gemm.group_blocks, flat.gemm.groups) == (16, 4, 1, 1)
    narrow = _conv((1, 8, 8, 16), 16, wide, kernel=3, cin_group=4)  # groups of 4 -> 4: blocks of 4
    assert narrow.gemm is not None and (narrow.gemm.width, narrow.gemm.group_blocks) == (4, 1)
    assert narrow.gemm.integer is None and not narrow.gemm.dot


def test_other_grouped_convolutions_pick_grouped():
    whole = _conv((1, 8, 8, 16), 16, GPU, kernel=3, cin_group=4)  # the gpu family: the cpu family's product
    assert whole.variant is Variant.GEMM_ROWS and whole == _conv((1, 8, 8, 16), 16, CPU, kernel=3, cin_group=4)
    for options in (TEXTURE, CompileOptions(conv_kernels=ConvKernels.PLAIN)):
        assert _conv((1, 8, 8, 16), 16, options, kernel=3, cin_group=4) == KernelSpec(Variant.GROUPED)
    assert _conv((1, 8, 8, 12), 12, CPU, kernel=3, cin_group=3) == KernelSpec(Variant.GROUPED)  # 4 groups of 3
    assert _conv((1, 8, 8, 16), 8, CPU, kernel=3, cin_group=4) == KernelSpec(Variant.GROUPED)  # 4 groups -> 2


def test_the_gpu_family_takes_small_windows_and_leaves_large_ones_to_the_matrix_products():
    spec = _conv((1, 16, 16, 32), 48, GPU, kernel=3)
    # 12 output slices in blocks of 4, pixel pairs on rows of 16, tiles of 3 input slices (3 x 144
    # weight FLT4s within TILE_BYTES); 64 work-items over (x, y)
    assert spec.variant is Variant.GPU_DIRECT and spec.gemm is None
    assert spec.tile == GpuTile(pixels=2, blocks=4, tile_slices=3, lanes=4)
    assert spec.grid == (8, 16, 3) and spec.work_group == (8, 8, 1)
    assert _conv((1, 16, 16, 32), 48, GPU, kernel=5).variant is Variant.GPU_DIRECT  # 25 taps: the most it takes
    large = _conv((1, 16, 16, 32), 48, GPU, kernel=7)  # 49 taps
    assert large.variant is Variant.GEMM_ROWS and large == _conv((1, 16, 16, 32), 48, CPU, kernel=7)
    # a work-group never exceeds the device's size
    small = CompileOptions(kernel_family=KernelFamily.GPU, gpu_work_group=16)
    wg = _conv((1, 16, 16, 32), 48, small, kernel=3).work_group
    assert wg is not None and wg[0] * wg[1] * wg[2] <= 16


def test_the_gpu_family_splits_the_input_slices_of_products_over_few_pixels():
    spec = _conv((1, 2, 2, 256), 40, GPU)  # 4 pixels of a 1x1 window: a reduction per output
    assert spec == KernelSpec(Variant.GPU_REDUCTION, grid=(64, 4, 10), work_group=(64, 1, 1))
    assert _conv((1, 4, 4, 256), 40, GPU).variant is Variant.GPU_DIRECT  # 16 pixels
    assert _conv((1, 2, 2, 8), 40, GPU).work_group == (2, 1, 1)  # 2 input slices: 2 work-items


def test_the_cpu_family_picks_the_matrix_product_by_window():
    flat = _conv((1, 8, 8, 16), 16, CPU)
    assert flat.variant is Variant.GEMM_FLAT and flat.grid == (11, 1, 1) and flat.work_group == (8, 1, 1)
    assert _conv((1, 8, 8, 16), 16, CPU, stride=2).variant is Variant.GEMM_ROWS  # a strided 1x1
    rows = _conv((1, 8, 8, 16), 16, CPU, kernel=3)
    assert rows.variant is Variant.GEMM_ROWS and rows.tile is None
    assert isinstance(rows.gemm, GemmSpec) and rows.gemm.kernel == (3, 3)


def test_the_generic_kernels_on_textures_or_when_the_options_ask():
    blocked = _conv((1, 8, 10, 16), 24, TEXTURE, kernel=3)
    # 4 pixels x 2 slices per work-item: 3 blocks of a 10-pixel row, 3 pairs of 6 slices
    assert blocked == KernelSpec(Variant.BLOCKED, grid=(3, 8, 3), work_group=(4, 4, 2))
    assert _conv((1, 8, 10, 16), 24, CompileOptions(conv_kernels=ConvKernels.BLOCKED), kernel=3) == blocked
    plain = CompileOptions(conv_kernels=ConvKernels.PLAIN)
    assert _conv((1, 8, 10, 16), 24, plain, kernel=3) == KernelSpec(Variant.PLAIN)
    plain_texture = CompileOptions(storage=TensorStorageType.TEXTURE_2D, conv_kernels=ConvKernels.PLAIN)
    assert _conv((1, 8, 10, 16), 24, plain_texture, kernel=3).variant is Variant.PLAIN
    # the gpu family's convolutions take any storage (they read through the tensor's Read)
    assert _conv((1, 8, 10, 16), 24, CompileOptions(kernel_family="gpu", conv_kernels="plain"), kernel=3).variant is (
        Variant.GPU_DIRECT
    )


def _gemm(src: tuple[int, int, int, int], cout: int, options: CompileOptions = CPU, **kwargs: int) -> GemmSpec:
    spec = _conv(src, cout, options, **kwargs)
    assert spec.gemm is not None, spec
    return spec.gemm


def test_matrix_product_blocks_follow_the_channel_counts():
    # 16 channels over 64 pixels: items of 6 pixels x 2 groups in lane order, weights first
    lane = _gemm((1, 8, 8, 16), 16)
    assert (lane.pixels, lane.groups, lane.order, lane.width) == (FLAT_PIXELS, FLAT_GROUPS, WEIGHTS_FIRST, 8)
    # 24 channels (3 groups of 8): items of 4 pixels x 3 groups, a FLT4 per pixel
    thirds = _gemm((1, 8, 8, 16), 24)
    assert (thirds.pixels, thirds.groups, thirds.order) == (THIRDS_PIXELS, THIRDS_GROUPS, "")
    assert thirds.whole_pixels  # every channel in one item: a pixel's channels are there together
    # windowed layers of several groups: row_blocking's block
    rows = _gemm((1, 9, 7, 16), 32, kernel=3)
    assert (rows.pixels, rows.groups, rows.order) == row_blocking(7, 4)
    # 16-wide vectors where the device wants them, for more than 8 channels
    assert _gemm((1, 8, 8, 16), 32, CompileOptions(vector_width=16)).width == 16
    assert _gemm((1, 8, 8, 16), 8, CompileOptions(vector_width=16)).width == 8


def test_narrow_outputs_and_thin_inputs():
    # 2 output channels from whole input slices: dot products in a 4-wide group
    mask = _gemm((1, 8, 8, 16), 2, kernel=3)
    assert (mask.width, mask.dot, mask.order) == (4, 2, "")
    # an image's 3 channels: the padding lane is not multiplied, the slice loop runs once
    image = _gemm((1, 8, 8, 3), 16, kernel=3, stride=2)
    assert (image.lanes, image.one_slice) == (3, True)
    # an image's first layer in 16-wide groups: blocks of at most LANES_ROW_MAX_PIXELS pixels
    # (rows of 112 would take 6 otherwise)
    wide = CompileOptions(vector_width=16)
    stem = _gemm((1, 224, 224, 3), 24, wide, kernel=3, stride=2)
    assert (stem.lanes, stem.pixels, stem.groups) == (3, LANES_ROW_MAX_PIXELS, 2)
    assert row_blocking(112, 2, 16)[0] == 6


def test_a_concatenated_input_is_read_through_its_sources():
    g = _Graph()
    node = g.conv((1, 8, 8, 3), 16, kernel=3)
    spec = select_conv(node, g.graph, CPU, sources=2)
    assert spec.gemm is not None and (spec.gemm.sources, spec.gemm.lanes, spec.gemm.one_slice) == (2, 4, False)


def test_depthwise_choices():
    def pick(options: CompileOptions, src: tuple[int, int, int, int] = (1, 14, 14, 32), **kwargs: int) -> KernelSpec:
        g = _Graph()
        return select_depthwise(g.depthwise(src, **kwargs), g.graph, options)

    assert pick(CPU, multiplier=2).variant is Variant.DEPTHWISE_MULTIPLIER
    assert pick(GPU, multiplier=2).variant is Variant.DEPTHWISE_MULTIPLIER
    # 7 pixels (two blocks fill a 14-pixel row) x 2 slices per work-item, a column of row blocks
    # per work-group
    rows = KernelSpec(Variant.DEPTHWISE_ROWS, grid=(2, 14, 4), work_group=(1, 14, 1), pack=8, rows=7)
    assert pick(CPU) == rows
    # 4 slices (FLT16) where the device is 16 wide; a pair where 8 channels are all there is
    wide = CompileOptions(vector_width=16)
    assert pick(wide) == KernelSpec(Variant.DEPTHWISE_ROWS, grid=(2, 14, 2), work_group=(1, 14, 1), pack=16, rows=7)
    assert pick(wide, (1, 14, 14, 8)).pack == 8
    # pixels per work-item: blocks that overhang the row least, the largest of equals; up to 10
    # at stride 1, up to 8 at stride 2
    assert [pick(CPU, (1, 6, w, 32)).rows for w in (4, 7, 10, 12, 16, 17, 20, 40, 64)] == [4, 7, 10, 6, 8, 9, 10, 10, 8]
    assert [pick(CPU, (1, 6, 2 * w, 32), stride=2).rows for w in (10, 20, 40)] == [5, 5, 8]
    assert pick(CPU, kernel=7).variant is Variant.DEPTHWISE_ROWS  # 49 taps: the most it unrolls
    assert pick(CPU, kernel=9).variant is Variant.PLAIN
    assert pick(TEXTURE).variant is Variant.PLAIN
    assert pick(GPU) == KernelSpec(Variant.GPU_DEPTHWISE, work_group=(16, 4, 1))
    assert pick(GPU, kernel=7).variant is Variant.DEPTHWISE_ROWS  # past the gpu family's taps


def test_fully_connected_choices():
    def pick(options: CompileOptions, rows: int = 1) -> KernelSpec:
        g = _Graph()
        return select_fully_connected(g.fully_connected(rows, 1280, 1000), g.graph, options)

    assert pick(GPU) == KernelSpec(Variant.GPU_REDUCTION, grid=(64, 1, 250), work_group=(64, 1, 1))
    assert pick(GPU, rows=32).variant is Variant.GPU_DIRECT
    flat = pick(CPU, rows=32)
    assert flat.variant is Variant.GEMM_FLAT and flat.gemm is not None and flat.gemm.kernel == (1, 1)
    assert pick(CompileOptions(conv_kernels=ConvKernels.PLAIN)) == KernelSpec(Variant.PLAIN)
    assert pick(TEXTURE) == KernelSpec(Variant.PLAIN)


def test_transpose_conv_choices():
    def pick(kernel: int, stride: int, padding: int, options: CompileOptions = CPU) -> KernelSpec:
        g = _Graph()
        return select_transpose_conv(g.transpose_conv((1, 6, 6, 8), 16, kernel, stride, padding), g.graph, options)

    phases = pick(2, 2, Padding.VALID)  # each output pixel has one tap: a 1x1 product per tap
    assert phases.variant is Variant.GEMM_PHASES and phases.grid is not None and phases.grid[2] == 4
    assert pick(3, 2, Padding.SAME).variant is Variant.GEMM_TRANSPOSED
    assert pick(2, 2, Padding.VALID, TEXTURE) == KernelSpec(Variant.PLAIN)
    assert pick(2, 2, Padding.VALID, GPU).variant is Variant.GEMM_PHASES  # no gpu kernel of its own


def _pair(src: tuple[int, int, int, int], options: CompileOptions) -> tuple[Node, Node, Graph]:
    g = _Graph()
    dw = g.depthwise(src)
    b, h, w, c = src
    filters, bias = g.tensor((24, 1, 1, c), True), g.tensor((24,), True)
    params = {"stride_height": 1, "stride_width": 1, "padding": Padding.SAME, "activation": 0}
    conv = g.node(Builtin.CONV_2D, [dw.outputs[0], filters, bias], (b, h, w, 24), **params)
    return dw, conv, g.graph


def test_depthwise_and_1x1_pairs():
    paired = CompileOptions(pair_local_bytes=PAIR_LOCAL_BYTES)
    spec = select_pair(*_pair((1, 14, 14, 32), paired), paired)
    assert spec is not None and spec.kernel == (3, 3) and spec.thirds and spec.width == 8
    assert select_pair(*_pair((1, 14, 14, 32), CPU), CPU) is None  # no local memory for it
    assert select_pair(*_pair((1, 7, 7, 32), paired), paired) is None  # rows too few and short
    textured = CompileOptions(storage=TensorStorageType.TEXTURE_2D, pair_local_bytes=PAIR_LOCAL_BYTES)
    assert select_pair(*_pair((1, 14, 14, 32), textured), textured) is None


def test_a_concatenation_is_read_in_place_by_the_cpu_matrix_products_only():
    g = _Graph()
    a, b = g.tensor((1, 8, 8, 8)), g.tensor((1, 8, 8, 4))
    concat = g.node(Builtin.CONCATENATION, [a, b], (1, 8, 8, 12), axis=3, activation=0)
    filters, bias = g.tensor((16, 3, 3, 12), True), g.tensor((16,), True)
    params = {"stride_height": 1, "stride_width": 1, "padding": Padding.SAME, "activation": 0}
    conv = g.node(Builtin.CONV_2D, [concat.outputs[0], filters, bias], (1, 8, 8, 16), **params)
    assert reads_concat_in_place(conv, concat, g.graph, CPU)
    assert not reads_concat_in_place(conv, concat, g.graph, GPU)
    assert not reads_concat_in_place(conv, concat, g.graph, TEXTURE)


@pytest.mark.parametrize(
    ("lhs", "rhs", "out", "adj_x", "adj_y", "variant", "rows", "grid"),
    [
        ((1, 4, 128, 64), (1, 4, 128, 64), (1, 4, 128, 128), False, True, Variant.BATCH_ROWS, ROWS, (32, 4, 32)),
        ((2, 3, 5, 13), (2, 3, 13, 6), (2, 3, 5, 6), False, False, Variant.BATCH_ROWS, ROWS, (4, 3, 2)),
        ((1, 2), (2, 3), (1, 3), False, False, Variant.BATCH_ROWS, 1, (1, 1, 1)),  # one row: one per work-item
        # a transposed left operand: the 4 rows of one of its slices per work-item, whatever M
        ((2, 13, 5), (2, 13, 6), (2, 5, 6), True, False, Variant.BATCH_SLICE_ROWS, SLICE_ROWS, (2, 2, 2)),
        ((1, 4, 64, 128), (1, 4, 64, 128), (1, 4, 128, 128), True, False, Variant.BATCH_SLICE_ROWS, 4, (32, 4, 32)),
        ((3, 2), (3, 5), (2, 5), True, False, Variant.BATCH_SLICE_ROWS, 4, (1, 1, 2)),
    ],
)
def test_batch_matmul_rows(lhs, rhs, out, adj_x, adj_y, variant, rows, grid):
    g = _Graph()
    node = g.node(Builtin.BATCH_MATMUL, [g.tensor(lhs), g.tensor(rhs)], out, adj_x=adj_x, adj_y=adj_y)
    assert select_batch_matmul(node, g.graph, CompileOptions()) == KernelSpec(variant, grid=grid, rows=rows)


@pytest.mark.parametrize(
    ("lhs", "rhs", "out", "grid"),
    [
        ((1, 4, 128, 128), (1, 4, 128, 64), (1, 4, 128, 64), (22, 4, 4)),  # attention's weights x V
        ((1, 3, 65, 64), (1, 3, 64, 65), (1, 3, 65, 65), (11, 3, 5)),  # Q x K^T, K transposed by a node
        ((7, 6), (6, 9), (7, 9), (2, 1, 1)),
        ((64, 64), (1, 64, 128), (1, 64, 128), (11, 1, 8)),  # MLP-Mixer's token mixing: constant weights on the left
    ],
)
def test_batch_matmul_blocks(lhs, rhs, out, grid):
    """Neither operand transposed, batch 1, 6 rows or more, buffers: blocks of 6 rows x 16 channels
    (the left operand a constant too)."""
    g = _Graph()
    node = g.node(Builtin.BATCH_MATMUL, [g.tensor(lhs, lhs == (64, 64)), g.tensor(rhs)], out)
    want = KernelSpec(Variant.BATCH_BLOCK, grid=grid, work_group=(8, 1, 1))
    assert select_batch_matmul(node, g.graph, CompileOptions()) == want
    # the gpu family and textures keep the rows kernel
    for options in (CompileOptions(kernel_family="gpu"), CompileOptions(storage=TensorStorageType.TEXTURE_2D)):
        assert select_batch_matmul(node, g.graph, options).variant is Variant.BATCH_ROWS


def _pool_node(g: _Graph, src: tuple[int, int, int, int], window: int) -> Node:
    b, h, w, c = src
    out = (b, -(-h // window), -(-w // window), c)
    return g.node(
        Builtin.MAX_POOL_2D, [g.tensor(src)], out, padding=Padding.SAME, stride_width=window, stride_height=window,
        filter_width=window, filter_height=window, activation=0,
    )  # fmt: skip


def test_elementwise_ops_take_runs_of_a_row_on_cpu_devices():
    g = _Graph()
    node = g.node(Builtin.ADD, [g.tensor((2, 5, 19, 6)), g.tensor((1, 1, 1, 6))], (2, 5, 19, 6))
    grid = (-(-19 // ROW_PIXELS) * 2, 5, 2)
    assert select_elementwise(node, g.graph, CPU) == KernelSpec(Variant.ROW_RUNS, grid=grid, rows=ROW_PIXELS)
    assert select_elementwise(node, g.graph, GPU) == KernelSpec(Variant.PLAIN)


def _reshape_node(g: _Graph, src: tuple[int, ...], out: tuple[int, ...]) -> Node:
    return g.node(Builtin.RESHAPE, [g.tensor(src), g.tensor((len(out),), True)], out)


def test_copies_take_runs_in_work_groups_fitted_to_the_grid():
    """A detection head's reshaped output, a column of 3 pixels: 1 run wide, so a work-group of
    one column of 32 rows, not 8 x 4 with 7 of 8 columns past the grid; wide rows keep 8 runs."""
    g = _Graph()
    head, wide = _reshape_node(g, (1, 20, 20, 75), (1, 400, 3, 25)), _reshape_node(g, (1, 2, 96, 6), (1, 2, 192, 3))
    up = g.node(UPSAMPLE_NEAREST, [g.tensor((1, 10, 10, 64))], (1, 20, 20, 64), factor_y=2, factor_x=2)
    assert select_copy(head, g.graph, CPU) == KernelSpec(
        Variant.ROW_RUNS, grid=(1, 400, 7), work_group=(1, 32, 1), rows=ROW_PIXELS
    )
    assert select_copy(wide, g.graph, CPU).work_group == (8, 2, 1)  # 24 runs x 2 rows
    assert select_copy(up, g.graph, CPU) == KernelSpec(
        Variant.ROW_RUNS, grid=(3, 20, 16), work_group=(4, 8, 1), rows=ROW_PIXELS
    )
    assert select_copy(head, g.graph, GPU) == KernelSpec(Variant.PLAIN)


def test_pooling_unrolls_windows_up_to_its_tap_limit_over_buffers():
    g = _Graph()
    small, large = _pool_node(g, (1, 9, 13, 8), 3), _pool_node(g, (1, 16, 16, 4), 8)
    assert 8 * 8 > POOL_MAX_TAPS >= 3 * 3
    rows = KernelSpec(Variant.POOL_ROWS, grid=(-(-5 // POOL_PIXELS), 3, 2), work_group=(1, 3, 1), rows=POOL_PIXELS)
    assert select_pool(small, g.graph, CPU) == rows
    assert select_pool(large, g.graph, CPU) == KernelSpec(Variant.PLAIN)
    assert select_pool(small, g.graph, TEXTURE) == KernelSpec(Variant.PLAIN)  # no linear addressing


def test_odd_thirds_picks_odd_multiples_of_three_groups():
    assert [g for g in range(1, 20) if odd_thirds(g)] == [3, 9, 15]


def test_lane_order_blocks_fit_the_vector_registers():
    for width, registers, most in ((8, VECTOR_REGISTERS, 8), (16, WIDE_VECTOR_REGISTERS, WIDE_ROW_MAX_PIXELS)):
        for row in (1, 2, 3, 7, 16, 33, 112):
            for groups in range(1, 40):
                pixels, per_item, order = row_blocking(row, groups, width)
                assert 1 <= pixels <= min(row, most) and 1 <= per_item <= groups
                assert lane_registers(pixels, per_item) <= registers
                assert order == (PIXELS_FIRST if pixels <= per_item else WEIGHTS_FIRST)
    # AVX-512's 32 registers hold larger blocks than AVX2's 16
    assert row_blocking(56, 8, 16) == (3, 8, PIXELS_FIRST) and row_blocking(56, 8) == (2, 4, PIXELS_FIRST)


def test_windowed_products_in_16_wide_groups_take_lane_order_blocks():
    wide = CompileOptions(vector_width=16)
    # rows of 4 pixels, 4 groups of 16: a work-item per row and 64 channels, not one pixel each
    short = _gemm((1, 4, 4, 256), 64, wide, kernel=3)
    assert (short.width, short.pixels, short.groups, short.order) == (16, 4, 4, PIXELS_FIRST)
    rows = _gemm((1, 32, 32, 128), 32, wide, kernel=3)
    assert (rows.pixels, rows.groups, rows.order) == row_blocking(32, 2, 16) == (4, 2, WEIGHTS_FIRST)
    # one group of 16 keeps the FLT4-per-pixel kernel
    assert _gemm((1, 8, 8, 16), 16, wide, kernel=3).order == ""


def test_windowed_products_with_large_weights_take_groups_whose_weights_fit_the_cache():
    wide = CompileOptions(vector_width=16)
    # 3x3 taps over 1280 channels: 0.7 MiB of weights per group of 16 channels; the row's block
    # of 4 groups (2.8 MiB) would be read from beyond the L2 cache once per output row
    assert row_blocking(5, 8, 16)[1] == 4
    heavy = _gemm((1, 5, 5, 1280), 126, wide, kernel=3)
    assert (heavy.pixels, heavy.groups) == row_blocking(5, 8, 16, 2)[:2] == (5, 2)
    assert heavy.groups * 9 * 320 * 4 * 16 * 4 <= ITEM_WEIGHT_BYTES
    # weights that fit keep the row's block
    light = _gemm((1, 5, 5, 256), 126, wide, kernel=3)
    assert (light.pixels, light.groups) == row_blocking(5, 8, 16)[:2]


def test_flat_products_over_many_slices_prefetch_their_input_slices():
    """The 1x1 products reading FLT4 slices hint the slice PREFETCH_SLICES ahead of the one they
    read (the planes lie further apart than the hardware prefetchers look); an input of no more
    slices than that, a windowed product and the lane-order blocks have no hints."""
    from delegate.compiler.kernels.cpu.gemm_blocks import PREFETCH_SLICES
    from delegate.compiler.kernels.cpu.gemm_conv import flat_code, rows_code

    wide = CompileOptions(vector_width=16)
    hint = f"args.src_tensor.PrefetchAt(o0 + (s + {PREFETCH_SLICES}) * sstride)"
    projection = _gemm((1, 10, 10, 384), 64, wide)
    assert projection.prefetch and hint in "".join(str(p) for p in flat_code(projection))
    thin = _gemm((1, 10, 10, 4 * PREFETCH_SLICES), 64, wide)
    assert not thin.prefetch and "PrefetchAt" not in "".join(str(p) for p in flat_code(thin))
    assert _gemm((1, 10, 10, 4 * PREFETCH_SLICES + 1), 64, wide).prefetch
    windowed = _gemm((1, 10, 10, 384), 64, wide, kernel=3)
    assert not windowed.prefetch and "PrefetchAt" not in "".join(str(p) for p in rows_code(windowed))
    assert not _gemm((1, 8, 8, 384), 16).prefetch  # lane order (8-wide groups)


@pytest.mark.parametrize("width", [8, 16])
def test_small_windowed_grids_are_split_for_every_core(width):
    # 8 rows of 2 blocks, one column of groups: 4 work-groups of (2, 2), not 2 of (2, 4)
    spec = _conv((1, 8, 8, 128), 32 if width == 16 else 16, CompileOptions(vector_width=width), kernel=3)
    assert spec.grid is not None and spec.work_group is not None
    assert spec.grid[0] == 2
    count = math.prod(-(-n // size) for n, size in zip(spec.grid, spec.work_group, strict=True))
    assert count == MIN_WORK_GROUPS and spec.work_group == (2, 2, 1)
    # larger grids keep work-groups of 8
    large = _conv((1, 32, 32, 128), 32, CompileOptions(vector_width=width), kernel=3).work_group
    assert large is not None and math.prod(large) == 8


@pytest.mark.parametrize(
    "options",
    [CPU, GPU, TEXTURE, CompileOptions(conv_kernels=ConvKernels.PLAIN), CompileOptions(vector_width=16)],
    ids=["cpu", "gpu", "texture", "plain", "vector16"],
)
def test_emit_launches_the_kernel_its_selector_chose(options):
    """Each node's kernel has the grid and work-group of the spec its selector returns (one kernel
    per node: no fusion), so the selectors are the whole of the choice."""
    g = _Graph()
    nodes = [
        g.conv((1, 16, 16, 32), 48, kernel=3),
        g.conv((1, 8, 8, 16), 24),
        g.conv((1, 2, 2, 256), 40),
        g.conv((1, 16, 16, 32), 48, kernel=7),
        g.depthwise((1, 14, 14, 32)),
        g.fully_connected(32, 64, 10),
        g.transpose_conv((1, 6, 6, 8), 16, 2, 2, Padding.VALID),
    ]
    q, k = g.tensor((1, 4, 9, 16)), g.tensor((1, 4, 12, 16))
    nodes.append(g.node(Builtin.BATCH_MATMUL, [q, k], (1, 4, 9, 12), adj_y=True))
    nodes.append(g.node(Builtin.ADD, [g.tensor((2, 5, 19, 6)), g.tensor((2, 5, 19, 6))], (2, 5, 19, 6)))
    nodes.append(_pool_node(g, (1, 9, 13, 8), 3))
    nodes.append(_reshape_node(g, (1, 6, 5, 30), (1, 30, 2, 15)))
    nodes.append(g.node(UPSAMPLE_NEAREST, [g.tensor((1, 3, 5, 8))], (1, 6, 10, 8), factor_y=2, factor_x=2))
    graph = g.graph
    select = {
        Builtin.CONV_2D: select_conv,
        Builtin.DEPTHWISE_CONV_2D: select_depthwise,
        Builtin.FULLY_CONNECTED: select_fully_connected,
        Builtin.TRANSPOSE_CONV: select_transpose_conv,
        Builtin.BATCH_MATMUL: select_batch_matmul,
        Builtin.ADD: select_elementwise,
        Builtin.MAX_POOL_2D: select_pool,
        Builtin.RESHAPE: select_copy,  # from channels to a divisor of them: the runs kernel
        UPSAMPLE_NEAREST: select_copy,
    }
    for node in nodes:
        spec = select[node.op](node, graph, options)
        inputs = [i for i in node.inputs if not graph.tensor(i).is_constant]
        (kernel,) = compile_partition(graph, [node.index], inputs, list(node.outputs), options).nodes
        op = kernel.gpu_op
        if spec.grid is not None:
            assert (op.grid_size.x, op.grid_size.y, op.grid_size.z) == spec.grid, (node.name, spec)
        if spec.work_group is not None:
            assert (op.work_group_size.x, op.work_group_size.y, op.work_group_size.z) == spec.work_group
        assert ("reqd_work_group_size" in op.code) == (spec.variant in (Variant.GPU_DIRECT, Variant.GPU_REDUCTION))
