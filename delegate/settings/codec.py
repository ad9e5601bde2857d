"""Read and write settings messages as binary protobuf, text format or JSON.

A file's format (binary, text, JSON) comes from its content, not its name. Text and JSON are
typed by their content (``message_types.type_for_fields``) unless the caller names a type; binary
protos say nothing of their type and are read as the type the caller names, else as
``ComputeSettings`` (``message_types.BINARY_DEFAULT``) when they decode cleanly as it, else as the
one other candidate they decode cleanly as. Bytes that do not decode cleanly as the type asked
for (fields it does not have, wire types that do not match, enum values it does not define,
string fields that are not text) are refused rather than read as a different configuration.
Strings holding control characters (what a nested message read as a string looks like) are
refused in every format.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from google.protobuf.message import DecodeError, Message

from ..errors import SettingsError
from .message_types import BINARY_DEFAULT, RUNNABLE, message_type, top_level_text_fields, type_for_fields

#: extensions that name a format, for files written (files read are typed by their content)
_EXTENSIONS = {
    ".textproto": "text",
    ".pbtxt": "text",
    ".txtpb": "text",
    ".txt": "text",
    ".json": "json",
    ".pb": "binary",
    ".bin": "binary",
    ".binpb": "binary",
}
#: control characters never found in text or JSON settings; a binary message's tags and lengths
#: almost always include one
_CONTROL = set(range(0x20)) - {0x09, 0x0A, 0x0D}


class SettingsFormat(Enum):
    BINARY = "binary"
    TEXT = "text"
    JSON = "json"

    @classmethod
    def for_path(cls, path: Path) -> SettingsFormat:
        """The format a file to be written gets from its extension (``_EXTENSIONS``); SettingsError
        for an extension that names none, rather than writing a form the name does not say."""
        fmt = _EXTENSIONS.get(path.suffix.lower())
        if fmt is None:
            known = ", ".join(sorted(_EXTENSIONS))
            raise SettingsError(
                f"{path}: the extension {path.suffix or '(none)'!r} names no settings format; use one of {known}"
            )
        return cls(fmt)

    @classmethod
    def of_content(cls, data: bytes, source: str) -> SettingsFormat:
        """The format of ``data`` by its content: JSON when its first character is ``{``, text when
        it is UTF-8 without control characters, else binary. A TFLite model is refused by name."""
        if data[4:8] == b"TFL3":
            raise SettingsError(
                f"{source} is a TFLite model (its header says TFL3), not acceleration settings: "
                "give it as the model, and settings as a .textproto, .json or binary settings file"
            )
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return cls.BINARY
        if any(ord(c) in _CONTROL for c in text):
            return cls.BINARY
        return cls.JSON if text.lstrip().startswith("{") else cls.TEXT


def _pass_the_type(name: str) -> str:
    other = "TFLiteSettings" if name != "TFLiteSettings" else "ComputeSettings"
    return (
        f"binary settings are read as {name} unless told otherwise: if the file holds another message, "
        f'pass its type (--settings-type {other}, or settings_type="{other}" in Python)'
    )


def content_type(text: str, fmt: SettingsFormat, candidates: Sequence[type[Message]], source: str) -> type[Message]:
    """The message a text or JSON document holds, by its top-level fields; candidates[0] when it sets none."""
    if fmt is SettingsFormat.JSON:
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise SettingsError(f"{source}: not valid JSON: {exc}") from exc
        names = list(document) if isinstance(document, dict) else []
    else:
        names = top_level_text_fields(text)
    return type_for_fields(names, candidates, source) or candidates[0]


def parse_settings(
    data: bytes | str,
    fmt: SettingsFormat,
    kind: Any = None,
    *,
    source: str = "<settings>",
    candidates: Sequence[type[Message]] = RUNNABLE,
) -> Message:
    """Parse ``data`` into a new message; raises SettingsError naming ``source``.

    ``kind`` (a message class or its name) is the type to read; without it text and JSON are typed
    by their content among ``candidates`` and binary is read as ``BINARY_DEFAULT``.
    """
    if fmt is SettingsFormat.BINARY:
        if kind is not None:
            return _parse_binary(data, message_type(kind), source)
        return _parse_untyped_binary(data, candidates, source)
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{source}: not a valid {fmt.value} settings file: {exc}") from exc
    chosen = message_type(kind) if kind is not None else content_type(text, fmt, candidates, source)
    message = chosen()
    try:
        if fmt is SettingsFormat.TEXT:
            text_format.Parse(text, message)
        else:
            json_format.Parse(text, message)
    except (text_format.ParseError, json_format.ParseError) as exc:
        hint = ""
        if kind is not None:
            try:
                detected = content_type(text, fmt, candidates, source)
            except SettingsError:
                detected = chosen
            if detected is not chosen:
                hint = (
                    f" (its fields are those of a {detected.DESCRIPTOR.name}: leave out the type, "
                    "and text and JSON are typed by their content)"
                )
        raise SettingsError(f"{source}: not a valid {fmt.value} {chosen.DESCRIPTOR.name}: {exc}{hint}") from exc
    bad = _bad_string(message, chosen.DESCRIPTOR.name)
    if bad:  # as in binary: these strings are names, paths and tokens
        raise SettingsError(f"{source}: not a valid {fmt.value} {chosen.DESCRIPTOR.name}: string field {bad}")
    return message


def _parse_untyped_binary(data: bytes | str, candidates: Sequence[type[Message]], source: str) -> Message:
    """Binary settings without a type given: ``BINARY_DEFAULT`` when they decode cleanly as it (two
    types can both decode the same bytes cleanly, so the default wins), else the one other candidate
    they decode cleanly as; else the default's error."""
    try:
        return _parse_binary(data, BINARY_DEFAULT, source)
    except SettingsError as default_error:
        clean = []
        for kind in candidates:
            if kind is BINARY_DEFAULT:
                continue
            try:
                clean.append(_parse_binary(data, kind, source))
            except SettingsError:
                continue
        if len(clean) == 1:
            return clean[0]
        raise default_error


def _parse_binary(data: bytes | str, kind: type[Message], source: str) -> Message:
    name = kind.DESCRIPTOR.name
    if isinstance(data, str):
        raise SettingsError(f"{source}: binary settings must be bytes, not text")
    message = kind()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise SettingsError(f"{source}: not a valid binary {name}: {exc}; {_pass_the_type(name)}") from exc
    bad = _bad_string(message, name)
    if bad:
        raise SettingsError(f"{source}: not a clean binary {name}: string field {bad}; {_pass_the_type(name)}")
    unknown = _unknown_fields_at(message, name)
    if unknown:
        raise SettingsError(
            f"{source}: not a clean binary {name}: {unknown} holds fields, wire types or enum values that "
            f"{name} does not define; {_pass_the_type(name)}"
        )
    return message


def _unknown_fields_at(message: Message, path: str) -> str | None:
    """The innermost message under ``message`` that carries unknown fields (parsed but not in the schema)."""
    clean = type(message)()
    clean.CopyFrom(message)
    clean.DiscardUnknownFields()
    if clean.ByteSize() == message.ByteSize():
        return None
    for desc, value in message.ListFields():
        if desc.type != desc.TYPE_MESSAGE:
            continue
        for index, item in enumerate(value if desc.is_repeated else [value]):
            inner = _unknown_fields_at(item, f"{path}.{desc.name}" + (f"[{index}]" if desc.is_repeated else ""))
            if inner:
                return inner
    return path


def _string_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return "is not valid UTF-8"
    if any(ord(c) < 0x20 and c not in "\t\n\r" for c in value):
        return "holds control characters"
    return None


def _bad_string(message: Message, path: str) -> str | None:
    """The path of a string field that is not text, and what is wrong with it.

    Binary protos do not check UTF-8: such a value comes back as ``bytes`` where a ``str`` belongs,
    and the text and JSON forms of the message could not be read back. Control characters are
    what a nested message read as a string looks like; the strings of these messages are names,
    paths and tokens.
    """
    for desc, value in message.ListFields():
        where = f"{path}.{desc.name}"
        values = value if desc.is_repeated else [value]
        problems = [p for p in map(_string_problem, values) if p] if desc.type == desc.TYPE_STRING else []
        if problems:
            return f"{where} {problems[0]}"
        if desc.type == desc.TYPE_MESSAGE:
            for index, item in enumerate(values):
                bad = _bad_string(item, f"{where}[{index}]" if desc.is_repeated else where)
                if bad:
                    return bad
    return None


def format_settings(message: Message, fmt: SettingsFormat) -> bytes | str:
    """``message`` encoded as binary (bytes), text format or JSON (str)."""
    if fmt is SettingsFormat.BINARY:
        return message.SerializeToString()
    if fmt is SettingsFormat.TEXT:
        return text_format.MessageToString(message)
    return json_format.MessageToJson(message, preserving_proto_field_name=True)


def load_settings_file(
    path: str | os.PathLike[str],
    kind: Any = None,
    fmt: SettingsFormat | None = None,
    *,
    candidates: Sequence[type[Message]] = RUNNABLE,
) -> Message:
    """Read a settings file; the format comes from its content unless ``fmt`` is given (a name says
    nothing of what a file holds), the type as ``parse_settings`` finds it."""
    file_path = Path(path)
    try:
        data = file_path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{file_path}: cannot read settings file: {exc.strerror}") from exc
    chosen_fmt = fmt or SettingsFormat.of_content(data, str(file_path))
    return parse_settings(data, chosen_fmt, kind, source=str(file_path), candidates=candidates)
