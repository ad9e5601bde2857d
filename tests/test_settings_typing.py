"""Which message a settings file holds: text and JSON by their fields, binary by the default unless
only another type decodes it cleanly; the format by the content, never the name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import delegate
import delegate.api
from delegate import SettingsError
from delegate.plugin.upstream_options import device_kind
from delegate.settings import (
    BINARY_DEFAULT,
    SettingsFormat,
    format_settings,
    load_settings_file,
    message_type,
    parse_settings,
)
from delegate.settings import configuration_pb2 as pb
from delegate.settings.mapping import load_settings, precision_for, priorities
from delegate.settings.message_types import top_level_text_fields

from .helpers import shared_path

GPU_LOSS = pb.TFLiteSettings(delegate=pb.GPU, gpu_settings=pb.GPUSettings(is_precision_loss_allowed=True))
COMPUTE = pb.ComputeSettings(preference=pb.LOW_LATENCY, tflite_settings=GPU_LOSS)


@pytest.mark.parametrize("message", [GPU_LOSS, COMPUTE, pb.MinibenchmarkSettings(settings_to_test=[GPU_LOSS])])
@pytest.mark.parametrize("fmt", [SettingsFormat.TEXT, SettingsFormat.JSON], ids=lambda f: f.value)
def test_text_and_json_are_typed_by_their_fields(message, fmt):
    candidates = (pb.ComputeSettings, pb.TFLiteSettings, pb.MinibenchmarkSettings)
    back = parse_settings(format_settings(message, fmt), fmt, candidates=candidates)
    assert type(back) is type(message) and back == message


def test_top_level_fields_skip_nesting_comments_and_strings():
    text = """
        # preference: FORCE_CPU  (a comment)
        model_namespace_for_statistics: "tflite_settings { delegate: GPU }"
        tflite_settings < delegate: GPU gpu_settings { inference_priority1: GPU_PRIORITY_MIN_LATENCY } >
        model_identifier_for_statistics: 'x'
    """
    assert top_level_text_fields(text) == [
        "model_namespace_for_statistics",
        "tflite_settings",
        "model_identifier_for_statistics",
    ]


@pytest.mark.parametrize(
    "text,says",
    [
        ("preference: LOW_LATENCY delegate: GPU", "ambiguous settings"),
        ("delegat: GPU", "belong to none of the settings messages"),
        ("tflite_settings { delegat: GPU }", 'has no field named "delegat"'),
    ],
)
def test_mixed_or_unknown_fields_say_what_is_wrong(text, says):
    with pytest.raises(SettingsError, match=says):
        parse_settings(text, SettingsFormat.TEXT)


def test_empty_text_is_the_default_message():
    assert type(parse_settings("# nothing set\n", SettingsFormat.TEXT)) is pb.ComputeSettings


def test_an_explicit_type_for_text_of_the_other_type_says_so():
    with pytest.raises(SettingsError, match="its fields are those of a TFLiteSettings"):
        parse_settings("delegate: GPU", SettingsFormat.TEXT, "ComputeSettings")


def test_types_by_name_or_class():
    assert message_type("TFLiteSettings") is pb.TFLiteSettings
    assert message_type("tflite.proto.ComputeSettings") is pb.ComputeSettings
    assert message_type(pb.MinibenchmarkSettings) is pb.MinibenchmarkSettings
    with pytest.raises(SettingsError, match="unknown settings type 'TfliteSettings'"):
        message_type("TfliteSettings")
    with pytest.raises(SettingsError, match="settings_type must be"):
        message_type(3)


def test_binary_default_is_compute_settings_and_names_work():
    assert BINARY_DEFAULT is pb.ComputeSettings
    assert load_settings(COMPUTE.SerializeToString()) == COMPUTE
    assert load_settings(GPU_LOSS.SerializeToString(), "TFLiteSettings") == GPU_LOSS
    assert load_settings(GPU_LOSS.SerializeToString(), pb.TFLiteSettings) == GPU_LOSS


@pytest.mark.parametrize(
    "message,read_as",
    [
        (COMPUTE, "TFLiteSettings"),
        (pb.ComputeSettings(tflite_settings=GPU_LOSS), "TFLiteSettings"),
        (pb.MinibenchmarkSettings(settings_to_test=[GPU_LOSS]), None),  # decodes cleanly as neither
        (GPU_LOSS, "ComputeSettings"),  # a type given is the type read
    ],
)
def test_binary_of_another_type_is_refused_with_the_type_to_pass(message, read_as):
    data = message.SerializeToString()
    with pytest.raises(SettingsError, match="pass its type") as info:
        parse_settings(data, SettingsFormat.BINARY, read_as)
    assert "--settings-type" in str(info.value) and "settings_type=" in str(info.value)
    # read as what it is, it decodes to the same message
    assert parse_settings(data, SettingsFormat.BINARY, type(message)) == message


@pytest.mark.parametrize("message", [GPU_LOSS, pb.TFLiteSettings(delegate=pb.XNNPACK)])
def test_untyped_binary_that_only_another_type_decodes_cleanly_is_that_type(message):
    back = parse_settings(message.SerializeToString(), SettingsFormat.BINARY)
    assert type(back) is pb.TFLiteSettings and back == message


def test_untyped_binary_that_both_types_decode_is_the_default():
    # TFLiteSettings{delegate: GPU} is the same two bytes as ComputeSettings{preference: LOW_POWER}
    data = pb.TFLiteSettings(delegate=pb.GPU).SerializeToString()
    assert parse_settings(data, SettingsFormat.BINARY) == pb.ComputeSettings(preference=pb.LOW_POWER)


def test_unknown_field_numbers_are_refused():
    data = COMPUTE.SerializeToString() + bytes([0xF8, 0x06, 0x01])  # field 111, varint 1
    with pytest.raises(SettingsError, match="ComputeSettings holds fields"):
        parse_settings(data, SettingsFormat.BINARY)
    nested = pb.ComputeSettings(tflite_settings=pb.TFLiteSettings(max_delegated_partitions=1)).SerializeToString()
    inner = nested[2:] + bytes([0xF8, 0x06, 0x01])
    with pytest.raises(SettingsError, match=r"ComputeSettings\.tflite_settings holds fields"):
        parse_settings(bytes([0x12, len(inner)]) + inner, SettingsFormat.BINARY)


def _run(*args: str):
    return subprocess.run([sys.executable, "-m", "delegate", *args], capture_output=True, text=True)


def _fastest(settings: pb.TFLiteSettings) -> str:
    """The precision ``settings`` run with on the default device (docs/settings.md's table)."""
    return precision_for(priorities(settings.gpu_settings), device_kind(""))


def test_cli_types_text_and_binary_by_content(tmp_path):
    text = tmp_path / "gpu.textproto"
    text.write_text("delegate: GPU gpu_settings { is_precision_loss_allowed: true }")
    valid = _run("settings", "validate", str(text))
    assert valid.returncode == 0, valid.stderr
    assert "valid TFLiteSettings" in valid.stdout and f"precision={_fastest(GPU_LOSS)}," in valid.stdout
    binary = tmp_path / "gpu.bin"
    converted = _run("settings", "convert", str(text), str(binary))
    assert converted.returncode == 0 and "binary TFLiteSettings" in converted.stdout
    assert pb.TFLiteSettings.FromString(binary.read_bytes()) == GPU_LOSS
    shown = _run("settings", "show", str(binary), "--format", "json")  # only TFLiteSettings decodes it cleanly
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["gpu_settings"]["is_precision_loss_allowed"] is True
    as_compute = _run("settings", "show", str(binary), "--settings-type", "ComputeSettings")
    assert as_compute.returncode == 2 and "--settings-type TFLiteSettings" in as_compute.stderr


def test_python_api_takes_the_type_by_name(tmp_path):
    path = tmp_path / "gpu.pb"
    path.write_bytes(GPU_LOSS.SerializeToString())
    effective = delegate.api.effective_settings(str(path), settings_type="TFLiteSettings")
    assert effective.engine == "gpu" and effective.options["precision"] == _fastest(GPU_LOSS)
    with pytest.raises(SettingsError, match='settings_type="TFLiteSettings"'):
        delegate.api.effective_settings(str(path), settings_type="ComputeSettings")
    assert load_settings_file(path, "TFLiteSettings") == GPU_LOSS
    assert load_settings_file(path) == GPU_LOSS


@pytest.mark.opencl
def test_interpreter_with_a_binary_tflite_settings_by_name(tmp_path):
    path = tmp_path / "gpu.pb"
    path.write_bytes(GPU_LOSS.SerializeToString())
    model = str(shared_path("models", "small_cnn.tflite"))
    interpreter = delegate.Interpreter(model, settings=path, settings_type="TFLiteSettings", program_cache="none")
    assert interpreter.effective.options["precision"] == _fastest(GPU_LOSS)
    assert interpreter.opencl.options.precision.name == _fastest(GPU_LOSS)


def test_cli_reads_settings_by_content_and_writes_by_a_named_format(tmp_path):
    text = tmp_path / "f32.yaml"  # text format under a name that says otherwise
    text.write_text("delegate: GPU gpu_settings { inference_priority1: GPU_PRIORITY_MAX_PRECISION }")
    valid = _run("settings", "validate", str(text))
    assert valid.returncode == 0 and "valid TFLiteSettings" in valid.stdout, valid.stderr
    unnamed = _run("settings", "convert", str(text), str(tmp_path / "out.yaml"))
    assert unnamed.returncode == 2 and "names no settings format" in unnamed.stderr
    assert not (tmp_path / "out.yaml").exists()
    model = _run("settings", "validate", str(shared_path("models", "small_cnn.tflite")))
    assert model.returncode == 2 and "is a TFLite model" in model.stderr
