"""cpu_when_faster by measurement (delegate/measured_choice.py): after the background build the
model is timed with the delegate and on TFLite's CPU kernels, the faster one runs, and the
measurement is kept in the partitions' records so that a later start decides without measuring.

Real timings decide nothing asserted here: the tests that measure a real model check that what
happens follows from the figures measured; those that check each decision give the figures
themselves (fake interpreters, or a measurement recorded on a real delegate's state).
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import delegate
from delegate import measured_choice
from delegate.api import host_runtime
from delegate.compiler.cpu_choice import DELEGATE_LEAD, CpuChoice, Measured
from delegate.interpreter import DelegatedInterpreter, ExecutionPath
from delegate.plugin.choice_record import record_measurement

from .helpers import assert_outputs_close, invoke_with, shared_path, uniform_inputs

UNET = str(shared_path("models", "unet_small.tflite"))
#: F32 tolerance, of the output's scale
TOLERANCE = 1e-4


def _cpu(model=UNET):
    cpu = host_runtime().Interpreter(model_path=model)
    cpu.allocate_tensors()
    return cpu


class _Sleeper:
    """An interpreter whose invoke takes ``ms`` milliseconds."""

    def __init__(self, ms):
        self.ms, self.invokes, self.inputs = ms, 0, {}

    def get_input_details(self):
        return [
            {"index": 0, "shape": np.array([1, 4]), "dtype": np.float32},
            {"index": 1, "shape": [2], "dtype": np.int32},
        ]

    def set_tensor(self, index, value):
        self.inputs[index] = value

    def invoke(self):
        self.invokes += 1
        time.sleep(self.ms / 1e3)


@pytest.mark.parametrize(("delegate_ms", "cpu_ms"), [(12.0, (2.0, 6.0)), (2.0, (20.0, 12.0))])
def test_compare_times_all_interleaved_and_takes_medians(delegate_ms, cpu_ms):
    on_delegate = _Sleeper(delegate_ms)
    cpus = {threads: _Sleeper(ms) for threads, ms in zip((2, 1), cpu_ms, strict=True)}
    on_cpu = cpus[2]
    measured = measured_choice.compare(on_delegate, cpus, budget_s=0.05, min_rounds=3, max_rounds=5)
    assert 3 <= measured.rounds <= 5
    # two untimed invokes first, then a block of one invoke (BLOCK_MS is under the shortest) a round
    assert all(s.invokes == measured.rounds + 2 for s in (on_delegate, *cpus.values()))
    fastest = min(cpu_ms)
    assert measured.cpu_threads == (2, 1)[cpu_ms.index(fastest)]
    assert measured.delegate_ms >= delegate_ms and fastest <= measured.cpu_ms < max(cpu_ms)
    assert measured.cpu_faster == (fastest < delegate_ms)
    # the same inputs for both: floats in [0, 1), integers zero
    for a, b in zip(on_delegate.inputs.values(), on_cpu.inputs.values(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert 0 <= on_delegate.inputs[0].min() and on_delegate.inputs[0].max() < 1 and not on_delegate.inputs[1].any()


def test_a_measurement_decides_over_the_estimate_and_survives_its_record():
    estimate = CpuChoice((0, 1), ("a", "b"), 2, 1, 0, 64, delegate_us=100.0, cpu_us=1.0)
    assert estimate.on_cpu  # the estimate alone keeps it on CPU
    measured = CpuChoice((0, 1), ("a", "b"), 2, 1, 0, 64, 100.0, 1.0, measured=Measured(1.0, 2.0, 5, 2))
    assert not measured.on_cpu and measured.as_dict()["source"] == "measured"
    slower = CpuChoice((0, 1), ("a", "b"), 2, 1, 0, 64, 1.0, 100.0, measured=Measured(3.0, 2.0, 5, 1))
    assert slower.on_cpu and "measured on this device" in slower.reason()
    off = CpuChoice((0, 1), ("a", "b"), 2, 1, 0, 64, 1.0, 100.0, applied=False, measured=Measured(3.0, 2.0, 5, 1))
    assert not off.on_cpu  # cpu_when_faster=false
    for choice in (measured, slower):
        record = {k: v for k, v in choice.as_dict().items() if k != "source"}
        again = CpuChoice.from_record(json.loads(json.dumps(record)), [0, 1], ("a", "b"))
        assert again.measured == choice.measured and again.on_cpu == choice.on_cpu and again.recorded


def test_the_delegate_keeps_a_partition_only_where_it_measured_a_lead():
    """Within DELEGATE_LEAD (3%) a measurement at load cannot tell the two apart, and the host's own
    kernels are the safer choice: a delegate 2% faster leaves the model on CPU, one 4% faster keeps it."""
    assert DELEGATE_LEAD == 0.03
    close = Measured(0.98, 1.0, 30, 2)
    assert close.cpu_faster and close.comparison() == "measured less than 3% faster than TFLite's CPU kernels"
    assert not Measured(0.96, 1.0, 30, 2).cpu_faster
    assert Measured(1.02, 1.0, 30, 2).comparison() == "measured slower than TFLite's CPU kernels"
    choice = CpuChoice((0, 1), ("a", "b"), 2, 1, 0, 64, 1.0, 100.0, measured=close)
    assert choice.on_cpu and "0.980 ms with the delegate, less than 3% faster" in choice.reason()
    outcome = measured_choice.Outcome(close, cpu=object())
    assert outcome.why().startswith("measured less than 3% faster than TFLite's CPU kernels (0.980 ms")


@pytest.mark.parametrize(
    "bad",
    [
        {"delegate_ms": 1.0, "cpu_ms": 2.0, "rounds": 3},
        {"delegate_ms": -1.0, "cpu_ms": 2.0, "rounds": 3, "cpu_threads": 1},
        {"delegate_ms": 1.0, "cpu_ms": float("nan"), "rounds": 3, "cpu_threads": 1},
        {"delegate_ms": 1.0, "cpu_ms": 2.0, "rounds": True, "cpu_threads": 1},
        {"delegate_ms": 1.0, "cpu_ms": 2.0, "rounds": 0, "cpu_threads": 1},
        {"delegate_ms": 1.0, "cpu_ms": 2.0, "rounds": 3, "cpu_threads": 0},
        {"delegate_ms": "1", "cpu_ms": 2.0, "rounds": 3, "cpu_threads": 1},
        [1.0, 2.0, 3],
    ],
)
def test_a_record_with_a_broken_measurement_is_refused(bad):
    record = {k: v for k, v in CpuChoice((0,), ("a",), 1, 1, 0, 4, 1.0, 2.0).as_dict().items() if k != "source"}
    with pytest.raises(ValueError, match="measure"):
        CpuChoice.from_record({**record, "measured": bad}, [0], ("a",))


def _built(measure, cpu_interpreter):
    """A DelegatedInterpreter whose background build hands over ``cpu_interpreter``'s sibling (a
    real interpreter of the model) and measures it with ``measure``."""
    return DelegatedInterpreter.with_background_compile(
        host_runtime().Interpreter(model_path=UNET),
        lambda: cpu_interpreter,
        mode="on",
        grace_s=0.0,
        fallback_allowed=False,
        opencl=None,
        opencl_delegate=None,
        effective=None,
        measure=measure,
    )


@pytest.mark.parametrize("cpu_faster", [True, False])
def test_the_switch_goes_where_the_measurement_says(gate, cpu_faster):
    built, faster = _cpu(), _cpu()
    measured = Measured(2.0, 1.0, 3, 1) if cpu_faster else Measured(1.0, 2.0, 3, 1)
    seen = []

    def measure(interpreter):
        seen.append(interpreter)
        return measured_choice.Outcome(measured, faster if cpu_faster else None)

    it = _built(measure, built)
    it.allocate_tensors()
    inputs = uniform_inputs(it, 1)
    on_cpu = invoke_with(it, inputs)  # while it builds
    gate.set()
    assert it.build_finished(timeout=60) and seen == [built]
    it.invoke()  # no set_tensor: the switch carries the caller's inputs over
    assert it.path is (ExecutionPath.CPU_FASTER if cpu_faster else ExecutionPath.DELEGATED)
    assert it.host is (faster if cpu_faster else built)
    assert_outputs_close([it.get_tensor(d["index"]) for d in it.get_output_details()], on_cpu, TOLERANCE)
    report = it._background
    assert report.path == ("cpu faster" if cpu_faster else "delegate")
    assert ("measured slower" in report.describe()) == cpu_faster
    assert it.wait_for_delegate() is not cpu_faster


@pytest.mark.cpu_choice_default
def test_a_real_measurement_is_followed_and_recorded(gate, tmp_path):
    folder = str(tmp_path)
    it = delegate.Interpreter(UNET, background_compile="on", serialization_dir=folder)
    it.allocate_tensors()
    gate.set()
    it.wait_for_delegate()
    measured = it.opencl.measured
    assert measured is not None and measured.rounds >= measured_choice.MIN_ROUNDS
    assert it.path is (ExecutionPath.CPU_FASTER if measured.cpu_faster else ExecutionPath.DELEGATED)
    inputs = uniform_inputs(it, 2)
    assert_outputs_close(invoke_with(it, inputs), invoke_with(_cpu(), inputs), TOLERANCE)
    (choice,) = it.opencl.cpu_choices
    assert choice["measured"] == measured.as_dict() and choice["decision"] == (
        "cpu" if measured.cpu_faster else "delegate"
    )
    # a later start reads the measurement from the record: it does not measure again
    again = delegate.Interpreter(UNET, background_compile="on", serialization_dir=folder)
    again.allocate_tensors()
    again.wait_for_delegate()
    (recorded,) = again.opencl.cpu_choices
    assert again.opencl.measured is None and recorded["source"] == "record"
    assert recorded["measured"] == measured.as_dict()
    assert bool(again.opencl.delegated_nodes) is not measured.cpu_faster
    assert_outputs_close(invoke_with(again, inputs), invoke_with(_cpu(), inputs), TOLERANCE)


@pytest.mark.cpu_choice_default
@pytest.mark.parametrize("cpu_faster", [True, False])
def test_a_host_loading_the_plugin_follows_a_recorded_measurement(tmp_path, cpu_faster):
    """Hosts that load the plugin themselves do not measure (docs/hosts.md): a measurement recorded
    in the serialization folder by an earlier start (``python -m delegate run``, or
    ``delegate.Interpreter``) decides for them, against the estimate (which keeps UNet-small
    delegated)."""
    folder = str(tmp_path)
    first = delegate.Interpreter(UNET, background_compile="off", serialization_dir=folder)
    first.allocate_tensors()
    (estimated,) = first.opencl.cpu_choices
    assert estimated["decision"] == "delegate" and estimated["source"] == "estimate"
    measured = Measured(2.0, 1.0, 4, 1) if cpu_faster else Measured(1.0, 2.0, 4, 1)
    assert record_measurement(first.opencl, measured) == 1
    plugin = delegate.load_delegate(serialization_dir=folder)
    host = host_runtime().Interpreter(model_path=UNET, experimental_delegates=[plugin])
    host.allocate_tensors()
    state = delegate.delegate_state(plugin)
    (recorded,) = state.cpu_choices
    assert recorded["source"] == "record" and recorded["measured"] == measured.as_dict()
    assert recorded["decision"] == ("cpu" if cpu_faster else "delegate")
    assert bool(state.delegated_nodes) is not cpu_faster
    inputs = uniform_inputs(host, 3)
    assert_outputs_close(invoke_with(host, inputs), invoke_with(_cpu(), inputs), TOLERANCE)


@pytest.mark.cpu_choice_default
@pytest.mark.parametrize("cpu_faster", [True, False])
def test_a_recorded_measurement_decides_the_partition(tmp_path, cpu_faster):
    folder = str(tmp_path)
    first = delegate.Interpreter(UNET, background_compile="off", serialization_dir=folder)
    first.allocate_tensors()
    assert first.opencl.delegated_nodes and measured_choice.applies(first.opencl)
    measured = Measured(2.0, 1.0, 4, 1) if cpu_faster else Measured(1.0, 2.0, 4, 1)
    assert record_measurement(first.opencl, measured) == 1
    assert not measured_choice.applies(first.opencl)  # measured now
    later = delegate.Interpreter(UNET, background_compile="off", serialization_dir=folder)
    later.allocate_tensors()
    assert bool(later.opencl.delegated_nodes) is not cpu_faster
    assert not measured_choice.applies(later.opencl)
    reasons = set(later.opencl.unsupported.values())
    assert (reasons and all("measured on this device" in why for why in reasons)) or not cpu_faster
    inputs = uniform_inputs(later, 3)
    assert_outputs_close(invoke_with(later, inputs), invoke_with(_cpu(), inputs), TOLERANCE)
    # under background compile the recorded decision also picks the CPU interpreter's threads
    background = delegate.Interpreter(UNET, background_compile="on", serialization_dir=folder)
    background.allocate_tensors()
    assert background.wait_for_delegate() is not cpu_faster
    assert background.path is (ExecutionPath.CPU_FASTER if cpu_faster else ExecutionPath.DELEGATED)
    assert background.opencl.measured is None  # not measured again
    assert_outputs_close(invoke_with(background, inputs), invoke_with(_cpu(), inputs), TOLERANCE)


def test_cpu_when_faster_false_measures_nothing(gate, tmp_path):
    it = delegate.Interpreter(UNET, background_compile="on", cpu_when_faster="false", serialization_dir=str(tmp_path))
    it.allocate_tensors()
    gate.set()
    assert it.wait_for_delegate() and it.path is ExecutionPath.DELEGATED
    assert it.opencl.measured is None and not measured_choice.applies(it.opencl)


@pytest.mark.parametrize(("fewer_ms", "chosen"), [(2.0, True), (30.0, False)])
def test_with_nothing_delegated_only_the_thread_count_is_measured(fewer_ms, chosen):
    from delegate.plugin import DelegateOptions, DelegateState

    state = DelegateState(DelegateOptions())  # nothing delegated, no partition the rule applies to
    state.report_for(1).cpu_rule = True  # the rule applies (a CPU device, cpu_when_faster auto)
    made = {}

    def make_cpu(threads, shapes):
        assert shapes == [(0, (1, 4)), (1, (2,))]  # the delegated interpreter's input shapes
        made[threads] = _Sleeper(fewer_ms)
        return made[threads]

    measure = measured_choice.measurer(state, make_cpu, (2, 1))
    outcome = measure(_Sleeper(10.0))
    assert list(made) == [1]
    if chosen:
        assert outcome.threads_only and outcome.cpu is made[1] and outcome.measured.cpu_threads == 1
        assert "nothing delegated" in outcome.why()
    else:
        assert outcome is None
    assert state.measured is None  # no partition holds it
    assert measured_choice.measurer(state, make_cpu, (1, 1))(_Sleeper(10.0)) is None  # nothing to choose
    state.subgraphs[0].cpu_rule = False  # cpu_when_faster=false: nothing measured
    assert measured_choice.measurer(state, make_cpu, (2, 1))(_Sleeper(10.0)) is None


@pytest.mark.cpu_choice_default
def test_run_reports_where_the_measurement_sent_the_model(gate):
    from delegate.model_run import format_result, run_model

    gate.set()
    result = run_model(UNET, {"background_compile": "on"}, runs=2, progress=False)
    text = format_result(result)
    measured = [c for c in result["cpu_choices"] if c.get("measured")]
    assert measured, "the run measured the model"
    cpu_faster = measured[0]["decision"] == "cpu"
    assert result["execution_path"] == ("cpu faster" if cpu_faster else "delegated")
    assert ("these outputs are TFLite's own" in text) == cpu_faster
    assert ("this interpreter (on TFLite's CPU kernels)" in text) == cpu_faster
    assert "measured, the model took" in text


@pytest.mark.cpu_choice_default
def test_without_background_compile_the_first_invoke_measures_and_keeps_the_callers_inputs(tmp_path):
    it = delegate.Interpreter(UNET, background_compile="off", serialization_dir=str(tmp_path))
    it.allocate_tensors()
    assert it.path is ExecutionPath.DELEGATED and it.opencl.measured is None
    inputs = uniform_inputs(it, 5)
    got = invoke_with(it, inputs)  # the measurement runs first, on its own inputs; the caller's are put back
    measured = it.opencl.measured
    assert measured is not None
    assert it.path is (ExecutionPath.CPU_FASTER if measured.cpu_faster else ExecutionPath.DELEGATED)
    assert (it.cpu_faster_cause is not None) == measured.cpu_faster
    assert_outputs_close(got, invoke_with(_cpu(), inputs), TOLERANCE)
    it.invoke()  # no second measurement
    assert it.opencl.measured is measured


@pytest.mark.parametrize("stateful", [True, False])
def test_the_first_invoke_measures_only_a_model_that_keeps_no_state(stateful):
    from .test_variables import _streaming_model

    host = host_runtime()
    made = host.Interpreter(model_content=_streaming_model()) if stateful else host.Interpreter(model_path=UNET)
    made.allocate_tensors()
    seen = []

    def measure(interpreter):
        seen.append(interpreter)
        for d in interpreter.get_input_details():  # the measurement's own inputs
            interpreter.set_tensor(d["index"], np.full(d["shape"], 3, d["dtype"]))
        return None

    it = DelegatedInterpreter(made, measure=measure)
    inputs = [(d["index"], np.ones(d["shape"], d["dtype"])) for d in it.get_input_details()]
    got = invoke_with(it, inputs)
    assert seen == ([] if stateful else [made])
    reference = host.Interpreter(model_content=_streaming_model()) if stateful else _cpu()
    reference.allocate_tensors()
    # the caller's inputs, put back after the measurement
    assert_outputs_close(got, invoke_with(reference, inputs), TOLERANCE)
