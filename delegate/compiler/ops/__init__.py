"""The op table: builtin code -> the op that checks and emits it."""

from __future__ import annotations

from .base import EmitContext, Op
from .batch_matmul import BatchMatMul
from .comparison import Cast, Compare, Logical, Select
from .concatenation import Concatenation
from .conv import Conv2D, DepthwiseConv2D, FullyConnected, TransposeConv
from .elementwise import Binary, Unary
from .pad import MirrorPad, Pad
from .pooling import Pool2D
from .reduce import Reduce
from .reindex import Slice, SpaceDepth, Split, Tile, Transpose
from .reshape import Reshape, SameOrder
from .resize import ResizeBilinear, ResizeNearest
from .softmax import Softmax

_OPS: list[Op] = [
    Conv2D(),
    DepthwiseConv2D(),
    FullyConnected(),
    TransposeConv(),
    BatchMatMul(),
    Binary(),
    Unary(),
    Compare(),
    Logical(),
    Select(),
    Cast(),
    Pool2D(),
    Reduce(),
    SameOrder(),
    Transpose(),
    Slice(),
    Tile(),
    MirrorPad(),
    SpaceDepth(),
    ResizeNearest(),
    Split(),
    Reshape(),
    Softmax(),
    Concatenation(),
    Pad(),
    ResizeBilinear(),
]

#: builtin code -> op
OPS: dict[int, Op] = {code: op for op in _OPS for code in op.codes}

__all__ = ["OPS", "EmitContext", "Op"]
