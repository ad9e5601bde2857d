"""The GIL is released while the device works: other Python threads keep running during a run.

A ticker thread records timestamps in a tight Python loop while the main thread runs a long
kernel (Runtime.run) or a model invoke through the plugin. Holding the GIL across the run would
leave no tick inside it; the test asks for thousands, and no gap over half the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import delegate
from delegate.context import model as m
from delegate.runtime import Runtime

from .helpers import shared_path
from .runtime_helpers import desc

pytestmark = pytest.mark.opencl

# One work item per output pixel spins args.iters times: as long a run as we want.
SPIN = """
MAIN_FUNCTION($0) {
  int X = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  if (X >= args.dst_tensor.Width() || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  float4 v = convert_float4(args.src_tensor.Read(X, Y, S));
  for (int i = 0; i < args.iters; ++i) v = v * 0.999f + (float4)(0.001f);
  args.dst_tensor.Write(TO_FLT4(v), X, Y, S);
}
"""


def _spin_context(iters: int) -> m.InferenceContext:
    op = m.GPUOperation(
        code=SPIN,
        arguments=m.Arguments(int_values=[m.IntValue("iters", iters, True)]),
        tensor_to_grid=m.TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z,
        work_group_size=m.Int3(1, 1, 1),
        src_tensors_names=["src_tensor"],
        dst_tensors_names=["dst_tensor"],
    )
    node = m.CLNode(gpu_op=op, input_ids=[0], output_ids=[1], name="spin")
    tensors = [m.TensorDescWithId(desc(4, h=2, w=2), 0), m.TensorDescWithId(desc(4, h=2, w=2), 1)]
    return m.InferenceContext(nodes=[node], tensors=tensors, input_ids=[0], output_ids=[1])


def _ticks_during(work: Callable[[], None]) -> tuple[float, list[float]]:
    """Run ``work`` while a Python thread ticks; its duration and the ticks inside its middle 80%."""
    ticks: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.02)
    start = time.perf_counter()
    work()
    end = time.perf_counter()
    stop.set()
    ticker.join()
    margin = 0.1 * (end - start)
    return end - start, [t for t in ticks if start + margin < t < end - margin]


def _assert_progress(duration: float, inside: list[float]) -> None:
    assert duration >= 0.1, f"the run took {duration:.3f} s: too short to tell"
    assert len(inside) > 1000, f"the other thread ticked {len(inside)} times during a {duration:.3f} s run"
    gaps = np.diff(inside) if len(inside) > 1 else np.array([duration])
    assert float(gaps.max()) < 0.5 * duration, f"the other thread stalled {gaps.max():.3f} s of {duration:.3f} s"


def test_runtime_run_releases_the_gil(tmp_path):
    iters = 1 << 16
    x = [np.ones((1, 2, 2, 4), np.float32)]
    while True:
        rt = Runtime.load(_spin_context(iters), cache_dir=tmp_path)
        rt.run(x)  # PoCL specialises the kernel at its first launch
        start = time.perf_counter()
        rt.run(x)
        if time.perf_counter() - start >= 0.3 or iters >= 1 << 28:
            break
        rt.close()
        iters *= 4
    with rt:
        out: list[np.ndarray] = []
        duration, inside = _ticks_during(lambda: out.extend(rt.run(x)))
    _assert_progress(duration, inside)
    assert np.isfinite(out[0]).all() and float(out[0].min()) > 0.0


def test_plugin_invoke_releases_the_gil(tmp_path):
    path = str(shared_path("models", "mobilenet_v2.tflite"))
    interpreter = delegate.Interpreter(path, program_cache=str(tmp_path))
    batch = 1
    while True:
        d = interpreter.get_input_details()[0]
        if batch > 1:  # a bigger batch for a longer invoke (the plugin prepares again)
            interpreter.resize_tensor_input(d["index"], [batch, *d["shape"][1:]])
        interpreter.allocate_tensors()
        d = interpreter.get_input_details()[0]
        interpreter.set_tensor(d["index"], np.random.default_rng(0).random(tuple(d["shape"]), dtype=np.float32))
        interpreter.invoke()  # PoCL specialises kernels at their first launch
        assert len(interpreter.opencl.delegated_nodes) == interpreter.opencl.total_nodes
        duration, inside = _ticks_during(interpreter.invoke)
        if duration >= 0.3 or batch >= 64:
            break
        batch *= 4
    _assert_progress(duration, inside)
