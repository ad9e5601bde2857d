"""TFLite acceleration settings (schemas/configuration.proto): messages and their encodings."""

from .._generated import configuration_pb2
from .codec import SettingsFormat, format_settings, load_settings_file, parse_settings

__all__ = ["SettingsFormat", "configuration_pb2", "format_settings", "load_settings_file", "parse_settings"]
