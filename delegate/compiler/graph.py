"""The compiler's model of a TFLite graph: what the plugin captures from the interpreter."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np


class Builtin(IntEnum):
    """TFLite builtin operator codes (tensorflow/lite/builtin_ops.h, schema BuiltinOperator) known by name."""

    ADD = 0
    AVERAGE_POOL_2D = 1
    CONCATENATION = 2
    CONV_2D = 3
    DEPTHWISE_CONV_2D = 4
    DEPTH_TO_SPACE = 5
    DEQUANTIZE = 6
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
    STRIDED_SLICE = 45
    EXP = 47
    SPLIT = 49
    LOG_SOFTMAX = 50
    CAST = 53
    PRELU = 54
    MAXIMUM = 55
    MINIMUM = 57
    NEG = 59
    PADV2 = 60
    SLICE = 65
    SIN = 66
    TRANSPOSE_CONV = 67
    TILE = 69
    EXPAND_DIMS = 70
    LOG = 73
    SUM = 74
    SQRT = 75
    RSQRT = 76
    SHAPE = 77
    POW = 78
    REDUCE_PROD = 81
    PACK = 83
    REDUCE_MAX = 82
    REDUCE_MIN = 89
    SQUARE = 92
    RESIZE_NEAREST_NEIGHBOR = 97
    LEAKY_RELU = 98
    SQUARED_DIFFERENCE = 99
    MIRROR_PAD = 100
    ABS = 101
    SPLIT_V = 102
    COS = 108
    ELU = 111
    HARD_SWISH = 117
    BATCH_MATMUL = 126


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
    #: affine-quantized (int8/uint8 with scales): this compiler computes on float tensors only
    quantized: bool = False
    #: affine quantization: per-channel (or single) scales and zero points, and the channel axis
    scales: tuple[float, ...] = ()
    zero_points: tuple[int, ...] = ()
    quant_axis: int = 0


@dataclass
class Node:
    """A node of the TFLite graph: builtin op, version, tensor indices and parameters."""

    index: int
    op: int  # builtin code
    version: int
    inputs: tuple[int, ...]  # -1 for an omitted optional input
    outputs: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        try:
            return f"{Builtin(self.op).name.lower()}_{self.index}"
        except ValueError:
            return f"op{self.op}_{self.index}"


@dataclass
class Graph:
    """The part of a TFLite graph the compiler sees: tensors and nodes by index."""

    tensors: dict[int, Tensor]
    nodes: dict[int, Node]

    def tensor(self, index: int) -> Tensor:
        return self.tensors[index]
