"""DelegatedInterpreter's paths (delegate/interpreter.py) on stand-in host interpreters: the
execution fallback, the background switch and its failures, close, and no forwarding of names the
class does not have. The same paths on real models: tests/test_warm_start.py,
tests/test_settings_mapping.py (execution fallback), tests/test_concurrency.py (one call at a time).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import delegate
from delegate.interpreter import DelegatedInterpreter, ExecutionPath


class FakeHost:
    """A host Interpreter of one input ``x`` and one output ``y = 2 x`` (``fails``: invokes raise)."""

    def __init__(self, name: str = "host", fails: bool = False) -> None:
        self.name, self.fails = name, fails
        self.tensors = {0: np.zeros((1, 2), np.float32), 1: np.zeros((1, 2), np.float32)}
        self.invokes = 0

    def get_input_details(self) -> list[dict[str, Any]]:
        return [{"index": 0, "name": "x", "shape": np.array([1, 2]), "dtype": np.float32}]

    def get_output_details(self) -> list[dict[str, Any]]:
        return [{"index": 1, "name": "y", "shape": np.array([1, 2]), "dtype": np.float32}]

    def allocate_tensors(self) -> None:
        pass

    def set_tensor(self, index: int, value: Any) -> None:
        self.tensors[index] = np.array(value, np.float32)

    def get_tensor(self, index: int, subgraph_index: int = 0) -> np.ndarray:
        return self.tensors[index]

    def tensor(self, index: int) -> Any:
        return lambda: self.tensors[index]

    def invoke(self) -> None:
        self.invokes += 1
        if self.fails:
            raise RuntimeError(f"{self.name}: device lost")
        self.tensors[1] = self.tensors[0] * 2


X = np.array([[1.0, 3.0]], np.float32)


def _run(interpreter: DelegatedInterpreter) -> np.ndarray:
    interpreter.set_tensor(0, X)
    interpreter.invoke()
    return interpreter.get_tensor(1)


def _compiling(make: Any, **kwargs: Any) -> DelegatedInterpreter:
    options = {"mode": "on", "grace_s": 0.0, "fallback_allowed": False, "opencl": None, "opencl_delegate": None}
    return DelegatedInterpreter.with_background_compile(FakeHost("cpu"), make, **{**options, **kwargs}, effective=None)


def test_an_invoke_that_fails_on_the_device_falls_back_to_cpu_once():
    device, cpus = FakeHost("device", fails=True), []
    it = DelegatedInterpreter(device, make_cpu=lambda: cpus.append(FakeHost("cpu")) or cpus[-1])
    assert it.path is ExecutionPath.DELEGATED and it.fallback_cause is None
    with pytest.warns(UserWarning, match=r"invoke failed on the device \(device: device lost\)"):
        np.testing.assert_array_equal(_run(it), 2 * X)
    assert it.path is ExecutionPath.FELL_BACK and it.fallback_cause == "device: device lost"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once, at the failure
        np.testing.assert_array_equal(_run(it), 2 * X)
    assert device.invokes == 1 and len(cpus) == 1 and cpus[0].invokes == 2
    assert it.host is device  # the caller's tensors stay where they were
    np.testing.assert_array_equal(it.tensor(1)(), 2 * X)


def test_without_execution_fallback_the_devices_error_raises():
    it = DelegatedInterpreter(FakeHost("device", fails=True))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="device lost"):
            it.invoke()
    assert it.path is ExecutionPath.DELEGATED and it.fallback_cause is None


def test_only_the_named_methods_and_the_host_escape_hatch():
    it = DelegatedInterpreter(FakeHost("on cpu"), path=ExecutionPath.CPU_BY_SETTINGS)
    assert not hasattr(it, "name") and it.host.name == "on cpu"
    assert it.opencl is None and it.opencl_delegate is None
    assert it.wait_for_delegate() is False and it.build_finished(timeout=0)
    assert isinstance(it, delegate.DelegatedInterpreter)


def test_close_and_the_with_block():
    with DelegatedInterpreter(FakeHost()) as it:
        np.testing.assert_array_equal(_run(it), 2 * X)
    assert it.path is ExecutionPath.CLOSED and "closed" in repr(it)
    for call in (it.invoke, lambda: it.host):
        with pytest.raises(delegate.DelegateError, match="closed"):
            call()


def test_the_background_build_switches_at_the_invoke_after_it(gate):
    device = FakeHost("device")
    it = _compiling(lambda: device)
    assert it.path is ExecutionPath.COMPILING and it.host.name == "cpu"
    it.allocate_tensors()
    np.testing.assert_array_equal(_run(it), 2 * X)
    gate.set()
    assert it.build_finished(timeout=60) and it.path is ExecutionPath.COMPILING
    it.invoke()  # switches: the input set on CPU carries over
    assert it.path is ExecutionPath.DELEGATED and it.host is device
    np.testing.assert_array_equal(it.get_tensor(1), 2 * X)
    assert device.invokes == 2  # the build's warm-up on zeros, then the caller's


def test_a_failed_build_falls_back_or_raises_as_the_settings_ask(gate):
    def broken() -> Any:
        raise RuntimeError("no kernels")

    allowed, refused = _compiling(broken, fallback_allowed=True), _compiling(broken)
    gate.set()
    with pytest.warns(UserWarning, match=r"background compile failed \(no kernels\)"):
        assert allowed.wait_for_delegate() is False
    assert allowed.path is ExecutionPath.FELL_BACK and allowed.fallback_cause == "no kernels"
    np.testing.assert_array_equal(_run(allowed), 2 * X)  # on the CPU interpreter
    for _ in range(2):
        with pytest.raises(RuntimeError, match="no kernels"):
            refused.invoke()
    assert refused.path is ExecutionPath.FAILED


def test_a_warm_up_that_fails_on_the_device_falls_back_under_execution_fallback(gate):
    device = FakeHost("device", fails=True)
    it = _compiling(lambda: device, fallback_allowed=True, make_cpu=lambda: FakeHost("fallback"))
    it.allocate_tensors()
    it.invoke()  # on CPU: the build warms the delegate up before handing it over
    gate.set()
    assert it.build_finished(timeout=60)
    with pytest.warns(UserWarning, match="invoke failed on the device"):
        np.testing.assert_array_equal(_run(it), 2 * X)
    assert it.path is ExecutionPath.FELL_BACK and it.host is device and device.invokes == 1
