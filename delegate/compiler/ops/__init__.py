"""The op table: builtin code -> the op that checks and emits it."""

from __future__ import annotations

from .base import EmitContext, Op
from .conv import BatchMatMul, Conv2D, DepthwiseConv2D, FullyConnected, TransposeConv
from .elementwise import Binary, Unary
from .gather import Concatenation, Pad, ResizeBilinear
from .pooling import Pool2D
from .shape import MirrorPad, Reduce, ResizeNearest, SameOrder, Slice, SpaceDepth, Split, Tile, Transpose
from .transform import Reshape, Softmax

_OPS: list[Op] = [
    Conv2D(),
    DepthwiseConv2D(),
    FullyConnected(),
    TransposeConv(),
    BatchMatMul(),
    Binary(),
    Unary(),
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
