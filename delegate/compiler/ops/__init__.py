"""The op tables: builtin code, or a custom op's name -> the op that checks and emits it."""

from __future__ import annotations

import importlib
import pkgutil

from ..graph import CUSTOM, Node
from .base import EmitContext, Op
from .batch_matmul import BatchMatMul
from .comparison import Cast, Compare, Logical, Select
from .concatenation import Concatenation
from .conv import Conv2D, DepthwiseConv2D, FullyConnected, TransposeConv
from .elementwise import Binary, Unary
from .mediapipe_pooling import MaxPoolingWithArgmax2D, MaxUnpooling2D
from .mediapipe_transform import Landmarks2TransformMatrix, TransformLandmarks, TransformTensorBilinear
from .mediapipe_transpose_conv import Convolution2DTransposeBias
from .pad import MirrorPad, Pad
from .pooling import Pool2D
from .reduce import Reduce
from .reindex import BroadcastTo, Reverse, Slice, SpaceDepth, Split, Tile, Transpose
from .reshape import Reshape, SameOrder
from .resize import ResizeBilinear, ResizeNearest
from .softmax import Softmax
from .traits import NO_TRAITS, Quantization, Traits

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
    BroadcastTo(),
    Reverse(),
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


def _one_module_ops() -> list[Op]:
    """The ops defined one family to a module, as its ``OP`` (ops/gelu.py; a tuple for a family of
    several ops, ops/pack.py): adding such an op is adding its module, with no edit here."""
    found = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        op = getattr(importlib.import_module(f"{__name__}.{info.name}"), "OP", None)
        found += [o for o in (op if isinstance(op, tuple) else (op,)) if isinstance(o, Op)]
    return found


_OPS += _one_module_ops()

#: ops that are custom ops (builtin code CUSTOM), known by name: MediaPipe's, which TFLite's CPU
#: kernels do not implement
_CUSTOM_OPS: list[Op] = [
    Convolution2DTransposeBias(),
    MaxPoolingWithArgmax2D(),
    MaxUnpooling2D(),
    TransformTensorBilinear(),
    TransformLandmarks(),
    Landmarks2TransformMatrix(),
]

#: builtin code -> op
OPS: dict[int, Op] = {code: op for op in _OPS for code in op.codes}
# two ops claiming one code (compiler-internal codes are picked by hand) would shadow each other
_claimed = [code for op in _OPS for code in op.codes]
if len(_claimed) != len(OPS):
    raise ImportError(f"op codes served twice: {sorted({c for c in _claimed if _claimed.count(c) > 1})}")
#: custom op name (the model's OperatorCode.custom_code) -> op
CUSTOM_OPS: dict[str, Op] = {name: op for op in _CUSTOM_OPS for name in op.custom_names}


def traits_of(code: int) -> Traits:
    """The traits the op running builtin ``code`` declares (none for a code no op runs)."""
    op = OPS.get(code)
    return op.traits(code) if op is not None else NO_TRAITS


def op_for(node: Node) -> Op | None:
    """The op that compiles ``node``: by its code, or a custom op by its name; None if none does."""
    if node.op == CUSTOM:
        return CUSTOM_OPS.get(node.custom_name)
    return OPS.get(node.op)


__all__ = ["CUSTOM_OPS", "OPS", "EmitContext", "Op", "Quantization", "Traits", "op_for", "traits_of"]
