"""Interpreters created, invoked and deleted from many threads of one fresh process.

Run as ``python -m tests.thread_driver MODEL THREADS DOOR [options]`` (tests/test_concurrency.py and
tests/stress_threads.py do): the process must never have touched OpenCL before, since the races of
the first OpenCL use (the loader, PoCL's start) only show there. DOOR is

- ``own``: each thread creates its own ``delegate.Interpreter``, allocates, invokes on random
  inputs, compares every output with TFLite's CPU kernels (the host's interpreter without the
  delegate), and deletes it;
- ``shared``: one ``delegate.Interpreter`` used by every thread at once, each setting the same
  inputs: a call that finds another thread inside is refused with ``InterpreterBusyError``;
- ``host``: one host Interpreter with the delegate of ``delegate.load_delegate`` used by every
  thread at once: the host's Python wrapper refuses most overlapping calls itself (it counts the
  references to its C++ interpreter: "at least 1 reference to internal data"), and the delegate's
  kernel refuses a second invoke while one runs (an invoke error saying so);
- ``kernel``: the same, each thread calling the host's C++ interpreter directly (what TFLite
  does for C++ callers, and in the window the Python check leaves): only the kernel refuses.

Prints one JSON line of counts; exits 0 when every output matched and every error was the expected
refusal, 1 otherwise. A crash is a signal, which the caller sees in the return code.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import sys
import threading
import time
from collections import Counter
from typing import Any

import numpy as np

#: float32 on the device against TFLite's CPU kernels, of the output's largest magnitude
TOLERANCE = 1e-4
#: what the delegate's kernel reports when a second thread invokes its interpreter (csrc/plugin.c)
KERNEL_BUSY = "in use by another thread"
#: what the host's Python Interpreter says when another thread holds its C++ interpreter
HOST_REFUSAL = "reference to internal data"


class Tally:
    """Counts shared by the threads (under a lock: ``Counter`` updates are not atomic)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []

    def add(self, what: str, error: str | None = None) -> None:
        with self.lock:
            self.counts[what] += 1
            if error is not None and len(self.errors) < 20:
                self.errors.append(error)


def _inputs(interpreter: Any, rng: np.random.Generator) -> list[tuple[int, np.ndarray]]:
    return [
        (d["index"], rng.uniform(-1, 1, size=d["shape"]).astype(d["dtype"])) for d in interpreter.get_input_details()
    ]


def _outputs(interpreter: Any) -> list[np.ndarray]:
    return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]


def _run(interpreter: Any, inputs: list[tuple[int, np.ndarray]]) -> list[np.ndarray]:
    for index, value in inputs:
        interpreter.set_tensor(index, value)
    interpreter.invoke()
    return _outputs(interpreter)


def _matches(got: list[np.ndarray], want: list[np.ndarray]) -> bool:
    return len(got) == len(want) and all(
        a.shape == b.shape and float(np.abs(a - b).max()) <= TOLERANCE * max(float(np.abs(b).max()), 1e-30)
        for a, b in zip(got, want, strict=True)
    )


class Reference:
    """TFLite's CPU outputs (the host's interpreter, no delegate), one interpreter per thread."""

    def __init__(self, model: str) -> None:
        from delegate.api import host_runtime

        self.cpu = host_runtime().Interpreter(model_path=model)
        self.cpu.allocate_tensors()

    def __call__(self, inputs: list[tuple[int, np.ndarray]]) -> list[np.ndarray]:
        return _run(self.cpu, inputs)


def _own(args: argparse.Namespace, number: int, tally: Tally, options: dict[str, str]) -> None:
    import delegate

    rng = np.random.default_rng(args.seed * 1000 + number)
    reference = Reference(args.model)
    interpreter = delegate.Interpreter(args.model, background_compile=args.mode, **options)
    interpreter.allocate_tensors()
    for number in range(args.invokes):
        wait = getattr(interpreter, "wait_for_delegate", None)  # background compile only
        if number == 1 and wait is not None:  # the first ran on CPU or the delegate; the others on the delegate
            wait()
        inputs = _inputs(interpreter, rng)
        tally.add("match" if _matches(_run(interpreter, inputs), reference(inputs)) else "mismatch")
    state = interpreter.opencl
    background = state.background_compile
    if state.partitions and (background is None or background.path in ("delegate", "off")):
        tally.add("ran_on_delegate")  # else every invoke ran on TFLite's CPU kernels (still compiling)
    del interpreter
    gc.collect()


