"""pytest-benchmark figures: every shared model on the delegate and on TFLite's CPU path, side by side.

    python -m pytest benchmarks/test_models.py --benchmark-only [-k mobilenet_v2]
        [--benchmark-histogram] [--benchmark-autosave] [--benchmark-compare]

The models are tests/test_model_corpus.py's: every ``*.tflite`` in ../shared/models, real/ and
quant/, globbed, so a new file is benchmarked without a change here; each is a parameter named by
its path under ../shared/models. Both paths run it with the pytest plugin's fixtures
(``delegate_interpreter``: default options, F32; ``cpu_interpreter``: the host runtime's default
CPU path, XNNPACK, one thread per core), on the stored input shapes (the open batch dim of
basic-pitch and of the openWakeWord embedding model is 1 in the file, and runs) and the same
seeded inputs. Two groups per model:

- ``MODEL``: one ``invoke()``, after one untimed call (the first call of a stateful model moves
  its state once; later calls are alike).
- ``MODEL start``: from nothing to the first output (Interpreter, allocate_tensors, the inputs,
  the first invoke), after one untimed round, so the delegate's caches (serialized context,
  OpenCL programs) are warm, as at an application's second start. A cold start (empty caches,
  every kernel compiled) takes fresh processes: benchmarks/compare.py.

A model the CPU path cannot run here skips that side with the reason, found by trying it as
tests/test_model_corpus.py does (under tflite-runtime 2.14: selfie_segmentation's custom op
Convolution2DTransposeBias and quant/*_dynamic's op versions; under ai-edge-litert 2.3 every
model runs). The delegate's side never skips: a model TFLite loads that it cannot run fails.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from delegate.api import current_host
from tests.helpers import shared_path
from tests.test_model_corpus import _corpus, _cpu_error, _id

PATHS = ("delegate", "cpu")
#: timed rounds of a start (each builds an interpreter: the delegate's maps the model's kernels)
START_ROUNDS = 5


def _name(path: Path) -> str:
    return _id(path).removesuffix(".tflite")


_MODELS = [pytest.param(p, id=_name(p)) for p in _corpus()] or [pytest.param(None, id="no-shared-models")]


def _model(path: Path | None, side: str) -> Path:
    """``path``, or a skip with the reason the ``side`` cannot run it."""
    if path is None:
        shared_path("models")  # fails under CI, else skips: ../shared is not beside this checkout
        pytest.skip("no *.tflite under ../shared/models")
    if side == "cpu":
        error = _cpu_error(path)
        if error is not None:
            host = current_host()
            pytest.skip(f"TFLite's CPU path ({host.name} {host.version}) cannot run this model: {error}")
    return path


def _describe(benchmark: Any, interpreter: Any, side: str) -> None:
    state = getattr(interpreter, "opencl", None)
    host = current_host()
    benchmark.extra_info["host"] = f"{host.name} {host.version}"
    if side == "delegate" and state is not None:
        benchmark.extra_info["device"] = state.device
        benchmark.extra_info["delegated"] = f"{len(state.delegated_nodes)} of {state.total_nodes} nodes"


@pytest.mark.parametrize("side", PATHS)
@pytest.mark.parametrize("path", _MODELS)
def test_invoke(benchmark, delegate_interpreter, cpu_interpreter, path, side):
    model = _model(path, side)
    interpreter = (delegate_interpreter if side == "delegate" else cpu_interpreter)(model)
    interpreter.invoke()  # untimed: a first call may do once what later ones reuse
    benchmark.group = _name(model)
    _describe(benchmark, interpreter, side)
    benchmark(interpreter.invoke)


@pytest.mark.parametrize("side", PATHS)
@pytest.mark.parametrize("path", _MODELS)
def test_start(benchmark, delegate_interpreter, cpu_interpreter, path, side):
    model = _model(path, side)
    make = delegate_interpreter if side == "delegate" else cpu_interpreter

    def start() -> Any:
        interpreter = make(model)
        interpreter.invoke()
        return interpreter

    benchmark.group = f"{_name(model)} start"
    _describe(benchmark, benchmark.pedantic(start, rounds=START_ROUNDS, warmup_rounds=1), side)
