"""Background compile (``delegate.Interpreter(..., background_compile=...)``): a first output in
well under a second on a cold start, the compiled kernels' speed afterwards.

A cold start compiles every kernel (seconds; PoCL then specialises each for its work-group size at
its first launch). Under background compile the delegated interpreter is built, allocated and, when
invokes already run without it, invoked once on zeros in a thread of its own, while TFLite's CPU
kernels answer the caller; the first invoke after the build finished switches to it: the inputs the
caller set are copied across, and every call from then on goes to the delegated interpreter. The
switch itself (the ``COMPILING`` path and the ones after it) is ``DelegatedInterpreter``'s
(delegate/interpreter.py); this module holds the mode, whether it applies to a model, the report,
the build and its pool.

Thread safety: the build thread touches only the interpreter it builds until it hands it over under
``BackgroundBuild.lock``; the caller's calls go to one interpreter at a time, as TFLite asks of any
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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import cancel
from .errors import CompileCancelled, DelegateError

if TYPE_CHECKING:
    from .effective import Effective

MODES = ("auto", "on", "off")
#: the environment variable that sets the mode when ``background_compile`` is not given
MODE_ENV = "DELEGATE_BACKGROUND_COMPILE"
#: ``auto``: how long ``allocate_tensors`` waits (from the interpreter's creation) for the build, so
#: that a start with warm caches (MobileNetV2: about 0.3 s) runs on the delegate from the first invoke
AUTO_GRACE_S = 1.5
#: ops that keep state in the interpreter between invokes: switching would lose it. Resource
#: variables, and the recurrent ops whose state inputs are variable tensors their kernels update in
#: place (the next invoke starts from the last one's state)
STATEFUL_OPS = frozenset(
    {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"}
    | {"UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "LSTM"}
    | {"UNIDIRECTIONAL_SEQUENCE_RNN", "BIDIRECTIONAL_SEQUENCE_RNN", "RNN", "SVDF"}
)
#: tests: an Event each background build waits on before it starts (None: builds start at once)
build_gate: threading.Event | None = None
#: builds at once in this process: one, or two where four or more CPUs leave room beside PoCL's workers
MAX_BUILDS = 2 if len(os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else ()) >= 4 else 1
#: the name of the pool's threads
THREAD_NAME = "delegate-background-compile"


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
    stateful = stateful_ops(cpu)
    if stateful is None:
        return "the TFLite runtime does not list the model's ops"
    if stateful:
        return (
            f"the model keeps state between invokes ({', '.join(stateful)}: resource variables or variable"
            " tensors), which live in one interpreter"
        )
    open_dims = [d["name"] for d in cpu.get_input_details() if any(int(n) < 0 for n in d.get("shape_signature", ()))]
    if open_dims:
        return f"inputs {', '.join(open_dims)} leave dims open (the caller resizes them before allocating)"
    return None


def stateful_ops(interpreter: Any) -> list[str] | None:
    """The ops of the host ``interpreter``'s model that keep state in it (``STATEFUL_OPS``),
    sorted; None when the host does not list its ops (then no model can be told stateless)."""
    try:
        ops = {op["op_name"] for op in interpreter._get_ops_details()}
    except Exception:  # a host without the ops listing
        return None
    return sorted(ops & STATEFUL_OPS)


@dataclass
class BackgroundCompile:
    """What background compile did (``interpreter.opencl.background_compile``).

    ``path``: ``compiling`` (the delegate is being built; invokes run on TFLite's CPU kernels),
    ``delegate`` (invokes run on the delegate), ``cpu faster`` (measured, TFLite's CPU kernels ran
    the model faster: invokes run on them, ``interpreter.opencl.measured``), ``cpu`` (the build
    failed and the settings allow fallback: invokes stay on CPU, ``cause`` says why) or ``failed``
    (the build failed, no fallback allowed: each invoke raises its error); ``off`` when ``auto``
    did not apply to this model or these settings (``cause`` says why): every invoke runs on the
    delegate, as without it.
    """

    mode: str
    path: str = "compiling"
    #: invokes that ran on TFLite's CPU kernels up to the switch (and the switching one, when it went to CPU)
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
        if self.path == "cpu faster":
            return head + f"built in {self.ready_s:.2f} s; {self.cause}: runs on TFLite's CPU kernels"
        return head + f"the build failed ({self.cause}); " + ("on CPU from then on" if self.path == "cpu" else "raised")


class BackgroundBuild:
    """One background build of a delegated interpreter and its handoff. The pool thread holds
    this, never the DelegatedInterpreter it is for (dropping that cancels the build)."""

    def __init__(
        self,
        make: Callable[[], Any],
        warm_up: Callable[[Any], None],
        *,
        execution_fallback: bool,
        measure: Callable[[Any], Any] | None = None,
    ) -> None:
        self.lock = threading.Lock()
        self.done = threading.Event()
        self._make, self._warm_up, self._measure = make, warm_up, measure
        #: what ``measure`` found (delegate/measured_choice.Outcome), None where it did not measure
        self.outcome: Any = None
        #: the settings allow execution fallback: a failed warm-up invoke is not the build's failure
        self._execution_fallback = execution_fallback
        #: the caller runs on CPU already: warm the delegate up before handing it over
        self.on_cpu = False
        self.interpreter: Any = None
        self.error: BaseException | None = None
        #: the warm-up invoke's error, under execution fallback: the interpreter falls back at the switch
        self.warm_up_error: RuntimeError | None = None
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
                # cpu_when_faster by measurement (delegate/measured_choice.py): its invokes warm the delegate up too
                warmed = self._measured(interpreter)
                cancel.checkpoint()
                with self.lock:
                    # the caller still waits (hand it over as it is, as without background compile), or the
                    # measurement's invokes warmed it up
                    if not self.on_cpu or warmed:
                        self.interpreter, self.ready_at = interpreter, time.perf_counter()
                        return
                # PoCL specialises kernels at their first launch: here, not in the caller's invoke
                self._warmed_up(interpreter)
            with self.lock:
                self.interpreter, self.ready_at = interpreter, time.perf_counter()
        except BaseException as exc:  # handed to the caller's next call
            with self.lock:
                self.error = exc
        finally:
            self.done.set()

    def _measured(self, interpreter: Any) -> bool:
        """Measure the delegated ``interpreter`` against TFLite's CPU kernels where that applies;
        whether it was invoked (a failed invoke, under execution fallback, counts: it is reported at the switch)."""
        if self._measure is None:
            return False
        try:
            self.outcome = self._measure(interpreter)
        except RuntimeError as exc:
            if not self._execution_fallback:
                raise
            self.warm_up_error = exc
            return True
        return self.outcome is not None

    def _warmed_up(self, interpreter: Any) -> None:
        try:
            self._warm_up(interpreter)
        except RuntimeError as exc:
            if not self._execution_fallback:
                raise
            self.warm_up_error = exc

    def wait(self) -> None:
        """A call of the caller's waits for the build's end (no limit)."""
        self.done.wait()

    def take_or_defer(self) -> tuple[Any, BaseException | None] | None:
        """The built interpreter (handed over: the thread is done with it) or the build's error;
        None while it builds, and from then on the thread warms the delegate up before handing it over."""
        with self.lock:
            if self.interpreter is None and self.error is None:
                self.on_cpu = True
                return None
            interpreter, self.interpreter = self.interpreter, None
            return interpreter, self.error

    def take(self) -> tuple[Any, BaseException | None]:
        """What ``take_or_defer`` gives, once the build is done."""
        taken = self.take_or_defer()
        assert taken is not None, "the build is done"
        return taken


_pool_lock = threading.Lock()
_queued: deque[BackgroundBuild] = deque()
_workers = 0


def submit(build: BackgroundBuild) -> None:
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


def withdraw(build: BackgroundBuild) -> None:
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


def io_mismatch(cpu: Any, delegated: Any) -> str | None:
    """What differs in the inputs and outputs of the two interpreters (the caller's tensor indices
    must stay valid across the switch), or None."""
    for what in ("input", "output"):
        a = [(d["index"], d["name"], tuple(d["shape"])) for d in getattr(cpu, f"get_{what}_details")()]
        b = [(d["index"], d["name"], tuple(d["shape"])) for d in getattr(delegated, f"get_{what}_details")()]
        if a != b:
            return f"{what}s differ from the CPU interpreter's: {b} vs {a}"
    return None
