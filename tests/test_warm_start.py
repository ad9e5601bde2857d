"""Background compile (delegate/warm_start.py): invokes on TFLite's CPU kernels while the delegate
builds, then the delegate; outputs equal across the switch, the switch reported, stateful models
never switched, build failures handled as the settings ask.

Deterministic: ``warm_start.build_gate`` holds every background build until the test releases it,
and ``build_finished()`` waits for the build's end; nothing here depends on how long a build takes.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import delegate
from delegate import warm_start
from delegate.api import host_runtime
from delegate.interpreter import ExecutionPath

from .helpers import assert_outputs_close, invoke_with, reject_kernels_of, shared_path, uniform_inputs
from .test_variables import _streaming_model

SMALL_CNN = str(shared_path("models", "small_cnn.tflite"))
#: F32 tolerance, of the output's scale
TOLERANCE = 1e-4
EXECUTION_FALLBACK = {"fallback_settings": {"allow_automatic_fallback_on_execution_error": True}}


@pytest.fixture(scope="module")
def program_cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("programs"))


@pytest.fixture
def release_on_wait(gate, monkeypatch):
    """The gate opens when a call starts waiting for the build (never before)."""
    real = warm_start.BackgroundBuild.wait

    def waiting(self):
        gate.set()
        return real(self)

    monkeypatch.setattr(warm_start.BackgroundBuild, "wait", waiting)


def _reference(inputs):
    cpu = host_runtime().Interpreter(model_path=SMALL_CNN)
    cpu.allocate_tensors()
    return invoke_with(cpu, inputs)


def test_outputs_equal_across_the_switch_and_the_switch_is_reported(gate, program_cache):
    it = delegate.Interpreter(SMALL_CNN, background_compile="on", program_cache=program_cache)
    report = it.opencl.background_compile
    assert report is not None and report.mode == "on" and report.path == "compiling"
    it.allocate_tensors()
    first, second = uniform_inputs(it, 1), uniform_inputs(it, 2)
    output = it.tensor(it.get_output_details()[0]["index"])
    on_cpu = invoke_with(it, first)
    assert report.path == "compiling" and report.cpu_invokes == 1
    assert not it.opencl.partitions  # the delegate has not been prepared yet
    gate.set()
    assert it.build_finished(timeout=600)
    assert report.path == "compiling"  # the switch waits for the next invoke
    # The caller sets only the second input set before the switching invoke ... and the first again after.
    on_delegate = invoke_with(it, second)
    assert report.path == "delegate" and report.cpu_invokes == 1 and report.switched_s >= report.ready_s > 0
    assert len(it.opencl.partitions) == 1 and it.opencl.delegated_nodes
    assert_outputs_close(on_delegate, _reference(second), TOLERANCE)
    again = invoke_with(it, first)
    assert_outputs_close(again, on_cpu, TOLERANCE)
    assert_outputs_close(on_cpu, _reference(first), TOLERANCE)
    np.testing.assert_array_equal(output(), again[0])  # the tensor() function follows the switch
    assert "then the delegate" in report.describe()


def test_inputs_set_before_the_switch_carry_over(gate, program_cache):
    it = delegate.Interpreter(SMALL_CNN, background_compile="on", program_cache=program_cache)
    it.allocate_tensors()
    inputs = uniform_inputs(it, 3)
    invoke_with(it, inputs)
    gate.set()
    it.build_finished(timeout=600)
    it.invoke()  # no set_tensor: the switch copies what the caller set on the CPU interpreter
    assert it.opencl.background_compile.path == "delegate"
    assert_outputs_close([it.get_tensor(d["index"]) for d in it.get_output_details()], _reference(inputs), TOLERANCE)


def test_a_build_done_within_the_grace_runs_on_the_delegate_from_the_first_invoke(monkeypatch, tmp_path):
    monkeypatch.delenv(warm_start.MODE_ENV, raising=False)  # the default, not the suite's
    folder = str(tmp_path)
    warm = delegate.Interpreter(SMALL_CNN, background_compile="off", serialization_dir=folder)
    warm.allocate_tensors()  # fills the caches
    assert warm.opencl.background_compile is None
    monkeypatch.setattr(warm_start, "AUTO_GRACE_S", 600.0)  # the warm start's build always fits in it
    it = delegate.Interpreter(SMALL_CNN, serialization_dir=folder)  # the default: auto
    it.allocate_tensors()
    report = it.opencl.background_compile
    assert report.mode == "auto" and report.path == "delegate" and report.cpu_invokes == 0
    assert [p.cache for p in it.opencl.partitions] == ["hit"]
    inputs = uniform_inputs(it, 4)
    assert_outputs_close(invoke_with(it, inputs), _reference(inputs), TOLERANCE)
    assert report.cpu_invokes == 0 and "before the first invoke" in report.describe()


@pytest.mark.parametrize("mode", ["auto", None])
def test_a_stateful_model_never_switches(monkeypatch, program_cache, mode):
    monkeypatch.delenv(warm_start.MODE_ENV, raising=False)
    it = delegate.Interpreter(model_content=_streaming_model(), background_compile=mode, program_cache=program_cache)
    assert it.path is ExecutionPath.DELEGATED
    report = it.opencl.background_compile
    assert report.path == "off" and "resource variables" in report.cause
    it.allocate_tensors()
    assert it.opencl.delegated_nodes  # delegated from the start
    with pytest.raises(delegate.DelegateError, match="resource variables"):
        delegate.Interpreter(model_content=_streaming_model(), background_compile="on", program_cache=program_cache)


def test_a_failed_build_raises_on_the_next_call_without_fallback(gate, monkeypatch, program_cache):
    reject_kernels_of(monkeypatch, "CONV_2D")
    it = delegate.Interpreter(SMALL_CNN, background_compile="on", program_cache=program_cache)
    it.allocate_tensors()
    inputs = uniform_inputs(it, 5)
    assert_outputs_close(invoke_with(it, inputs), _reference(inputs), TOLERANCE)  # on CPU while it builds
    gate.set()
    assert it.build_finished(timeout=600)
    for _ in range(2):  # every later invoke: the interpreter could not be built
        with pytest.raises(Exception, match="injected") as raised:
            it.invoke()
        assert not isinstance(raised.value, AssertionError)
    assert it.opencl.background_compile.path == "failed" and it.opencl.background_compile.cause


def test_a_failed_build_stays_on_cpu_with_fallback(gate, monkeypatch, program_cache):
    reject_kernels_of(monkeypatch, "CONV_2D")
    it = delegate.Interpreter(
        SMALL_CNN, settings=EXECUTION_FALLBACK, background_compile="auto", program_cache=program_cache
    )
    it.allocate_tensors()
    gate.set()
    assert it.build_finished(timeout=600)
    inputs = uniform_inputs(it, 6)
    with pytest.warns(UserWarning, match="background compile failed"):
        got = invoke_with(it, inputs)
    assert_outputs_close(got, _reference(inputs), TOLERANCE)
    report = it.opencl.background_compile
    assert report.path == "cpu" and report.cause and it.fallback_cause == report.cause
    assert report.cpu_invokes == 1
    assert "on CPU from then on" in report.describe()


def test_resize_waits_for_the_build_and_works_on_the_delegate(release_on_wait, program_cache):
    it = delegate.Interpreter(SMALL_CNN, background_compile="on", program_cache=program_cache)
    index = it.get_input_details()[0]["index"]
    shape = list(it.get_input_details()[0]["shape"])
    it.resize_tensor_input(index, shape)
    report = it.opencl.background_compile
    assert report.path == "delegate" and report.waited_for == "resize_tensor_input" and report.cpu_invokes == 0
    it.allocate_tensors()
    inputs = uniform_inputs(it, 7)
    assert_outputs_close(invoke_with(it, inputs), _reference(inputs), TOLERANCE)


def test_dropping_or_closing_the_interpreter_while_it_compiles(gate, program_cache):
    dropped = delegate.Interpreter(SMALL_CNN, background_compile="on", program_cache=program_cache)
    dropped.allocate_tensors()
    invoke_with(dropped, uniform_inputs(dropped, 8))
    threads = [t for t in threading.enumerate() if t.name == "delegate-background-compile"]
    assert threads
    del dropped
    gc.collect()
    closed = delegate.Interpreter(SMALL_CNN, background_compile="on", program_cache=program_cache)
    threading.Timer(0.05, gate.set).start()
    closed.close()  # joins its build
    for thread in threads:
        thread.join(timeout=600)
        assert not thread.is_alive()


def test_the_mode_is_checked():
    with pytest.raises(delegate.DelegateError, match="background_compile='sometimes'"):
        delegate.Interpreter(SMALL_CNN, background_compile="sometimes")


def test_run_shows_the_path_and_compares_the_delegate(release_on_wait, program_cache):
    from delegate.model_run import format_result, run_model

    result = run_model(SMALL_CNN, {"background_compile": "on", "program_cache": program_cache}, 2, progress=False)
    assert result["first_output_ms"] is not None
    assert "1 invoke(s) on TFLite's CPU kernels while compiling, then the delegate" in result["background_compile"]
    assert result["delegated_nodes"] == result["total_nodes"] and result["max_relative_error"] <= TOLERANCE
    assert result["background_compile"] in format_result(result)
