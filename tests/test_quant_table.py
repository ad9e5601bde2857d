"""int8 / uint8 unary ops as tables of their input's integers (delegate/compiler/quant_table.py):
every integer through the delegate against TFLite's integer kernels, and what the compiler makes
of such an op (a table read in place of the op's code and of its rounding step)."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import FLOAT32, Builtin, Carried, Graph, Node, Tensor
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.compiler.quant import qdq_code
from delegate.compiler.quant_table import carried_inputs, grid_values

from .test_quant import check_quant, qt
from .tflite_builder import Op

_INT8, _UINT8 = 9, 3
#: what the rounding step (quant.qdq_code) writes into every kernel it runs in
_ROUNDING = "convert_float4(convert_int4(q + "


@pytest.mark.parametrize(
    ("op", "src", "dst", "options", "dtype"),
    [
        (Builtin.LOGISTIC, (0.04, 5), (1 / 256, -128), None, np.int8),
        (Builtin.LOGISTIC, (0.05, 128), (1 / 256, 0), None, np.uint8),
        (Builtin.TANH, (0.03, -7), (1 / 128, 0), None, np.int8),
        (Builtin.HARD_SWISH, (0.04, 5), (0.03, -40), None, np.int8),
        (Builtin.GELU, (0.03, 2), (0.02, -60), ("GeluOptions", {"Approximate": False}), np.int8),
        (Builtin.GELU, (0.03, 2), (0.02, -60), ("GeluOptions", {"Approximate": True}), np.int8),
    ],
    ids=["LOGISTIC-int8", "LOGISTIC-uint8", "TANH", "HARD_SWISH", "GELU", "GELU-approximate"],
)
def test_every_integer_as_tflite_computes_it(op, src, dst, options, dtype):
    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1).astype(dtype).reshape(1, 4, 8, 8)
    tensors = [qt(x.shape, *src, dtype=dtype), qt(x.shape, *dst, dtype=dtype)]
    version = 1 if op in (Builtin.HARD_SWISH, Builtin.GELU) else 2
    check_quant(tensors, [Op(op, [0], [1], options, version=version)], [0], [1], [x], exact=0.99)


def test_int8_swish_on_every_integer():
    """MUL(x, LOGISTIC(x)), one fused op (compiler/swish.py) and so one table: the sigmoid rounded
    onto its 1/256 grid before the product, as TFLite's integer LOGISTIC writes it."""
    x = np.arange(-128, 128).astype(np.int8).reshape(1, 4, 8, 8)
    tensors = [qt(x.shape, 0.05, -20), qt(x.shape, 1 / 256, -128), qt(x.shape, 0.03, -100)]
    ops = [Op(Builtin.LOGISTIC, [0], [1], version=2), Op(Builtin.MUL, [0, 1], [2], ("MulOptions", {}), version=2)]
    check_quant(tensors, ops, [0], [2], [x], exact=0.99)


_IN, _MID, _OUT = (
    Carried(0.05, 3, -128, 127, _INT8),
    Carried(0.02, -128, -128, 127, _INT8),
    Carried(1 / 256, -128, -128, 127, _INT8),
)


def _relu_logistic(carried: bool) -> Graph:
    """RELU, then LOGISTIC linked into its kernel; int8 carried in float when ``carried``."""
    grids = (_IN, _MID, _OUT) if carried else (None, None, None)
    tensors = {i: Tensor(i, FLOAT32, (1, 4, 4, 8), f"t{i}", carried=grid) for i, grid in enumerate(grids)}
    nodes = [Node(0, Builtin.RELU, 1, (0,), (1,)), Node(1, Builtin.LOGISTIC, 1, (1,), (2,))]
    return Graph(tensors, {n.index: n for n in nodes})


def test_table_in_place_of_the_op_and_its_rounding():
    ctx = compile_partition(_relu_logistic(True), [0, 1], [0], [2], CompileOptions())
    (node,) = ctx.nodes
    code = node.gpu_op.code
    assert code.count(_ROUNDING) == code.count("args.dst_tensor.Write")  # RELU's step only
    (table,) = node.gpu_op.arguments.buffer_objects
    assert code.count(f"args.{table.key}.Read(lut_i.x)") == code.count("args.dst_tensor.Write")
    values = np.frombuffer(table.value.data, np.float32)
    want = grid_values(1 / (1 + np.exp(-carried_inputs(_MID))), _OUT)
    np.testing.assert_array_equal(values, want)


def test_float_ops_keep_their_code():
    ctx = compile_partition(_relu_logistic(False), [0, 1], [0], [2], CompileOptions())
    (node,) = ctx.nodes
    assert not node.gpu_op.arguments.buffer_objects and "lut_i" not in node.gpu_op.code


def _run_step(grid: Carried, x: np.ndarray) -> np.ndarray:
    """quant.qdq_code's step on float32 ``x``, run as OpenCL on the default device."""
    import pyopencl as cl

    import delegate  # noqa: F401  (the embedded PoCL's ICD, for pyopencl too)

    source = (
        "#define TO_FLT4(v) convert_float4(v)\n"
        "__kernel void k(__global const float4* x, __global float4* y) {\n"
        f"  int i = get_global_id(0);\n  float4 result = x[i];\n{qdq_code(grid)}  y[i] = result;\n}}\n"
    )
    device = next(d for p in cl.get_platforms() for d in p.get_devices())
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    program = cl.Program(context, source).build()
    flags = cl.mem_flags
    src = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
    dst = cl.Buffer(context, flags.WRITE_ONLY, x.nbytes)
    program.k(queue, (x.size // 4,), None, src, dst)
    out = np.empty_like(x)
    cl.enqueue_copy(queue, out, dst)
    return out


@pytest.mark.opencl
@pytest.mark.parametrize(
    "grid",
    [Carried(0.02, -128, -128, 127, _INT8), Carried(0.03, 0, 0, 255, _UINT8), Carried(0.05, 3, -128, 127, _INT8)],
    ids=["int8-relu-grid", "uint8-zero-at-0", "int8-signed"],
)
def test_rounding_step_as_the_table_rounds(grid):
    """The step (signs dropped on grids that hold no negative q) against quant_table.grid_values:
    ties within TIE away from zero, the clamps, NaN and -0 to the low end, infinities clamped."""
    steps = np.arange((grid.low - grid.zero_point - 2) * 4, (grid.high - grid.zero_point + 2) * 4 + 1) / 4
    ties = np.concatenate([steps, steps + 0.0005, steps - 0.0005, steps + 0.01, steps - 0.01])
    x = np.concatenate([ties * grid.scale, [np.nan, -0.0, np.inf, -np.inf, 1e30, -1e30, 0.0, 0.0]])
    x = np.resize(x.astype(np.float32), -(-x.size // 4) * 4)
    got = _run_step(grid, x)
    np.testing.assert_array_equal(got, grid_values(x.astype(np.float64), grid))
    signed = grid.low - grid.zero_point < 0
    assert ("0x80000000u" in qdq_code(grid)) == signed
