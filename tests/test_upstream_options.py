"""Upstream's GPU delegate option names, with upstream's meaning."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import delegate
from delegate.plugin import DelegateOptions, OptionsError
from delegate.plugin.upstream_options import FLAG_BITS, device_kind, parse_flags, translate
from delegate.settings import configuration_pb2 as pb
from delegate.settings.mapping import resolve

from .helpers import shared_path

P = pb.GPUInferencePriority


def _settings_precision(**gpu: object) -> str:
    """The precision settings with these GPUSettings give on the default device."""
    settings = pb.TFLiteSettings(delegate=pb.GPU, gpu_settings=pb.GPUSettings(**gpu))
    return resolve(settings, device_kind("")).options["precision"]


def _fastest_half() -> str:
    """What an allowed precision loss runs on the default device: F32 on a CPU device (float math
    either way), F16 on a GPU with cl_khr_fp16, else F32_F16."""
    device = device_kind("")
    assert device is not None
    return "F32" if not device.is_gpu else "F16" if device.fp16 else "F32_F16"


@pytest.mark.parametrize("value", ["1", "true", "0", "false"])
def test_precision_loss_maps_as_gpu_settings_do(value):
    loss = value in ("1", "true")
    assert DelegateOptions.parse({"is_precision_loss_allowed": value}).precision.name == _settings_precision(
        is_precision_loss_allowed=loss
    )
    assert translate({"gpu_precision_loss_allowed": value})["precision"] == _settings_precision(
        is_precision_loss_allowed=loss
    )


PRIORITY_SPELLINGS = [
    ("MIN_LATENCY", P.GPU_PRIORITY_MIN_LATENCY),
    ("2", P.GPU_PRIORITY_MIN_LATENCY),
    ("TFLITE_GPU_INFERENCE_PRIORITY_MIN_MEMORY_USAGE", P.GPU_PRIORITY_MIN_MEMORY_USAGE),
    ("gpu_priority_max_precision", P.GPU_PRIORITY_MAX_PRECISION),
]


@pytest.mark.parametrize("text,number", PRIORITY_SPELLINGS)
def test_priorities_by_name_or_number_map_as_gpu_settings_do(text, number):
    second = P.GPU_PRIORITY_MAX_PRECISION if number != P.GPU_PRIORITY_MAX_PRECISION else P.GPU_PRIORITY_MIN_LATENCY
    got = translate({"inference_priority1": text, "inference_priority2": str(int(second))})
    assert got["precision"] == _settings_precision(inference_priority1=number, inference_priority2=second)


def test_unset_priorities_take_upstreams_defaults():
    # TfLiteGpuDelegateOptionsV2Default: MAX_PRECISION, AUTO, AUTO; only the second given
    got = translate({"inference_priority2": "MIN_LATENCY"})
    want = _settings_precision(inference_priority1=P.GPU_PRIORITY_MAX_PRECISION, inference_priority2=2)
    assert got["precision"] == want


@pytest.mark.parametrize(
    "options,says",
    [
        ({"precision": "F32", "is_precision_loss_allowed": "1"}, "precision=F32 conflicts with is_precision_loss"),
        ({"is_precision_loss_allowed": "1", "inference_priority1": "MIN_LATENCY"}, "both given"),
        ({"is_precision_loss_allowed": "1", "gpu_precision_loss_allowed": "0"}, "contradict each other"),
        ({"inference_priority1": "AUTO", "inference_priority2": "MIN_LATENCY"}, "invalid GPU inference priorities"),
        ({"inference_priority1": "FASTEST"}, "inference_priority1 must be one of"),
        ({"enable_quantized_inference": "false", "experimental_flags": "ENABLE_QUANT"}, "conflicts with"),
        ({"tuning": "none", "inference_preference": "SUSTAINED_SPEED"}, "tuning=none conflicts"),
        ({"experimental_flags": "GL_ONLY"}, "OpenGL backend"),
        ({"gpu_backend": "gl"}, "OpenGL backend"),
        ({"gpu_backend": "vulkan"}, "gpu_backend must be cl or gl"),
        ({"experimental_flags": "ENABLE_SERIALIZATION"}, "needs serialization_dir"),
        ({"experimental_flags": "32"}, "bits this delegate does not know"),
        ({"experimental_flags": "FAST"}, "unknown flag"),
        ({"delegate_serialize_token": "a", "model_token": "b"}, "model_token=b conflicts"),
    ],
)
def test_invalid_or_contradicting_options_say_why(options, says):
    with pytest.raises(OptionsError, match=says):
        DelegateOptions.parse(options)


def test_consistent_options_given_twice_are_fine():
    opts = DelegateOptions.parse({"precision": "f16", "is_precision_loss_allowed": "true", "storage_type": "BUFFER"})
    assert opts.precision.name == "F16" and opts.storage_type.name == "BUFFER"
    opts = DelegateOptions.parse({"enable_quantized_inference": "1", "experimental_flags": "1"})
    assert opts.enable_quantized_inference


def test_experimental_flags():
    assert parse_flags("ENABLE_QUANT|CL_ONLY") == parse_flags("3") == parse_flags("0x3") == 3
    assert parse_flags("TFLITE_GPU_EXPERIMENTAL_FLAGS_ENABLE_QUANT, CL_ONLY") == 3
    assert not DelegateOptions.parse({"experimental_flags": "0"}).enable_quantized_inference
    assert DelegateOptions.parse({"experimental_flags": str(FLAG_BITS["ENABLE_QUANT"])}).enable_quantized_inference


def test_serialization_names(tmp_path):
    opts = DelegateOptions.parse(
        {
            "delegate_serialize_dir": str(tmp_path / "cache"),
            "delegate_serialize_token": "tok",
            "experimental_flags": "ENABLE_QUANT|ENABLE_SERIALIZATION",
        }
    )
    assert opts.serialization_dir == str(tmp_path / "cache") and opts.model_token == "tok"


@pytest.mark.parametrize("text,tuning", [("FAST_SINGLE_ANSWER", "none"), ("1", "exhaustive"), ("BALANCED", "fast")])
def test_inference_preference(text, tuning):
    assert DelegateOptions.parse({"inference_preference": text}).tuning.value == tuning
    sustained = DelegateOptions.parse({"gpu_inference_for_sustained_speed": "true"}).tuning.value
    assert sustained == DelegateOptions.parse({"inference_preference": "SUSTAINED_SPEED"}).tuning.value


def test_project_names_pass_through():
    pairs = {"precision": "F32_F16", "fuse": "false", "max_delegated_partitions": "2"}
    assert translate(pairs) == pairs


def _run(*args: str):
    return subprocess.run([sys.executable, "-m", "delegate", *args], capture_output=True, text=True)


@pytest.mark.opencl
def test_cli_run_with_precision_loss_allowed_runs_the_fastest_allowed_precision():
    model = str(shared_path("models", "small_cnn.tflite"))
    off = ("--option", "cpu_when_faster=false")  # small_cnn is delegated whatever its size
    half = _run(
        "run", model, "--option", "is_precision_loss_allowed=1", "--option", "program_cache=none", "--json", *off
    )
    assert half.returncode == 0, half.stderr
    report = json.loads(half.stdout)
    assert report["precision"] == _fastest_half() and report["delegated_nodes"] > 0
    full = _run(
        "run", model, "--option", "is_precision_loss_allowed=0", "--option", "program_cache=none", "--json", *off
    )
    assert json.loads(full.stdout)["precision"] == "F32"
    clash = _run("run", model, "--option", "is_precision_loss_allowed=1", "--option", "precision=F32")
    assert clash.returncode == 2 and "conflicts with is_precision_loss_allowed" in clash.stderr


@pytest.mark.opencl
def test_load_delegate_and_interpreter_take_upstream_names():
    model = str(shared_path("models", "small_cnn.tflite"))
    interpreter = delegate.Interpreter(
        model, inference_priority1="MIN_LATENCY", experimental_flags="ENABLE_QUANT", program_cache="none"
    )
    assert interpreter.opencl.options.precision.name == _fastest_half()
    # an upstream option replaces the precision the settings chose
    settings = pb.TFLiteSettings(delegate=pb.GPU, gpu_settings=pb.GPUSettings(inference_priority1=1))
    over = delegate.Interpreter(model, settings=settings, is_precision_loss_allowed=1, program_cache="none")
    assert over.opencl.options.precision.name == _fastest_half()
    assert delegate.load_delegate(is_precision_loss_allowed="0", program_cache="none") is not None


@pytest.mark.parametrize("text", ["UNKNOWN", "single_texture_2d"])
def test_storage_types_that_cannot_hold_every_tensor_are_refused_and_never_offered(text):
    with pytest.raises(OptionsError, match="cannot hold every tensor") as info:
        DelegateOptions.parse({"storage_type": text})
    offered = str(info.value).split("use one of ", 1)[1]
    assert "BUFFER" in offered and "UNKNOWN" not in offered and "SINGLE_TEXTURE_2D" not in offered
    with pytest.raises(OptionsError) as typo:
        DelegateOptions.parse({"storage_type": "BUFER"})
    assert "UNKNOWN" not in str(typo.value) and "SINGLE_TEXTURE_2D" not in str(typo.value)


@pytest.mark.opencl
def test_cli_takes_a_device_index(tmp_path):
    model = str(shared_path("models", "small_cnn.tflite"))
    result = _run("run", model, "--option", "device=0", "--option", "program_cache=none", "--runs", "1", "--json")
    assert result.returncode == 0, result.stderr
