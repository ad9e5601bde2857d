"""The compiler without TFLite or OpenCL: small graphs built in Python go through ``compile_partition``
and the context that comes out is checked (kernels, names, fusion, schedule, rendered text)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest

from delegate.compiler import kernel_names
from delegate.compiler.graph import FLOAT32, Builtin, Graph, Node, Padding, Tensor
from delegate.compiler.kernel import LANE_MASK, WRITE, WRITE_WIDE, Kernel, PixelOps, RequiredWorkGroup, WideOps
from delegate.compiler.kernels.common.pieces import operation, written
from delegate.compiler.ops import OPS
from delegate.compiler.ops.base import EmitContext, Op
from delegate.compiler.options import ConvKernels, KernelFamily
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.compiler.selectors.pair import PAIR_LOCAL_BYTES
from delegate.context import model
from delegate.context.kernel_text import SERIAL_MARKER
from delegate.context.schedule import schedule_violation
from delegate.context.writer import serialize_context

RNG = np.random.default_rng(0)


class _Builder:
    """A graph under construction: tensors and nodes by index, as the plugin captures them."""

    def __init__(self) -> None:
        self.tensors: dict[int, Tensor] = {}
        self.nodes: dict[int, Node] = {}

    def tensor(self, shape: tuple[int, ...], data: np.ndarray | None = None) -> int:
        index = len(self.tensors)
        self.tensors[index] = Tensor(index, FLOAT32, shape, f"t{index}", is_constant=data is not None, constant=data)
        return index

    def constant(self, shape: tuple[int, ...]) -> int:
        return self.tensor(shape, RNG.standard_normal(shape).astype(np.float32))

    def node(self, op: int, inputs: list[int], shape: tuple[int, ...], **params: object) -> int:
        out = self.tensor(shape)
        index = len(self.nodes)
        self.nodes[index] = Node(index, op, 1, tuple(inputs), (out,), dict(params))
        return out

    def conv(self, x: int, cout: int, kernel: int = 1, activation: int = 0) -> int:
        b, h, w, cin = self.tensors[x].shape
        params = {"stride_height": 1, "stride_width": 1, "padding": Padding.SAME, "activation": activation}
        filters, bias = self.constant((cout, kernel, kernel, cin)), self.constant((cout,))
        return self.node(Builtin.CONV_2D, [x, filters, bias], (b, h, w, cout), **params)

    def depthwise(self, x: int, kernel: int = 3) -> int:
        shape = self.tensors[x].shape
        params = {"stride_height": 1, "stride_width": 1, "padding": Padding.SAME, "activation": 3}
        filters, bias = self.constant((1, kernel, kernel, shape[3])), self.constant((shape[3],))
        return self.node(Builtin.DEPTHWISE_CONV_2D, [x, filters, bias], shape, depth_multiplier=1, **params)

    def compile(self, inputs: list[int], outputs: list[int], **options: object) -> model.InferenceContext:
        graph = Graph(self.tensors, self.nodes)
        for node in self.nodes.values():
            assert OPS[node.op].check(node, graph) is None, node.name
        return compile_partition(graph, list(self.nodes), inputs, outputs, CompileOptions(**options))


def _names(ctx: model.InferenceContext) -> list[str]:
    return [n.name for n in ctx.nodes]


def test_an_elementwise_chain_links_into_its_producer():
    g = _Builder()
    x = g.tensor((1, 8, 8, 16))
    y = g.node(Builtin.RELU, [g.conv(x, 16)], (1, 8, 8, 16))
    z = g.node(Builtin.ADD, [y, g.constant((16,))], (1, 8, 8, 16), activation=0)
    ctx = g.compile([x], [z])
    assert _names(ctx) == ["conv_2d_0+relu_1+add_2"]
    (node,) = ctx.nodes
    assert node.input_ids == [x] and node.output_ids == [z]
    assert node.gpu_op.linkable_count == 2
    assert kernel_names.fused_ops(node.name) == 2
    assert [t.key for t in node.gpu_op.arguments.tensor_objects] == ["link2"]
    # the linked code runs in front of every write of the matrix-product kernel: the ReLU and the
    # ADD once per whole FLT8 accumulator of the blocks' writes (kernel.WideOps; the ADD's operand
    # read as two FLT4 slices), and per slice in the general write loop
    code = node.gpu_op.code
    writes = code.count(LANE_MASK[:40])
    wide = len(re.findall(r"FLT8 r\d+ = TO_FLT8", code))
    assert wide > 0 and code.count("result = result < ((FLT8)(0.0f)) ? ((FLT8)(0.0f)) : result;") == wide
    assert code.count("FLT8 link2_w;") == wide and code.count("link2_v = args.link2.Read") == 2 * wide + 1
    assert writes == 2 * wide + 1  # the wide writes run no ADD of their own
    assert code.count("result = result < INIT_FLT4(0.0f) ? INIT_FLT4(0.0f) : result;") == 1
    assert {t.id for t in ctx.tensors} == {x, z}  # the intermediate tensors are never written
    assert schedule_violation(ctx) is None
    serialize_context(ctx)


def test_without_fusion_every_node_has_its_kernel():
    g = _Builder()
    x = g.tensor((1, 8, 8, 16))
    y = g.node(Builtin.RELU, [g.conv(x, 16)], (1, 8, 8, 16))
    ctx = g.compile([x], [y], fuse=False)
    assert _names(ctx) == ["conv_2d_0", "relu_1"]
    assert all(n.gpu_op.linkable_count == 0 for n in ctx.nodes)


def test_a_tensor_with_two_readers_is_written():
    g = _Builder()
    x = g.tensor((1, 4, 4, 8))
    y = g.node(Builtin.TANH, [x], (1, 4, 4, 8))
    a = g.node(Builtin.RELU, [y], (1, 4, 4, 8))
    b = g.node(Builtin.ABS, [y], (1, 4, 4, 8))
    ctx = g.compile([x], [a, b])
    assert _names(ctx) == ["tanh_0", "relu_1", "abs_2"]


def test_a_partition_output_is_written_even_with_one_reader():
    g = _Builder()
    x = g.tensor((1, 4, 4, 8))
    y = g.node(Builtin.TANH, [x], (1, 4, 4, 8))
    z = g.node(Builtin.RELU, [y], (1, 4, 4, 8))
    assert _names(g.compile([x], [y, z])) == ["tanh_0", "relu_1"]


def test_a_softmax_links_into_the_matrix_product_holding_its_channels():
    g = _Builder()
    x = g.tensor((1, 1, 1, 32))
    fc = g.node(
        Builtin.FULLY_CONNECTED,
        [x, g.constant((10, 32)), g.constant((10,))],
        (1, 1, 1, 10),
        activation=0,
        weights_format=0,
    )
    y = g.node(Builtin.SOFTMAX, [fc], (1, 1, 1, 10), beta=1.0)
    ctx = g.compile([x], [y])
    assert _names(ctx) == ["fully_connected_0+softmax_1"]
    code = ctx.nodes[0].gpu_op.code
    assert "// softmax over 10 channels, beta 1.0" in code and "/* pixel ops:" not in code


def test_a_softmax_over_a_plain_kernel_gets_its_own():
    g = _Builder()
    x = g.tensor((1, 4, 4, 10))
    y = g.node(Builtin.SOFTMAX, [g.node(Builtin.TANH, [x], (1, 4, 4, 10))], (1, 4, 4, 10), beta=1.0)
    assert _names(g.compile([x], [y])) == ["tanh_0", "softmax_1"]


def test_a_depthwise_and_its_projection_pair_on_cpu_devices():
    g = _Builder()
    x = g.tensor((1, 16, 16, 32))
    y = g.conv(g.depthwise(x), 16)
    z = g.node(Builtin.RELU, [y], (1, 16, 16, 16))
    ctx = g.compile([x], [z], pair_local_bytes=PAIR_LOCAL_BYTES)
    assert _names(ctx) == ["depthwise_conv_2d_0+conv_2d_1+relu_2"]
    op = ctx.nodes[0].gpu_op
    assert (op.work_group_size.x, op.work_group_size.y, op.work_group_size.z) == (8, 1, 1)
    assert "reqd_work_group_size(8, 1, 1)" in op.code and SERIAL_MARKER in op.code
    assert [b.key for b in op.arguments.buffer_objects] == ["dw_weights", "dw_biases", "weights", "biases"]
    # without the local memory budget (GPUs) the two stay apart
    apart = _names(g.compile([x], [z]))
    assert apart == ["depthwise_conv_2d_0", "conv_2d_1+relu_2"]


def test_a_concatenation_read_in_place_has_no_kernel():
    g = _Builder()
    x = g.tensor((1, 4, 4, 8))
    a = g.node(Builtin.TANH, [x], (1, 4, 4, 8))
    b = g.node(Builtin.ABS, [x], (1, 4, 4, 8))
    c = g.node(Builtin.CONCATENATION, [a, b], (1, 4, 4, 16), axis=3, activation=0)
    y = g.conv(c, 8)
    ctx = g.compile([x], [y])
    assert _names(ctx) == ["tanh_0", "abs_1", "conv_2d_3+concatenation_2"]
    assert ctx.nodes[2].input_ids == [a, b]
    assert c not in {t.id for t in ctx.tensors}


def test_split_gets_one_kernel_per_output():
    g = _Builder()
    x = g.tensor((1, 4, 4, 8))
    axis = g.tensor((1,), np.array([3], np.int32))
    g.tensors[axis].dtype = 2
    outs = (g.tensor((1, 4, 4, 4)), g.tensor((1, 4, 4, 4)))
    g.nodes[0] = Node(0, Builtin.SPLIT, 1, (axis, x), outs, {"num_splits": 2})
    ctx = g.compile([x], list(outs))
    assert _names(ctx) == [f"split_0:{outs[0]}", f"split_0:{outs[1]}"]
    assert OPS[Builtin.SPLIT].per_output


def test_a_linked_binary_op_waits_for_its_other_operand():
    g = _Builder()
    x = g.tensor((1, 4, 4, 8))
    a = g.node(Builtin.RELU, [x], (1, 4, 4, 8))
    b = g.node(Builtin.ABS, [g.node(Builtin.TANH, [x], (1, 4, 4, 8))], (1, 4, 4, 8))
    y = g.node(Builtin.ADD, [a, b], (1, 4, 4, 8), activation=0)
    ctx = g.compile([x], [y])
    assert _names(ctx) == ["tanh_1+abs_2", "relu_0+add_3"]
    assert schedule_violation(ctx) is None


@pytest.mark.parametrize("precision", list(model.CalculationsPrecision))
def test_kernels_carry_the_partitions_precision(precision):
    g = _Builder()
    x = g.tensor((1, 4, 4, 8))
    y = g.node(Builtin.TANH, [x], (1, 4, 4, 8))
    ctx = g.compile([x], [y], precision=precision)
    assert ctx.precision == precision and ctx.nodes[0].gpu_op.definition.precision == precision


def test_every_op_family_is_an_op():
    assert all(isinstance(op, Op) for op in OPS.values())


def test_a_kernel_renders_links_in_front_of_each_write():
    k = operation(["head\n", WRITE, "middle\n", WRITE], srcs=[])
    assert k.accepts_links and k.pixel_ops is None
    k.linked += ["  one();\n", "  two();\n"]
    assert k.render() == "head\n  one();\n  two();\n" + WRITE.text + "middle\n  one();\n  two();\n" + WRITE.text
    assert k.links == 2


def test_wide_links_run_at_the_wide_point_and_the_rest_at_each_write():
    """The wide prefix of the links runs once on the vector; its wide writes run only the links
    after it, a plain write all of them."""
    k = operation(["v\n", WideOps("r", 8), "part\n", WRITE_WIDE, "edge\n", WRITE], srcs=[])
    assert k.wide_widths == {8}
    k.linked += ["  one();\n", "  two();\n"]
    k.wide_linked.append({8: "  one8();\n"})
    wide = "  { FLT8 result = r;\n  one8();\n  r = result; }\n"
    text = k.render()
    assert text == "v\n" + wide + "part\n  two();\n" + WRITE.text + "edge\n  one();\n  two();\n" + WRITE.text
    assert k.source_size() == len(text)
    # a point naming its first slice offers it to links reading an operand there
    point = WideOps("r", 8, "g0 * 2 + 2")
    k = operation(["v\n", point, "part\n", WRITE_WIDE], srcs=[])
    assert k.wide_coordinates and not operation([WideOps("r", 8), WRITE_WIDE], srcs=[]).wide_coordinates
    k.linked.append("  one();\n")
    k.wide_linked.append({8: "  one8(wide_s);\n"})
    k.wide_reads = True
    text = k.render()
    assert "  { FLT8 result = r;\n  int wide_s = g0 * 2 + 2;\n  one8(wide_s);\n  r = result; }\n" in text
    assert k.source_size() == len(text)


def test_a_kernel_without_write_hooks_takes_no_links():
    k = operation("MAIN_FUNCTION($0) { }\n", srcs=[])
    assert not k.accepts_links and k.render() == "MAIN_FUNCTION($0) { }\n"


def test_pixel_ops_render_as_their_marker_or_the_linked_code():
    ops = PixelOps(pixels=6, groups=2, activation=1, width=8)
    k = Kernel(model.GPUOperation(), ["a\n", ops, "b\n"])
    assert k.pixel_ops == ops
    assert k.render() == "a\n  /* pixel ops: pixels=6 groups=2 activation=1 width=8 */\nb\n"
    k.pixel_code = "  softmax();\n"
    assert k.render() == "a\n  softmax();\nb\n" and k.links == 1


def test_the_required_work_group_sets_the_launch_size():
    k = operation(written("x"), srcs=[], work_group=RequiredWorkGroup((4, 2, 1)))
    assert (k.operation.work_group_size.x, k.operation.work_group_size.y) == (4, 2)


def test_emit_context_is_what_generators_read():
    g = _Builder()
    g.tensor((1, 2, 2, 3))
    options = CompileOptions(precision=model.CalculationsPrecision.F16, kernel_family="gpu")
    ctx = EmitContext(Graph(g.tensors, g.nodes), options)
    assert ctx.dtype == np.float16 and ctx.linear_storage and ctx.options is options
    # the choices are typed, whatever spelling the options were given in
    assert options.kernel_family is KernelFamily.GPU and options.conv_kernels is ConvKernels.GEMM


@dataclass(frozen=True)
class _Device:
    """DeviceFacts of a made-up device (compiler/device_policy.py)."""

    is_gpu: bool
    max_work_group_size: int = 1024
    max_work_item_sizes: tuple[int, ...] = (1024, 1024, 64)
    name: str = "made-up"
    local_mem_bytes: int = 65536
    compiler_cpu: str = ""
    vector_floats: int = 8
    int8_dot: bool = False
    byte_lookup: bool = False


def test_kernel_family_auto_follows_the_device_type_and_is_forced_by_the_option():
    from delegate.compiler.device_policy import compile_options
    from delegate.errors import DelegateError
    from delegate.plugin.options import DelegateOptions, OptionsError

    f32, buffer = model.CalculationsPrecision.F32, model.TensorStorageType.BUFFER

    def family(device: _Device, requested: str) -> tuple[str, int, int]:
        opts = compile_options(device, f32, buffer, fuse=True, requested_family=requested)
        return opts.kernel_family, opts.gpu_work_group, opts.pair_local_bytes

    gpu, cpu = _Device(is_gpu=True), _Device(is_gpu=False)
    assert family(gpu, "auto") == ("gpu", 64, 0)
    assert family(cpu, "auto") == ("cpu", 64, PAIR_LOCAL_BYTES)
    assert family(cpu, "gpu") == ("gpu", 64, 0)  # the gpu family has no pair kernel
    assert family(gpu, "cpu")[0] == "cpu"
    # a device that takes fewer work-items gets the largest power of two it takes
    assert family(_Device(is_gpu=True, max_work_group_size=48), "auto")[1] == 32
    assert family(_Device(is_gpu=True, max_work_item_sizes=(16, 16, 16)), "auto")[1] == 16
    with pytest.raises(DelegateError, match="kernel_family must be one of auto, gpu, cpu"):
        family(gpu, "fpga")
    # the byte reads of int8 tables are the cpu family's, on a device compiling the byte permute
    vbmi = _Device(is_gpu=False, vector_floats=16, byte_lookup=True)
    for requested, want in (("auto", True), ("gpu", False)):
        assert compile_options(vbmi, f32, buffer, fuse=True, requested_family=requested).byte_lookup is want
    assert not compile_options(cpu, f32, buffer, fuse=True).byte_lookup
    assert DelegateOptions().kernel_family == "auto"
    assert DelegateOptions.parse({"kernel_family": " GPU "}).kernel_family == "gpu"
    with pytest.raises(OptionsError, match="kernel_family must be auto, gpu or cpu, not 'tpu'"):
        DelegateOptions.parse({"kernel_family": "tpu"})


def test_gpu_family_kernels_share_weight_tiles_and_take_links():
    g = _Builder()
    x = g.tensor((1, 16, 16, 32))
    y = g.node(Builtin.RELU, [g.depthwise(g.conv(x, 48, kernel=3))], (1, 16, 16, 48))
    fc = g.node(
        Builtin.FULLY_CONNECTED,
        [y, g.constant((10, 48)), g.constant((10,))],
        (1, 16, 16, 10),
        activation=0,
        weights_format=0,
    )
    ctx = g.compile([x], [fc], kernel_family="gpu", gpu_work_group=64)
    assert _names(ctx) == ["conv_2d_0", "depthwise_conv_2d_1+relu_2", "fully_connected_3"]
    conv, depthwise, dense = (n.gpu_op for n in ctx.nodes)
    # the convolutions require their work-group (its items share the tile), 64 work-items
    for op in (conv, dense):
        assert "barrier(CLK_LOCAL_MEM_FENCE)" in op.code and "__local FLT4 tile[" in op.code
        wg = op.work_group_size
        assert "reqd_work_group_size" in op.code and wg.x * wg.y * wg.z == 64 and wg.z == 1
    # the depthwise kernel has no local memory and no required size (tuning may pick one), and its
    # linked RELU runs before its write
    assert "__local" not in depthwise.code and "reqd_work_group_size" not in depthwise.code
    assert depthwise.code.index("result = result < INIT_FLT4(0.0f)") < depthwise.code.index("Write(result")
    assert schedule_violation(ctx) is None
    serialize_context(ctx)


def test_gpu_family_products_over_few_pixels_split_their_input_slices():
    g = _Builder()
    x = g.tensor((1, 1, 1, 1280))
    fc = g.node(
        Builtin.FULLY_CONNECTED, [x, g.constant((1000, 1280)), g.constant((1000,))], (1, 1, 1, 1000), activation=0,
        weights_format=0,
    )  # fmt: skip
    (node,) = g.compile([x], [fc], kernel_family="gpu", gpu_work_group=64).nodes
    op = node.gpu_op
    assert "__local ACCUM_FLT4 part[64];" in op.code
    assert (op.work_group_size.x, op.grid_size.x, op.grid_size.y, op.grid_size.z) == (64, 64, 1, 250)
