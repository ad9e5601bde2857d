"""Op names in reasons and node names: TFLite's full BuiltinOperator table, and custom ops by name."""

from __future__ import annotations

import numpy as np
import pytest
import tflite
from flatbuffers import flexbuffers

import delegate
from delegate.compiler.graph import CUSTOM, Builtin, Graph, Node, Tensor, describe_op, op_name
from delegate.compiler.op_names import BUILTIN_OPERATORS
from delegate.compiler.partition import unsupported_reason

from .tflite_builder import Op, T, build_model


def test_table_is_tflites_builtin_operator_enum():
    # Regenerate with `python scripts/gen_op_names.py` when a newer `tflite` package adds codes.
    members = vars(tflite.BuiltinOperator)
    expected = {v: k for k, v in members.items() if not k.startswith("_") and isinstance(v, int)}
    assert BUILTIN_OPERATORS == dict(sorted(expected.items()))


def test_the_compilers_codes_agree_with_the_table():
    for member in Builtin:
        assert BUILTIN_OPERATORS[member.value] == member.name
    assert BUILTIN_OPERATORS[CUSTOM] == "CUSTOM"


def test_names_of_builtin_custom_and_unknown_ops():
    assert op_name(83) == "PACK" and describe_op(83) == "PACK"
    assert Node(108, 83, 1, (0,), (1,)).name == "pack_108"
    assert Node(7, Builtin.CONV_2D, 1, (0,), (1,)).name == "conv_2d_7"
    custom = Node(244, CUSTOM, 1, (0,), (1,), custom_name="Convolution2DTransposeBias")
    assert custom.name == "Convolution2DTransposeBias_244"
    assert custom.op_description == "custom op Convolution2DTransposeBias"
    assert op_name(CUSTOM, "Convolution2DTransposeBias") == "Convolution2DTransposeBias"
    assert op_name(CUSTOM) == "CUSTOM" and Node(3, CUSTOM, 1, (), ()).name == "custom_3"
    assert "builtin code 100000" in describe_op(100000)  # newer than the table: the code, said plainly


def test_unsupported_reasons_name_the_op():
    graph = Graph({0: Tensor(0, 1, (1, 4)), 1: Tensor(1, 1, (1, 4))}, {})
    floor = Node(1, 8, 1, (0,), (1,))
    assert unsupported_reason(floor, graph) == "FLOOR is not supported by the compiler"
    custom = Node(2, CUSTOM, 1, (0,), (1,), custom_name="NoSuchOp")
    assert unsupported_reason(custom, graph) == "custom op NoSuchOp is not supported by the compiler"
    # A custom op the compiler has an op for (ops/mediapipe_transpose_conv.py) is checked by it.
    known = Node(3, CUSTOM, 1, (0,), (1,), custom_name="Convolution2DTransposeBias")
    assert "input, weights, bias -> output expected" in unsupported_reason(known, graph)


@pytest.mark.opencl
def test_a_custom_op_is_captured_by_its_name():
    # AudioSpectrogram is a custom op that TFLite's builtin resolver registers: the model runs on
    # CPU, and the delegate sees the node with builtin code 32 and its registration's custom name.
    options = bytes(flexbuffers.Dumps({"window_size": 16, "stride": 8, "magnitude_squared": False}))
    tensors = [T((64, 1)), T((64, 1)), T((1, 7, 9))]
    ops = [
        Op(Builtin.RELU, [0], [1]),
        Op(CUSTOM, [1], [2], custom_code="AudioSpectrogram", custom_options=options),
    ]
    interpreter = delegate.Interpreter(model_content=build_model(tensors, ops, [0], [2]))
    interpreter.allocate_tensors()
    assert interpreter.opencl.unsupported == {
        "AudioSpectrogram_1": "custom op AudioSpectrogram is not supported by the compiler"
    }
    assert len(interpreter.opencl.delegated_nodes) == 1
    x = np.random.default_rng(0).standard_normal((64, 1)).astype(np.float32)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    assert interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).shape == (1, 7, 9)
