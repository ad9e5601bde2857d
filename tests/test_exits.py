"""Prompt exits and Ctrl-C (delegate/cancel.py, delegate/warm_start.py's pool): a script that ends
while its delegate compiles in the background exits at once, leaving no half-written cache entry;
SIGINT ends a foreground compile, a background compile and ``python -m delegate run`` within two
seconds, as KeyboardInterrupt (the CLI: status 130 and one line); interpreters created in a loop
share a bounded pool of build threads, and the builds of dropped ones never start.

Each process runs on cold caches of its own (serialization folder, program cache, PoCL's kernel
cache), so the driver really compiles: unet_small takes seconds, far longer than any limit here.
"""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import delegate
from delegate import warm_start

from .helpers import shared_path

ROOT = Path(__file__).resolve().parent.parent
#: a cold compile of several seconds on PoCL (two program builds, then first launches)
MODEL = str(shared_path("models", "unet_small.tflite"))
SMALL_CNN = str(shared_path("models", "small_cnn.tflite"))
#: a cold compile whose largest program build takes seconds inside the driver
MOBILENET = str(shared_path("models", "mobilenet_v2.tflite"))
#: a script that ends during a compile must exit within this many seconds of its last line
EXIT_LIMIT_S = 5.0
#: and a process sent SIGINT within this many
SIGINT_LIMIT_S = 2.0


def _env(folder: Path) -> dict[str, str]:
    env = dict(os.environ, POCL_CACHE_DIR=str(folder / "pocl"), PYTHONUNBUFFERED="1")
    env.pop("DELEGATE_BACKGROUND_COMPILE", None)  # the suite's default (off): each script says its mode
    return env


def _script(folder: Path, body: str) -> list[str]:
    head = f"""\
        import atexit, logging, sys, threading, time, traceback
        import delegate
        CACHE = {str(folder / "cache")!r}
        MODEL, SMALL_CNN, MOBILENET = {MODEL!r}, {SMALL_CNN!r}, {MOBILENET!r}
        def say(what):
            print(what, time.time(), flush=True)
    """
    return [sys.executable, "-c", textwrap.dedent(head) + textwrap.dedent(body)]


@pytest.fixture
def sigint_handled():
    """SIGINT handled by Python in this process while the test runs, whatever it was given: a job
    that a shell without job control started in the background ignores SIGINT, as would every
    child it starts (pytest-xdist's workers included), and a child that ignores it cannot show
    what a user's Ctrl-C does. A handled signal is reset to its default action in a child."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _start(folder: Path, body: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _script(folder, body), cwd=ROOT, env=_env(folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _wait_for_line(process: subprocess.Popen[str], word: str, timeout: float = 60) -> float:
    """The timestamp of the first stdout line that starts with ``word``."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if line.startswith(word):
            return float(line.split()[1])
    process.kill()
    pytest.fail(f"the script never printed {word!r}: {process.communicate()}")


def _exit_time(process: subprocess.Popen[str], timeout: float = 120) -> tuple[float, str, str]:
    """When the process ended (time.time()), the rest of its stdout, and its stderr."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"still running after {timeout} s: {process.communicate()}")
    return time.time(), out, err


def _leftovers(folder: Path) -> list[str]:
    """Temporary (half-written) files under the caches: ``.NAME.PID.RANDOM.tmp`` (delegate/_atomic.py)."""
    return [str(p) for p in (folder / "cache").rglob("*") if p.name.endswith(".tmp")]


END_AFTER_FIRST_INVOKE = """\
    it = delegate.Interpreter(MODEL, background_compile={mode!r}, serialization_dir=CACHE)
    it.allocate_tensors()
    it.invoke()
    assert it.opencl.background_compile.path == "compiling", it.opencl.background_compile
    say("END")
"""

END_WHILE_TUNING = """\
    from delegate import cancel
    tuning = threading.Event()

    class Hold(logging.Handler):
        # Holds the build at its first tuning record until the process exits: the script ends
        # during the search, whatever the machine's speed.

        def emit(self, record):
            if record.getMessage().startswith("tuning") and not tuning.is_set():
                tuning.set()
                deadline = time.monotonic() + 60
                while not cancel.exiting() and time.monotonic() < deadline:
                    time.sleep(0.01)

    progress = logging.getLogger("delegate.progress")
    progress.addHandler(Hold())
    progress.setLevel(logging.DEBUG)
    # upstream's SUSTAINED_SPEED: an exhaustive work-group search (minutes on PoCL: a compile per size)
    it = delegate.Interpreter(
        SMALL_CNN,
        inference_preference="SUSTAINED_SPEED",
        cpu_when_faster="false",
        background_compile="on",
        serialization_dir=CACHE,
    )
    assert it.opencl.options.tuning.value == "exhaustive"
    it.allocate_tensors()
    it.invoke()
    assert tuning.wait(120), "the exhaustive search never started"

    def stopped():  # atexit: after the package's exit hook (threading's run first)
        error = it._build.error if it._build.done.is_set() else None
        where = [frame.filename for frame in traceback.extract_tb(error.__traceback__)] if error else []
        tuning = any(name.endswith("tuning.py") for name in where)
        print("STOPPED", type(error).__name__, "in tuning" if tuning else "elsewhere", flush=True)

    atexit.register(stopped)
    say("END")
