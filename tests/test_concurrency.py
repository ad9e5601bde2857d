"""Interpreters from many threads at once: created, invoked and deleted concurrently in fresh
processes (outputs equal to TFLite's CPU kernels, no signal), and one interpreter shared by
threads refusing the second caller instead of crashing.

The delegate kernel's own refusal (a second invoke reaching it while one runs) is checked
deterministically in C, tests/test_leaks.py's overlap check: a host interpreter invoked by two
threads also races in TFLite's own code (its error reporter, which ASan catches), so that case is
not driven through a real host here.

The races of a process's first OpenCL use (the loader, PoCL's start) only show in a process that
never touched OpenCL, so each case runs tests/thread_driver.py in a subprocess. The serialization
cache is filled once, by threads compiling at the same time (the cold case); the other processes
load from it, so the CPU goes to the threads, not to the compiler. tests/stress_threads.py runs the
same driver at the full size (2 to 8 threads, 20 processes each).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from delegate.errors import InterpreterBusyError
from delegate.interpreter import DelegatedInterpreter

from .helpers import shared_path

ROOT = Path(__file__).resolve().parent.parent
#: a crashed process takes no longer; a hung one (a deadlock) fails here instead of stalling CI
TIMEOUT_S = 240


def _drive(model: Path, threads: int, door: str, *options: str) -> dict[str, int]:
    """Run the driver in a fresh process; its counts. Fails on a signal or a non-zero exit."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.thread_driver", str(model), str(threads), door, *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode >= 0, f"killed by signal {-done.returncode}:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])["counts"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def unet() -> Path:
    return shared_path("models", "unet_small.tflite")


@pytest.fixture(scope="module")
def cache(unet: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A serialization folder filled by two threads compiling the model at once (cold)."""
    folder = str(tmp_path_factory.mktemp("serialization"))
    counts = _drive(unet, 2, "own", "--cache", folder)
    assert counts == {"match": 4, "ran_on_delegate": 2}
    return folder


@pytest.mark.opencl
@pytest.mark.parametrize("mode", ["off", "auto"])
def test_threads_create_invoke_and_delete_interpreters_in_fresh_processes(unet, cache, mode):
    for seed in range(3):
        counts = _drive(unet, 4, "own", "--cache", cache, "--mode", mode, "--invokes", "3", "--seed", str(seed))
        # every output equal to TFLite's; every interpreter ran on the delegate (auto: after waiting for it)
        assert counts == {"match": 12, "ran_on_delegate": 4}


@pytest.mark.opencl
def test_threads_sharing_a_delegate_interpreter_are_refused_not_crashed(unet, cache):
    counts = _drive(unet, 4, "shared", "--cache", cache, "--invokes", "30")
    assert counts.get("match", 0) + counts.get("busy", 0) == 120 and set(counts) <= {"match", "busy"}
    assert counts.get("match", 0) > 0 and counts.get("busy", 0) > 0


@pytest.mark.opencl
def test_the_opencl_loader_is_made_once_by_threads_starting_together():
    script = (
        "import threading\n"
        "from delegate.runtime import opencl\n"
        "start, made = threading.Barrier(8), []\n"
        "def first_use():\n"
        "    start.wait()\n"
        "    made.append(opencl.loader())\n"
        "threads = [threading.Thread(target=first_use) for _ in range(8)]\n"
        "[t.start() for t in threads]\n"
        "[t.join() for t in threads]\n"
        "print(len(made), len({id(m) for m in made}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["8", "1"]  # one loader, the same object for every thread


class _Blocking:
    """An interpreter whose ``invoke`` and ``get_tensor`` wait for the test inside the call."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.release = threading.Event()
        self.calls: list[str] = []

    def _wait(self, call: str) -> None:
        self.calls.append(call)
        self.inside.set()
        assert self.release.wait(30)

    def invoke(self) -> None:
        self._wait("invoke")

    def get_tensor(self, index: int) -> int:
        self._wait("get_tensor")
        return index

    def set_tensor(self, index: int, value: object) -> None:
        self.calls.append("set_tensor")

    def get_input_details(self) -> list[dict[str, int]]:
        return [{"index": 0}]


def _inside(interpreter: DelegatedInterpreter, call: str, *args: object) -> threading.Thread:
    """A thread that has entered ``call`` of ``interpreter`` and waits there."""
    inner = interpreter.host
    thread = threading.Thread(target=getattr(interpreter, call), args=args, name=f"caller-{call}")
    thread.start()
    assert inner.inside.wait(30)
    return thread


def test_a_call_overlapping_an_invoke_is_refused_with_what_runs_where():
    inner = _Blocking()
    interpreter = DelegatedInterpreter(inner)
    thread = _inside(interpreter, "invoke")
    for call, args in [("invoke", ()), ("set_tensor", (0, 1.0)), ("get_tensor", (0,)), ("wait_for_delegate", ())]:
        with pytest.raises(InterpreterBusyError, match=f"^{call}: the interpreter is in use by another thread") as exc:
            getattr(interpreter, call)(*args)
        assert "invoke in thread 'caller-invoke'" in str(exc.value)
    assert isinstance(exc.value, RuntimeError)  # what TFLite's own invoke errors are
    inner.release.set()
    thread.join()
    assert inner.calls == ["invoke"]  # the refused calls never reached the interpreter
    interpreter.set_tensor(0, 1.0)
    interpreter.invoke()
    assert interpreter.wait_for_delegate() is True  # on the delegate from the start: nothing to wait for
    assert inner.calls == ["invoke", "set_tensor", "invoke"]


def test_reads_overlap_each_other_but_not_a_call_that_changes_the_interpreter():
    inner = _Blocking()
    interpreter = DelegatedInterpreter(inner)
    thread = _inside(interpreter, "get_tensor", 5)
    assert interpreter.get_input_details() == [{"index": 0}]  # another read goes in beside it
    with pytest.raises(InterpreterBusyError, match="a read of its tensors"):
        interpreter.invoke()
    inner.release.set()
    thread.join()
    interpreter.invoke()
    assert inner.calls == ["get_tensor", "invoke"]


def test_a_failing_call_leaves_the_interpreter_free():
    class Failing:
        def invoke(self) -> None:
            raise RuntimeError("the model failed")

    interpreter = DelegatedInterpreter(Failing())
    for _ in range(2):  # a second call is not refused as busy
        with pytest.raises(RuntimeError, match="the model failed"):
            interpreter.invoke()
