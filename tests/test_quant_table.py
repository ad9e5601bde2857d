"""int8 / uint8 unary ops as tables of their input's integers (delegate/compiler/quant_table.py):
every integer through the delegate against TFLite's integer kernels, and what the compiler makes
of such an op (a table read in place of the op's code and of its rounding step)."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import FLOAT32, Builtin, Carried, Graph, Node, Tensor
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.compiler.quant_step import qdq_code, rounded_lookup_code
from delegate.compiler.quant_table import carried_inputs, grid_values, lookup_code

from .test_quant import check_quant, qt
from .tflite_builder import Op

_INT8, _UINT8 = 9, 3
#: what the rounding step (quant_step.qdq_code) writes into every kernel it runs in
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
    """LOGISTIC linked after RELU's rounding step: the step's integer is the table's index (one
    step, quant_step.rounded_lookup_code), neither the LOGISTIC's code nor its own rounding step."""
    ctx = compile_partition(_relu_logistic(True), [0, 1], [0], [2], CompileOptions())
    (node,) = ctx.nodes
    code = node.gpu_op.code
    writes = code.count("args.dst_tensor.Write")
    assert _ROUNDING not in code and code.count("convert_float4(result)") == writes  # RELU's scaling only
    assert code.count(f"lut_i = convert_int4(q + {0.5 + 1 / 1024}f) + 0;") == writes
    (table,) = node.gpu_op.arguments.buffer_objects
    assert code.count(f"args.{table.key}.Read(lut_i.x)") == writes
    values = np.frombuffer(table.value.data, np.float32)
    want = grid_values(1 / (1 + np.exp(-carried_inputs(_MID))), _OUT)
    np.testing.assert_array_equal(values, want)


def test_rounding_step_and_table_at_the_wider_vectors():
    """A 1x1 convolution writing a carried tensor, then a table: the rounding step and the table
    run once per FLT8 of the block write (kernel.WideOps), as one step."""
    tensors = {
        0: Tensor(0, FLOAT32, (1, 4, 4, 8), "x", carried=_IN),
        1: Tensor(1, FLOAT32, (16, 1, 1, 8), "w", constant=np.ones((16, 1, 1, 8), np.float32)),
        2: Tensor(2, FLOAT32, (16,), "b", constant=np.zeros(16, np.float32)),
        3: Tensor(3, FLOAT32, (1, 4, 4, 16), "y", carried=_IN),
        4: Tensor(4, FLOAT32, (1, 4, 4, 16), "z", carried=_OUT),
    }
    nodes = [Node(0, Builtin.CONV_2D, 1, (0, 1, 2), (3,)), Node(1, Builtin.LOGISTIC, 1, (3,), (4,))]
    nodes[0].params.update(stride_height=1, stride_width=1, padding=1, activation=0)
    graph = Graph(tensors, {n.index: n for n in nodes})
    (node,) = compile_partition(graph, [0, 1], [0], [4], CompileOptions(vector_width=8)).nodes
    code = node.gpu_op.code
    assert "int8 lut_i = convert_int8(q + " in code and "float8 q = " in code
    assert _ROUNDING not in code  # the edge blocks' FLT4 writes take the one step too


def test_float_ops_keep_their_code():
    ctx = compile_partition(_relu_logistic(False), [0, 1], [0], [2], CompileOptions())
    (node,) = ctx.nodes
    assert not node.gpu_op.arguments.buffer_objects and "lut_i" not in node.gpu_op.code


