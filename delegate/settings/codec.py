"""Read and write settings messages as binary protobuf, text format or JSON.

Binary protos do not say which message they hold: bytes are parsed as the
``message_type`` the caller gives, ``ComputeSettings`` by default (the
top-level message), for text and JSON too.
"""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path

from google.protobuf import json_format, text_format
from google.protobuf.message import DecodeError, Message

from .._generated import configuration_pb2
from ..errors import SettingsError


class SettingsFormat(Enum):
    BINARY = "binary"
    TEXT = "text"
    JSON = "json"

    @classmethod
    def for_path(cls, path: Path) -> SettingsFormat:
        """By extension: .textproto/.pbtxt/.txtpb/.txt are text, .json is JSON, anything else binary."""
        suffix = path.suffix.lower()
        if suffix in {".textproto", ".pbtxt", ".txtpb", ".txt"}:
            return cls.TEXT
        if suffix == ".json":
            return cls.JSON
        return cls.BINARY


def parse_settings(
    data: bytes | str,
    fmt: SettingsFormat,
    message_type: type[Message] = configuration_pb2.ComputeSettings,
    *,
    source: str = "<settings>",
) -> Message:
    """Parse ``data`` into a new ``message_type``; raises SettingsError naming ``source``."""
    message = message_type()
    name = message_type.DESCRIPTOR.name
    try:
        if fmt is SettingsFormat.BINARY:
            if isinstance(data, str):
                raise SettingsError(f"{source}: binary settings must be bytes, not text")
            message.ParseFromString(data)
            bad = _non_utf8_string(message, name)
            if bad:
                raise SettingsError(f"{source}: not a valid binary {name}: string field {bad} is not valid UTF-8")
        else:
            text = data.decode("utf-8") if isinstance(data, bytes) else data
            if fmt is SettingsFormat.TEXT:
                text_format.Parse(text, message)
            else:
                json_format.Parse(text, message)
    except (DecodeError, text_format.ParseError, json_format.ParseError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{source}: not a valid {fmt.value} {name}: {exc}") from exc
    return message


def _non_utf8_string(message: Message, path: str) -> str | None:
    """The path of a string field holding bytes that are not UTF-8 (binary protos do not check it).

    Such a value comes back as ``bytes`` where a ``str`` belongs, and the text and JSON forms of
    the message could not be read back.
    """
    for desc, value in message.ListFields():
        where = f"{path}.{desc.name}"
        values = value if desc.is_repeated else [value]
        if desc.type == desc.TYPE_STRING and any(isinstance(v, bytes) for v in values):
            return where
        if desc.type == desc.TYPE_MESSAGE:
            for index, item in enumerate(values):
                bad = _non_utf8_string(item, f"{where}[{index}]" if desc.is_repeated else where)
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
    message_type: type[Message] = configuration_pb2.ComputeSettings,
    fmt: SettingsFormat | None = None,
) -> Message:
    """Read a settings file; the format comes from the extension unless ``fmt`` is given."""
    file_path = Path(path)
    try:
        data = file_path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"{file_path}: cannot read settings file: {exc.strerror}") from exc
    return parse_settings(data, fmt or SettingsFormat.for_path(file_path), message_type, source=str(file_path))
