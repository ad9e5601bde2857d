"""Create / run / destroy loops of the plugin and the runtime on the default device, for leak checks.

    python -m tests.leak_loop cycles N CACHE    N cycles of both (run it under valgrind)
    python -m tests.leak_loop blocks N CACHE    Python blocks still allocated per cycle (3 windows of
                                                N cycles), for TFLite alone, the delegate's
                                                Interpreter and the Runtime

A cycle creates an interpreter with the delegate on small_cnn (program binaries from CACHE),
invokes it and deletes it, then loads a three-node context with Runtime, runs it and closes it.
tests/RELIABILITY.md has the commands and the figures.
"""

from __future__ import annotations

import gc
import itertools
import sys
from collections.abc import Callable

import numpy as np

import delegate
from delegate.api import host_runtime
from delegate.plugin import live_kernels
from delegate.runtime import Runtime

from .helpers import MODELS
from .runtime_helpers import chain

MODEL = str(MODELS / "small_cnn.tflite")


def _invoke(interpreter) -> None:
    interpreter.allocate_tensors()
    d = interpreter.get_input_details()[0]
    interpreter.set_tensor(d["index"], np.ones(d["shape"], np.float32))
    interpreter.invoke()


def tflite_alone(cache: str) -> None:
    _invoke(host_runtime().Interpreter(model_path=MODEL))


def plugin(cache: str) -> None:
    _invoke(delegate.Interpreter(MODEL, program_cache=cache))


def runtime(cache: str) -> None:
    with Runtime.load(chain(3), cache_dir=cache) as rt:
        rt.run([np.ones(rt.input_shapes[0], np.float32)])


def _blocks_per_cycle(cycle: Callable[[str], None], n: int, cache: str, windows: int = 3) -> list[float]:
    """Python blocks left per cycle in ``windows`` consecutive windows of ``n`` cycles: a leak keeps
    its rate, a cache filling up (pyopencl's, TFLite's) falls to zero."""
    for _ in range(10):  # warm up: programs, PoCL's kernel cache, interned names
        cycle(cache)
    gc.collect()
    marks = [sys.getallocatedblocks()]
    for _ in range(windows):
        for _ in range(n):
            cycle(cache)
        gc.collect()
        marks.append(sys.getallocatedblocks())
    return [(b - a) / n for a, b in itertools.pairwise(marks)]


def main(argv: list[str]) -> int:
    mode, n, cache = argv[0], int(argv[1]), argv[2]
    if mode == "cycles":
        for _ in range(n):
            plugin(cache)
            runtime(cache)
            gc.collect()
        assert live_kernels() == 0
        print(f"cycles {n}")
    else:
        for cycle in (tflite_alone, plugin, runtime):
            rates = " ".join(f"{r:+.2f}" for r in _blocks_per_cycle(cycle, n, cache))
            print(f"{cycle.__name__}: {rates} Python blocks per cycle (3 windows of {n} cycles)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
