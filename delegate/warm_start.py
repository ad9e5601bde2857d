"""Background compile (``delegate.Interpreter(..., background_compile=...)``): a first output in
well under a second on a cold start, the compiled kernels' speed afterwards.

A cold start compiles every kernel (seconds; PoCL then specialises each for its work-group size at
its first launch). Under background compile the delegated interpreter is built, allocated and, when
invokes already run without it, invoked once on zeros in a thread of its own, while TFLite's CPU
kernels answer the caller; the first invoke after the build finished switches to it: the inputs the
caller set are copied across, and every call from then on goes to the delegated interpreter.

Thread safety: the build thread touches only the interpreter it builds until it hands it over under
``_Build.lock``; the caller's calls go to one interpreter at a time, as TFLite asks of any
interpreter.

Builds run in one small pool per process (``MAX_BUILDS`` daemon threads, started when a build is
queued and ended when the queue is empty), not a thread per interpreter: PoCL already compiles on
every core. A build stops at its next checkpoint (delegate/cancel.py: between partitions, program
builds and tuning trials) once its interpreter is closed or dropped, or the process exits: a script
that ends while its delegate compiles exits at once (waiting at most ``cancel.EXIT_WAIT_S`` for the
driver call in flight), and a queued build whose interpreter is gone never starts. Cache entries are
written atomically, so a cancelled build leaves none half written.
"""

from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import cancel
from .errors import CompileCancelled, DelegateError

if TYPE_CHECKING:
    import numpy as np

    from .effective import Effective
    from .plugin import DelegateState

MODES = ("auto", "on", "off")
#: the environment variable that sets the mode when ``background_compile`` is not given
MODE_ENV = "DELEGATE_BACKGROUND_COMPILE"
#: ``auto``: how long ``allocate_tensors`` waits (from the interpreter's creation) for the build, so
#: that a start with warm caches (MobileNetV2: about 0.3 s) runs on the delegate from the first invoke
AUTO_GRACE_S = 1.5
#: ops that keep state in the interpreter (resource variables): switching would lose it
STATEFUL_OPS = frozenset({"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"})
#: tests: an Event each background build waits on before it starts (None: builds start at once)
build_gate: threading.Event | None = None
#: builds at once in this process: one, or two where four or more CPUs leave room beside PoCL's workers
MAX_BUILDS = 2 if len(os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()) >= 4 else 1
#: the name of the pool's threads
THREAD_NAME = "delegate-background-compile"

_WARNING = "tflite-opencl-delegate"


def resolve_mode(value: Any) -> str:
    """``background_compile`` as given (None: ``$DELEGATE_BACKGROUND_COMPILE``, else ``auto``)."""
    text = str(value if value is not None else os.environ.get(MODE_ENV) or "auto").strip().lower()
    if text in ("true", "1"):
        text = "on"
    elif text in ("false", "0"):
        text = "off"
    if text not in MODES:
        raise DelegateError(f"background_compile={value!r}: use one of {', '.join(MODES)}")
    return text


def not_applicable(cpu: Any, effective: Effective | None, resized: bool = False) -> str | None:
    """Why switching interpreters could change what the caller sees for this model (its CPU
    interpreter ``cpu``, unallocated) and settings, or None when background compile may run."""
    if effective is not None and not (effective.compile_fallback or effective.execution_fallback):
        return "the acceleration settings allow no fallback, so a failure to apply the delegate shows at creation"
    try:
        ops = {op["op_name"] for op in cpu._get_ops_details()}
    except Exception:  # a host without the ops listing: cannot tell stateful models apart
        return "the TFLite runtime does not list the model's ops"
    stateful = sorted(ops & STATEFUL_OPS)
    if stateful:
        return f"the model keeps state in resource variables ({', '.join(stateful)}), which live in one interpreter"
    open_dims = [d["name"] for d in cpu.get_input_details() if any(int(n) < 0 for n in d.get("shape_signature", ()))]
    if open_dims:
        return f"inputs {', '.join(open_dims)} leave dims open (the caller resizes them before allocating)"
    return None


