"""int8 / uint8 unary ops as tables of their input's integers (delegate/compiler/quant_table.py):
every integer through the delegate against TFLite's integer kernels, and what the compiler makes
of such an op (a table read in place of the op's code and of its rounding step)."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import FLOAT32, Builtin, Carried, Graph, Node, Tensor
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.compiler.quant_table import carried_inputs, grid_values

from .test_quant import check_quant, qt
from .tflite_builder import Op

_INT8, _UINT8 = 9, 3
#: what the rounding step (quant.qdq_code) writes into every kernel it runs in
_ROUNDING = "0x80000000u"


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
