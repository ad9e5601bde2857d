"""UNIDIRECTIONAL_SEQUENCE_LSTM (ops/lstm.py) through the delegate against TFLite's builtin kernel,
over successive invokes: the state variables carry each invoke's last h and c into the next, as
TFLite's kernel leaves them, until the interpreter resets its variables."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import Activation, Builtin, Graph, Node, Tensor
from delegate.compiler.ops.lstm import OP as LSTM

from .helpers import assert_outputs_close, invoke_with, uniform_inputs
from .test_ops import PROGRAM_CACHE, TOLERANCE
from .tflite_builder import Op, T, build_model

INVOKES = 3
#: inputs are uniform in [0, 1): on [-1, 1) the sums reach the range where sigmoid and tanh saturate less
_SPREAD = 2.0


def _lstm_model(
    batch: int,
    steps: int,
    channels: int,
    units: int,
    *,
    time_major: bool = False,
    cell_clip: float = 0.0,
    activation: int = Activation.TANH,
    peephole: bool = False,
    seed: int = 0,
) -> bytes:
    """x -> UNIDIRECTIONAL_SEQUENCE_LSTM (random weights, as tf_keras lays them out: 24 inputs, the
    optional ones absent) -> y; the states are variable tensors starting at zero."""
    rng = np.random.default_rng(seed)
    x_shape = (steps, batch, channels) if time_major else (batch, steps, channels)
    y_shape = (*x_shape[:2], units)

    def weights(*shape: int) -> T:
        return T(shape, rng.uniform(-0.6, 0.6, size=shape).astype(np.float32))

    tensors = [T(x_shape)]
    tensors += [weights(units, channels) for _ in range(4)]  # 1-4: input to gate weights
    tensors += [weights(units, units) for _ in range(4)]  # 5-8: recurrent weights
    tensors += [weights(units) for _ in range(4)]  # 9-12: biases
    tensors += [T((batch, units), variable=True), T((batch, units), variable=True), T(y_shape)]  # 13-15
    tensors += [weights(units)]  # 16: peephole weights (one tensor for the three gates), when taken
    peepholes = [16, 16, 16] if peephole else [-1, -1, -1]
    inputs = [0, 1, 2, 3, 4, 5, 6, 7, 8, *peepholes, 9, 10, 11, 12, -1, -1, 13, 14]
    inputs += [-1, -1, -1, -1]
    options = {"FusedActivationFunction": int(activation), "CellClip": cell_clip, "TimeMajor": time_major}
    op = Op(Builtin.UNIDIRECTIONAL_SEQUENCE_LSTM, inputs, [15], ("UnidirectionalSequenceLSTMOptions", options))
    return build_model(tensors, [op], [0], [15])


def _interpreters(model: bytes, **options):
    import delegate
    from delegate.api import host_runtime

    host = host_runtime()
    d = delegate.load_delegate(program_cache=PROGRAM_CACHE, cpu_when_faster="false", **options)
    gpu = host.Interpreter(model_content=model, experimental_delegates=[d])
    cpu = host.Interpreter(
        model_content=model, experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    for interpreter in (gpu, cpu):
        interpreter.allocate_tensors()
    return gpu, cpu, delegate.delegate_state(d)


def _spread(inputs: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
    return [(i, (v * _SPREAD - 1.0).astype(np.float32)) for i, v in inputs]


def _invokes_agree(gpu, cpu, tolerance: float, invokes: int = INVOKES, first_seed: int = 0) -> None:
    """``invokes`` invokes, each on new inputs: outputs and both states within ``tolerance``."""
    for step in range(invokes):
        inputs = _spread(uniform_inputs(cpu, first_seed + step))
        got, want = invoke_with(gpu, inputs), invoke_with(cpu, inputs)
        # the states (variable tensors 13, 14) are what the next invoke starts from
        got += [gpu.get_tensor(13), gpu.get_tensor(14)]
        want += [cpu.get_tensor(13), cpu.get_tensor(14)]
        assert np.abs(want[1]).max() > 0, "the state was not updated"
        try:
            assert_outputs_close(got, want, tolerance)
        except AssertionError as error:
            raise AssertionError(f"invoke {step}: {error}") from error


@pytest.mark.opencl
@pytest.mark.parametrize(
    ("batch", "steps", "channels", "units", "time_major", "cell_clip"),
    [
        (1, 5, 3, 4, False, 0.0),
        (1, 12, 8, 16, False, 0.0),
        (2, 7, 5, 12, False, 0.0),
        (2, 6, 8, 16, True, 0.0),
        (1, 4, 13, 64, True, 0.0),
        (2, 9, 6, 33, False, 0.5),
        (2, 5, 7, 64, True, 0.8),
    ],
)
def test_lstm_matches_tflite_over_successive_invokes(batch, steps, channels, units, time_major, cell_clip):
    model = _lstm_model(batch, steps, channels, units, time_major=time_major, cell_clip=cell_clip, seed=units)
    gpu, cpu, state = _interpreters(model)
    assert len(state.delegated_nodes) == 1, state.unsupported
    _invokes_agree(gpu, cpu, TOLERANCE["F32"])


@pytest.mark.opencl
def test_lstm_in_half_precision():
    """F16 storage rounds the inputs, the weights and the states handed back at every invoke to 11
    bits; the gates' sums run in float (measured: 9e-4 of the largest value at most over 3 invokes)."""
    gpu, cpu, state = _interpreters(_lstm_model(2, 8, 6, 24, seed=5), precision="F16")
    assert len(state.delegated_nodes) == 1, state.unsupported
    _invokes_agree(gpu, cpu, 2e-3)


