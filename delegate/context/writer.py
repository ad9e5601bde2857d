"""Serialize the model (model.py) into InferenceContext FlatBuffers bytes."""

from __future__ import annotations

import math
import os
from pathlib import Path

import flatbuffers
import numpy as np

from .._atomic import atomic_write
from ..errors import ContextFormatError
from .fields import Kind, field_specs
from .model import InferenceContext
from .schedule import schedule_violation

_PREPEND_SLOT = {
    Kind.BOOL: "PrependBoolSlot",
    Kind.INT32: "PrependInt32Slot",
    Kind.UINT32: "PrependUint32Slot",
    Kind.FLOAT32: "PrependFloat32Slot",
    Kind.ENUM: "PrependInt8Slot",
}


def _offset_vector(builder: flatbuffers.Builder, offsets: list[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        builder.PrependUOffsetTRelative(off)
    return builder.EndVector()


def _word_vector(builder: flatbuffers.Builder, values: list[int] | list[float], dtype: str) -> int:
    return builder.CreateNumpyVector(np.asarray(values, dtype=dtype))


def _write_table(builder: flatbuffers.Builder, obj: object) -> int:
    specs = field_specs(type(obj))
    children: dict[int, int] = {}
    # FlatBuffers cannot nest objects under construction: children go first.
    for spec in specs:
        value = getattr(obj, spec.name)
        kind = spec.kind
        if kind is Kind.STRING and value is not None:
            children[spec.slot] = builder.CreateString(value)
        elif kind is Kind.TABLE and value is not None:
            children[spec.slot] = _write_table(builder, value)
        elif kind is Kind.BYTES and len(value):
            children[spec.slot] = builder.CreateNumpyVector(np.frombuffer(value, dtype=np.uint8))
        elif kind is Kind.TABLE_LIST and value:
            children[spec.slot] = _offset_vector(builder, [_write_table(builder, v) for v in value])
        elif kind is Kind.STRING_LIST and value:
            children[spec.slot] = _offset_vector(builder, [builder.CreateString(v) for v in value])
        elif kind is Kind.INT32_LIST and value:
            children[spec.slot] = _word_vector(builder, value, "<i4")
        elif kind is Kind.FLOAT32_LIST and value:
            children[spec.slot] = _word_vector(builder, value, "<f4")
    builder.StartObject(len(specs))
    for spec in specs:
        if spec.slot in children:
            builder.PrependUOffsetTRelativeSlot(spec.slot, children[spec.slot], 0)
        elif spec.kind in _PREPEND_SLOT:
            value = getattr(obj, spec.name)
            # The builder skips values equal to the default; -0.0 == 0 but must keep its sign.
            default = None if spec.kind is Kind.FLOAT32 and math.copysign(1.0, value) < 0 else 0
            getattr(builder, _PREPEND_SLOT[spec.kind])(spec.slot, value, default)
    return builder.EndObject()


def serialize_context(context: InferenceContext, *, check_schedule: bool = True) -> bytes:
    """The FlatBuffers bytes of ``context`` (no file identifier, as upstream).

    A context whose nodes read a tensor before it is written (schedule.py) is refused with
    ``ContextFormatError``; ``check_schedule=False`` writes it anyway, for tests of the format
    itself (the runtime still refuses to load it).
    """
    if check_schedule:
        problem = schedule_violation(context)
        if problem is not None:
            raise ContextFormatError(f"refusing to write a context whose {problem}", kind="semantic", source="writer")
    builder = flatbuffers.Builder(1024)
    root = _write_table(builder, context)
    builder.Finish(root)
    return bytes(builder.Output())


def write_context(context: InferenceContext, path: str | os.PathLike[str], *, check_schedule: bool = True) -> Path:
    """Write ``context`` to ``path`` atomically (temporary file, fsync, rename); see ``serialize_context``."""
    return atomic_write(path, serialize_context(context, check_schedule=check_schedule))
