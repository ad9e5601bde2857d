"""TensorFlow's interpreter (tf.lite.Interpreter) as a host: the plugin library loaded by path into
a TensorFlow process of its own environment, which never imports the package (the library does),
on every shared float model, compared with TensorFlow's own CPU kernels.

TensorFlow is a large install, kept out of the package's environment: scripts/test_tensorflow.sh
makes one (.venv-tensorflow) and names its Python in DELEGATE_TENSORFLOW_PYTHON; CI runs it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import delegate

from .helpers import SHARED, shared_path
from .test_hosts import F32_TOLERANCE, run_by_path

FLOAT_MODELS = ["elementwise_mix", "mobilenet_v2", "mobilenet_v2_fp16", "small_cnn", "unet_small"]


@pytest.fixture(scope="module")
def tensorflow_python() -> str:
    python = os.environ.get("DELEGATE_TENSORFLOW_PYTHON")
    if not python:
        pytest.skip("no TensorFlow environment given (scripts/test_tensorflow.sh makes one and runs this file)")
    done = subprocess.run(
        [python, "-c", "import tensorflow as tf; print(tf.__version__)"], capture_output=True, text=True
    )
    assert done.returncode == 0, f"{python} cannot import tensorflow:\n{done.stderr[-2000:]}"
    return python


@pytest.mark.opencl
def test_tensorflow_runs_the_shared_float_models_through_the_plugin_by_path(tensorflow_python, tmp_path):
    models = [shared_path("models", f"{name}.tflite") for name in FLOAT_MODELS]
    assert len(list(SHARED.joinpath("models").glob("*.tflite"))) == len(models), "a shared float model is not listed"
    results = run_by_path(tensorflow_python, "tensorflow", delegate.plugin_path(), models, tmp_path)
    assert [r["model"] for r in results] == [str(m) for m in models]
    for result in results:
        assert result["delegated_nodes"] > 0, result
        assert result["difference"] <= F32_TOLERANCE, result


@pytest.mark.opencl
def test_tensorflow_gives_the_plugin_the_decompositions_of_composites(tensorflow_python, tmp_path):
    """AcquireSubgraphContext in TensorFlow's interpreter: litert-torch's composites (a LayerNorm and
    a two-result composite of a name of its own) inlined into the main graph's partitions."""
    model = Path(__file__).resolve().parent / "models" / "torch_composites_mixed.tflite"
    (result,) = run_by_path(tensorflow_python, "tensorflow", delegate.plugin_path(), [model], tmp_path)
    assert result["inlined_subgraphs"] >= 2, result
    assert result["difference"] <= F32_TOLERANCE, result


@pytest.mark.opencl
def test_tensorflow_runs_a_keras3_loop_unrolled_from_the_file_it_mapped(tensorflow_python, tmp_path):
    """No model_file in TensorFlow's interpreter: the WHILE's subgraphs are read from the mapped file."""
    model = Path(__file__).resolve().parent / "models" / "gru_keras3.tflite"
    (result,) = run_by_path(tensorflow_python, "tensorflow", delegate.plugin_path(), [model], tmp_path)
    assert result["delegated_nodes"] == result["total_nodes"] and result["inlined_subgraphs"] == 2, result
    assert result["difference"] <= F32_TOLERANCE, result
