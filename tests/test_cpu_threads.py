"""TFLite's threads beside the delegate on a CPU device (delegate/cpu_threads.py): delegate.Interpreter
gives the nodes TFLite runs one thread per core unless the model is too small to share, says what
it chose, and leaves a caller's num_threads (and GPUs) alone."""

from __future__ import annotations

import numpy as np
import pytest

import delegate
from delegate import api
from delegate.api import host_runtime
from delegate.compiler.graph import Builtin
from delegate.cpu_threads import PARALLEL_MIN_WORK_US, model_work_us, tflite_threads
from delegate.model_run import format_result, run_model

from .helpers import shared_path
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl


class _Wrapper:
    """The method of a host Interpreter's native wrapper that cpu_threads reads."""

    def __init__(self, tensors: dict[int, tuple[int, ...]]):
        self._tensors = tensors

    def TensorSize(self, index: int, subgraph: int) -> np.ndarray:
        assert subgraph == 0
        return np.array(self._tensors[index], np.int32)


class _Details:
    """What cpu_threads reads of a host Interpreter: its nodes, and its tensors' shapes through the
    native wrapper. ``get_tensor_details`` fails: it would read each tensor's sparsity parameters,
    which crashes tflite-runtime 2.14 on a sparse tensor."""

    def __init__(self, tensors: dict[int, tuple[int, ...]], ops: list[tuple[str, list[int], list[int]]]):
        self._interpreter, self._ops = _Wrapper(tensors), ops

    def get_tensor_details(self) -> list[dict]:
        raise AssertionError("get_tensor_details reads sparsity parameters (tflite-runtime 2.14 crashes)")

    def _get_ops_details(self) -> list[dict]:
        return [{"op_name": name, "inputs": ins, "outputs": outs} for name, ins, outs in self._ops]


def test_the_work_counts_multiply_adds_and_elements():
    tensors = {0: (1, 8, 8, 4), 1: (16, 3, 3, 4), 2: (16,), 3: (1, 8, 8, 16), 4: (1, 3, 3, 16), 5: (1, 8, 8, 16),
               6: (10, 1024), 7: (1, 10), 8: (1, 1024)}  # fmt: skip
    ops = [
        ("CONV_2D", [0, 1, 2], [3]),  # 8*8*16 outputs x 3*3*4
        ("DEPTHWISE_CONV_2D", [3, 4, -1], [5]),  # 8*8*16 x 3*3
        ("FULLY_CONNECTED", [8, 6, -1], [7]),  # 10 x 1024
        ("ADD", [5, 5], [5]),
    ]
    macs = 1024 * 36 + 1024 * 9 + 10 * 1024
    elements = 1024 + 1024 + 10 + 1024
    want = macs / 40_000 + 2 * elements / 15_000
    assert model_work_us(_Details(tensors, ops)) == pytest.approx(want)


def test_one_thread_below_the_threshold_every_core_above():
    def model(n: int) -> _Details:  # n ADDs of 1x16x16x8: 2 x 2048 elements each
        return _Details({0: (1, 16, 16, 8)}, [("ADD", [0, 0], [0])] * n)

    per_add = 2 * 2048 / 15_000
    small, large = model(int(PARALLEL_MIN_WORK_US / per_add) - 1), model(int(PARALLEL_MIN_WORK_US / per_add) + 1)
    assert tflite_threads(small, 4).threads == 1
    choice = tflite_threads(large, 4)
    assert choice.threads == 4 and choice.cores == 4 and choice.work_us >= PARALLEL_MIN_WORK_US
    assert choice.as_dict() == {"threads": 4, "work_us": round(choice.work_us, 2), "cores": 4}


def test_a_model_whose_work_lies_in_subgraphs_takes_every_core():
    # a Keras LSTM: its steps' products are in the WHILE loop's body, which these nodes do not show
    tensors = {0: (1, 32, 64), 1: (1, 128), 2: (1, 10)}
    loop = _Details(tensors, [("WHILE", [0], [1]), ("FULLY_CONNECTED", [1], [2])])
    assert model_work_us(loop) is None
    choice = tflite_threads(loop, 4)
    assert choice.threads == 4 and choice.as_dict() == {"threads": 4, "work_us": None, "cores": 4}