@dataclass
class BackgroundCompile:
    """What background compile did (``interpreter.opencl.background_compile``).

    ``path``: ``compiling`` (the delegate is being built; invokes run on TFLite's CPU kernels),
    ``delegate`` (invokes run on the delegate), ``cpu`` (the build failed and the settings allow
    fallback: invokes stay on CPU, ``cause`` says why) or ``failed`` (the build failed, no fallback
    allowed: each invoke raises its error); ``off`` when ``auto`` did not apply to this model or
    these settings (``cause`` says why): every invoke runs on the delegate, as without it.
    """

    mode: str
    path: str = "compiling"
    #: invokes that ran on TFLite's CPU kernels
    cpu_invokes: int = 0
    #: seconds from the interpreter's creation until the delegated interpreter was built
    ready_s: float | None = None
    #: seconds from the interpreter's creation until invokes went to the delegate
    switched_s: float | None = None
    #: why the build failed
    cause: str | None = None
    #: the call that ended the CPU phase early by waiting for the build (resize_tensor_input, ...)
    waited_for: str | None = None

    def describe(self) -> str:
        """One line for ``python -m delegate run``."""
        head = f"background compile ({self.mode}): "
        if self.path == "off":
            return head + f"not used: {self.cause}"
        on_cpu = f"{self.cpu_invokes} invoke(s) on TFLite's CPU kernels"
        if self.path == "compiling":
            return head + f"compiling; {on_cpu} so far"
        if self.path == "delegate":
            if self.cpu_invokes == 0 and self.waited_for is None:
                return head + f"the delegate was ready in {self.ready_s:.2f} s, before the first invoke"
            when = f"{self.switched_s:.2f} s after creation" if self.switched_s is not None else "later"
            waited = f" ({self.waited_for} waited for the build)" if self.waited_for else ""
            return head + f"{on_cpu} while compiling, then the delegate, {when}{waited}"
        return head + f"the build failed ({self.cause}); " + ("on CPU from then on" if self.path == "cpu" else "raised")


class _Build:
    """The background build and its handoff; the thread holds this, never the wrapper."""

    def __init__(self, make: Callable[[], Any], warm_up: Callable[[Any], None]) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self._make, self._warm_up = make, warm_up
        #: the caller runs on CPU already: warm the delegate up before handing it over
        self.on_cpu = False
        self.interpreter: Any = None
        self.error: BaseException | None = None
        self.ready_at: float | None = None
        self.token = cancel.Token()

    def run(self) -> None:
        """In a pool thread: build (unless cancelled already), warm up when asked, hand over."""
        gate = build_gate
        if gate is not None:
            gate.wait()
        try:
            with cancel.running(self.token):
                cancel.checkpoint()  # closed or dropped while queued: never started
                interpreter = self._make()
                cancel.checkpoint()
                with self.lock:
                    if not self.on_cpu:  # the caller still waits: hand it over as it is, as without background compile
                        self.interpreter, self.ready_at = interpreter, time.perf_counter()
                        return
                # PoCL specialises kernels at their first launch: here, not in the caller's invoke
                self._warm_up(interpreter)
            with self.lock:
                self.interpreter, self.ready_at = interpreter, time.perf_counter()
        except BaseException as exc:  # handed to the caller's next call
            with self.lock:
                self.error = exc
        finally:
            self.done.set()

    def take_or_defer(self) -> tuple[Any, BaseException | None] | None:
        """The built interpreter (handed over: the thread is done with it) or the build's error;
        None while it builds, and from then on the thread warms the delegate up before handing it over."""
        with self.lock:
            if self.interpreter is None and self.error is None:
                self.on_cpu = True
                return None
            interpreter, self.interpreter = self.interpreter, None
            return interpreter, self.error


_pool_lock = threading.Lock()
_queued: deque[_Build] = deque()
_workers = 0


