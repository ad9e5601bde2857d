"""What ``delegate.Interpreter`` returns: ``DelegatedInterpreter``, a TFLite Interpreter with this
delegate attached (or on TFLite's CPU kernels, as the settings asked).

It owns the host's Interpreter(s) (ai-edge-litert's or tflite-runtime's) and names the host's
methods users call; where its invokes run is one explicit state, ``ExecutionPath``:

- ``DELEGATED``: on the delegate (TFLite runs the nodes the delegate did not take).
- ``COMPILING``: background compile (delegate/warm_start.py): a pool thread builds the delegated
  interpreter while calls go to one on TFLite's CPU kernels; the first invoke after the build
  finished switches to ``DELEGATED`` (or, when the build failed, ``FELL_BACK`` or ``FAILED``).
- ``CPU_FASTER``: background compile measured the built delegate slower than TFLite's CPU kernels
  (cpu_when_faster, delegate/measured_choice.py): TFLite's CPU kernels from then on.
- ``FELL_BACK``: the delegate failed, and the settings allow fallback: its background build, or
  an invoke under execution fallback (delegate/fallback.py); TFLite's CPU kernels from then on,
  ``fallback_cause`` says why.
- ``FAILED``: the background build failed and the settings allow no fallback: ``allocate_tensors``
  and ``invoke`` raise its error.
- ``CPU_BY_SETTINGS``: the acceleration settings asked for TFLite's CPU kernels or XNNPACK.
- ``CLOSED``: after ``close()``.

One call at a time: TFLite's interpreter is not safe for concurrent calls, so a call that changes
the interpreter while another thread is inside it, or any call while one that changes it runs,
raises InterpreterBusyError (docs/runtime.md "Threads").
"""

from __future__ import annotations

import enum
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import cancel, fallback, warm_start
from ._warnings import warn
from .errors import DelegateError, InterpreterBusyError

if TYPE_CHECKING:
    import numpy as np

    from .effective import Effective
    from .plugin import DelegateState

TensorDetails = dict[str, Any]

_WARNING = "tflite-opencl-delegate"


class ExecutionPath(enum.Enum):
    """Where a ``DelegatedInterpreter``'s invokes run now (``interpreter.path``)."""

    #: on the delegate
    DELEGATED = "delegated"
    #: background compile: the delegate builds, TFLite's CPU kernels answer meanwhile
    COMPILING = "compiling"
    #: measured after the background build, TFLite's CPU kernels ran the model faster: on them from then on
    CPU_FASTER = "cpu faster"
    #: the delegate failed (its build or an invoke) and the settings allow fallback: on CPU from then on
    FELL_BACK = "fell back"
    #: the background build failed and the settings allow no fallback: allocate and invoke raise its error
    FAILED = "failed"
    #: the settings asked for TFLite's CPU kernels or XNNPACK: no delegate
    CPU_BY_SETTINGS = "cpu by settings"
    #: ``close()`` let go of the interpreters
    CLOSED = "closed"


class _Calls:
    """Which calls are inside an interpreter now: one that changes it (``exclusive``) or any number
    that only read it (``shared``). A call that would overlap another is refused at once, never
    queued: overlapping calls are a race in the caller's code, which a wait would hide.

    Guards are plain context-manager objects, one per call name, not generators: an invoke of a
    tiny model takes about 10 us, and a generator-based guard added a third of that."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (call, thread id) of the exclusive call inside, if any
        self._writer: tuple[str, int] | None = None
        self._readers = 0
        self._guards: dict[tuple[str, bool], _Guard] = {}

    def _busy(self, call: str) -> InterpreterBusyError:
        writer = self._writer
        names = {t.ident: t.name for t in threading.enumerate()}
        inside = f"{writer[0]} in thread {names.get(writer[1], writer[1])!r}" if writer else "a read of its tensors"
        return InterpreterBusyError(
            f"{call}: the interpreter is in use by another thread ({inside}); a TFLite interpreter takes "
            "one call at a time: give each thread its own interpreter, or hold a lock around its calls"
        )

    def exclusive(self, call: str) -> _Guard:
        return self._guard(call, True)

    def shared(self, call: str) -> _Guard:
        return self._guard(call, False)

    def _guard(self, call: str, exclusive: bool) -> _Guard:
        guard = self._guards.get((call, exclusive))
        if guard is None:
            guard = self._guards.setdefault((call, exclusive), _Guard(self, call, exclusive))
        return guard


class _Guard:
    """One call's entry into ``_Calls``: ``with calls.exclusive("invoke"): ...``."""

    __slots__ = ("_call", "_calls", "_exclusive")

    def __init__(self, calls: _Calls, call: str, exclusive: bool) -> None:
        self._calls, self._call, self._exclusive = calls, call, exclusive

    def __enter__(self) -> None:
        calls = self._calls
        with calls._lock:
            if calls._writer is not None or (self._exclusive and calls._readers):
                raise calls._busy(self._call)
            if self._exclusive:
                calls._writer = (self._call, threading.get_ident())
            else:
                calls._readers += 1

    def __exit__(self, *exc: object) -> None:
        calls = self._calls
        if self._exclusive:
            calls._writer = None  # one store: no other thread writes it while this call is inside
            return
        with calls._lock:
            calls._readers -= 1


