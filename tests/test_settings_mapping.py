"""Acceleration settings mapped onto the delegate, with upstream's rules."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

import delegate
from delegate import SettingsError
from delegate.settings import configuration_pb2 as pb
from delegate.settings.mapping import DeviceKind, load_settings, priorities, resolve

from .helpers import reject_kernels_of, shared_path

A, MAXP, LAT, MEM = (
    pb.GPU_PRIORITY_AUTO,
    pb.GPU_PRIORITY_MAX_PRECISION,
    pb.GPU_PRIORITY_MIN_LATENCY,
    pb.GPU_PRIORITY_MIN_MEMORY_USAGE,
)


def gpu(p1=A, p2=A, p3=A, loss=False, **kw) -> pb.TFLiteSettings:
    return pb.TFLiteSettings(
        delegate=pb.GPU,
        gpu_settings=pb.GPUSettings(
            inference_priority1=p1, inference_priority2=p2, inference_priority3=p3, is_precision_loss_allowed=loss, **kw
        ),
    )


NVIDIA = DeviceKind("NVIDIA Corporation", "NVIDIA H200", is_gpu=True, fp16=True, images=True)
ADRENO = DeviceKind("Qualcomm", "QUALCOMM Adreno(TM) 740", is_gpu=True, fp16=True, images=True)
INTEL = DeviceKind("Intel(R) Corporation", "Intel(R) UHD Graphics", is_gpu=True, fp16=True, images=True)
POCL = DeviceKind("AuthenticAMD", "pthread-AMD EPYC", is_gpu=False, fp16=False, images=True)
#: a GPU without cl_khr_fp16, and one without images
NO_HALF = DeviceKind("Advanced Micro Devices, Inc.", "gfx1030", is_gpu=True, fp16=False, images=True)
NO_IMAGES = DeviceKind("NVIDIA Corporation", "NVIDIA H200", is_gpu=True, fp16=True, images=False)

# (settings, device) -> (precision, storage); every row is one of upstream's rules, narrowed to
# what is fastest on the device (docs/settings.md).
TABLE = [
    (gpu(), POCL, "F32", "BUFFER"),  # default: MAX_PRECISION first
    # precision loss allowed: MIN_LATENCY first; a CPU device computes in float32 whatever the
    # storage, so half storage would only add conversions: F32 and BUFFER
    (gpu(loss=True), POCL, "F32", "BUFFER"),
    (gpu(LAT, MEM, MAXP), POCL, "F32", "BUFFER"),
    (gpu(LAT, MAXP), POCL, "F32", "BUFFER"),
    (gpu(loss=True), None, "F16", "BUFFER"),  # no device known: upstream's names
    (gpu(loss=True), NO_HALF, "F32_F16", "IMAGE_BUFFER"),  # no cl_khr_fp16: half storage, float math
    (gpu(loss=True), NO_IMAGES, "F16", "BUFFER"),  # no images: buffers
    (gpu(loss=True), NVIDIA, "F16", "IMAGE_BUFFER"),
    (gpu(loss=True), ADRENO, "F16", "TEXTURE_2D"),
    (gpu(loss=True), INTEL, "F16", "BUFFER"),
    (gpu(MAXP), NVIDIA, "F32", "BUFFER"),  # MIN_LATENCY absent: least memory
    (gpu(MAXP, LAT), NVIDIA, "F32", "IMAGE_BUFFER"),  # latency outranks memory (absent)
    (gpu(LAT, MAXP), NVIDIA, "F32_F16", "IMAGE_BUFFER"),  # MAX_PRECISION second
    (gpu(LAT, MEM, MAXP), NVIDIA, "F16", "IMAGE_BUFFER"),  # MAX_PRECISION third
    (gpu(MEM, LAT), NVIDIA, "F16", "BUFFER"),  # memory outranks latency
    (gpu(MEM, MAXP, LAT), ADRENO, "F32_F16", "BUFFER"),
    (gpu(LAT, loss=False), ADRENO, "F16", "TEXTURE_2D"),  # explicit priorities: the flag is ignored
    (gpu(MAXP, loss=True), ADRENO, "F32", "BUFFER"),
]


@pytest.mark.parametrize("settings,device,precision,storage", TABLE)
def test_priorities_map_to_precision_and_storage(settings, device, precision, storage):
    effective = resolve(settings, device)
    assert effective.engine == "gpu"
    assert effective.options["precision"] == precision
    assert effective.options["storage_type"] == storage


@pytest.mark.parametrize("given", [(A, LAT, A), (LAT, A, MAXP), (A, A, MEM), (LAT, LAT, A), (MAXP, MEM, MAXP)])
def test_invalid_priorities_are_rejected(given):
    with pytest.raises(SettingsError, match="invalid GPU inference priorities"):
        priorities(gpu(*given).gpu_settings)


@pytest.mark.parametrize("given", [(LAT, A, A), (LAT, MAXP, A), (MAXP, LAT, MEM)])
def test_the_seed_docs_valid_examples_are_accepted(given):
    assert priorities(gpu(*given).gpu_settings) == given


def test_low_latency_preference_turns_on_fast_tuning():
    low = resolve(pb.ComputeSettings(preference=pb.LOW_LATENCY, tflite_settings=gpu()))
    assert low.options["tuning"] == "fast"
    for other in (pb.ANY, pb.LOW_POWER):
        assert "tuning" not in resolve(pb.ComputeSettings(preference=other, tflite_settings=gpu())).options
    assert "tuning" not in resolve(gpu()).options


def test_delegates_backends_and_preferences():
    assert resolve(pb.ComputeSettings(preference=pb.FORCE_CPU, tflite_settings=gpu())).engine == "builtin"
    xnn = resolve(pb.TFLiteSettings(delegate=pb.XNNPACK, xnnpack_settings=pb.XNNPackSettings(num_threads=3)))
    assert (xnn.engine, xnn.num_threads) == ("xnnpack", 3)
    assert resolve(pb.TFLiteSettings(delegate=pb.NONE)).engine == "builtin"
    assert resolve(pb.TFLiteSettings()).engine == "gpu"  # unset delegate: GPU
    for other, name in [
        (pb.NNAPI, "NNAPI"),
        (pb.HEXAGON, "HEXAGON"),
        (pb.EDGETPU, "EDGETPU"),
        (pb.EDGETPU_CORAL, "EDGETPU_CORAL"),
    ]:
        with pytest.raises(SettingsError, match=f"the {name} delegate is not available"):
            resolve(pb.TFLiteSettings(delegate=other))
    with pytest.raises(SettingsError, match="OpenGL backend is not available"):
        resolve(gpu(force_backend=pb.OPENGL))
    fallback = gpu(force_backend=pb.OPENGL)
    fallback.fallback_settings.allow_automatic_fallback_on_compilation_error = True
    assert resolve(fallback).engine == "cpu"
    opencl = resolve(gpu(force_backend=pb.OPENCL, enable_quantized_inference=False))
    assert opencl.options["enable_quantized_inference"] == "false"
    limited = gpu()
    limited.max_delegated_partitions = 2
    limited.cpu_settings.num_threads = 2
    effective = resolve(limited)
    assert effective.options["max_delegated_partitions"] == "2" and effective.num_threads == 2


def test_binary_settings_from_tflites_own_schema_mean_the_same():
    # TFLiteSettings encoded by hand from the field numbers of TFLite's configuration.proto:
    # delegate (1) = GPU (2); gpu_settings (3) { inference_priority1 (4) = MIN_LATENCY (2),
    # inference_priority2 (5) = MAX_PRECISION (1) }; fallback_settings (9) { compilation (7) = true }.
    wire = bytes([0x08, 0x02, 0x1A, 0x04, 0x20, 0x02, 0x28, 0x01, 0x4A, 0x02, 0x38, 0x01])
    settings = load_settings(wire, pb.TFLiteSettings)
    assert settings.delegate == pb.GPU
    assert settings.gpu_settings.inference_priority1 == LAT
    assert settings.fallback_settings.allow_automatic_fallback_on_compilation_error
    effective = resolve(settings, NVIDIA)
    assert effective.options["precision"] == "F32_F16" and effective.compile_fallback
    assert settings.SerializeToString() == wire


def test_settings_sources(tmp_path):
    message = pb.ComputeSettings(
        tflite_settings=pb.TFLiteSettings(gpu_settings=pb.GPUSettings(is_precision_loss_allowed=True))
    )
    path = tmp_path / "s.json"
    path.write_text('{"tflite_settings": {"gpu_settings": {"is_precision_loss_allowed": true}}}')
    for source in (
        message,
        message.SerializeToString(),
        path,
        str(path),
        {"tflite_settings": {"gpu_settings": {"is_precision_loss_allowed": True}}},
    ):
        assert load_settings(source) == message
    with pytest.raises(SettingsError, match="not a valid ComputeSettings"):
        load_settings({"tflite_settings": {"no_such_field": 1}})


def test_load_delegate_refuses_settings_that_do_not_ask_for_the_gpu():
    with pytest.raises(delegate.DelegateError, match="do not ask for the GPU delegate"):
        delegate.load_delegate(settings=pb.ComputeSettings(preference=pb.FORCE_CPU))


def _run(*args: str):
    return subprocess.run([sys.executable, "-m", "delegate", *args], capture_output=True, text=True)


@pytest.mark.opencl
@pytest.mark.parametrize(
    "text,engine,delegated,precision",
    [
        ("tflite_settings { gpu_settings { inference_priority1: GPU_PRIORITY_MAX_PRECISION } }", "gpu", 10, {"F32"}),
        # on PoCL (a CPU device) the allowed loss buys nothing: F32
        ("tflite_settings { gpu_settings { is_precision_loss_allowed: true } }", "gpu", 10, {"F32"}),
        ("preference: FORCE_CPU", "builtin", 0, {""}),
        ("tflite_settings { delegate: NONE }", "builtin", 0, {""}),
        ("tflite_settings { delegate: XNNPACK }", "xnnpack", 0, {""}),
        (
            "tflite_settings { gpu_settings { force_backend: OPENGL } "
            "fallback_settings { allow_automatic_fallback_on_compilation_error: true } }",
            "cpu",
            0,
            {""},
        ),
    ],
)
def test_run_with_settings(tmp_path, text, engine, delegated, precision):
    path = tmp_path / "settings.textproto"
    path.write_text(text)
    result = _run(
        "run", str(shared_path("models", "small_cnn.tflite")), "--settings", str(path), "--json", "--runs", "1",
        "--option", "cpu_when_faster=false",  # small_cnn is delegated whatever its size
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["engine"] == engine and report["delegated_nodes"] == delegated
    assert report["precision"] in precision
    assert report["max_abs_error"] <= 2e-2 * report["max_abs_reference"]
    if engine in ("cpu", "xnnpack"):  # the same CPU path as the reference run: identical outputs
        assert report["max_abs_error"] == 0.0


@pytest.mark.opencl
@pytest.mark.parametrize(
    "text,message",
    [
        (
            "tflite_settings { gpu_settings { inference_priority1: GPU_PRIORITY_AUTO "
            "inference_priority2: GPU_PRIORITY_MIN_LATENCY } }",
            "inference priorities",
        ),
        ("tflite_settings { gpu_settings { force_backend: OPENGL } }", "OpenGL"),
        ("tflite_settings { delegate: NNAPI }", "NNAPI"),
        ("tflite_settings { delegate: NOT_A_DELEGATE }", "not a valid text ComputeSettings"),
    ],
)
def test_run_with_bad_settings_exits_2(tmp_path, text, message):
    path = tmp_path / "settings.textproto"
    path.write_text(text)
    result = _run("run", str(shared_path("models", "small_cnn.tflite")), "--settings", str(path), "--json")
    assert result.returncode == 2 and message in result.stderr and result.stdout == ""


def test_settings_cli(tmp_path):
    src = tmp_path / "s.textproto"
    src.write_text("tflite_settings { gpu_settings { is_precision_loss_allowed: true } }")
    shown = _run("settings", "show", str(src), "--format", "json")
    assert shown.returncode == 0 and '"is_precision_loss_allowed": true' in shown.stdout
    binary = tmp_path / "s.pb"
    assert _run("settings", "convert", str(src), str(binary)).returncode == 0
    assert load_settings(binary) == load_settings(src)
    valid = _run("settings", "validate", str(binary))
    # PoCL is a CPU device: the allowed loss is narrowed to F32 (docs/settings.md)
    assert valid.returncode == 0 and "engine: gpu" in valid.stdout and "precision=F32," in valid.stdout
    bad = tmp_path / "bad.textproto"
    bad.write_text(
        "tflite_settings { gpu_settings { inference_priority1: GPU_PRIORITY_AUTO "
        "inference_priority2: GPU_PRIORITY_MIN_LATENCY } }"
    )
    invalid = _run("settings", "validate", str(bad))
    assert invalid.returncode == 2 and "inference priorities" in invalid.stderr


@pytest.mark.opencl
def test_compile_fallback_with_a_real_failure(tmp_path):
    # A tensor wider than the device's largest 2-D image cannot be a TEXTURE_2D: a real load failure.
    from .tflite_builder import Op, T, build_model

    shape = (1, 1, 20000, 4)
    model = tmp_path / "wide.tflite"
    model.write_bytes(build_model([T(shape), T(shape)], [Op(19, [0], [1])], [0], [1]))  # RELU
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    with pytest.raises(RuntimeError, match=r"relu_0.*TEXTURE_2D of 20000x1 pixels"):
        delegate.Interpreter(str(model), storage_type="TEXTURE_2D", program_cache="none")
    with pytest.warns(UserWarning, match="fall back to CPU"):
        interpreter = delegate.Interpreter(
            str(model), storage_type="TEXTURE_2D", compile_fallback="true", program_cache="none"
        )
    interpreter.allocate_tensors()
    interpreter.set_tensor(0, x)
    interpreter.invoke()
    np.testing.assert_array_equal(interpreter.get_tensor(1), np.maximum(x, 0))
    state = interpreter.opencl
    assert state.delegated_nodes == [] and state.fallbacks and "TEXTURE_2D" in state.fallbacks[0]["cause"]


@pytest.mark.opencl
@pytest.mark.parametrize("allowed", [True, False])
def test_execution_fallback_with_a_real_device_failure(allowed):
    from . import plugin_testing

    path = str(shared_path("models", "small_cnn.tflite"))
    settings = pb.TFLiteSettings(delegate=pb.GPU)
    settings.fallback_settings.allow_automatic_fallback_on_execution_error = allowed
    interpreter = delegate.Interpreter(path, settings=settings, settings_type=pb.TFLiteSettings, program_cache="none")
    interpreter.allocate_tensors()
    rng = np.random.default_rng(4)
    cpu = delegate.api.host_runtime().Interpreter(model_path=path)
    cpu.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]
    out = interpreter.get_output_details()[0]["index"]
    x = rng.random((1, 32, 32, 3), dtype=np.float32)
    interpreter.set_tensor(index, x)
    interpreter.invoke()  # on the device
    assert plugin_testing.break_launches() > 0
    if not allowed:
        with pytest.raises(RuntimeError, match="OpenCL error -53"):  # CL_INVALID_WORK_DIMENSION
            interpreter.invoke()
        return
    for seed in (5, 6):
        x = np.random.default_rng(seed).random((1, 32, 32, 3), dtype=np.float32)
        interpreter.set_tensor(index, x)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            interpreter.invoke()
        cpu.set_tensor(cpu.get_input_details()[0]["index"], x)
        cpu.invoke()
        np.testing.assert_allclose(
            interpreter.get_tensor(out), cpu.get_tensor(cpu.get_output_details()[0]["index"]), rtol=1e-5, atol=1e-6
        )
        assert interpreter.fallback_cause and "OpenCL error" in interpreter.fallback_cause
        # Warned once, at the failure; later invokes stay on CPU quietly.
        assert len([w for w in caught if "running on CPU" in str(w.message)]) == (1 if seed == 5 else 0)


@pytest.mark.opencl
def test_compile_fallback_when_a_kernel_fails_to_build(monkeypatch):
    path = str(shared_path("models", "small_cnn.tflite"))
    reject_kernels_of(monkeypatch, "MAX_POOL_2D")
    with pytest.raises(RuntimeError, match=r"max_pool_2d_3.*failed to build"):
        delegate.Interpreter(path, program_cache="none")
    with pytest.warns(UserWarning, match="fall back to CPU"):
        interpreter = delegate.Interpreter(path, program_cache="none", compile_fallback="true")
    interpreter.allocate_tensors()
    x = np.random.default_rng(8).random((1, 32, 32, 3), dtype=np.float32)
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    cpu = delegate.api.host_runtime().Interpreter(model_path=path)
    cpu.allocate_tensors()
    cpu.set_tensor(cpu.get_input_details()[0]["index"], x)
    cpu.invoke()
    # The whole (single) partition held the failing kernel: everything ran on CPU, and says why.
    assert interpreter.opencl.delegated_nodes == [] and "failed to build" in interpreter.opencl.fallbacks[0]["cause"]
    np.testing.assert_array_equal(
        interpreter.get_tensor(interpreter.get_output_details()[0]["index"]),
        cpu.get_tensor(cpu.get_output_details()[0]["index"]),
    )


@pytest.mark.opencl
def test_compile_fallback_when_the_model_does_not_fit_device_memory(tmp_path):
    # Input and output of an ADD live together: 2 x 1.0009 GiB, over PoCL's 2 GiB largest allocation.
    from delegate.runtime import describe, select_device

    from .tflite_builder import Op, T, build_model

    limit = describe(select_device()).max_mem_alloc_bytes
    width = limit // (2 * 8192 * 4 * 4) + 8
    shape = (1, 8192, width, 4)
    model = tmp_path / "big.tflite"
    model.write_bytes(build_model([T(shape), T(shape)], [Op(0, [0, 0], [1], ("AddOptions", {}))], [0], [1]))
    with pytest.raises(RuntimeError, match=r"add_0.*allows at most"):
        delegate.Interpreter(str(model), program_cache="none")
    with pytest.warns(UserWarning, match="fall back to CPU"):
        interpreter = delegate.Interpreter(str(model), program_cache="none", compile_fallback="true")
    interpreter.allocate_tensors()
    x = np.full(shape, 0.25, np.float32)
    interpreter.set_tensor(0, x)
    del x
    interpreter.invoke()
    assert interpreter.opencl.delegated_nodes == []
    assert float(interpreter.get_tensor(1)[0, 123, 45, 2]) == 0.5
