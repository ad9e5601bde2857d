"""A context's graph checked before anything is allocated: tensors, storage, schedule.

A context file is input like any other. ``context.semantics.check_semantics`` (which the Runtime
runs first) holds its values to what they mean (sizes, ids, work-groups); here every tensor must
also have a data type and storage the runtime can hold, and the node order must be a valid
schedule. A violation is a ``ContextFormatError`` of kind "semantic".
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..context import ContextFile, model
from ..context.model import TensorStorageType
from ..context.schedule import schedule_violation
from ..context.semantics import semantic_error
from ..errors import ContextFormatError
from . import memory
from .limits import check_native


@dataclass(frozen=True)
class RuntimeTensor:
    """A runtime tensor: id, descriptor and shape; ``padded``: its slice planes sit
    ``memory.slice_pitch`` apart with padding (a CPU device)."""

    tensor_id: int
    desc: model.TensorDescriptor
    shape: memory.Shape
    padded: bool = False

    @property
    def slice_pitch(self) -> int:
        """FLT4 elements from one slice plane to the next in buffer-backed storage."""
        return memory.slice_pitch(self.desc, self.padded)

    @property
    def storage_bytes(self) -> int:
        return memory.storage_bytes(self.desc, self.padded)

    @property
    def image_dims(self) -> tuple[int, ...]:
        return memory.image_dims(self.desc, self.padded)

    @property
    def host_shape(self) -> tuple[int, ...]:
        """The shape ``Runtime.run`` takes or returns: BHWC, or BHWDC when D > 1."""
        s = self.shape
        return (s.b, s.h, s.w, s.d, s.c) if s.d > 1 else (s.b, s.h, s.w, s.c)


def semantic(message: str) -> ContextFormatError:
    """The error of a context that is well-formed but inconsistent."""
    return semantic_error(message)


def load_model(source: Any) -> tuple[model.InferenceContext, ContextFile | None]:
    """The model of a context (a model, bytes or a path) and the open file it reads from, if any:
    weights are views of the file, which the caller closes once they are uploaded."""
    if isinstance(source, model.InferenceContext):
        return source, None
    if isinstance(source, (bytes, bytearray, memoryview)):
        file = ContextFile(source)
    else:
        file = ContextFile.open(os.fspath(source))
    try:
        check_native(file.root)  # before a Python object is made of each node
    except BaseException:
        file.close()
        raise
    return file.to_model(), file


def _tensor(t: model.TensorDescWithId, padded: bool) -> RuntimeTensor:
    if t.desc is None:
        raise semantic(f"tensor {t.id} has no descriptor")
    try:
        shape = memory.Shape.of(t.desc)
        memory.element_bytes(t.desc)
    except ValueError as exc:
        raise semantic(f"tensor {t.id}: {exc}") from None
    if t.desc.storage_type == TensorStorageType.UNKNOWN:
        raise semantic(f"tensor {t.id} has storage type UNKNOWN")
    if t.desc.storage_type == TensorStorageType.SINGLE_TEXTURE_2D and shape.c > 4:
        raise semantic(f"tensor {t.id} is a SINGLE_TEXTURE_2D with {shape.c} channels (at most 4)")
    return RuntimeTensor(t.id, t.desc, shape, padded)


def check_graph(ctx: model.InferenceContext, padded: bool = False) -> dict[int, RuntimeTensor]:
    """The context's tensors by id, after checking that the runtime can hold them and that the
    schedule is valid (on a context ``check_semantics`` passed); ``padded``: with their slice
    planes padded (``RuntimeTensor.padded``)."""
    tensors = {t.id: _tensor(t, padded) for t in ctx.tensors}
    problem = schedule_violation(ctx)
    if problem is not None:
        raise semantic(problem)
    return tensors
