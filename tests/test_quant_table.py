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


def _conv_logistic(
    options: CompileOptions, channels: tuple[int, int] = (16, 32), mid: Carried = _MID
) -> tuple[str, list]:
    """A 1x1 convolution of ``channels`` (in, out) writing a carried tensor on ``mid``, LOGISTIC
    linked into it: the kernel's code and buffer objects."""
    cin, cout = channels
    tensors = {
        0: Tensor(0, FLOAT32, (1, 4, 4, cin), "x", carried=_IN),
        1: Tensor(1, FLOAT32, (cout, 1, 1, cin), "w", constant=np.ones((cout, 1, 1, cin), np.float32)),
        2: Tensor(2, FLOAT32, (cout,), "b", constant=np.zeros(cout, np.float32)),
        3: Tensor(3, FLOAT32, (1, 4, 4, cout), "y", carried=mid),
        4: Tensor(4, FLOAT32, (1, 4, 4, cout), "z", carried=_OUT),
    }
    nodes = [Node(0, Builtin.CONV_2D, 1, (0, 1, 2), (3,)), Node(1, Builtin.LOGISTIC, 1, (3,), (4,))]
    nodes[0].params.update(stride_height=1, stride_width=1, padding=1, activation=0)
    graph = Graph(tensors, {n.index: n for n in nodes})
    (node,) = compile_partition(graph, [0, 1], [0], [4], options).nodes
    return node.gpu_op.code, node.gpu_op.arguments.buffer_objects


def test_rounding_step_and_table_at_the_wider_vectors():
    """A 1x1 convolution writing a carried tensor, then a table: the rounding step and the table
    run once per FLT8 of the block write (kernel.WideOps), as one step."""
    code, _ = _conv_logistic(CompileOptions(vector_width=8), (8, 16), _IN)
    assert "int8 lut_i = convert_int8(q + " in code and "float8 q = " in code
    assert _ROUNDING not in code  # the edge blocks' FLT4 writes take the one step too


def test_float_ops_keep_their_code():
    ctx = compile_partition(_relu_logistic(False), [0, 1], [0], [2], CompileOptions())
    (node,) = ctx.nodes
    assert not node.gpu_op.arguments.buffer_objects and "lut_i" not in node.gpu_op.code


def _run_step(step: str, x: np.ndarray, width: int = 4, table: np.ndarray | None = None,
              codes: bytes = b"\0") -> np.ndarray:  # fmt: skip
    """``step`` (statements on FLT``width`` ``result``; ``tbl.Read(i)`` reads ``table``, ``c`` points
    at ``codes``) on float32 ``x``, run as OpenCL on the default device."""
    import pyopencl as cl

    import delegate  # noqa: F401  (the embedded PoCL's ICD, for pyopencl too)

    source = (
        f"#define TO_FLT{width}(v) convert_float{width}(v)\n#define FLT{width} float{width}\n"
        "typedef struct { __global const float* p; } Table;\n"
        "float Read(Table t, int i) { return t.p[i]; }\n"
        f"__kernel void k(__global const float{width}* x, __global float{width}* y, __global const float* t,"
        " __global const uchar* c) {\n"
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
    byte_codes = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=np.frombuffer(codes, np.uint8))
    program.k(queue, (x.size // width,), None, src, dst, tbl, byte_codes)
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


def test_byte_table_holds_the_codes_of_the_values():
    """quant_table.byte_table: each entry's code (integer less the grid's low end), from which
    the byte read recovers the float32 entry exactly; values off the grid have none."""
    from delegate.compiler.quant_table import byte_table, table

    values = table(lambda x: 1 / (1 + np.exp(-x)), _MID, _OUT)
    data = byte_table(values, _OUT)
    assert data is not None and len(data) == 256
    codes = np.frombuffer(data, np.uint8).astype(np.int32)
    steps = (codes - (_OUT.zero_point - _OUT.low)).astype(np.float32)
    np.testing.assert_array_equal(steps * np.float32(_OUT.scale), values)
    short = table(lambda x: x, Carried(0.02, 0, 0, 15, _UINT8), _OUT)  # 16 entries: padded
    assert np.frombuffer(byte_table(short, _OUT) or b"", np.uint8)[16:].tolist() == [0] * 240
    assert byte_table(values + np.float32(_OUT.scale) / 3, _OUT) is None  # not on the grid
    assert byte_table(values, _IN) is None  # another grid: codes out of 0..255 or values off it


def test_byte_lookup_on_the_sixteen_wide_vectors_only():
    """With CompileOptions.byte_lookup a kernel's 16-wide table reads take the codes table
    (quant_table.byte_read_code), its FLT4 edge writes the float table; without it, or without
    16-wide vectors, no codes table is made."""
    code, objects = _conv_logistic(CompileOptions(vector_width=16, byte_lookup=True))
    assert "__builtin_ia32_vpermi2varqi512" in code and "int16 lut_i" in code
    assert ".Read(lut_i.x)" in code  # the edge blocks' FLT4 writes
    floats, codes = (o.value.data for o in objects if "table" in o.key or "codes" in o.key)
    steps = (np.frombuffer(codes, np.uint8).astype(np.int32) - (_OUT.zero_point - _OUT.low)).astype(np.float32)
    np.testing.assert_array_equal(steps * np.float32(_OUT.scale), np.frombuffer(floats, np.float32))
    for options in (CompileOptions(vector_width=16), CompileOptions(vector_width=8, byte_lookup=True)):
        code, objects = _conv_logistic(options)
        assert "vpermi2varqi512" not in code and not any("codes" in o.key for o in objects)


@pytest.mark.opencl
@pytest.mark.parametrize("grid", _GRIDS, ids=_GRID_IDS)
def test_byte_lookup_reads_what_the_loads_read(grid):
    """The byte read (two permutes of the codes table) against the float table's 16 loads, after
    the rounding step, over every index and the values around each step of ``grid``."""
    from delegate.compiler.quant_table import ByteTable, byte_table, table
    from delegate.runtime import opencl
    from delegate.runtime.device import describe, select_device

    opencl.loader()  # PoCL's CPU device compiling for the host's instruction sets (pocl_cpu.py)
    info = describe(select_device())
    if not info.byte_lookup:
        pytest.skip(f"the device compiles for {info.compiler_cpu or 'a model not known'}, without AVX512-VBMI")
    x = _near_ties(grid)
    entries = table(np.tanh, grid, _OUT)
    data = byte_table(entries, _OUT)
    assert data is not None
    want = _run_step(rounded_lookup_code(grid, "tbl", 16), x, 16, entries)
    step = rounded_lookup_code(grid, "tbl", 16, ByteTable("cod", _OUT)).replace("cod.GetPtr()", "c")
    assert "vpermi2varqi512" in step
    got = _run_step(step, x, 16, entries, codes=data)
    np.testing.assert_array_equal(got, want)