def _refusal(error: BaseException) -> str | None:
    """Which refusal of an overlapping call ``error`` is: ``busy`` (this package's), ``host_refused``
    (the host's Python wrapper's), or None (a failure)."""
    from delegate.errors import InterpreterBusyError

    if isinstance(error, InterpreterBusyError) or (isinstance(error, RuntimeError) and KERNEL_BUSY in str(error)):
        return "busy"
    if isinstance(error, RuntimeError) and HOST_REFUSAL in str(error):
        return "host_refused"
    return None


def _shared_loop(interpreter: Any, args: argparse.Namespace, tally: Tally, want: list[np.ndarray], inputs: Any) -> None:
    """Invoke ``interpreter`` (shared with the other threads) on ``inputs``: each output must be
    ``want`` or the call refused."""
    for _ in range(args.invokes):
        try:
            if args.door == "kernel":
                interpreter._interpreter.Invoke()  # the host's C++ interpreter: no Python check first
                got = _outputs(interpreter)
            else:
                got = _run(interpreter, inputs)
        except Exception as exc:
            refusal = _refusal(exc)
            tally.add(refusal or "error", None if refusal else f"{type(exc).__name__}: {exc}")
            time.sleep(0.001)  # let the thread inside finish, so that every thread gets its turns
            continue
        tally.add("match" if _matches(got, want) else "mismatch")


def _shared_interpreter(args: argparse.Namespace, options: dict[str, str]) -> Any:
    import delegate

    if args.door == "shared":
        interpreter: Any = delegate.Interpreter(args.model, background_compile=args.mode, **options)
    else:
        from delegate.api import host_runtime

        interpreter = host_runtime().Interpreter(
            model_path=args.model, experimental_delegates=[delegate.load_delegate(**options)]
        )
    interpreter.allocate_tensors()
    return interpreter


def _options(args: argparse.Namespace) -> dict[str, str]:
    # every partition on the delegate: the rule cpu_when_faster would leave small ones on CPU
    options = {"cpu_when_faster": "false"}
    if args.cache:
        options["serialization_dir"] = args.cache
    else:
        options["program_cache"] = "none"
    return options


def _run_threads(args: argparse.Namespace, tally: Tally) -> None:
    """Start every thread at once on its door's work and wait for them all."""
    options = _options(args)
    shared: Any = None
    if args.door != "own":
        shared = _shared_interpreter(args, options)
        inputs = _inputs(shared, np.random.default_rng(args.seed))
        want = Reference(args.model)(inputs)
        for index, value in inputs:  # the kernel door sets them only here
            shared.set_tensor(index, value)
    start = threading.Barrier(args.threads)

    def work(number: int) -> None:
        start.wait()
        try:
            if shared is None:
                _own(args, number, tally, options)
            else:
                _shared_loop(shared, args, tally, want, inputs)
        except Exception as exc:
            tally.add("error", f"thread {number}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(n,), name=f"worker-{n}") for n in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("threads", type=int)
    parser.add_argument("door", choices=["own", "shared", "host", "kernel"])
    parser.add_argument("--mode", default="off", help="background_compile: off, auto or on")
    parser.add_argument("--cache", default="", help="serialization_dir (none: compile, no cache)")
    parser.add_argument("--invokes", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    faulthandler.enable()  # a crash prints every thread's stack
    tally = Tally()
    _run_threads(args, tally)
    gc.collect()  # the shared interpreter and its delegate go here, in the main thread
    counts = dict(tally.counts)
    print(json.dumps({"counts": counts, "errors": tally.errors}))
    done = sum(counts.get(k, 0) for k in ("match", "busy", "host_refused"))
    return 0 if done == args.threads * args.invokes and not counts.get("mismatch") and not counts.get("error") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