"""


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_a_script_that_ends_during_a_background_compile_exits_at_once(tmp_path, mode):
    process = _start(tmp_path, END_AFTER_FIRST_INVOKE.format(mode=mode))
    end = _wait_for_line(process, "END")
    exited, _, err = _exit_time(process)
    assert process.returncode == 0, err
    assert exited - end < EXIT_LIMIT_S, f"exited {exited - end:.1f} s after the script's end"
    assert _leftovers(tmp_path) == []


def test_a_script_that_ends_during_an_exhaustive_search_exits_at_once(tmp_path):
    process = _start(tmp_path, END_WHILE_TUNING)
    end = _wait_for_line(process, "END", timeout=120)
    exited, out, err = _exit_time(process)
    assert process.returncode == 0, err
    assert "STOPPED CompileCancelled in tuning" in out, out  # at a trial, not abandoned inside one
    assert exited - end < EXIT_LIMIT_S, f"exited {exited - end:.1f} s after the script's end"
    assert _leftovers(tmp_path) == []


def _wait_for_builds(pocl_cache: Path, process: subprocess.Popen[str]) -> None:
    """Return once PoCL has started building a program into ``pocl_cache`` (a compile is under
    way, however fast this machine compiles), or once ``process`` has ended (the caller's check).
    PoCL writes a temporary file there when it starts; each program it builds gets a folder."""
    deadline = time.time() + 60
    while time.time() < deadline and process.poll() is None:
        if pocl_cache.is_dir() and any(entry.is_dir() for entry in pocl_cache.iterdir()):
            return
        time.sleep(0.005)


def _interrupted(process: subprocess.Popen[str], after: float) -> tuple[float, str, str]:
    """Send SIGINT ``after`` seconds from now; (seconds from the signal to the exit, stdout, stderr)."""
    time.sleep(after)
    assert process.poll() is None, f"the script ended before the signal: {process.communicate()}"
    process.send_signal(signal.SIGINT)
    sent = time.time()
    exited, out, err = _exit_time(process, timeout=60)
    return exited - sent, out, err


FOREGROUND = """\
    from delegate.runtime import driver

    builds = []
    real_build = driver.Program.build

    def build(program, *args):  # observes the driver's program builds
        builds.append(program)
        if len(builds) == 1:  # a persistent segment of MobileNetV2: seconds inside the driver
            say("BUILDING")
        return real_build(program, *args)

    driver.Program.build = build
    it = delegate.Interpreter(MOBILENET, background_compile="off", serialization_dir=CACHE)
    say("COMPILED")
    it.allocate_tensors()
"""

BACKGROUND = """\
    it = delegate.Interpreter(MODEL, background_compile="on", serialization_dir=CACHE)
    it.allocate_tensors()
    it.invoke()
    say("ONCPU")
    it.wait_for_delegate()
    say("COMPILED")
"""


@pytest.mark.parametrize(("body", "started", "delay"), [(FOREGROUND, "BUILDING", 0.2), (BACKGROUND, "ONCPU", 0.5)])
def test_sigint_during_a_compile_raises_keyboard_interrupt_at_once(tmp_path, body, started, delay, sigint_handled):
    process = _start(tmp_path, body)
    _wait_for_line(process, started)
    took, out, err = _interrupted(process, delay)
    assert process.returncode in (130, -signal.SIGINT), (out, err)
    assert "COMPILED" not in out, "the compile went on"
    assert "KeyboardInterrupt" in err and "Exception ignored" not in err, err
    assert took < SIGINT_LIMIT_S, f"exited {took:.1f} s after SIGINT"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("mode", ["auto", "off"])
def test_sigint_ends_the_cli_run_with_one_line(tmp_path, mode, sigint_handled):
    cache = str(tmp_path / "cache")
    command = [sys.executable, "-m", "delegate", "run", MODEL, "--serialization-dir", cache, "--runs", "1", "--quiet"]
    env = dict(_env(tmp_path), DELEGATE_BACKGROUND_COMPILE=mode)
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_builds(tmp_path / "pocl", process)  # past the imports, inside the compile
    took, _, err = _interrupted(process, 0.0)
    assert process.returncode == 130, err
    ours = [line for line in err.splitlines() if not line.startswith("INFO: ")]  # TFLite's own (XNNPACK's) notice
    assert ours == ["interrupted"], err
    assert took < SIGINT_LIMIT_S, f"exited {took:.1f} s after SIGINT"
    assert _leftovers(tmp_path) == []


def test_interpreters_created_in_a_loop_share_the_pool_and_dropped_ones_never_build(monkeypatch, tmp_path):
    gate = threading.Event()
    monkeypatch.setattr(warm_start, "build_gate", gate)
    try:
        made = [delegate.Interpreter(SMALL_CNN, background_compile="on", program_cache=str(tmp_path)) for _ in range(8)]
        builders = [t for t in threading.enumerate() if t.name == warm_start.THREAD_NAME]
        assert 1 <= len(builders) <= warm_start.MAX_BUILDS
        states = [it.opencl for it in made]
        kept = made[-1]
        del made
        gc.collect()  # seven interpreters dropped while their builds wait in the queue
        gate.set()
        assert kept.wait_for_delegate()
        assert kept.opencl.delegated_nodes
        assert [s.prepares for s in states[:-1]] == [0] * 7  # never compiled, not even the one held at the gate
        kept.close()
        for thread in builders:
            thread.join(timeout=60)
            assert not thread.is_alive()
    finally:
        gate.set()


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_inside_prepare_is_raised_once_the_host_returns(monkeypatch, interrupt):
    from tests.plugin_testing import inject

    def interrupted(*args):
        raise interrupt()

    with monkeypatch.context() as patch:
        inject(patch, capture=interrupted)  # the first step of Prepare's plan
        with pytest.raises(interrupt):
            delegate.Interpreter(SMALL_CNN, background_compile="off", compile_fallback="true")
    it = delegate.Interpreter(SMALL_CNN, background_compile="off")  # nothing left over from the interrupt
    assert it.opencl.delegated_nodes


def _interrupt_at_the_third_release(patch: pytest.MonkeyPatch, signals: bool) -> list[object]:
    """Make the third OpenCL memory object released raise an interrupt right after its release,
    as Ctrl-C landing inside the delegate kernel's free would (``signals``: a real SIGINT, whose
    KeyboardInterrupt Python raises at its next check, else the exception raised directly);
    returns the list of released objects."""
    from delegate.runtime import driver

    real = driver.MemObject.release
    released: list[object] = []

    def release(self) -> None:
        if self.handle is None:
            return real(self)
        released.append(self)
        real(self)
        if len(released) == 3:
            if signals:
                signal.raise_signal(signal.SIGINT)
            else:
                raise KeyboardInterrupt

    patch.setattr(driver.MemObject, "release", release)
    return released


@pytest.mark.parametrize("signals", [False, True], ids=["raised", "signal"])
def test_ctrl_c_inside_the_kernels_release_is_raised_after_the_release(monkeypatch, signals, sigint_handled):
    """Ctrl-C landing while TFLite frees the delegate's kernels (the interpreter's destructor calls
    the plugin from C, where an exception cannot pass): the release finishes, each OpenCL object
    once, and close() raises KeyboardInterrupt instead of it being lost (an "Exception ignored"
    line, and a script that goes on as if nothing was pressed)."""
    from delegate.plugin.registry import REGISTRY

    before = {id(rt) for rt in REGISTRY.live_runtimes()}
    it = delegate.Interpreter(SMALL_CNN, background_compile="off")
    it.allocate_tensors()
    it.invoke()
    (runtime,) = [rt for rt in REGISTRY.live_runtimes() if id(rt) not in before]
    objects = runtime._resources.release_order()
    with monkeypatch.context() as patch:
        released = _interrupt_at_the_third_release(patch, signals)
        with pytest.raises(KeyboardInterrupt):
            it.close()
    assert runtime._released and all(obj.handle is None for obj in objects)
    assert sorted(map(id, released)) == sorted(map(id, objects))  # every one, each once
    assert id(runtime) not in {id(rt) for rt in REGISTRY.live_runtimes()}


def test_ctrl_c_inside_a_release_outside_the_package_comes_back_as_sigint(monkeypatch, sigint_handled):
    """The same interrupt where no call of the package dropped the host interpreter (the caller's
    last reference to it went): it comes back as a new SIGINT for the main thread."""
    from delegate.plugin.registry import REGISTRY

    assert threading.current_thread() is threading.main_thread()  # where Python delivers signals
    before = {id(rt) for rt in REGISTRY.live_runtimes()}
    it = delegate.Interpreter(SMALL_CNN, background_compile="off")
    host = it.host
    (runtime,) = [rt for rt in REGISTRY.live_runtimes() if id(rt) not in before]
    it.close()  # the host is still referenced here: nothing is freed yet
    assert not runtime._released
    with monkeypatch.context() as patch:
        _interrupt_at_the_third_release(patch, signals=False)
        with pytest.raises(KeyboardInterrupt):
            del host  # the last reference: TFLite frees the kernels now
            assert runtime._released
            for _ in range(200):  # Python runs the handler at its next check after the send
                time.sleep(0.005)
    assert runtime._released
