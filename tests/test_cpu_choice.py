"""The rule cpu_when_faster (delegate/compiler/cpu_choice.py): a partition the delegate cannot run
faster than TFLite's CPU kernels stays there by default on a CPU device, says why, and is delegated
with the option off or on a GPU."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import delegate
from delegate._integrity import entry_key, seal, unseal
from delegate.cache import write_record
from delegate.calibration import POCL_CPU
from delegate.compiler.cpu_choice import estimate, node_macs
from delegate.compiler.device_policy import cpu_when_faster
from delegate.compiler.graph import Builtin, Graph, Node, Tensor
from delegate.plugin.loader import Target, open_target
from delegate.plugin.options import DelegateOptions
from delegate.runtime.device import describe, select_device

from .helpers import delegate_and_builtin, shared_path
from .plugin_testing import inject
from .tflite_builder import Op, T, build_model

pytestmark = [pytest.mark.opencl, pytest.mark.cpu_choice_default]

RELU = ("FullyConnectedOptions", {"FusedActivationFunction": 1})


def sine_like() -> bytes:
    """tflite-micro's sine model's shape: 1 -> 16 -> 16 -> 1, three FULLY_CONNECTED layers."""
    rng = np.random.default_rng(7)
    sizes = [(16, 1), (16, 16), (1, 16)]
    tensors, ops = [T((1, 1))], []
    for k, (cout, cin) in enumerate(sizes):
        src = len(tensors) - 1
        w, b = rng.uniform(-1, 1, (cout, cin)), rng.uniform(-1, 1, (cout,))
        tensors += [T(w.shape, w.astype(np.float32)), T(b.shape, b.astype(np.float32)), T((1, cout))]
        options = RELU if k < 2 else ("FullyConnectedOptions", {})
        ops.append(Op(Builtin.FULLY_CONNECTED, [src, src + 1, src + 2], [src + 3], options))
    return build_model(tensors, ops, [0], [len(tensors) - 1])


@pytest.fixture(scope="module")
def programs() -> str:
    """The default program cache, as users have it (tests/test_ops.py: PROGRAM_CACHE)."""
    return "default"


def _feeds() -> list[np.ndarray]:
    return [np.array([[0.7]], np.float32)]


def test_a_tiny_model_stays_on_cpu_by_default_on_pocl_saying_why(programs):
    assert not describe(select_device()).is_gpu  # the default device here: PoCL
    # "auto" is the default (test_the_option_and_the_device_default); the helper's default is off
    got, want, state = delegate_and_builtin(sine_like(), _feeds(), programs, cpu_when_faster="auto")
    assert state.delegated_nodes == [] and state.partitions == []
    assert len(state.unsupported) == 3
    for why in state.unsupported.values():
        assert why.startswith("faster on TFLite's CPU kernels") and "cpu_when_faster=false" in why
    (choice,) = state.cpu_choices
    assert choice["decision"] == "cpu" and choice["applied"]
    assert choice["macs"] == 16 + 16 * 16 + 16 and choice["kernels"] == 3
    assert choice["delegate_us"] > choice["cpu_us"]
    np.testing.assert_array_equal(got[0], want[0])  # the host's CPU kernels ran it


def test_the_option_off_delegates_it_and_keeps_the_figures(programs):
    got, want, state = delegate_and_builtin(sine_like(), _feeds(), programs, cpu_when_faster="false")
    assert len(state.delegated_nodes) == 3 and state.unsupported == {}
    (choice,) = state.cpu_choices
    assert choice["decision"] == "delegate" and not choice["applied"]
    assert choice["delegate_us"] > choice["cpu_us"]  # the figures say it would have stayed
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-4 * max(float(np.abs(want[0]).max()), 1e-6))


def test_on_a_gpu_the_rule_is_off_unless_asked(programs, monkeypatch):
    def gpu(request):
        real = open_target(request)
        return Target(real.device, dataclasses.replace(real.info, is_gpu=True))

    inject(monkeypatch, target=gpu)
    _, _, state = delegate_and_builtin(sine_like(), _feeds(), programs, cpu_when_faster="auto")
    assert len(state.delegated_nodes) == 3 and not state.cpu_choices[0]["applied"]
    _, _, state = delegate_and_builtin(sine_like(), _feeds(), programs, cpu_when_faster="true")
    assert state.delegated_nodes == [] and state.cpu_choices[0]["decision"] == "cpu"


def test_the_option_and_the_device_default():
    assert DelegateOptions().cpu_when_faster is None
    assert [DelegateOptions.parse({"cpu_when_faster": v}).cpu_when_faster for v in ("auto", "true", "0")] == [
        None,
        True,
        False,
    ]
    with pytest.raises(ValueError, match="cpu_when_faster must be auto, true or false, not 'maybe'"):
        delegate.load_delegate(cpu_when_faster="maybe")
    info = describe(select_device())
    cpu, gpu = dataclasses.replace(info, is_gpu=False), dataclasses.replace(info, is_gpu=True)
    assert [cpu_when_faster(cpu, None), cpu_when_faster(gpu, None)] == [True, False]
    assert [cpu_when_faster(gpu, True), cpu_when_faster(cpu, False)] == [True, False]


def _graph(cin: int, size: int, cout: int) -> Graph:
    """A 3x3 CONV_2D (SAME) of a size x size x cin input, then a RELU: a graph by hand."""
    tensors = {
        0: Tensor(0, 1, (1, size, size, cin)),
        1: Tensor(1, 1, (cout, 3, 3, cin), is_constant=True),
        2: Tensor(2, 1, (cout,), is_constant=True),
        3: Tensor(3, 1, (1, size, size, cout)),
        4: Tensor(4, 1, (1, size, size, cout)),
    }
    nodes = {0: Node(0, Builtin.CONV_2D, 1, (0, 1, 2), (3,)), 1: Node(1, Builtin.RELU, 1, (3,), (4,))}
    return Graph(tensors, nodes)


def test_the_estimate_counts_work_and_kernels():
    small, large = _graph(4, 4, 4), _graph(64, 56, 64)
    assert node_macs(large.nodes[0], large) == 56 * 56 * 64 * 64 * 9
    assert node_macs(large.nodes[1], large) == 0
    tiny = estimate(small, [0, 1], applied=True, calibration=POCL_CPU)
    big = estimate(large, [0, 1], applied=True, calibration=POCL_CPU)
    # the RELU links into the convolution's kernel: one kernel, two nodes on CPU
    assert (tiny.kernels, tiny.cpu_nodes) == (1, 2)
    assert tiny.delegate_us == big.delegate_us == POCL_CPU.invoke_us + POCL_CPU.kernel_us
    assert tiny.on_cpu and not big.on_cpu
    assert big.cpu_us > 1000 * tiny.cpu_us
    assert not estimate(small, [0, 1], applied=False, calibration=POCL_CPU).on_cpu


@pytest.mark.parametrize("name,delegated", [("mobilenet_v2", 65), ("small_cnn", 0), ("elementwise_mix", 0)])
def test_shared_models_with_the_defaults(name, delegated, programs):
    """MobileNetV2 is still delegated whole; the two small models (tens of microseconds on XNNPACK,
    measured faster there: benchmarks/RESULTS.md, "CPU choice") stay on CPU."""
    interpreter = delegate.Interpreter(str(shared_path("models", f"{name}.tflite")), program_cache=programs)
    interpreter.allocate_tensors()
    state = interpreter.opencl
    assert len(state.delegated_nodes) == delegated
    (choice,) = state.cpu_choices
    assert choice["decision"] == ("delegate" if delegated else "cpu") and choice["applied"]
    assert all(why.startswith("faster on TFLite's CPU kernels") for why in state.unsupported.values())


def _records(folder) -> list:
    return sorted(p for p in folder.iterdir() if p.suffix == ".json")


def test_the_decision_and_its_figures_are_recorded_with_the_serialized_partitions(programs, tmp_path):
    """With a serialization folder the first Prepare writes each candidate partition's record
    (sealed JSON) and later ones read it back instead of estimating: a record written with other
    figures (as a measurement would give) decides."""
    folder = tmp_path / "ser"
    folder.mkdir()
    options = dict(cpu_when_faster="auto", serialization_dir=str(folder), model_token="sine")
    _, _, first = delegate_and_builtin(sine_like(), _feeds(), programs, **options)
    (record,) = _records(folder)
    assert record.name.startswith("sine-")
    assert not list(folder.glob("*.ctx"))  # left on CPU: the record is all that is serialized
    (choice,) = first.cpu_choices
    assert choice["source"] == "estimate" and choice["decision"] == "cpu"
    written = json.loads(bytes(unseal(record.read_bytes(), "record")))
    assert written == {k: v for k, v in choice.items() if k not in ("source", "subgraph", "names")}

    _, _, second = delegate_and_builtin(sine_like(), _feeds(), programs, **options)
    assert second.cpu_choices[0] == {**choice, "source": "record"}

    # figures as a measurement might give them: the record, not the estimate, decides
    figures = {**written, "cpu_us": written["delegate_us"] + 100.0, "decision": "delegate"}
    write_record(figures, record, entry_key(record.read_bytes()))
    got, want, third = delegate_and_builtin(sine_like(), _feeds(), programs, **options)
    assert third.cpu_choices[0]["source"] == "record" and third.cpu_choices[0]["decision"] == "delegate"
    assert len(third.delegated_nodes) == 3 and len(list(folder.glob("*.ctx"))) == 1
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-4 * max(float(np.abs(want[0]).max()), 1e-6))


def _resealed(**changes: object):
    return lambda data, written: seal(json.dumps({**written, **changes}).encode(), entry_key(data))


#: ways a record goes bad: each must be refused, estimated again and replaced (sealed with its own
#: key, so that it is the content that is refused)
DAMAGES = {
    "seal": lambda data, written: data[:-3] + b"xyz",
    "array": lambda data, written: seal(b"[1, 2]", entry_key(data)),
    "json": lambda data, written: seal(b"{not json", entry_key(data)),
    "key": lambda data, written: seal(json.dumps(written).encode(), {**entry_key(data), "key": "0" * 64}),
    "nodes": _resealed(nodes=[0, 1, 9]),
    "count": _resealed(kernels=-1),
    "nan": _resealed(cpu_us=float("nan")),
    "applied": _resealed(applied=1),
    "decision": _resealed(decision="delegate"),
}


@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_an_unusable_record_is_estimated_again_and_replaced(programs, tmp_path, damage):
    folder = tmp_path / "ser"
    folder.mkdir()
    options = dict(cpu_when_faster="auto", serialization_dir=str(folder), model_token="sine")
    delegate_and_builtin(sine_like(), _feeds(), programs, **options)
    (record,) = _records(folder)
    data = record.read_bytes()
    written = json.loads(bytes(unseal(data, "record")))
    record.write_bytes(damage(data, written))
    with pytest.warns(UserWarning, match="cache record .* is unusable .*; estimating again"):
        _, _, state = delegate_and_builtin(sine_like(), _feeds(), programs, **options)
    assert state.cpu_choices[0]["source"] == "estimate" and state.cpu_choices[0]["decision"] == "cpu"
    assert record.read_bytes() == data  # replaced by a good one