class DelegatedInterpreter:
    """A TFLite Interpreter with this delegate attached (or on CPU, as the settings asked), taking
    one call at a time; made by ``delegate.Interpreter``.

    The host Interpreter's methods are here by name and go to the host interpreter current now
    (``host``: under background compile the CPU one until the switch). Reads (``get_tensor``, the
    details) may overlap other reads; any call overlapping one that changes the interpreter
    (``invoke``, ``allocate_tensors``, ``set_tensor``, ``resize_tensor_input``,
    ``reset_all_variables``, ``get_signature_runner``, ``wait_for_delegate``, ``close``) raises
    InterpreterBusyError. ``tensor(i)`` returns a function that reads the current host interpreter
    at each call; an array it returned is a view of the interpreter current then, so call the
    function again after each invoke (TFLite asks the same). The arrays ``tensor()`` returns and
    signature runners reach TFLite directly, outside the one-call check.
    """

    #: what the delegate did (nodes, partitions, reasons a node stayed on CPU, cache, host); None on CPU
    opencl: DelegateState | None
    #: the host's delegate object, for ``experimental_delegates`` of another interpreter; None on CPU
    opencl_delegate: Any
    #: how the acceleration settings (or the keyword options) mapped onto the delegate
    effective: Effective | None

    def __init__(
        self,
        host: Any,
        *,
        path: ExecutionPath = ExecutionPath.DELEGATED,
        opencl: DelegateState | None = None,
        opencl_delegate: Any = None,
        effective: Effective | None = None,
        make_cpu: Callable[[], Any] | None = None,
        measure: Callable[[Any], Any] | None = None,
    ) -> None:
        """``host``: the host's Interpreter (delegated, or on CPU for ``CPU_BY_SETTINGS``);
        ``make_cpu``: under execution fallback, makes the allocated CPU interpreter an invoke that
        failed on the device runs on (None: a failed invoke raises); ``measure``: on the delegated
        path, the measurement against TFLite's CPU kernels (delegate/measured_choice.py) made
        before the first invoke, unless the model keeps state."""
        self._calls = _Calls()
        self._host: Any = host
        self._path = path
        self.opencl, self.opencl_delegate, self.effective = opencl, opencl_delegate, effective
        self._make_cpu = make_cpu
        #: after an invoke failed on the device: the CPU interpreter every invoke runs on
        self._fallback_cpu: Any = None
        self._execution_cause: str | None = None
        # Background compile (``with_background_compile``); the build stays for its report.
        self._build: warm_start.BackgroundBuild | None = None
        self._background: warm_start.BackgroundCompile | None = None
        self._created = time.perf_counter()
        self._grace_s = 0.0
        self._fallback_allowed = False
        #: the first allocate (or invoke) has waited out the grace for the build
        self._decided = False
        #: no background build, or its switch is behind: an invoke has nothing to decide
        self._settled = True
        #: the measurement the first invoke makes (plain path; under background compile the build makes it)
        self._measure = measure if path is ExecutionPath.DELEGATED else None
        self._settled = self._measure is None
        #: why invokes run on TFLite's CPU kernels (``CPU_FASTER``): the measurement's finding
        self.cpu_faster_cause: str | None = None
        #: the caller allocated the CPU interpreter (so its inputs hold what the caller set)
        self._cpu_allocated = False
        self._error: BaseException | None = None

    @classmethod
    def with_background_compile(
        cls,
        cpu: Any,
        make: Callable[[], Any],
        *,
        mode: str,
        grace_s: float,
        fallback_allowed: bool,
        opencl: DelegateState | None,
        opencl_delegate: Any,
        effective: Effective | None,
        make_cpu: Callable[[], Any] | None = None,
        measure: Callable[[Any], Any] | None = None,
    ) -> DelegatedInterpreter:
        """``COMPILING``: calls go to ``cpu`` (the host's Interpreter without the delegate, not
        allocated) while a pool thread runs ``make`` (the allocated delegated interpreter), then
        ``measure`` on it (delegate/measured_choice.py, None: not measured).
        ``grace_s``: how long from now the first ``allocate_tensors`` waits for the build;
        ``fallback_allowed``: a failed build falls back to CPU instead of raising."""
        interpreter = cls(
            cpu,
            path=ExecutionPath.COMPILING,
            opencl=opencl,
            opencl_delegate=opencl_delegate,
            effective=effective,
            make_cpu=make_cpu,
        )
        interpreter._grace_s, interpreter._fallback_allowed = grace_s, fallback_allowed
        interpreter._settled = False
        interpreter._background = warm_start.BackgroundCompile(mode)
        if opencl is not None:
            opencl.background_compile = interpreter._background
        build = warm_start.BackgroundBuild(
            make, warm_start.warm_up_on_zeros, execution_fallback=make_cpu is not None, measure=measure
        )
        interpreter._build = build
        weakref.finalize(interpreter, build.token.cancel)  # dropped: its build stops or never starts
        warm_start.submit(build)
        return interpreter

    # What it is now.

    @property
    def path(self) -> ExecutionPath:
        """Where invokes run now."""
        return self._path

    @property
    def host(self) -> Any:
        """The host's Interpreter that calls go to now: for the host's methods not named here.
        Under background compile it changes at the switch; calls on it bypass the one-call check
        and the execution fallback."""
        if self._path is ExecutionPath.CLOSED:
            raise DelegateError("the interpreter is closed")
        return self._host

    @property
    def fallback_cause(self) -> str | None:
        """Why invokes run on CPU: the execution fallback's cause (settings that allow it), or the
        failed background build's. None while nothing failed."""
        return self._execution_cause or (self._background.cause if self._background is not None else None)

    def __repr__(self) -> str:
        return f"<delegate.DelegatedInterpreter {self._path.value}>"

    # The host Interpreter's calls.

    def allocate_tensors(self) -> None:
        with self._calls.exclusive("allocate_tensors"):
            if self._build is None:
                self.host.allocate_tensors()
            else:
                self._allocate_beside_the_build()

    def invoke(self) -> None:
        with self._calls.exclusive("invoke"):
            if not self._settled:
                if self._build is not None:
                    self._switch_when_built()
                    # decided and switched: later invokes skip the build's bookkeeping
                    self._settled = self._decided and self._path is not ExecutionPath.COMPILING
                else:
                    self._measure_before_the_first_invoke()
                    self._settled = True
            self._invoke()

    def set_tensor(self, tensor_index: int, value: np.ndarray) -> None:
        with self._calls.exclusive("set_tensor"):
            self.host.set_tensor(tensor_index, value)

    def resize_tensor_input(self, input_index: int, tensor_size: Sequence[int], strict: bool = False) -> None:
        with self._calls.exclusive("resize_tensor_input"):
            self._await_build("resize_tensor_input")
            self.host.resize_tensor_input(input_index, tensor_size, strict)

    def reset_all_variables(self) -> None:
        with self._calls.exclusive("reset_all_variables"):
            self.host.reset_all_variables()

    def get_signature_runner(self, signature_key: str | None = None) -> Any:
        with self._calls.exclusive("get_signature_runner"):
            self._await_build("get_signature_runner")
            return self.host.get_signature_runner(signature_key)

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        return self.host.get_signature_list()

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        return lambda: self.host.tensor(tensor_index)()

    # Arguments beyond the index pass as given: hosts differ in them (subgraph_index).
    def get_tensor(self, tensor_index: int, *args: Any) -> np.ndarray:
        with self._calls.shared("get_tensor"):
            return self.host.get_tensor(tensor_index, *args)

    def get_input_details(self) -> list[TensorDetails]:
        with self._calls.shared("get_input_details"):
            return self.host.get_input_details()

    def get_output_details(self) -> list[TensorDetails]:
        with self._calls.shared("get_output_details"):
            return self.host.get_output_details()

    def get_tensor_details(self, *args: Any) -> list[TensorDetails]:
        with self._calls.shared("get_tensor_details"):
            return self.host.get_tensor_details(*args)

    # The delegate's calls.

    def wait_for_delegate(self) -> bool:
        """Under background compile, wait for the build and switch now. True when calls go to the
        delegated interpreter (also after an execution fallback: ``fallback_cause``), False when
        they run on TFLite's CPU kernels (the build failed and the settings allow fallback, or the
        settings asked for the CPU); raises the build's error when they allow no fallback."""
        with self._calls.exclusive("wait_for_delegate"):
            return self._await_build("wait_for_delegate")

    def build_finished(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: no limit) for the background build to end, without
        switching: the next invoke switches. True when it has ended (or there is none)."""
        return self._build.done.wait(timeout) if self._build is not None else True

    def close(self) -> None:
        """Cancel a background build (it stops at its next checkpoint), wait for it, and let go of
        the interpreters; any call after it raises DelegateError."""
        with self._calls.exclusive("close"):
            build = self._build
            if build is not None:
                build.token.cancel()
                warm_start.withdraw(build)
                build.done.wait()
                build.take_or_defer()  # drops the built interpreter, if it was not taken
            self._path = ExecutionPath.CLOSED
            with cancel.host_call():  # TFLite frees the delegate's kernels: Ctrl-C there comes back here
                self._host = self._fallback_cpu = None

    def __enter__(self) -> DelegatedInterpreter:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    # Invokes, and the execution fallback.

    def _on_delegate(self) -> bool:
        """Whether the host interpreter is the delegated one (its tensors are the caller's)."""
        return self._path is ExecutionPath.DELEGATED or (
            self._path is ExecutionPath.FELL_BACK and self._fallback_cpu is not None
        )

    def _invoke(self) -> None:
        host = self.host
        if self._fallback_cpu is None and self._make_cpu is None:  # no execution fallback: the plain call
            host.invoke()
            return
        if self._fallback_cpu is not None:
            fallback.run_on_cpu(host, self._fallback_cpu)
            return
        if self._make_cpu is None or not self._on_delegate():
            host.invoke()
            return
        try:
            host.invoke()
            return
        except RuntimeError as exc:
            self._fall_back_on_execution(exc)
        fallback.run_on_cpu(host, self._fallback_cpu)

    def _fall_back_on_execution(self, error: RuntimeError) -> None:
        """An invoke of the delegated interpreter failed, under execution fallback: CPU from now on."""
        assert self._make_cpu is not None
        self._execution_cause = fallback.cause_of(error)
        fallback.warn_falling_back(self._execution_cause)
        self._fallback_cpu = self._make_cpu()
        self._path = ExecutionPath.FELL_BACK

    # The plain path's measurement.

    def _measure_before_the_first_invoke(self) -> None:
        """Measure the delegated interpreter against TFLite's CPU kernels (the caller's inputs kept)
        and go to the CPU when it was faster. A model that keeps state is left alone: the
        measurement's invokes would move it."""
        measure, self._measure = self._measure, None
        host = self._host
        if measure is None or self._path is not ExecutionPath.DELEGATED or warm_start.stateful_ops(host) != []:
            return
        inputs = [(d["index"], host.get_tensor(d["index"]).copy()) for d in host.get_input_details()]
        try:
            outcome = measure(host)
        finally:
            for index, value in inputs:
                host.set_tensor(index, value)
        if outcome is None or (outcome.cpu is None and outcome.delegated is None):
            return
        for index, value in inputs:
            (outcome.cpu or outcome.delegated).set_tensor(index, value)
        if outcome.delegated is not None:  # the partitions measured faster only (measured_choice.py)
            self._host = outcome.delegated
            return
        self._host, self._path, self.cpu_faster_cause = outcome.cpu, ExecutionPath.CPU_FASTER, outcome.why()

    # Background compile: the calls that may switch, and the switch.

    def _allocate_beside_the_build(self) -> None:
        if not self._decided:
            self._decide()
        self._raise_failure()
        try:
            with cancel.host_call():  # a resize compiles the partitions again
                self.host.allocate_tensors()
        except RuntimeError:
            # TFLite's CPU kernels cannot run the model (a custom op only the delegate runs): there is
            # nothing to answer with meanwhile, so wait for the delegate; the CPU's error if it failed
            if self._on_delegate() or not self._await_build(
                "allocate_tensors (TFLite's CPU kernels cannot run the model)"
            ):
                raise
            with cancel.host_call():
                self.host.allocate_tensors()
        self._cpu_allocated = not self._on_delegate()

    def _switch_when_built(self) -> None:
        """Before an invoke: the first one decides (as the first allocate does); one while
        compiling switches when the build is done; count those on CPU."""
        assert self._build is not None and self._background is not None
        if not self._decided:
            self._decide()
        elif self._path is ExecutionPath.COMPILING and self._build.done.is_set():
            self._switch(self._build.take())
        self._raise_failure()
        if not self._on_delegate():
            self._background.cpu_invokes += 1

    def _await_build(self, why: str) -> bool:
        """Wait for the background build and switch (no build: nothing to wait for); True when
        calls go to the delegated interpreter. Raises the build's error without fallback."""
        if self._path is ExecutionPath.COMPILING:
            assert self._build is not None and self._background is not None
            if not self._build.done.is_set():
                self._background.waited_for = why
            self._build.wait()
            self._decided = True
            self._switch(self._build.take())
        self._raise_failure()
        return self._on_delegate()

    def _decide(self) -> None:
        """The first allocate (or invoke): wait out the grace for the build, else run on CPU."""
        assert self._build is not None
        remaining = self._grace_s - (time.perf_counter() - self._created)
        if remaining > 0:
            self._build.done.wait(remaining)
        self._decided = True
        taken = self._build.take_or_defer()
        if taken is not None:
            self._switch(taken)

    def _switch(self, taken: tuple[Any, BaseException | None]) -> None:
        """The build ended: go to its interpreter, or fail as the settings ask."""
        assert self._build is not None and self._background is not None
        interpreter, error = taken
        report = self._background
        now = time.perf_counter() - self._created
        if error is not None:
            self._failed(error)
            return
        mismatch = warm_start.io_mismatch(self._host, interpreter)
        if mismatch:
            self._failed(DelegateError(f"the delegated interpreter's {mismatch}"), always_fall_back=True)
            return
        outcome = self._build.outcome
        faster_cpu = outcome.cpu if outcome is not None else None
        if faster_cpu is not None:
            interpreter = faster_cpu  # the delegated one is let go
        elif outcome is not None and outcome.delegated is not None:
            interpreter = outcome.delegated  # the partitions measured faster only (measured_choice.py)
        if self._cpu_allocated:
            for detail in self._host.get_input_details():  # what the caller set, on the interpreter it set it on
                interpreter.set_tensor(detail["index"], self._host.get_tensor(detail["index"]))
        ready_at = self._build.ready_at
        report.ready_s = (ready_at - self._created) if ready_at is not None else now
        report.switched_s = now
        if faster_cpu is not None:
            report.path, report.cause = "cpu faster", outcome.why()
            self.cpu_faster_cause = report.cause
            self._host, self._path = interpreter, ExecutionPath.CPU_FASTER
            return
        report.path = "delegate"
        self._host, self._path = interpreter, ExecutionPath.DELEGATED
        if self._build.warm_up_error is not None:  # the warm-up invoke failed on the device
            self._fall_back_on_execution(self._build.warm_up_error)

    def _failed(self, error: BaseException, always_fall_back: bool = False) -> None:
        assert self._background is not None
        report = self._background
        report.cause = str(error).strip() or type(error).__name__
        if self._fallback_allowed or always_fall_back:
            report.path = "cpu"
            self._path = ExecutionPath.FELL_BACK
            warn(f"{_WARNING}: the background compile failed ({report.cause}); running on CPU")
            return
        report.path = "failed"
        self._path = ExecutionPath.FAILED
        if hasattr(error, "add_note"):
            error.add_note(f"{_WARNING}: raised by the background compile (background_compile={report.mode})")
        self._error = error

    def _raise_failure(self) -> None:
        if self._path is ExecutionPath.FAILED:
            assert self._error is not None
            raise self._error