def _run_step(step: str, x: np.ndarray, width: int = 4, table: np.ndarray | None = None) -> np.ndarray:
    """``step`` (statements on FLT``width`` ``result``; ``tbl.Read(i)`` reads ``table``) on
    float32 ``x``, run as OpenCL on the default device."""
    import pyopencl as cl

    import delegate  # noqa: F401  (the embedded PoCL's ICD, for pyopencl too)

    source = (
        f"#define TO_FLT{width}(v) convert_float{width}(v)\n#define FLT{width} float{width}\n"
        "typedef struct { __global const float* p; } Table;\n"
        "float Read(Table t, int i) { return t.p[i]; }\n"
        f"__kernel void k(__global const float{width}* x, __global float{width}* y, __global const float* t) {{\n"
        f"  Table tbl = {{t}};\n  int i = get_global_id(0);\n  float{width} result = x[i];\n"
        f"{step.replace('tbl.Read(', 'Read(tbl, ')}  y[i] = result;\n}}\n"
    )
    device = next(d for p in cl.get_platforms() for d in p.get_devices())
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    program = cl.Program(context, source).build()
    flags = cl.mem_flags
    src = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=x)
    entries = np.zeros(1, np.float32) if table is None else table.astype(np.float32)
    tbl = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=entries)
    dst = cl.Buffer(context, flags.WRITE_ONLY, x.nbytes)
    program.k(queue, (x.size // width,), None, src, dst, tbl)
    out = np.empty_like(x)
    cl.enqueue_copy(queue, out, dst)
    return out


_GRIDS = [Carried(0.02, -128, -128, 127, _INT8), Carried(0.03, 0, 0, 255, _UINT8), Carried(0.05, 3, -128, 127, _INT8)]
_GRID_IDS = ["int8-relu-grid", "uint8-zero-at-0", "int8-signed"]


def _near_ties(grid: Carried) -> np.ndarray:
    """float32 values around every step and half step of ``grid`` and past its ends, NaN, -0 and
    infinities, a multiple of 16 of them."""
    steps = np.arange((grid.low - grid.zero_point - 2) * 4, (grid.high - grid.zero_point + 2) * 4 + 1) / 4
    ties = np.concatenate([steps, steps + 0.0005, steps - 0.0005, steps + 0.01, steps - 0.01])
    x = np.concatenate([ties * grid.scale, [np.nan, -0.0, np.inf, -np.inf, 1e30, -1e30, 0.0, 0.0]])
    return np.resize(x.astype(np.float32), -(-x.size // 16) * 16)


@pytest.mark.opencl
@pytest.mark.parametrize("width", [4, 16])
@pytest.mark.parametrize("grid", _GRIDS, ids=_GRID_IDS)
def test_rounding_step_as_the_table_rounds(grid, width):
    """The step (signs dropped on grids that hold no negative q) against quant_table.grid_values:
    ties within TIE away from zero, the clamps, NaN and -0 to the low end, infinities clamped;
    on FLT4 and on the wider vectors a kernel's kernel.WideOps point holds."""
    x = _near_ties(grid)
    got = _run_step(qdq_code(grid, width=width), x, width)
    np.testing.assert_array_equal(got, grid_values(x.astype(np.float64), grid))
    signed = grid.low - grid.zero_point < 0
    assert ("q < 0.0f" in qdq_code(grid)) == signed
    # the sign by a float comparison: an integer view of q makes the clamps compare-and-blend pairs
    assert "as_uint" not in qdq_code(grid, width=width)


@pytest.mark.opencl
@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize("grid", _GRIDS, ids=_GRID_IDS)
def test_rounded_index_is_the_rounded_values_index(grid, width):
    """quant_step.rounded_lookup_code reads the entry that the rounding step and a table lookup after
    it read (quant_table.lookup_code): the table here holds each index's own number."""
    x = _near_ties(grid)
    entries = np.arange(grid.high - grid.low + 1, dtype=np.float32)
    got = _run_step(rounded_lookup_code(grid, "tbl", width), x, width, entries)
    want = _run_step(qdq_code(grid) + lookup_code(grid, "tbl"), x, 4, entries)
    np.testing.assert_array_equal(got, want)
    steps = grid_values(x.astype(np.float64), grid) / np.float32(grid.scale)
    np.testing.assert_array_equal(got, np.round(steps) + grid.zero_point - grid.low)
