"""Which settings message a file or value holds: a type named by the caller, or told by its content.

Binary protos carry no type: they are read as ``BINARY_DEFAULT`` (``ComputeSettings``, the
top-level message) unless the caller names another. Text format and JSON name their fields, and
the top-level field names of ``ComputeSettings``, ``TFLiteSettings`` and ``MinibenchmarkSettings``
are disjoint, so those are typed by the fields they set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf.message import Message

from .._generated import configuration_pb2 as pb
from ..errors import SettingsError

#: the message binary settings are read as when no type is given, everywhere
BINARY_DEFAULT: type[Message] = pb.ComputeSettings
#: the messages text and JSON settings are typed among (what ``run`` and the Python API take)
RUNNABLE: tuple[type[Message], ...] = (pb.ComputeSettings, pb.TFLiteSettings)
#: ... and for ``settings show|convert|validate``, which also read mini-benchmark settings
ANY_SETTINGS: tuple[type[Message], ...] = (*RUNNABLE, pb.MinibenchmarkSettings)


def message_type(kind: Any) -> type[Message]:
    """A settings message class from a class or its name ("TFLiteSettings", "tflite.proto.TFLiteSettings")."""
    if isinstance(kind, type) and issubclass(kind, Message):
        return kind
    if isinstance(kind, str):
        name = kind.strip().removeprefix(pb.DESCRIPTOR.package + ".")
        if name in pb.DESCRIPTOR.message_types_by_name:
            return getattr(pb, name)  # type: ignore[no-any-return]
        raise SettingsError(
            f"unknown settings type {kind!r}: use one of {', '.join(t.DESCRIPTOR.name for t in ANY_SETTINGS)}"
            " (or another message of schemas/configuration.proto)"
        )
    raise SettingsError(
        f"settings_type must be a message name such as 'TFLiteSettings' or a configuration_pb2 class, "
        f"not {type(kind).__name__}"
    )


def _field_names(kind: type[Message]) -> set[str]:
    return {name for f in kind.DESCRIPTOR.fields for name in (f.name, f.json_name)}


def type_for_fields(names: Iterable[str], candidates: Sequence[type[Message]], source: str) -> type[Message] | None:
    """The one candidate whose fields ``names`` (top-level field names) are; None when there are none.

    Raises SettingsError when the names belong to several candidates, or to none of them.
    """
    given = sorted(set(names))
    if not given:
        return None
    owners = {kind: [n for n in given if n in _field_names(kind)] for kind in candidates}
    matched = [kind for kind, hits in owners.items() if hits]
    if len(matched) == 1:
        return matched[0]
    described = "; ".join(
        f"{kind.DESCRIPTOR.name}: {', '.join(f.name for f in kind.DESCRIPTOR.fields)}" for kind in candidates
    )
    if not matched:
        raise SettingsError(
            f"{source}: top-level field(s) {', '.join(given)} belong to none of the settings messages "
            f"({described}); check the spelling"
        )
    parts = ", ".join(f"{', '.join(owners[kind])} of {kind.DESCRIPTOR.name}" for kind in matched)
    hint = (
        " (a TFLiteSettings inside a ComputeSettings goes in tflite_settings { ... })"
        if pb.ComputeSettings in matched and pb.TFLiteSettings in matched
        else ""
    )
    raise SettingsError(f"{source}: ambiguous settings: top-level fields {parts}; use one message{hint}")


def top_level_text_fields(text: str) -> list[str]:
    """The field names at the outermost level of a text-format message (comments and strings skipped)."""
    names: list[str] = []
    depth = 0
    i, n = 0, len(text)
    expect_name = True  # at depth 0, the next identifier is a field name (not a value)
    while i < n:
        c = text[i]
        if c == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif c in "\"'":
            i += 1
            while i < n and text[i] != c:
                i += 2 if text[i] == "\\" else 1
            i += 1
            expect_name = True
            continue
        elif c in "{<":
            depth += 1
        elif c in "}>":
            depth -= 1
            expect_name = True
        elif c == "[" and depth == 0:  # an extension name (not a field of ours) or a list value
            while i < n and text[i] != "]":
                i += 1
            expect_name = not expect_name
        elif c == ":":
            expect_name = False
        elif c.isalpha() or c == "_":
            start = i
            while i < n and (text[i].isalnum() or text[i] in "_."):
                i += 1
            if depth == 0:
                if expect_name:
                    names.append(text[start:i])
                    expect_name = False
                else:
                    expect_name = True  # a scalar value ended the field
            continue
        elif depth == 0 and not c.isspace() and c not in ",;":
            expect_name = True  # a number or other scalar value
            while i < n and not text[i].isspace() and text[i] not in "#,;{}<>":
                i += 1
            continue
        i += 1
    return names
