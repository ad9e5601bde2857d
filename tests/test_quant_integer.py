"""The integer matrix product (GemmSpec.integer): 1x1 convolutions and fully connected layers over a
carried int8 / uint8 input with int8-coded weights multiply the codes with AVX512-VNNI's dot
product on devices that compile it (CompileOptions.int8_dot), and the float kernels elsewhere.

The generator tests run without a device: the packing against numpy's integer product, and which
nodes get the kernel. The device tests compare the kernel's outputs with TFLite's integer kernels
(check_quant's steps, as the float path) and check that the kernel ran, on devices that have it.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from delegate.compiler.graph import FLOAT32, INT32, Builtin, Carried, Graph, Node, Padding, Tensor
from delegate.compiler.kernels.cpu.gemm_blocks import column_codes, pack_integer_weights, vnni
from delegate.compiler.options import CompileOptions
from delegate.compiler.quant import INT8, UINT8, carry_quantized
from delegate.compiler.selectors.conv import select_conv, select_fully_connected

from .helpers import delegate_and_builtin
from .test_ops import PROGRAM_CACHE
from .test_quant import check_quant, int_bias, qrand, qt
from .tflite_builder import Op, T, build_model

#: the dot product's mark in a kernel's code
VNNI = vnni(16)


def _vpdpbusd(acc: np.ndarray, u: int, k: np.ndarray) -> np.ndarray:
    """The instruction on numpy: lane j adds the four unsigned bytes of ``u`` times the four
    signed bytes of ``k``'s lane j."""
    a = np.frombuffer(np.int32(u).tobytes(), np.uint8).astype(np.int64)
    b = k.view(np.int8).reshape(16, 4).astype(np.int64)
    return acc + b @ a


@pytest.mark.parametrize("taps", [1, 9])
@pytest.mark.parametrize("dtype, zero", [(INT8, -3), (UINT8, 131)])
def test_packed_codes_give_the_real_products(dtype, zero, taps):
    """pack_integer_weights' codes and corrections, run through the dot product as the kernel runs
    it (the input's codes made unsigned, packed four to an int, tap by tap), give the real
    products: 37 input channels (padded to 40) and 20 output channels (padded to 32), per-channel
    scales; a 3x3 window's taps in (ky, kx) order."""
    rng = np.random.default_rng(5)
    cout, cin, k = 20, 37, int(np.sqrt(taps))
    low, high = (-128, 127) if dtype == INT8 else (0, 255)
    grid = Carried(0.05, zero, low, high, dtype)
    values = rng.integers(-127, 128, size=(cout, k, k, cin)).astype(np.int8)
    scales = rng.uniform(0.002, 0.02, size=cout)
    weights, params = pack_integer_weights(values, scales, grid)
    q = rng.integers(low, high + 1, size=(taps, cin))
    u = np.zeros((taps, 40), np.int64)
    u[:, :cin] = q - low
    u[:, cin:] = rng.integers(0, 256, size=(taps, 3))  # padding lanes: whatever they hold meets zero codes
    packed = u.astype(np.uint8).view(np.int32)  # four codes to an int, as the kernel packs them
    codes = np.frombuffer(weights, np.int32).reshape(2, taps, 10, 16)
    table = np.frombuffer(params, np.int32).reshape(2, 2, 16)
    got = []
    for g in range(2):
        acc = np.zeros(16, np.int64)
        for t in range(taps):
            for s in range(10):
                acc = _vpdpbusd(acc, int(packed[t, s]), codes[g, t, s])
        got.append((acc + table[g, 1]) * table[g, 0].view(np.float32).astype(np.float64))
    want = values.reshape(cout, -1).astype(np.float64) @ ((q.reshape(-1) - zero) * 0.05) * scales
    np.testing.assert_allclose(np.concatenate(got)[:cout], want, rtol=1e-6)
    assert not np.concatenate(got)[cout:].any()


