"""The compiler's model of a TFLite graph: what the plugin captures from the interpreter."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np

from .op_names import BUILTIN_OPERATORS, TFLITE_VERSION

#: builtin code of every custom op (BuiltinOperator CUSTOM): its registration's custom name names it
CUSTOM = 32


class Builtin(IntEnum):
    """The TFLite builtin operator codes the compiler uses by name (all of them: op_names.py)."""

    ADD = 0
    AVERAGE_POOL_2D = 1
    CONCATENATION = 2
    CONV_2D = 3
    DEPTHWISE_CONV_2D = 4
    DEPTH_TO_SPACE = 5
    DEQUANTIZE = 6
    EMBEDDING_LOOKUP = 7
    FULLY_CONNECTED = 9
    LOGISTIC = 14
    MAX_POOL_2D = 17
    MUL = 18
    RELU = 19
    RELU_N1_TO_1 = 20
    RELU6 = 21
    RESHAPE = 22
    RESIZE_BILINEAR = 23
    SOFTMAX = 25
    SPACE_TO_DEPTH = 26
    TANH = 28
    PAD = 34
    GATHER = 36
    TRANSPOSE = 39
    MEAN = 40
    SUB = 41
    DIV = 42
    SQUEEZE = 43
    UNIDIRECTIONAL_SEQUENCE_LSTM = 44
    STRIDED_SLICE = 45
    EXP = 47
    SPLIT = 49
    LOG_SOFTMAX = 50
    CAST = 53
    PRELU = 54
    MAXIMUM = 55
    MINIMUM = 57
    LESS = 58
    NEG = 59
    PADV2 = 60
    GREATER = 61
    GREATER_EQUAL = 62
    LESS_EQUAL = 63
    SELECT = 64
    SLICE = 65
    SIN = 66
    TRANSPOSE_CONV = 67
    TILE = 69
    EXPAND_DIMS = 70
    EQUAL = 71
    NOT_EQUAL = 72
    LOG = 73
    SUM = 74
    SQRT = 75
    RSQRT = 76
    SHAPE = 77
    POW = 78
    REDUCE_PROD = 81
    REDUCE_MAX = 82
    PACK = 83
    LOGICAL_OR = 84
    LOGICAL_AND = 86
    LOGICAL_NOT = 87
    UNPACK = 88
    REDUCE_MIN = 89
    SQUARE = 92
    RESIZE_NEAREST_NEIGHBOR = 97
    LEAKY_RELU = 98
    SQUARED_DIFFERENCE = 99
    MIRROR_PAD = 100
    ABS = 101
    SPLIT_V = 102
    REVERSE_V2 = 105
    COS = 108
    ELU = 111
    QUANTIZE = 114
    HARD_SWISH = 117
    SELECT_V2 = 123
    DENSIFY = 124
    BATCH_MATMUL = 126
    CALL_ONCE = 129
    BROADCAST_TO = 130
    VAR_HANDLE = 142
    READ_VARIABLE = 143
    ASSIGN_VARIABLE = 144
    GELU = 150
    STABLEHLO_COMPOSITE = 206


class Activation(IntEnum):
    """TfLiteFusedActivation."""

    NONE = 0
    RELU = 1
    RELU_N1_TO_1 = 2
    RELU6 = 3
    TANH = 4
    SIGN_BIT = 5
    SIGMOID = 6


class Padding(IntEnum):
    UNKNOWN = 0
    SAME = 1
    VALID = 2


FLOAT32 = 1  # kTfLiteFloat32
INT32 = 2  # kTfLiteInt32
INT64 = 4  # kTfLiteInt64
BOOL = 6  # kTfLiteBool


def op_name(code: int, custom_name: str = "") -> str:
    """The schema's name of builtin ``code`` (``PACK``), or a custom op's own name (``custom_name``)."""
    if code == CUSTOM and custom_name:
        return custom_name
    return BUILTIN_OPERATORS.get(code, f"BUILTIN_{code}")


def describe_op(code: int, custom_name: str = "") -> str:
    """The op as a sentence names it: ``PACK``, ``custom op Convolution2DTransposeBias``."""
    if code == CUSTOM:
        return f"custom op {custom_name}" if custom_name else "a custom op without a name"
    if code not in BUILTIN_OPERATORS:
        return f"builtin code {code} (newer than the op table of tflite {TFLITE_VERSION}: scripts/gen_op_names.py)"
    return BUILTIN_OPERATORS[code]


@dataclass(frozen=True)
class Carried:
    """The quantization of a tensor carried in float: real = (q - zero_point) * scale, q in [low, high]
    (the range of ``dtype``, the TfLiteType TFLite holds it in)."""

    scale: float
    zero_point: int
    low: int
    high: int
    dtype: int


@dataclass(frozen=True, eq=False)
class IntegerCodes:
    """The int8 values of a constant quantized symmetrically (zero points 0): real = values * scale,
    the scale per channel along ``axis`` (one scale: per tensor)."""

    values: np.ndarray
    scales: tuple[float, ...]
    axis: int


@dataclass
class Tensor:
    """A tensor of the TFLite graph: type, shape, name, and its data when it is constant."""

    index: int
    dtype: int  # TfLiteType
    shape: tuple[int, ...]
    name: str = ""
    #: read-only data mapped from the model (weights, biases, axes)
    is_constant: bool = False
    #: the constant's value when it was read (the plugin reads large ones only to compile)
    constant: np.ndarray | None = None
    #: affine-quantized (int8/uint8 with scales) and not made float by folding (fold.py) or
    #: carried (quant.py): this compiler computes on float tensors only
    quantized: bool = False
    #: affine quantization: per-channel (or single) scales and zero points, and the channel axis
    scales: tuple[float, ...] = ()
    zero_points: tuple[int, ...] = ()
    quant_axis: int = 0
    #: a quantized activation carried in float (compiler/quant.py): its quantization, else None
    carried: Carried | None = None
    #: a symmetric int8 constant that compiler/quant.py made float: its integer codes, scales and
    #: channel axis (integer matrix products read them), else None
    codes: IntegerCodes | None = None
    #: the model's shape signature (-1 where a dimension is only known at run time); None: none stored
    signature: tuple[int, ...] | None = None
    #: a TFLite variable tensor: state that persists between invokes (an LSTM's), written in place
    #: by the node reading it
    is_variable: bool = False


@dataclass
class Node:
    """A node of the TFLite graph: builtin op (and a custom op's name), version, tensor indices and parameters."""

    index: int
    op: int  # builtin code
    version: int
    inputs: tuple[int, ...]  # -1 for an omitted optional input
    outputs: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)
    #: TfLiteRegistration.custom_name of a custom op (op CUSTOM), else ""
    custom_name: str = ""
    #: a custom op with no kernel of its own (no prepare, no external registration): only a
    #: delegate can run it
    unresolved: bool = False
    #: a custom op's options as the model stores them (Operator.custom_options): a flat C struct
    #: or a flexbuffer, as each op defines
    custom_options: bytes = b""

    @property
    def name(self) -> str:
        """``pack_108``; a custom op keeps its own spelling: ``Convolution2DTransposeBias_244``."""
        if self.op == CUSTOM and self.custom_name:
            return f"{self.custom_name}_{self.index}"
        return f"{op_name(self.op).lower()}_{self.index}"

    @property
    def op_description(self) -> str:
        """What the op is, for messages: ``PACK``, ``custom op Convolution2DTransposeBias``."""
        return describe_op(self.op, self.custom_name)


@dataclass
class Graph:
    """The part of a TFLite graph the compiler sees: tensors and nodes by index."""

    tensors: dict[int, Tensor]
    nodes: dict[int, Node]

    def tensor(self, index: int) -> Tensor:
        return self.tensors[index]
