"""Acceleration settings: the proto matches the seed document, and messages round-trip in every encoding."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import Descriptor, EnumDescriptor, FieldDescriptor
from google.protobuf.message import Message

from delegate import SettingsError
from delegate.settings import (
    SettingsFormat,
    configuration_pb2,
    format_settings,
    load_settings_file,
    parse_settings,
)

from .helpers import shared_path

FILE = configuration_pb2.DESCRIPTOR
PACKAGE = "tflite.proto."
_SCALAR_NAMES = {
    FieldDescriptor.TYPE_INT32: "int32",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_FLOAT: "float",
}


def _all_messages() -> list[Descriptor]:
    out = []
    for m in FILE.message_types_by_name.values():
        out.append(m)
        out.extend(m.nested_types)
    return out


def _all_enums() -> list[EnumDescriptor]:
    out = list(FILE.enum_types_by_name.values())
    for m in FILE.message_types_by_name.values():
        out.extend(m.enum_types)
    return out


def _field_type(f: FieldDescriptor) -> str:
    if f.message_type is not None:
        return f.message_type.full_name.removeprefix(PACKAGE)
    if f.enum_type is not None:
        return f.enum_type.full_name.removeprefix(PACKAGE)
    return _SCALAR_NAMES[f.type]


def _label(f: FieldDescriptor) -> str:
    return "repeated" if f.is_repeated else "optional"


def _seed_blocks() -> list[list[str]]:
    """The seed doc split into blocks (one per message or enum), each a list of its bullet lines."""
    blocks: list[list[str]] = [[]]
    for line in shared_path("seeds", "003_dbfa55aadf563e7d.txt").read_text().splitlines():
        if line.startswith("• "):
            blocks[-1].append(line[2:].strip())
        elif line and not line.startswith(" ") and blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


_FIELD = re.compile(r"^(optional|repeated|required) ([\w.]+) (\w+) = (\d+)$")
_VALUE = re.compile(r"^(\w+) = (\d+)$")


def test_every_message_and_enum_of_the_seed_doc_is_in_the_proto():
    # The doc drops message names, so messages are matched by their exact field sets (as multisets:
    # XNNPackSettings and CPUSettings have the same fields), enums by their value sets.
    ours_messages = Counter(
        frozenset((_label(f), _field_type(f), f.name, f.number) for f in m.fields) for m in _all_messages()
    )
    ours_enums = Counter(frozenset((v.name, v.number) for v in e.values) for e in _all_enums())
    doc_messages: Counter = Counter()
    doc_enums: Counter = Counter()
    for block in _seed_blocks():
        fields = [_FIELD.match(b) for b in block]
        if all(fields):
            doc_messages[frozenset((m[1], m[2], m[3], int(m[4])) for m in fields)] += 1
        else:
            values = [_VALUE.match(b) for b in block]
            assert all(values), block
            doc_enums[frozenset((m[1], int(m[2])) for m in values)] += 1
    assert sum(doc_messages.values()) == 23 and sum(doc_enums.values()) == 12
    assert doc_messages == ours_messages
    assert doc_enums == ours_enums


def test_message_names_and_defaults_follow_upstream():
    names = {m.name for m in FILE.message_types_by_name.values()}
    expected = """
        ComputeSettings NNAPISettings GPUSettings HexagonSettings XNNPackSettings EdgeTpuDeviceSpec
        EdgeTpuInactivePowerConfig EdgeTpuSettings CoralSettings CPUSettings TFLiteSettings
        FallbackSettings BenchmarkMetric BenchmarkResult ErrorCode BenchmarkError BenchmarkEvent
        BestAccelerationDecision BenchmarkInitializationFailure MiniBenchmarkEvent ModelFile
        BenchmarkStoragePaths MinibenchmarkSettings
    """.split()
    assert names == set(expected)
    file_proto = descriptor_pb2.FileDescriptorProto.FromString(FILE.serialized_pb)
    assert file_proto.package == "tflite.proto" and file_proto.syntax in ("", "proto2")
    gpu = configuration_pb2.GPUSettings()
    assert gpu.enable_quantized_inference is True
    assert gpu.inference_priority1 == gpu.inference_priority2 == gpu.inference_priority3 == 0
    assert configuration_pb2.CPUSettings().num_threads == -1
    assert configuration_pb2.CoralSettings().performance == configuration_pb2.CoralSettings.MAXIMUM
    assert configuration_pb2.EdgeTpuSettings().inference_priority == -1


def _fill(message: Message, serial: list[int]) -> Message:
    """Set every field of ``message`` (recursively) to a non-default value."""
    for f in message.DESCRIPTOR.fields:
        serial[0] += 1
        n = serial[0]

        def value(f: FieldDescriptor = f, n: int = n) -> object:
            if f.enum_type is not None:
                values = f.enum_type.values
                return values[1 + n % (len(values) - 1)].number
            return {
                "int32": -n,
                "int64": -(n << 33),
                "bool": not f.default_value,
                "string": f"value-{n}-ü",
                "float": n + 0.5,
            }[_SCALAR_NAMES[f.type]]

        if f.message_type is not None:
            if f.is_repeated:
                for _ in range(2):
                    _fill(getattr(message, f.name).add(), serial)
            else:
                _fill(getattr(message, f.name), serial)
        elif f.is_repeated:
            getattr(message, f.name).extend([value(), value()])
        else:
            setattr(message, f.name, value())
    return message


def _assert_fully_populated(message: Message) -> None:
    for f in message.DESCRIPTOR.fields:
        if f.is_repeated:
            items = getattr(message, f.name)
            assert len(items) == 2, f.full_name
            if f.message_type is not None:
                for item in items:
                    _assert_fully_populated(item)
        else:
            assert message.HasField(f.name), f.full_name
            value = getattr(message, f.name)
            if f.message_type is not None:
                _assert_fully_populated(value)
            else:
                assert value != f.default_value, f.full_name


MESSAGES = [
    configuration_pb2.TFLiteSettings,
    configuration_pb2.ComputeSettings,
    configuration_pb2.MinibenchmarkSettings,
]


@pytest.mark.parametrize("message_type", MESSAGES, ids=lambda t: t.DESCRIPTOR.name)
@pytest.mark.parametrize("fmt", list(SettingsFormat), ids=lambda f: f.value)
def test_fully_populated_settings_round_trip(message_type, fmt):
    original = _fill(message_type(), [0])
    _assert_fully_populated(original)
    encoded = format_settings(original, fmt)
    back = parse_settings(encoded, fmt, message_type)
    assert back == original
    assert back.SerializeToString(deterministic=True) == original.SerializeToString(deterministic=True)


SUFFIXES = [
    (".pb", SettingsFormat.BINARY),
    (".textproto", SettingsFormat.TEXT),
    (".pbtxt", SettingsFormat.TEXT),
    (".json", SettingsFormat.JSON),
]


@pytest.mark.parametrize("suffix,fmt", SUFFIXES)
def test_settings_files_by_extension(tmp_path, suffix, fmt):
    original = _fill(configuration_pb2.ComputeSettings(), [0])
    encoded = format_settings(original, fmt)
    path = tmp_path / f"settings{suffix}"
    path.write_bytes(encoded if isinstance(encoded, bytes) else encoded.encode())
    assert load_settings_file(path) == original
    tflite = _fill(configuration_pb2.TFLiteSettings(), [0])
    encoded = format_settings(tflite, fmt)
    path.write_bytes(encoded if isinstance(encoded, bytes) else encoded.encode())
    assert load_settings_file(path, configuration_pb2.TFLiteSettings) == tflite


@pytest.mark.parametrize("fmt", list(SettingsFormat), ids=lambda f: f.value)
@pytest.mark.parametrize("suffix", [".yaml", ".textproto", ".json", ".pb", ""])
def test_settings_files_are_read_by_their_content_whatever_their_name(tmp_path, fmt, suffix):
    original = _fill(configuration_pb2.ComputeSettings(), [0])
    encoded = format_settings(original, fmt)
    path = tmp_path / f"settings{suffix}"
    path.write_bytes(encoded if isinstance(encoded, bytes) else encoded.encode())
    assert SettingsFormat.of_content(path.read_bytes(), str(path)) is fmt
    assert load_settings_file(path) == original


def test_a_model_given_as_settings_is_named_a_model(tmp_path):
    model = tmp_path / "model.tflite"
    model.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    with pytest.raises(SettingsError, match="is a TFLite model"):
        load_settings_file(model)


@pytest.mark.parametrize("suffix,fmt", [*SUFFIXES, (".bin", SettingsFormat.BINARY), (".txt", SettingsFormat.TEXT)])
def test_files_written_take_their_format_from_the_extension(tmp_path, suffix, fmt):
    assert SettingsFormat.for_path(tmp_path / f"out{suffix}") is fmt


@pytest.mark.parametrize("name", ["out.yaml", "out", "out.tflite"])
def test_an_output_name_that_names_no_format_is_refused(tmp_path, name):
    with pytest.raises(SettingsError, match="names no settings format"):
        SettingsFormat.for_path(tmp_path / name)


def test_json_uses_proto_field_names():
    text = format_settings(configuration_pb2.TFLiteSettings(max_delegated_partitions=2), SettingsFormat.JSON)
    assert '"max_delegated_partitions": 2' in text


@pytest.mark.parametrize(
    "suffix,content,says",
    [
        (".textproto", b"tflite_settings { delegate: NOT_A_DELEGATE }", "not a valid text ComputeSettings"),
        (".json", b"{not json", "not valid JSON"),  # no fields to type it by
        (".pb", b"\xff\xff", "not a valid binary ComputeSettings"),
    ],
)
def test_unparseable_settings_name_the_file(tmp_path, suffix, content, says):
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(content)
    with pytest.raises(SettingsError) as info:
        load_settings_file(path)
    assert str(path) in str(info.value) and says in str(info.value)


def test_missing_settings_file(tmp_path):
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings_file(tmp_path / "absent.textproto")