@pytest.mark.parametrize("dtype, zero", [(INT8, 127), (INT8, -128), (UINT8, 255), (UINT8, 131)])
def test_padding_codes_are_int_literals(dtype, zero):
    """The codes a pixel outside the input reads (the real zero's, offset to unsigned, four to an
    int) are written as a literal within int's range: one past it (zero points from 0 on, in int8)
    made the compiler warn on every line of the kernel, and PoCL print the count on stderr."""
    low, high = (-128, 127) if dtype == INT8 else (0, 255)
    masks = [p for p in column_codes("  ", 3, Carried(0.05, zero, low, high, dtype)) if isinstance(p, str)]
    assert len(masks) == 3
    for line in masks:
        found = re.fullmatch(r"\s*u(\d) = in\1 \? u\1 : (-?\d+);\n", line)
        assert found is not None, line
        value = int(found.group(2))
        assert -(2**31) <= value < 2**31
        assert np.int32(value).view(np.uint32) == (zero - low) * 0x01010101


@pytest.mark.parametrize("dtype, zero", [(INT8, -3), (UINT8, 131)])
def test_row_sums_stand_for_a_row_of_padding(dtype, zero):
    """pack_integer_weights' ``rows`` sums: a window row outside the input, skipped with its sum
    added (gemm_blocks.skipped_row), gives the int32 sums of reading that row as padding (every
    input code the real zero's, offset to unsigned), row by row of a 3x3 window; the scales and
    corrections stay first in each group's params."""
    rng = np.random.default_rng(6)
    cout, cin = 20, 37
    low, high = (-128, 127) if dtype == INT8 else (0, 255)
    grid = Carried(0.05, zero, low, high, dtype)
    values = rng.integers(-127, 128, size=(cout, 3, 3, cin)).astype(np.int8)
    scales = rng.uniform(0.002, 0.02, size=cout)
    weights, params = pack_integer_weights(values, scales, grid, rows=True)
    _, plain = pack_integer_weights(values, scales, grid)
    table = np.frombuffer(params, np.int32).reshape(2, 5, 16)
    assert table[:, :2].tobytes() == np.frombuffer(plain, np.int32).reshape(2, 2, 16).tobytes()
    codes = np.frombuffer(weights, np.int32).reshape(2, 3, 3, 10, 16)
    padding = np.full(40, zero - low, np.int64).astype(np.uint8).view(np.int32)
    for g in range(2):
        for ky in range(3):
            acc = np.zeros(16, np.int64)
            for kx in range(3):
                for s in range(10):
                    acc = _vpdpbusd(acc, int(padding[s]), codes[g, ky, kx, s])
            np.testing.assert_array_equal(table[g, 2 + ky], acc)


def _graph(op: int, src: tuple[int, ...], cout: int, *, in_dtype: int = INT8, per_channel: bool = True,
           float_model: bool = False, kernel: int = 1, stride: int = 1,
           groups: int = 1) -> tuple[Graph, Node]:  # fmt: skip
    """One CONV_2D (1x1) or FULLY_CONNECTED node over a quantized input, as read from a model, with
    carry_quantized applied; ``float_model``: every tensor float; ``groups``: a grouped CONV_2D's."""
    rng = np.random.default_rng(0)
    cin = src[-1] // groups
    wshape = (cout, kernel, kernel, cin) if op == Builtin.CONV_2D else (cout, cin)
    oshape = (*src[:-1], cout)
    scales = tuple(float(s) for s in rng.uniform(0.01, 0.02, size=cout if per_channel else 1))
    if float_model:
        tensors = [
            Tensor(0, FLOAT32, src),
            Tensor(1, FLOAT32, wshape, is_constant=True, constant=rng.standard_normal(wshape).astype(np.float32)),
            Tensor(2, FLOAT32, (cout,), is_constant=True, constant=np.zeros(cout, np.float32)),
            Tensor(3, FLOAT32, oshape),
        ]
    else:
        zero = 5 if in_dtype == INT8 else 133
        tensors = [
            Tensor(0, in_dtype, src, quantized=True, scales=(0.05,), zero_points=(zero,)),
            Tensor(1, INT8, wshape, is_constant=True, constant=rng.integers(-127, 128, wshape).astype(np.int8),
                   quantized=True, scales=scales, zero_points=(0,) * len(scales)),
            Tensor(2, INT32, (cout,), is_constant=True, constant=np.zeros(cout, np.int32), quantized=True,
                   scales=tuple(0.05 * s for s in scales), zero_points=(0,) * len(scales)),
            Tensor(3, in_dtype, oshape, quantized=True, scales=(0.5,), zero_points=(zero,)),
        ]  # fmt: skip
    params: dict[str, Any] = {"activation": 0}
    if op == Builtin.CONV_2D:
        params |= {"stride_height": stride, "stride_width": stride, "padding": Padding.SAME}
    node = Node(0, op, 1, (0, 1, 2), (3,), params)
    graph = Graph({t.index: t for t in tensors}, {0: node})
    carry_quantized(graph)
    return graph, node


