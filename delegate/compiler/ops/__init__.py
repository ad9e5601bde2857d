"""The op table: builtin code -> the op that checks and emits it."""

from __future__ import annotations

from .base import EmitContext, Op
from .conv import Conv2D, DepthwiseConv2D, FullyConnected
from .elementwise import Binary, Unary
from .pooling import Mean, Pool2D
from .transform import Reshape, Softmax

_OPS: list[Op] = [Conv2D(), DepthwiseConv2D(), FullyConnected(), Binary(), Unary(), Pool2D(), Mean(), Reshape(),
                  Softmax()]  # fmt: skip

#: builtin code -> op
OPS: dict[int, Op] = {code: op for op in _OPS for code in op.codes}

__all__ = ["OPS", "EmitContext", "Op"]
