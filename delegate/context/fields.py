"""Field specs of the model's dataclasses: what kind of FlatBuffers field each one is.

The writer, the native reader's converter and the tests all walk the schema
through these specs, so the table layout is written down once (model.py).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from enum import Enum, IntEnum
from functools import cache

from . import model


class Kind(Enum):
    BOOL = "bool"
    INT32 = "int32"
    UINT32 = "uint32"
    FLOAT32 = "float32"
    ENUM = "enum"
    STRING = "string"
    BYTES = "bytes"
    TABLE = "table"
    TABLE_LIST = "[table]"
    STRING_LIST = "[string]"
    INT32_LIST = "[int32]"
    FLOAT32_LIST = "[float32]"


_SCALAR_TAGS = {"int32": Kind.INT32, "uint32": Kind.UINT32, "float32": Kind.FLOAT32}
_LIST_OF = {Kind.INT32: Kind.INT32_LIST, Kind.FLOAT32: Kind.FLOAT32_LIST, Kind.STRING: Kind.STRING_LIST}


@dataclass(frozen=True)
class FieldSpec:
    """How one field of a table dataclass is stored: name, vtable slot, kind and target type."""

    name: str
    slot: int
    kind: Kind
    #: the table dataclass (TABLE, TABLE_LIST) or IntEnum class (ENUM)
    target: type | None = None


def _classify(hint: object) -> tuple[Kind, type | None]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is bool:
        return Kind.BOOL, None
    if hint is str:
        return Kind.STRING, None
    if origin is typing.Annotated:
        return _SCALAR_TAGS[args[1]], None
    if isinstance(hint, type) and issubclass(hint, IntEnum):
        return Kind.ENUM, hint
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return Kind.TABLE, hint
    if origin is list:
        kind, target = _classify(args[0])
        if kind is Kind.TABLE:
            return Kind.TABLE_LIST, target
        return _LIST_OF[kind], None
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in args if a is not type(None)]
        if set(members) == {bytes, memoryview}:
            return Kind.BYTES, None
        if len(members) == 1:
            return _classify(members[0])
    raise TypeError(f"unsupported model annotation {hint!r}")


@cache
def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """The specs of a table dataclass, in slot order."""
    hints = typing.get_type_hints(cls, vars(model), include_extras=True)
    specs = []
    for slot, f in enumerate(dataclasses.fields(cls)):
        kind, target = _classify(hints[f.name])
        specs.append(FieldSpec(f.name, slot, kind, target))
    return tuple(specs)