def test_a_fused_lstm_counts_its_gates_products():
    # inputs: 0 the sequence, 1-4 input weights [units, features], 5-8 recurrent weights [units, units]
    tensors = {0: (1, 32, 64), 2: (128, 64), 6: (128, 128), 9: (1, 32, 128)}
    inputs = [0, -1, 2, 2, 2, -1, 6, 6, 6]  # no input gate (CIFG): the forget gate's weights are there
    lstm = _Details(tensors, [("UNIDIRECTIONAL_SEQUENCE_LSTM", inputs, [9])])
    macs, elements = 32 * 128 * 4 * (64 + 128), 32 * 128
    assert model_work_us(lstm) == pytest.approx(macs / 40_000 + 2 * elements / 15_000)
    assert tflite_threads(lstm, 2).threads == 2


def _model_of_adds(n: int, shape: tuple[int, ...]) -> bytes:
    tensors = [T(shape)] + [T(shape) for _ in range(n)]
    ops = [Op(Builtin.ADD, [k, k], [k + 1]) for k in range(n)]
    return build_model(tensors, ops, [0], [n])


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_the_interpreter_chooses_and_reports_on_a_cpu_device(mode, tmp_path):
    if api.cpu_device_threads() < 2:
        pytest.skip("the default OpenCL device here is not a CPU device of several compute units")
    cores = api.cpu_device_threads()
    large = tmp_path / "large.tflite"
    large.write_bytes(_model_of_adds(4, (1, 64, 64, 16)))  # 4 x 2 x 65536 elements: about 35 us
    tiny = tmp_path / "tiny.tflite"
    tiny.write_bytes(_model_of_adds(2, (1, 4, 4, 4)))
    got = delegate.Interpreter(str(large), background_compile=mode)
    assert got.opencl.tflite_threads.threads == cores
    got = delegate.Interpreter(str(tiny), background_compile=mode)
    assert got.opencl.tflite_threads.threads == 1
    chosen = delegate.Interpreter(str(large), background_compile=mode, num_threads=1)
    assert chosen.opencl.tflite_threads is None  # the caller's choice stands


def test_a_gpu_keeps_tflites_default(monkeypatch, tmp_path):
    monkeypatch.setattr(api, "cpu_device_threads", lambda device=None: 0)
    model = tmp_path / "m.tflite"
    model.write_bytes(_model_of_adds(4, (1, 64, 64, 16)))
    assert delegate.Interpreter(str(model), background_compile="off").opencl.tflite_threads is None


def test_run_reports_the_choice():
    if api.cpu_device_threads() < 2:
        pytest.skip("the default OpenCL device here is not a CPU device of several compute units")
    report = run_model(str(shared_path("models", "real", "pymicro-wakeword__okay_nabu.tflite")), {}, 1, progress=False)
    assert report["tflite_threads"]["threads"] == 1  # a few microseconds of work: one thread
    assert "TFLite's kernels: 1 thread(s) of" in format_result(report)


def test_the_work_of_shared_models_puts_the_threshold_between_them():
    # microWakeWord's streaming model ran slower on two threads than one; the quantized small CNNs
    # faster (benchmarks/RESULTS.md, "TFLite's threads beside a CPU device")
    host = host_runtime()
    wake = host.Interpreter(model_path=str(shared_path("models", "real", "pymicro-wakeword__okay_nabu.tflite")))
    cnn = host.Interpreter(model_path=str(shared_path("models", "quant", "small_cnn_int8.tflite")))
    assert model_work_us(wake) < PARALLEL_MIN_WORK_US < model_work_us(cnn)


def test_a_model_with_sparse_weights_is_read_without_crashing_the_host():
    # MediaPipe's pose detection has sparse fp16 weights, whose sparsity parameters crash
    # tflite-runtime 2.14's get_tensor_details (scripts/test_tflite_runtime.sh runs this file)
    host = host_runtime()
    pose = host.Interpreter(model_path=str(shared_path("models", "real", "mediapipe__pose_detection.tflite")))
    assert model_work_us(pose) > PARALLEL_MIN_WORK_US