@pytest.mark.opencl
def test_lstm_with_texture_storage_keeps_its_states_in_buffers():
    """Input and output in textures; the states, read and written by the one kernel, in buffers."""
    gpu, cpu, state = _interpreters(_lstm_model(2, 5, 6, 8, time_major=True, seed=4), storage_type="TEXTURE_2D")
    assert len(state.delegated_nodes) == 1, state.unsupported
    _invokes_agree(gpu, cpu, TOLERANCE["F32"])


@pytest.mark.opencl
def test_lstm_state_resets_with_the_interpreters_variables():
    """reset_all_variables zeroes the state in TFLite's tensors, where the delegate reads it."""
    gpu, cpu, _ = _interpreters(_lstm_model(1, 6, 4, 8, seed=2))
    _invokes_agree(gpu, cpu, TOLERANCE["F32"], invokes=2)
    for interpreter in (gpu, cpu):
        interpreter.reset_all_variables()
    _invokes_agree(gpu, cpu, TOLERANCE["F32"], invokes=2, first_seed=10)


@pytest.mark.opencl
def test_lstm_with_a_peephole_stays_on_cpu_and_says_why():
    _, _, state = _interpreters(_lstm_model(1, 4, 3, 4, peephole=True))
    assert not state.delegated_nodes
    assert any("peephole" in why for why in state.unsupported.values()), state.unsupported


def _graph(activation: int = Activation.TANH, variable: bool = True, cifg: bool = False) -> Graph:
    rng = np.random.default_rng(0)
    tensors = {0: Tensor(0, 1, (1, 5, 3))}
    for i in range(1, 5):
        tensors[i] = Tensor(i, 1, (4, 3), is_constant=True, constant=rng.standard_normal((4, 3)))
    for i in range(5, 9):
        tensors[i] = Tensor(i, 1, (4, 4), is_constant=True, constant=rng.standard_normal((4, 4)))
    for i in range(12, 16):
        tensors[i] = Tensor(i, 1, (4,), is_constant=True, constant=rng.standard_normal(4))
    tensors[18] = Tensor(18, 1, (1, 4), is_variable=variable)
    tensors[19] = Tensor(19, 1, (1, 4), is_variable=variable)
    tensors[30] = Tensor(30, 1, (1, 5, 4))
    inputs = [0, -1 if cifg else 1, 2, 3, 4, 5, 6, 7, 8, -1, -1, -1, -1 if cifg else 12, 13, 14, 15, -1, -1, 18, 19]
    params = {"activation": activation, "cell_clip": 0.0, "proj_clip": 0.0, "time_major": False}
    node = Node(0, Builtin.UNIDIRECTIONAL_SEQUENCE_LSTM, 1, tuple(inputs), (30,), params)
    return Graph(tensors, {0: node})


def test_what_stays_on_cpu_is_named():
    taken = _graph()
    assert LSTM.check(taken.nodes[0], taken) is None
    relu = _graph(activation=Activation.RELU)
    assert "activation" in (LSTM.check(relu.nodes[0], relu) or "")
    plain = _graph(variable=False)
    assert "not a variable tensor" in (LSTM.check(plain.nodes[0], plain) or "")
    cifg = _graph(cifg=True)
    assert "CIFG" in (LSTM.check(cifg.nodes[0], cifg) or "")


@pytest.mark.opencl
def test_delegate_interpreter_keeps_an_lstm_in_one_interpreter():
    """Neither background compile nor the measured choice may run the model in another interpreter
    or invoke it before the caller does: either would leave the state elsewhere or moved."""
    import delegate

    model = _lstm_model(1, 6, 4, 8, seed=6)
    it = delegate.Interpreter(
        model_content=model, program_cache=PROGRAM_CACHE, cpu_when_faster="false", background_compile="auto"
    )
    assert it.opencl.background_compile.path == "off"
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in it.opencl.background_compile.cause
    _, cpu, _ = _interpreters(model)
    it.allocate_tensors()
    _invokes_agree(it, cpu, TOLERANCE["F32"])