def _spec(graph: Graph, node: Node, int8_dot: bool):
    options = CompileOptions(vector_width=16, int8_dot=int8_dot)
    select = select_conv if node.op == Builtin.CONV_2D else select_fully_connected
    return select(node, graph, options).gemm


@pytest.mark.parametrize("op", [Builtin.CONV_2D, Builtin.FULLY_CONNECTED], ids=lambda o: o.name)
@pytest.mark.parametrize("in_dtype", [INT8, UINT8], ids=["int8", "uint8"])
def test_integer_product_chosen_for_carried_inputs_where_the_device_has_it(op, in_dtype):
    from delegate.compiler.kernels.cpu.gemm_conv import flat_code

    src = (1, 7, 9, 37) if op == Builtin.CONV_2D else (3, 37)
    graph, node = _graph(op, src, 20, in_dtype=in_dtype)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.integer == graph.tensor(0).carried
    assert VNNI in "".join(str(p) for p in flat_code(spec))
    off = _spec(graph, node, int8_dot=False)
    assert off is not None and off.integer is None
    assert VNNI not in "".join(str(p) for p in flat_code(off))


def test_integer_product_in_rows_mode_for_windows():
    from delegate.compiler.kernels.cpu.gemm_conv import rows_code

    graph, node = _graph(Builtin.CONV_2D, (1, 7, 9, 37), 20, kernel=3)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.kernel == (3, 3) and spec.integer == graph.tensor(0).carried
    assert spec.shared_columns  # stride 1: a window row's columns converted once
    assert VNNI in "".join(str(p) for p in rows_code(spec))
    off = _spec(graph, node, int8_dot=False)
    assert off is not None and off.integer is None and VNNI not in "".join(str(p) for p in rows_code(off))


