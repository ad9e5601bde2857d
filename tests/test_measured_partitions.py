"""cpu_when_faster measured per partition (delegate/measured_choice.py, ``_each_alone``): with two
partitions delegated, each is timed alone delegated, only those that made the model faster stay
delegated, from contexts compiled once, and their records make a later start skip the measurement.

The figures are the tests' own (``compare_alone`` replaced), so that which partition is slower does
not depend on this machine's load; the interpreters built and run are real.
"""

from __future__ import annotations

import numpy as np
import pytest

import delegate
from delegate import measured_choice
from delegate.api import host_runtime
from delegate.compiler.cpu_choice import Measured
from delegate.compiler.graph import Builtin
from delegate.interpreter import ExecutionPath
from delegate.plugin.registry import REGISTRY

from .helpers import assert_outputs_close, invoke_with, uniform_inputs
from .plugin_testing import inject
from .tflite_builder import Op, T, build_model

pytestmark = [pytest.mark.opencl, pytest.mark.cpu_choice_default]

TOLERANCE = 1e-4
RELU = ("FullyConnectedOptions", {"FusedActivationFunction": 1})
#: the two partitions, split by L2_NORMALIZATION (which the compiler does not run)
FIRST, SECOND = (0, (0, 1)), (0, (3, 4))
L2_NORMALIZATION = 11


def two_partitions(width: int = 256, rows: int = 32) -> bytes:
    """Two FULLY_CONNECTED layers, L2_NORMALIZATION, two more: large enough for the estimate to
    delegate both partitions on PoCL."""
    rng = np.random.default_rng(3)
    tensors, ops = [T((rows, width))], []

    def dense(source: int, relu: bool = True) -> int:
        w = rng.uniform(-0.1, 0.1, (width, width)).astype(np.float32)
        b = rng.uniform(-0.1, 0.1, (width,)).astype(np.float32)
        tensors.extend([T(w.shape, w), T(b.shape, b), T((rows, width))])
        n = len(tensors)
        ops.append(Op(Builtin.FULLY_CONNECTED, [source, n - 3, n - 2], [n - 1], RELU if relu else None))
        return n - 1

    hidden = dense(dense(0))
    tensors.append(T((rows, width)))
    ops.append(Op(L2_NORMALIZATION, [hidden], [len(tensors) - 1], ("L2NormOptions", {})))
    out = dense(dense(len(tensors) - 1), relu=False)
    return build_model(tensors, ops, [0], [out])


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "two.tflite"
    path.write_bytes(two_partitions())
    return str(path)


def _cpu(model):
    cpu = host_runtime().Interpreter(model_path=model)
    cpu.allocate_tensors()
    return cpu


def _figures(slow: set, seen: list):
    """A ``compare_alone`` that gives each partition of ``slow`` 3 ms and the others 1 ms against
    2 ms on CPU (the whole model 2.5 ms), checking each alone interpreter computes the model."""

    def compare_alone(delegated, alone, cpus, *, budget_s):
        seen.append((sorted(alone), budget_s))
        for key, interpreter in alone.items():  # that partition only, loaded from the context the build compiled
            (partition,) = delegate.delegate_state(interpreter._delegates[0]).partitions
            assert (0, tuple(partition.nodes)) == key and partition.cache == "memory"
        inputs = uniform_inputs(delegated, 7)
        for interpreter in (delegated, *alone.values()):
            assert_outputs_close(
                invoke_with(interpreter, inputs), invoke_with(next(iter(cpus.values())), inputs), TOLERANCE
            )
        threads = min(cpus)
        each = {key: Measured(3.0 if key in slow else 1.0, 2.0, 5, threads, alone=True) for key in alone}
        return Measured(2.5, 2.0, 5, threads), each

    return compare_alone


def _counting_compiles(monkeypatch) -> list:
    compiled = []
    real = REGISTRY.plan.loader.compiler.compile

    def counted(graph, nodes, *args, **kwargs):
        compiled.append(tuple(nodes))
        return real(graph, nodes, *args, **kwargs)

    inject(monkeypatch, compile=counted)
    return compiled