def _submit(build: _Build) -> None:
    """Queue ``build``; start a pool thread when fewer than ``MAX_BUILDS`` run."""
    global _workers
    cancel.register_exit_hook()
    with _pool_lock:
        _queued.append(build)
        if _workers >= MAX_BUILDS:
            return
        _workers += 1
    threading.Thread(target=_work, name=THREAD_NAME, daemon=True).start()


def _work() -> None:
    global _workers
    while True:
        with _pool_lock:
            if not _queued:
                _workers -= 1
                return
            build = _queued.popleft()
        build.run()


def _withdraw(build: _Build) -> None:
    """Take ``build`` out of the queue, when it has not started (it is then done)."""
    with _pool_lock:
        if build not in _queued:
            return
        _queued.remove(build)
    with build.lock:
        build.error = CompileCancelled("the interpreter was closed before its background compile started")
    build.done.set()


def warm_up_on_zeros(interpreter: Any) -> None:
    """One invoke on zero inputs, so that the driver's first-launch work is done."""
    import numpy as np

    for detail in interpreter.get_input_details():
        interpreter.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
    interpreter.invoke()


class WarmStartInterpreter:
    """A delegated interpreter that answers on TFLite's CPU kernels until its delegate is built.

    Everything not defined here goes to the interpreter active now. ``tensor(i)`` returns a
    function that reads the active interpreter at each call; an array it returned earlier is a
    view of the interpreter active then, so call the function again after each invoke (TFLite
    asks the same). ``resize_tensor_input`` and ``get_signature_runner`` end the CPU phase: they
    wait for the build, then work on the delegated interpreter.
    """

    def __init__(
        self,
        cpu: Any,
        make: Callable[[], Any],
        *,
        mode: str,
        state: DelegateState | None,
        fallback_allowed: bool,
        grace_s: float,
    ) -> None:
        self._created = time.perf_counter()
        self._cpu: Any = cpu
        self._active: Any = cpu
        self._delegated = False
        self._decided = False
        #: the caller allocated the CPU interpreter (so its inputs hold what the caller set)
        self._cpu_allocated = False
        self._fallback_allowed = fallback_allowed
        self._grace_s = grace_s
        self._error: BaseException | None = None
        self.background_compile = BackgroundCompile(mode)
        #: the delegate's state; its ``background_compile`` is this wrapper's report
        self.opencl = state
        self.opencl_delegate: Any = None
        self.effective: Effective | None = None
        if state is not None:
            state.background_compile = self.background_compile
        self._build = _Build(make, warm_up_on_zeros)
        weakref.finalize(self, self._build.token.cancel)  # dropped: its build stops or never starts
        _submit(self._build)

    def __getattr__(self, name: str) -> Any:
        if name == "_active":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self._active, name)

    # The calls that may switch.

    def allocate_tensors(self) -> None:
        if not self._decided:
            self._decide()
        self._raise_failure()
        try:
            with cancel.host_call():  # a resize compiles the partitions again
                self._active.allocate_tensors()
        except RuntimeError:
            # TFLite's CPU kernels cannot run the model (a custom op only the delegate runs): there is
            # nothing to answer with meanwhile, so wait for the delegate; the CPU's error if it failed
            if self._delegated or not self.wait_for_delegate(
                "allocate_tensors (TFLite's CPU kernels cannot run the model)"
            ):
                raise
            with cancel.host_call():
                self._active.allocate_tensors()
        self._cpu_allocated = not self._delegated

    def invoke(self) -> None:
        if not self._decided:
            self._decide()
        elif not self._delegated and self._error is None and self._build.done.is_set():
            self._switch(self._must_take())
        self._raise_failure()
        if not self._delegated:
            self.background_compile.cpu_invokes += 1
        self._active.invoke()

    def resize_tensor_input(self, input_index: int, tensor_size: Sequence[int], strict: bool = False) -> None:
        self.wait_for_delegate("resize_tensor_input")
        self._active.resize_tensor_input(input_index, tensor_size, strict)

    def get_signature_runner(self, signature_key: str | None = None) -> Any:
        self.wait_for_delegate("get_signature_runner")
        return self._active.get_signature_runner(signature_key)

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        return lambda: self._active.tensor(tensor_index)()

    def wait_for_delegate(self, why: str = "wait_for_delegate") -> bool:
        """Wait for the build and switch now; True when calls now go to the delegate (False: the
        build failed and the settings allow fallback). Raises the build's error otherwise."""
        if not self._delegated and self._error is None:
            if not self._build.done.is_set():
                self.background_compile.waited_for = why
            self._build.done.wait()
            self._decided = True
            self._switch(self._must_take())
        self._raise_failure()
        return self._delegated

    def build_finished(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: no limit) for the build to end, without switching:
        the next invoke switches. True when it has ended."""
        return self._build.done.wait(timeout)

    def close(self) -> None:
        """Cancel the build (it stops at its next checkpoint), wait for it, let go of both interpreters."""
        self._build.token.cancel()
        _withdraw(self._build)
        self._build.done.wait()
        self._build.take_or_defer()  # drops the built interpreter, if it was not taken
        self._cpu = self._active = None

    @property
    def fallback_cause(self) -> str | None:
        """The execution fallback's cause (settings that allow it), or the failed build's."""
        return getattr(self._active, "fallback_cause", None) or self.background_compile.cause

    # The handoff.

    def _decide(self) -> None:
        """The first allocate (or invoke): wait out the grace for the build, else run on CPU."""
        remaining = self._grace_s - (time.perf_counter() - self._created)
        if remaining > 0:
            self._build.done.wait(remaining)
        self._decided = True
        taken = self._build.take_or_defer()
        if taken is not None:
            self._switch(taken)

    def _switch(self, taken: tuple[Any, BaseException | None]) -> None:
        interpreter, error = taken
        report = self.background_compile
        now = time.perf_counter() - self._created
        if error is not None:
            self._failed(error)
            return
        mismatch = _io_mismatch(self._cpu, interpreter)
        if mismatch:
            self._failed(DelegateError(f"the delegated interpreter's {mismatch}"), always_fall_back=True)
            return
        if self._cpu_allocated:
            for detail in self._cpu.get_input_details():  # what the caller set, on the interpreter it set it on
                interpreter.set_tensor(detail["index"], self._cpu.get_tensor(detail["index"]))
        ready_at = self._build.ready_at
        report.ready_s = (ready_at - self._created) if ready_at is not None else now
        report.switched_s = now
        report.path = "delegate"
        self._active, self._cpu, self._delegated = interpreter, None, True

    def _must_take(self) -> tuple[Any, BaseException | None]:
        taken = self._build.take_or_defer()
        assert taken is not None, "the build is done"
        return taken

    def _failed(self, error: BaseException, always_fall_back: bool = False) -> None:
        report = self.background_compile
        report.cause = str(error).strip() or type(error).__name__
        if self._fallback_allowed or always_fall_back:
            report.path = "cpu"
            warnings.warn(f"{_WARNING}: the background compile failed ({report.cause}); running on CPU", stacklevel=3)
            return
        report.path = "failed"
        if hasattr(error, "add_note"):
            error.add_note(f"{_WARNING}: raised by the background compile (background_compile={report.mode})")
        self._error = error

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error


def _io_mismatch(cpu: Any, delegated: Any) -> str | None:
    """What differs in the inputs and outputs of the two interpreters (the caller's tensor indices
    must stay valid across the switch), or None."""
    for what in ("input", "output"):
        a = [(d["index"], d["name"], tuple(d["shape"])) for d in getattr(cpu, f"get_{what}_details")()]
        b = [(d["index"], d["name"], tuple(d["shape"])) for d in getattr(delegated, f"get_{what}_details")()]
        if a != b:
            return f"{what}s differ from the CPU interpreter's: {b} vs {a}"
    return None