def test_a_concatenation_the_integer_product_reads_is_not_read_in_place():
    """A CONV_2D over a CONCATENATION of carried tensors keeps the concatenation's own kernel where
    it takes the integer product (which reads one tensor): read in place, the concatenation left
    it the float product over the carried values (an int8 YOLO-style FPN's 3x3 layers over an
    upsampled map and a skip connection: the model 1.12x slower). Without the dot product the
    float product reads it in place, as in float models."""
    from delegate.compiler.selectors.conv import reads_concat_in_place

    rng = np.random.default_rng(3)
    q = {"quantized": True, "scales": (0.05,), "zero_points": (5,)}
    codes = rng.integers(-127, 128, (16, 3, 3, 24)).astype(np.int8)
    tensors = [
        Tensor(0, INT8, (1, 8, 8, 16), **q),
        Tensor(1, INT8, (1, 8, 8, 8), **q),
        Tensor(2, INT8, (1, 8, 8, 24), **q),
        Tensor(3, INT8, codes.shape, is_constant=True, constant=codes, quantized=True, scales=(0.01,),
               zero_points=(0,)),
        Tensor(4, INT32, (16,), is_constant=True, constant=np.zeros(16, np.int32), quantized=True,
               scales=(0.0005,), zero_points=(0,)),
        Tensor(5, INT8, (1, 8, 8, 16), quantized=True, scales=(0.5,), zero_points=(5,)),
    ]  # fmt: skip
    concat = Node(0, Builtin.CONCATENATION, 1, (0, 1), (2,), {"axis": 3, "activation": 0})
    params = {"activation": 0, "stride_height": 1, "stride_width": 1, "padding": Padding.SAME}
    conv = Node(1, Builtin.CONV_2D, 1, (2, 3, 4), (5,), params)
    graph = Graph({t.index: t for t in tensors}, {0: concat, 1: conv})
    carry_quantized(graph)
    dot, plain = CompileOptions(vector_width=16, int8_dot=True), CompileOptions(vector_width=16)
    alone = select_conv(conv, graph, dot).gemm
    assert alone is not None and alone.integer is not None
    assert not reads_concat_in_place(conv, concat, graph, dot)
    assert reads_concat_in_place(conv, concat, graph, plain)


@pytest.mark.parametrize(("kernel", "stride", "shared"), [(3, 2, 2), (7, 2, 2), (2, 2, 0), (3, 3, 0)])
def test_strided_windows_share_columns_where_taps_overlap(kernel, stride, shared):
    """A window row's input columns are converted once where neighbouring pixels' taps overlap
    (KW > stride): pixel p's tap kx reads column p x stride + kx of the block's."""
    from delegate.compiler.kernels.cpu.gemm_conv import rows_code

    graph, node = _graph(Builtin.CONV_2D, (1, 15, 17, 3), 20, kernel=kernel, stride=stride)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.integer is not None and spec.shared_columns == shared
    code = "".join(str(p) for p in rows_code(spec))
    if shared:
        last = (spec.pixels - 1) * stride + kernel - 1
        assert f"int xc{last} = X0 * {stride} + {last} - args.pad_w;" in code
        assert f"(int16)(u{last}), k)" in code


