"""The LiteRT CompiledModel GPU accelerator (csrc/litert_accelerator.c, delegate/litert.py): every
shared model through CompiledModel on it, checked against CompiledModel on LiteRT's CPU."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import delegate
from delegate import litert
from delegate.plugin import live_kernels
from delegate.plugin.options import OptionsError

from .helpers import shared_path

pytestmark = pytest.mark.opencl
if "libasan" in os.environ.get("LD_PRELOAD", ""):
    # scripts/sanitize.sh: the accelerator's C runs under the sanitizers in tests/test_leaks.py
    pytest.skip(
        "LiteRT's CompiledModel loads its vendor plugins with RTLD_DEEPBIND, which ASan's runtime refuses",
        allow_module_level=True,
    )
compiled_model = pytest.importorskip("ai_edge_litert.compiled_model")
if ".".join(litert.litert_distribution()[1].split(".")[:2]) not in litert.SUPPORTED_LITERT:
    pytest.skip("the installed ai-edge-litert is not a version the accelerator supports", allow_module_level=True)

from ai_edge_litert.environment import Environment  # noqa: E402
from ai_edge_litert.hardware_accelerator import HardwareAccelerator  # noqa: E402

CompiledModel = compiled_model.CompiledModel
GPU = HardwareAccelerator.GPU
GPU_CPU = HardwareAccelerator.GPU | HardwareAccelerator.CPU
FLOAT_MODELS = ["elementwise_mix", "mobilenet_v2", "mobilenet_v2_fp16", "small_cnn", "unet_small"]
# Tolerance per model kind, as a fraction of max(1, largest |CPU output|), or in quantization steps
# for int8 outputs. Float models: the suite's F32 tolerance. Dynamic-range models: LiteRT's CPU
# quantizes activations on the fly while the delegate computes them in float. Full-integer models:
# the delegate computes in float between the quantized inputs and outputs, so a value may round
# to the neighbouring step.
QUANT_MODELS = {
    "mobilenet_v2_int8": 2,
    "small_cnn_int8": 2,
    "small_cnn_int8_fio": 2e-2,
    "small_cnn_dynamic": 1e-2,
    "unet_small_dynamic": 1e-2,
}


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One accelerator environment for the module, its partitions cached across its tests."""
    return delegate.litert_environment(serialization_dir=str(tmp_path_factory.mktemp("litert-cache")))


@pytest.fixture(scope="module")
def cpu_env() -> Any:
    return Environment.create()


def _inputs(model: Any, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    values = []
    for buffer in model.create_input_buffers(0):
        details = buffer.get_tensor_details()
        dtype, shape = np.dtype(details["dtype"]), tuple(details["shape"])
        if dtype.kind == "f":
            values.append(rng.random(shape, dtype=np.float32).astype(dtype))
        else:
            info = np.iinfo(dtype)
            values.append(rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype))
    return values


def _run(model: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """write / run / read through TensorBuffers."""
    ins, outs = model.create_input_buffers(0), model.create_output_buffers(0)
    for buffer, value in zip(ins, inputs, strict=True):
        buffer.write(value)
    model.run_by_index(0, ins, outs)
    results = []
    for buffer in outs:
        details = buffer.get_tensor_details()
        shape = tuple(details["shape"])
        results.append(buffer.read(int(np.prod(shape)), details["dtype"]).reshape(shape))
    return results


def _check(path: Path, env: Any, cpu_env: Any, accel: Any, tolerance: float) -> Any:
    gpu = CompiledModel.from_file(str(path), hardware_accel=accel, environment=env)
    cpu = CompiledModel.from_file(str(path), hardware_accel=HardwareAccelerator.CPU, environment=cpu_env)
    inputs = _inputs(cpu)
    for got, want in zip(_run(gpu, inputs), _run(cpu, inputs), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
        if want.dtype.kind == "f":
            bound = tolerance * max(1.0, float(np.max(np.abs(want))))
        else:
            bound = tolerance  # quantization steps
        assert float(diff.max()) <= bound, f"{path.name}: max difference {diff.max()} > {bound}"
    return gpu


@pytest.mark.parametrize("name", FLOAT_MODELS)
def test_float_models_run_fully_on_the_accelerator(name: str, env: Any, cpu_env: Any) -> None:
    # GPU alone: LiteRT refuses the model unless the delegate takes every node.
    before = live_kernels()
    model = _check(shared_path("models", f"{name}.tflite"), env, cpu_env, GPU, 1e-4)
    assert model.is_fully_accelerated()
    assert live_kernels() > before  # the delegate's partitions, not LiteRT's CPU, ran it


@pytest.mark.parametrize("name", sorted(QUANT_MODELS))
def test_quantized_models_match_cpu(name: str, env: Any, cpu_env: Any) -> None:
    before = live_kernels()
    model = _check(shared_path("models", "quant", f"{name}.tflite"), env, cpu_env, GPU_CPU, QUANT_MODELS[name])
    assert live_kernels() > before, "the delegate took no partition"
    model.close()


def test_nodes_left_by_the_delegate_run_on_litert_cpu(tmp_path: Path, cpu_env: Any) -> None:
    env = delegate.litert_environment(serialization_dir=str(tmp_path), exclude_ops="SOFTMAX")
    path = shared_path("models", "small_cnn.tflite")
    _check(path, env, cpu_env, GPU_CPU, 1e-4)
    with pytest.raises(RuntimeError, match="not accelerated"):
        CompiledModel.from_file(str(path), hardware_accel=GPU, environment=env)


def test_unsupported_litert_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(litert.ANY_VERSION_VARIABLE, raising=False)
    monkeypatch.setattr(litert, "litert_distribution", lambda: ("ai-edge-litert-nightly", "2.4.0.dev20261026"))
    with pytest.raises(litert.LiteRtVersionError, match=r"2\.4\.0\.dev20261026 is not supported .*2\.3\.x"):
        delegate.litert_environment()
    monkeypatch.setenv(litert.ANY_VERSION_VARIABLE, "1")
    litert.check_litert_version("2.4.0")  # the escape hatch


def test_missing_litert_and_bad_options_are_clear(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OptionsError, match="precision"):
        delegate.litert_environment(precision="F64")
    with pytest.raises(OptionsError, match="unknown option"):
        delegate.litert_environment(no_such_option=1)
    monkeypatch.setattr(litert.metadata, "packages_distributions", lambda: {})
    with pytest.raises(delegate.DelegateError, match="ai-edge-litert is not installed"):
        delegate.litert_environment()


def test_the_accelerator_refuses_a_damaged_options_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    env = delegate.litert_environment(model_token="damaged-options-file")
    options_file = Path(env.options.runtime_path) / litert.OPTIONS_FILE
    options_file.write_bytes(litert.OPTIONS_MAGIC + b"litert.plugin\0/nowhere")  # unterminated
    with pytest.raises(RuntimeError):
        CompiledModel.from_file(str(shared_path("models", "small_cnn.tflite")), hardware_accel=GPU, environment=env)
    assert "unterminated string" in capfd.readouterr().err


def test_composites_run_through_compiled_model(env: Any, cpu_env: Any) -> None:
    """litert-torch's composites (AcquireSubgraphContext under CompiledModel): GQA attention,
    LayerNorm and a two-result composite inlined, the one around a CUMSUM on LiteRT's CPU."""
    before = live_kernels()
    path = Path(__file__).resolve().parent / "models" / "torch_composites_mixed.tflite"
    model = _check(path, env, cpu_env, GPU_CPU, 1e-4)
    assert live_kernels() > before, "the delegate took no partition"
    model.close()
