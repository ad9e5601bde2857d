"""TFLite acceleration settings (schemas/configuration.proto): messages and their encodings."""

from .._generated import configuration_pb2
from .codec import SettingsFormat, format_settings, load_settings_file, parse_settings
from .message_types import ANY_SETTINGS, BINARY_DEFAULT, RUNNABLE, message_type

__all__ = [
    "ANY_SETTINGS",
    "BINARY_DEFAULT",
    "RUNNABLE",
    "SettingsFormat",
    "configuration_pb2",
    "format_settings",
    "load_settings_file",
    "message_type",
    "parse_settings",
]