@pytest.mark.parametrize("pixels", [1, 4, 5, 6, 7, 9])
def test_prefetch_hints_cover_every_line_of_a_slice(pixels):
    """The hints of a block's consecutive FLT4s (16 bytes each) reach every 64-byte line they span,
    whatever line the first one starts in."""
    from delegate.compiler.kernels.cpu.gemm_blocks import PREFETCH_SLICES, slice_prefetches

    hints = slice_prefetches("", pixels)
    hinted = [int(h.split("PrefetchAt(o")[1].split(" ")[0]) for h in hints]
    for start in range(4):  # the first pixel's place in its line
        lines = {(start + p) // 4 for p in range(pixels)}
        assert lines == {(start + p) // 4 for p in hinted}
    assert all(f"(s + {PREFETCH_SLICES}) * sstride" in h for h in hints)


def test_integer_products_prefetch_their_input_slices():
    """The flat mode, the rows mode's shared columns and a strided 1x1 layer (rows mode, one tap)
    hint the input slice ahead of the one they read: the slice planes lie further apart than the
    hardware prefetchers look."""
    from delegate.compiler.kernels.cpu.gemm_conv import flat_code, rows_code

    graph, node = _graph(Builtin.CONV_2D, (1, 8, 8, 32), 64)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.integer is not None
    assert "args.src_tensor.PrefetchAt(o0 + (s + " in "".join(str(p) for p in flat_code(spec))
    graph, node = _graph(Builtin.CONV_2D, (1, 7, 9, 37), 20, kernel=3)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.shared_columns
    last = spec.pixels + 1  # (pixels - 1) x 1 + 3 columns
    assert f"args.src_tensor.PrefetchAt(o{last} + (s + " in "".join(str(p) for p in rows_code(spec))
    graph, node = _graph(Builtin.CONV_2D, (1, 8, 8, 32), 64, stride=2)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.integer is not None and spec.kernel == (1, 1)
    code = "".join(str(p) for p in rows_code(spec))
    assert f"args.src_tensor.PrefetchAt(o{spec.pixels - 1} + (s + " in code


def test_integer_products_run_pixel_by_pixel_over_the_groups_weights():
    """Per input slice, the flat mode loads every group's weights first and then takes the pixels
    one by one, each meeting all groups (one broadcast live at a time: group by group kept every
    pixel's broadcast live past AVX-512's registers); the weights are read through a pointer per
    group, so that the groups share one index (the windowed mode's taps too)."""
    from delegate.compiler.kernels.cpu.gemm_conv import flat_code, rows_code

    graph, node = _graph(Builtin.CONV_2D, (1, 8, 8, 32), 256)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.integer is not None and spec.groups > 1 and spec.pixels > 1
    code = "".join(str(p) for p in flat_code(spec))
    products = [line.strip() for line in code.splitlines() if VNNI in line]
    expected = [
        f"i{g}{p} = {VNNI}(i{g}{p}, (int16)(u{p}), k{g});" for p in range(spec.pixels) for g in range(spec.groups)
    ]
    assert products == expected
    assert code.rindex(f"int16 k{spec.groups - 1} = c{spec.groups - 1}[s];") < code.index(VNNI)
    graph, node = _graph(Builtin.CONV_2D, (1, 7, 9, 37), 20, kernel=3)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.shared_columns
    code = "".join(str(p) for p in rows_code(spec))
    assert "int16 k = c0[t + 2 * src_slices + s];" in code and "codes[" not in code


def test_integer_flat_blocks_all_take_the_whole_vector_writes():
    """The flat mode's last block of pixels moves back to end on the last pixel (the device cases'
    99 pixels in blocks of 6 check the values), so that no block of a layer whose pixels are not a
    multiple of the block's falls to the FLT4 writes."""
    from delegate.compiler.kernels.cpu.gemm_conv import flat_code

    graph, node = _graph(Builtin.CONV_2D, (1, 4, 4, 32), 64)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.integer is not None and 16 % spec.pixels
    code = "".join(str(p) for p in flat_code(spec))
    moved = f"if (npix >= {spec.pixels}) p0 = p0 + {spec.pixels} <= npix ? p0 : npix - {spec.pixels};"
    assert code.index(moved) < code.index("int o0 =")


@pytest.mark.parametrize(("cout", "per_item"), [(64, 4), (96, 3), (80, 3), (144, 3), (112, 4), (160, 4), (32, 2)])
def test_integer_items_take_the_groups_that_leave_the_fewest_repeated(cout, per_item):
    """A work-item past the last group repeats it: 96 channels (6 groups of 16) in items of 4
    groups would compute 8, in items of 3 exactly 6; items of 3 are taken only where they compute
    fewer groups than items of 4."""
    graph, node = _graph(Builtin.CONV_2D, (1, 8, 8, 32), cout)
    options = CompileOptions(vector_width=16, int8_dot=True)
    kernel = select_conv(node, graph, options)
    assert kernel.gemm is not None and kernel.gemm.integer is not None
    assert kernel.gemm.groups == per_item
    groups = cout // 16
    assert kernel.grid[1] == -(-groups // per_item)


def test_integer_product_not_chosen_for_float_models_or_narrow_outputs():
    graph, node = _graph(Builtin.CONV_2D, (1, 8, 8, 32), 20, float_model=True)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.integer is None
    # 8 output channels: 8-wide groups, which the 16-lane product does not fill
    graph, node = _graph(Builtin.CONV_2D, (1, 8, 8, 32), 8)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.width == 8 and spec.integer is None


@pytest.mark.parametrize(("group_outputs", "width"), [(24, 8), (8, 8), (32, 16), (48, 16)])
def test_grouped_convolutions_take_the_integer_product_of_their_group_width(group_outputs, width):
    """A grouped CONV_2D over a carried input multiplies integers in blocks as wide as its groups'
    outputs allow (16, else the 256-bit form's 8), a work-item's blocks within one group; none on a
    device without the dot product."""
    graph, node = _graph(Builtin.CONV_2D, (1, 8, 8, 3 * group_outputs), 3 * group_outputs, kernel=3, groups=3)
    spec = _spec(graph, node, int8_dot=True)
    assert spec is not None and spec.integer is not None and spec.width == width
    assert spec.group_slices == group_outputs // 4 and (group_outputs // width) % spec.groups == 0
    spec = _spec(graph, node, int8_dot=False)
    assert spec is not None and spec.integer is None


# ---------------------------------------------------------------- on the device


def _device_int8_dot() -> bool:
    from delegate.runtime.device import describe, select_device

    return describe(select_device()).int8_dot


def _kernel_codes(monkeypatch: pytest.MonkeyPatch, int8_dot: bool | None = None) -> list[str]:
    """The codes of the kernels compiled from now on (the list fills as partitions compile);
    ``int8_dot`` given: the compile option forced to it."""
    import dataclasses

    from delegate.plugin.registry import REGISTRY
    from tests.plugin_testing import inject

    codes: list[str] = []
    real = REGISTRY.plan.loader.compiler.compile

    def spied(graph: Any, nodes: list[int], inputs: Any, outputs: Any, options: CompileOptions) -> Any:
        if int8_dot is not None:
            options = dataclasses.replace(options, int8_dot=int8_dot)
        ctx = real(graph, nodes, inputs, outputs, options)
        codes.extend(n.gpu_op.code for n in ctx.nodes if n.gpu_op is not None and n.gpu_op.code)
        return ctx

    inject(monkeypatch, compile=spied)
    return codes


#: 1x1 convolutions (flat mode), windows (rows mode; stride 1 shares columns), an input of 3
#: channels, a fully connected layer
DEVICE_CASES = [
    "conv-int8",
    "conv-int8-96",
    "conv-uint8",
    "conv3x3-int8",
    "conv3x3s2-uint8",
    "conv3x3s2-int8-c3",
    "conv7x7s2-int8-c3",
    "fully-connected",
    # grouped: 3 groups of 24 channels (8-wide, the 256-bit product), 2 of 16 in and 32 out
    # (16-wide, flat mode), 4 of 8 strided (8-wide, shared columns)
    "grouped3x3-int8-g3x24",
    "grouped1x1-int8-g2x16",
    "grouped3x3s2-int8-g4x8",
]


def _case(name: str, rng: np.random.Generator) -> tuple[list[T], list[Op], tuple[int, ...]]:
    if name.startswith(("conv", "grouped")):
        dtype = np.uint8 if "uint8" in name else np.int8
        # c3: an image's 3 channels, one padded slice; -96: 96 outputs, 6 groups in items of 3
        src, cout = (1, 9, 11, 3 if "c3" in name else 37), 96 if name.endswith("-96") else 20
        cin = src[3]
        if name.startswith("grouped"):  # -gNxC: N groups of C input channels, twice C outputs in the 1x1
            groups, cin = (int(v) for v in name.rsplit("-g", 1)[1].split("x"))
            src, cout = (1, 9, 11, groups * cin), groups * cin * (2 if "1x1" in name else 1)
        k = 7 if "7x7" in name else 3 if "3x3" in name else 1
        stride = 2 if "s2" in name else 1
        if dtype == np.uint8:  # uint8 weights: per tensor, zero point near 128
            wq = rng.integers(0, 256, size=(cout, k, k, cin)).astype(np.uint8)
            w_scales = np.full(cout, 0.01, np.float32)
            weights = T(wq.shape, wq, np.uint8, quant=([0.01], [128], 0))
            bias = T((cout,), rng.integers(-3000, 3000, size=cout).astype(np.int32), np.int32,
                     quant=([float(np.float32(0.05) * np.float32(0.01))], [0], 0))  # fmt: skip
            zeros = (140, 120)
        else:
            wq = rng.integers(-127, 128, size=(cout, k, k, cin)).astype(np.int8)
            w_scales = rng.uniform(0.002, 0.02, size=cout).astype(np.float32)
            weights = T(wq.shape, wq, np.int8, quant=([float(s) for s in w_scales], [0] * cout, 0))
            bias = int_bias(w_scales * np.float32(0.05), rng)
            zeros = (-7, 4)
        out_scale = 0.05 * float(w_scales.mean()) * 64 * k * np.sqrt(cin) / 4
        out = (1, -(-src[1] // stride), -(-src[2] // stride), cout)  # SAME padding
        tensors = [qt(src, 0.05, zeros[0], dtype), weights, bias, qt(out, out_scale, zeros[1], dtype)]
        window = {"Padding": 0, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": 0}
        options = ("Conv2DOptions", window)
        return tensors, [Op(Builtin.CONV_2D, [0, 1, 2], [3], options, version=3)], src
    rows, cin, cout = 5, 45, 33  # fully connected, per-tensor int8 weights
    wq = rng.integers(-127, 128, size=(cout, cin)).astype(np.int8)
    weights = T(wq.shape, wq, np.int8, quant=([0.004], [0], 0))
    out_scale = 0.03 * 0.004 * 64 * np.sqrt(cin) / 4
    tensors = [qt((rows, cin), 0.03, 9), weights, int_bias(np.full(cout, np.float32(0.03 * 0.004)), rng),
               qt((rows, cout), out_scale, -2)]  # fmt: skip
    return tensors, [Op(Builtin.FULLY_CONNECTED, [0, 1, 2], [3], ("FullyConnectedOptions", {}), version=4)], (rows, cin)


@pytest.mark.opencl
@pytest.mark.parametrize("case", DEVICE_CASES)
def test_integer_product_matches_tflite_integer_kernels(case, monkeypatch):
    if not _device_int8_dot():
        pytest.skip("the device does not compile AVX512-VNNI's dot product (a GPU, or a CPU model without it)")
    rng = np.random.default_rng(len(case))
    tensors, ops, src = _case(case, rng)
    codes = _kernel_codes(monkeypatch)
    dtype = np.uint8 if "uint8" in case else np.int8
    check_quant(tensors, ops, [0], [3], [qrand(src, rng, dtype)], exact=0.99)
    # groups of 24 or 8 output channels: 8-wide blocks, the 256-bit form
    mark = vnni(8) if case.endswith(("x24", "x8")) else VNNI
    assert any(mark in c for c in codes), "the integer product did not run"


@pytest.mark.opencl
def test_option_integer_products_false_keeps_the_float_product(monkeypatch):
    """``integer_products=false``: the same model compiles its float product, with TFLite's values."""
    if not _device_int8_dot():
        pytest.skip("the device does not compile AVX512-VNNI's dot product (a GPU, or a CPU model without it)")
    rng = np.random.default_rng(5)
    tensors, ops, src = _case("conv-int8", rng)
    model = build_model(tensors, ops, [0], [3])
    feeds = [qrand(src, rng, np.int8)]
    for integer_products, expected in ((True, True), (False, False)):
        codes = _kernel_codes(monkeypatch)
        got, want, state = delegate_and_builtin(model, feeds, PROGRAM_CACHE, integer_products=integer_products)
        assert len(state.delegated_nodes) == 1, state.unsupported
        assert any(VNNI in c for c in codes) is expected
        assert int(np.abs(got[0].astype(np.int64) - want[0].astype(np.int64)).max()) <= 1