@pytest.mark.parametrize("background", ["off", "on"])
def test_only_the_partition_measured_faster_stays_delegated_and_its_record_skips_the_next_measurement(
    model, tmp_path, monkeypatch, gate, background
):
    seen: list = []
    monkeypatch.setattr(measured_choice, "compare_alone", _figures({SECOND}, seen))
    compiled = _counting_compiles(monkeypatch)
    folder = str(tmp_path / "cache")
    it = delegate.Interpreter(model, background_compile=background, serialization_dir=folder)
    it.allocate_tensors()
    inputs = uniform_inputs(it, 2)
    gate.set()
    if background == "on":
        assert it.wait_for_delegate()
    got = invoke_with(it, inputs)  # off: the first invoke measures
    assert [keys for keys, _ in seen] == [[FIRST, SECOND]]
    assert seen[0][1] == pytest.approx(measured_choice.BUDGET_S + 2 * measured_choice.PARTITION_BUDGET_S)
    assert sorted(compiled) == [(0, 1), (3, 4)]  # each partition compiled once
    assert it.path is ExecutionPath.DELEGATED
    state = it.opencl
    assert state.delegated_nodes == [0, 1] and [p.nodes for p in state.partitions] == [[0, 1]]
    assert "running this partition alone" in state.unsupported["fully_connected_3"]
    first, second = state.cpu_choices
    assert (first["decision"], second["decision"]) == ("delegate", "cpu")
    assert first["measured"]["alone"] and first["measured"]["delegate_ms"] == 1.0
    assert state.measured == Measured(2.5, 2.0, 5, state.measured.cpu_threads)
    assert_outputs_close(got, invoke_with(_cpu(model), inputs), TOLERANCE)

    # a later start reads each partition's decision from its record: nothing is measured
    seen.clear()
    again = delegate.Interpreter(model, background_compile=background, serialization_dir=folder)
    again.allocate_tensors()
    if background == "on":
        assert again.wait_for_delegate()
    got = invoke_with(again, inputs)
    assert seen == [] and again.opencl.measured is None
    assert again.opencl.delegated_nodes == [0, 1] and again.path is ExecutionPath.DELEGATED
    assert [c["source"] for c in again.opencl.cpu_choices] == ["record", "record"]
    assert [c["decision"] for c in again.opencl.cpu_choices] == ["delegate", "cpu"]
    assert_outputs_close(got, invoke_with(_cpu(model), inputs), TOLERANCE)


@pytest.mark.parametrize(
    ("slow", "path"), [(set(), ExecutionPath.DELEGATED), ({FIRST, SECOND}, ExecutionPath.CPU_FASTER)]
)
def test_all_kept_runs_the_built_interpreter_and_none_kept_runs_tflite(model, tmp_path, monkeypatch, slow, path):
    seen: list = []
    monkeypatch.setattr(measured_choice, "compare_alone", _figures(slow, seen))
    folder = str(tmp_path / "cache")
    it = delegate.Interpreter(model, background_compile="off", serialization_dir=folder)
    it.allocate_tensors()
    built = it.host
    inputs = uniform_inputs(it, 4)
    got = invoke_with(it, inputs)
    assert len(seen) == 1 and it.path is path
    assert (it.host is built) == (not slow)
    assert (it.cpu_faster_cause is not None and "each of its 2 delegated partitions" in it.cpu_faster_cause) == bool(
        slow
    )
    assert_outputs_close(got, invoke_with(_cpu(model), inputs), TOLERANCE)
    # a later start: every partition on CPU by its own record runs on TFLite's CPU kernels
    later = delegate.Interpreter(model, background_compile="on", serialization_dir=folder)
    later.allocate_tensors()
    assert later.wait_for_delegate() is not bool(slow)
    assert later.path is path and len(seen) == 1


def test_cpu_when_faster_false_measures_no_partition(model, tmp_path, monkeypatch):
    seen: list = []
    monkeypatch.setattr(measured_choice, "compare_alone", _figures({SECOND}, seen))
    it = delegate.Interpreter(model, background_compile="off", cpu_when_faster="false")
    it.allocate_tensors()
    inputs = uniform_inputs(it, 5)
    got = invoke_with(it, inputs)
    assert seen == [] and it.opencl.delegated_nodes == [0, 1, 3, 4]
    assert_outputs_close(got, invoke_with(_cpu(model), inputs), TOLERANCE)


def test_compare_alone_times_each_partition_against_the_fastest_cpu():
    from .test_measured_choice import _Sleeper

    alone = {FIRST: _Sleeper(1.0), SECOND: _Sleeper(8.0)}
    cpus = {2: _Sleeper(6.0), 1: _Sleeper(4.0)}
    whole, each = measured_choice.compare_alone(_Sleeper(5.0), alone, cpus, budget_s=0.05)
    assert whole.cpu_threads == 1 and not whole.alone and whole.rounds >= measured_choice.MIN_ROUNDS
    assert not each[FIRST].cpu_faster and each[SECOND].cpu_faster
    assert all(m.alone and m.cpu_ms == whole.cpu_ms and m.rounds == whole.rounds for m in each.values())
    assert all(s.invokes == whole.rounds + 2 for s in (*alone.values(), *cpus.values()))
