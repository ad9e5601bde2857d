"""WHILE loops with a trip count known before they run, unrolled into the calling graph's
partition (delegate/compiler/while_loop.py, delegate/plugin/loops.py): the Keras 3 RNN models of
tests/models, a loop built here, and the loops that stay on TFLite's CPU kernels with their reason.

Oracle: TFLite's builtin CPU kernels on the same inputs, F32 within 1e-4."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import delegate
from delegate.api import host_runtime
from delegate.compiler.claim import EXCLUDED
from delegate.compiler.graph import Builtin
from delegate.compiler.while_loop import MAX_UNROLLED_NODES
from tests.helpers import assert_outputs_close, invoke_with, uniform_inputs
from tests.tflite_builder import Op, Subgraph, T, build_model

MODELS = Path(__file__).resolve().parent / "models"
F32_TOLERANCE = 1e-4
WHILE = 119
#: model stem -> its nodes (every subgraph's): all delegated, in one partition
KERAS3_RNNS = {"lstm_keras3": 33, "gru_keras3": 28, "bilstm_keras3": 67}

pytestmark = pytest.mark.opencl


def _run(path: Path, seed: int = 0, **options: Any) -> tuple[list[np.ndarray], list[np.ndarray], Any]:
    """``path``'s outputs through the delegate (``options``, cpu_when_faster off) and through TFLite's
    builtin CPU kernels on seeded inputs, and the delegate's state."""
    host = host_runtime()
    d = delegate.load_delegate(cpu_when_faster="false", **options)
    gpu = host.Interpreter(model_path=str(path), experimental_delegates=[d])
    cpu = host.Interpreter(
        model_path=str(path), experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    gpu.allocate_tensors()
    cpu.allocate_tensors()
    inputs = [(i, v * 2 - 1) for i, v in uniform_inputs(cpu, seed)]  # [-1, 1): both signs through the gates
    got = invoke_with(gpu, inputs)
    got_again = invoke_with(gpu, inputs)  # a loop starts over at every invoke: nothing carried
    assert_outputs_close(got_again, got, 0.0)
    return got, invoke_with(cpu, inputs), delegate.delegate_state(d)


@pytest.mark.parametrize("stem", sorted(KERAS3_RNNS))
def test_keras3_rnn_runs_unrolled_in_one_partition(stem: str):
    path = MODELS / f"{stem}.tflite"
    got, want, state = _run(path, model_file=str(path))
    assert state.total_nodes == KERAS3_RNNS[stem]
    assert len(state.delegated_nodes) == state.total_nodes, state.unsupported
    assert len(state.partitions) == 1
    assert_outputs_close(got, want, F32_TOLERANCE)
    inlined = [r for r in state.subgraphs if r.inlined_into]
    assert len(inlined) == len(state.subgraphs) - 1 and all(not r.partitions for r in inlined)


def test_delegate_interpreter_passes_its_model_file():
    interpreter = delegate.Interpreter(str(MODELS / "gru_keras3.tflite"), cpu_when_faster="false")
    interpreter.allocate_tensors()
    state = interpreter.opencl
    assert len(state.delegated_nodes) == state.total_nodes == KERAS3_RNNS["gru_keras3"], state.unsupported


def test_without_model_file_the_file_tflite_mapped_is_read():
    """Any host: TFLite maps a model loaded from a path, and the plugin reads the loop's subgraphs there."""
    path = MODELS / "lstm_keras3.tflite"
    got, want, state = _run(path)
    assert len(state.delegated_nodes) == state.total_nodes == KERAS3_RNNS["lstm_keras3"], state.unsupported
    assert_outputs_close(got, want, F32_TOLERANCE)


def test_a_model_given_as_bytes_without_model_file_keeps_its_loop_on_cpu_and_says_why():
    path = MODELS / "lstm_keras3.tflite"
    host = host_runtime()
    d = delegate.load_delegate(cpu_when_faster="false")
    gpu = host.Interpreter(model_content=path.read_bytes(), experimental_delegates=[d])
    cpu = host.Interpreter(
        model_path=str(path), experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    gpu.allocate_tensors()
    cpu.allocate_tensors()
    why = delegate.delegate_state(d).unsupported["while_1"]
    assert "not loaded from a file" in why and "model_file=PATH" in why, why
    inputs = uniform_inputs(cpu, 0)
    assert_outputs_close(invoke_with(gpu, inputs), invoke_with(cpu, inputs), F32_TOLERANCE)


def test_exclude_ops_while_keeps_the_loop_on_cpu():
    path = MODELS / "gru_keras3.tflite"
    got, want, state = _run(path, model_file=str(path), exclude_ops="WHILE")
    whiles = [name for name in state.unsupported if name.startswith("while")]
    assert whiles and all(state.unsupported[name] == EXCLUDED for name in whiles), state.unsupported
    assert_outputs_close(got, want, F32_TOLERANCE)


def test_a_loop_whose_body_has_an_excluded_op_stays_on_cpu_naming_that_op():
    path = MODELS / "gru_keras3.tflite"
    got, want, state = _run(path, model_file=str(path), exclude_ops="TANH")
    loops = [name for name in state.unsupported if name.startswith("while")]
    assert len(loops) == 1, state.unsupported
    why = state.unsupported[loops[0]]
    assert why.startswith("unrolled (") and "/tanh_" in why and "cannot run on the delegate" in why, why
    assert not any(name.startswith("tanh") for name in state.unsupported), state.unsupported  # no TFLite nodes
    assert_outputs_close(got, want, F32_TOLERANCE)


def _rnn(steps: int, units: int, features: int, *, runtime_trips: bool = False) -> bytes:
    """A simple RNN as a WHILE: h = tanh(x[i] W + h U + b) for i < steps, x [steps, 1, features]
    the input, h [1, units] from zeros; outputs h and the final counter. Loop values (i, h, x), i
    an int32 counter from a constant 0; with ``runtime_trips`` the loop runs to a model input
    ``n`` (a fourth loop value) instead of the constant ``steps``."""
    rng = np.random.default_rng(steps * 100 + units)
    w = rng.uniform(-0.5, 0.5, (units, features)).astype(np.float32)
    u = rng.uniform(-0.5, 0.5, (units, units)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, (units,)).astype(np.float32)
    scalar = np.int32
    values = [T(()), T((1, units)), T((steps, 1, features))]
    values[0].dtype = scalar
    if runtime_trips:
        values.append(T((), dtype=scalar))
    n = len(values)
    # condition: i < steps (or i < n)
    cond = [*(T(v.shape, dtype=v.dtype) for v in values), T((), np.array(steps, scalar), dtype=scalar)]
    cond.append(T((), dtype=np.bool_))
    limit = 3 if runtime_trips else n
    cond_ops = [Op(Builtin.LESS, [0, limit], [n + 1])]
    # body: 0.. n-1 inputs; then 1, W, U, b constants; i + 1, x[i], x W, h U, sum, + b, tanh
    body = [*(T(v.shape, dtype=v.dtype) for v in values)]
    one, wi, ui, bi = n, n + 1, n + 2, n + 3
    body += [T((), np.array(1, scalar), dtype=scalar), T(w.shape, w), T(u.shape, u), T(b.shape, b)]
    nxt, xi, xw, hu, total, h1 = range(n + 4, n + 10)
    body += [T((), dtype=scalar), T((1, features)), T((1, units)), T((1, units)), T((1, units)), T((1, units))]
    fc = ("FullyConnectedOptions", {})
    body_ops = [
        Op(Builtin.ADD, [0, one], [nxt], ("AddOptions", {})),
        Op(Builtin.GATHER, [2, 0], [xi], ("GatherOptions", {"Axis": 0})),
        Op(Builtin.FULLY_CONNECTED, [xi, wi, bi], [xw], fc),
        Op(Builtin.FULLY_CONNECTED, [1, ui, -1], [hu], fc),
        Op(Builtin.ADD, [xw, hu], [total], ("AddOptions", {})),
        Op(Builtin.TANH, [total], [h1]),
    ]
    body_outputs = [nxt, h1, 2, *([3] if runtime_trips else [])]
    # main: inputs x (and n); i0 = 0, h0 = zeros; WHILE; output h
    h0 = np.zeros((1, units), np.float32)
    main = [T((steps, 1, features)), T((), np.array(0, scalar), dtype=scalar), T((1, units), h0)]
    main += [T((), dtype=scalar), T((1, units)), T((steps, 1, features))]
    loop_in, loop_out, inputs = [1, 2, 0], [3, 4, 5], [0]
    if runtime_trips:
        main += [T((), dtype=scalar), T((), dtype=scalar)]
        loop_in, loop_out, inputs = [*loop_in, 6], [*loop_out, 7], [0, 6]
    indices = {"CondSubgraphIndex": 1, "BodySubgraphIndex": 2}
    ops = [Op(WHILE, loop_in, loop_out, ("WhileOptions", indices))]
    loop_inputs = list(range(n))
    subgraphs = (Subgraph(cond, cond_ops, loop_inputs, [n + 1]), Subgraph(body, body_ops, loop_inputs, body_outputs))
    return build_model(main, ops, inputs, [4, 3], subgraphs)


@pytest.mark.parametrize(("steps", "units", "features"), [(5, 8, 3), (1, 4, 4)])
def test_a_built_rnn_loop_is_unrolled(tmp_path: Path, steps: int, units: int, features: int):
    path = tmp_path / "rnn.tflite"
    path.write_bytes(_rnn(steps, units, features))
    got, want, state = _run(path, model_file=str(path))
    assert len(state.delegated_nodes) == state.total_nodes == 1 + 1 + 6, state.unsupported
    assert len(state.partitions) == 1
    assert_outputs_close(got, want, F32_TOLERANCE)
    assert got[1] == want[1] == steps  # the final counter, a constant once unrolled, is written


def test_a_loop_to_a_runtime_count_stays_on_cpu_with_its_reason(tmp_path: Path):
    path = tmp_path / "rnn.tflite"
    path.write_bytes(_rnn(4, 8, 3, runtime_trips=True))
    host = host_runtime()
    d = delegate.load_delegate(cpu_when_faster="false", model_file=str(path))
    gpu = host.Interpreter(model_path=str(path), experimental_delegates=[d])
    cpu = host.Interpreter(
        model_path=str(path), experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    gpu.allocate_tensors()
    cpu.allocate_tensors()
    state = delegate.delegate_state(d)
    assert "trip count is not known before it runs" in state.unsupported["while_0"], state.unsupported
    x = np.random.default_rng(3).uniform(-1, 1, (4, 1, 3)).astype(np.float32)
    for trips in (0, 2, 4):
        feeds = [(gpu.get_input_details()[0]["index"], x), (gpu.get_input_details()[1]["index"], np.int32(trips))]
        assert_outputs_close(invoke_with(gpu, feeds), invoke_with(cpu, feeds), F32_TOLERANCE)


def test_a_loop_past_the_unrolling_bound_stays_on_cpu_with_its_reason(tmp_path: Path):
    steps = MAX_UNROLLED_NODES // 4  # five copies a trip (the counter's ADD folds, the GATHER's index too)
    path = tmp_path / "rnn.tflite"
    path.write_bytes(_rnn(steps, 4, 2))
    got, want, state = _run(path, model_file=str(path))
    assert f"more than {MAX_UNROLLED_NODES} nodes" in state.unsupported["while_0"], state.unsupported
    assert_outputs_close(got, want, F32_TOLERANCE)


def test_a_model_file_of_another_model_is_refused(tmp_path: Path):
    path, other = tmp_path / "rnn.tflite", tmp_path / "other.tflite"
    path.write_bytes(_rnn(5, 8, 3))
    other.write_bytes(_rnn(5, 8, 3, runtime_trips=True))
    got, want, state = _run(path, model_file=str(other))
    why = state.unsupported["while_0"]
    assert "model_file is not the model this interpreter runs" in why or "loop value" in why, why
    assert_outputs_close(got, want, F32_TOLERANCE)
