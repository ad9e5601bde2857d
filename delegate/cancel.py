"""Stopping long work early: background builds that nobody waits for any more, and Ctrl-C.

A background build runs under a :class:`Token`; :func:`checkpoint` (called between partitions,
between OpenCL program builds and between tuning trials) raises :class:`CompileCancelled` once
its token is cancelled (its interpreter was closed or dropped) or the process is exiting. At exit
(a hook that runs before Python joins its threads) every build is cancelled and the exit waits at
most ``EXIT_WAIT_S`` for the work in flight to stop: one driver call (a program build) can last
seconds and cannot be stopped, so a build still inside one is abandoned (its threads are daemons),
as is, at once, a driver call that Ctrl-C interrupted.
Foreground compiles (no token) are never cancelled.

Ctrl-C: Python raises ``KeyboardInterrupt`` in the main thread only while it runs Python code, so
the main thread waits for a program build (:func:`call_interruptibly`) instead of making the driver
call itself. TFLite calls the plugin from C, where an exception cannot pass: the plugin remembers
the interrupt (:func:`remember`) and fails its call, and the package's own calls into the host
raise it again once the host has returned (:func:`host_call`).
"""

from __future__ import annotations

import _thread
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from .errors import CompileCancelled

#: at exit, how long to wait for cancelled work to reach a checkpoint before leaving it behind
#: (not at all when the script ended by Ctrl-C: the user asked to stop, not to wait)
EXIT_WAIT_S = 2.0

#: how long after a call from C a held KeyboardInterrupt is sent again (``redeliver``): the
#: call's end, in C, is microseconds away
REDELIVER_AFTER_S = 0.01

T = TypeVar("T")

_exiting = threading.Event()
_busy = threading.Condition()
_busy_count = 0
_abandoned_count = 0  # interrupted driver calls still running in their helper thread (under _busy)
_hook_lock = threading.Lock()
_hook_registered = False
_local = threading.local()  # .token: the build this thread runs; .interrupt: a remembered interrupt


class Token:
    """Whether one background build should stop."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set() or _exiting.is_set()


def exiting() -> bool:
    """True once the process has started to exit (its main script ended)."""
    return _exiting.is_set()


@contextmanager
def running(token: Token) -> Iterator[None]:
    """The block runs ``token``'s build: checkpoints in this thread obey it, and the exit waits
    (at most ``EXIT_WAIT_S``) for the block to end."""
    previous = getattr(_local, "token", None)
    _local.token = token
    try:
        with busy():
            yield
    finally:
        _local.token = previous


def checkpoint() -> None:
    """Raise CompileCancelled when the build this thread runs has been cancelled."""
    token: Token | None = getattr(_local, "token", None)
    if token is not None and token.cancelled:
        raise CompileCancelled("the background compile was cancelled: its interpreter is gone or the process exits")


@contextmanager
def busy() -> Iterator[None]:
    """Work the exit should wait for (at most ``EXIT_WAIT_S``)."""
    global _busy_count
    register_exit_hook()
    with _busy:
        _busy_count += 1
    try:
        yield
    finally:
        with _busy:
            _busy_count -= 1
            _busy.notify_all()


def register_exit_hook() -> None:
    """Cancel every build when the main script ends, before Python joins non-daemon threads."""
    global _hook_registered
    with _hook_lock:
        if _hook_registered:
            return
        try:
            threading._register_atexit(_on_exit)  # type: ignore[attr-defined]  # the hook concurrent.futures uses
        except RuntimeError:  # the interpreter is already shutting down
            _exiting.set()
        _hook_registered = True


def _on_exit() -> None:
    _exiting.set()
    interrupted = isinstance(getattr(sys, "last_value", None), KeyboardInterrupt)  # the script's uncaught error
    deadline = time.monotonic() + (0.0 if interrupted else EXIT_WAIT_S)
    with _busy:
        # a call an interrupt left behind is not waited for: the user asked to stop, not to wait
        while _busy_count > _abandoned_count and (left := deadline - time.monotonic()) > 0:
            _busy.wait(left)


def call_interruptibly(call: Callable[[], T]) -> T:
    """``call()``, made in a helper thread while the main thread waits for it, so that Ctrl-C
    interrupts the wait at once; in any other thread (signals reach only the main thread), or once
    the process exits, made directly. The helper is a daemon: an interrupted call is left behind."""
    if threading.current_thread() is not threading.main_thread() or _exiting.is_set():
        return call()
    global _abandoned_count
    outcome: list[T] = []
    failure: list[BaseException] = []
    done = threading.Event()
    left = [False]  # the waiting thread was interrupted while the call ran

    def run() -> None:
        global _abandoned_count
        try:
            with busy():
                outcome.append(call())
        except BaseException as exc:  # handed to the waiting thread
            failure.append(exc)
        finally:
            with _busy:
                done.set()
                _abandoned_count -= left[0]

    threading.Thread(target=run, name="delegate-driver-call", daemon=True).start()
    try:
        while not done.wait(0.1):  # Ctrl-C raises KeyboardInterrupt here, at the latest at the next poll
            pass
    except BaseException:
        with _busy:
            if not done.is_set():
                left[0] = True
                _abandoned_count += 1
        raise
    if failure:
        raise failure[0]
    return outcome[0]


def driver_call_abandoned() -> bool:
    """True while a driver call that an interrupt left behind still runs: releasing driver objects
    then waits for it (PoCL's release takes the lock its compiler holds), so cleanup skips them."""
    with _busy:
        return _abandoned_count > 0


def remember(interrupt: BaseException) -> None:
    """Keep an interrupt (KeyboardInterrupt, SystemExit, CompileCancelled) caught inside a call
    from C, for :func:`host_call` in this thread."""
    _local.interrupt = interrupt


def redeliver(interrupt: BaseException) -> None:
    """Raise ``interrupt`` again after a call from C that had to finish its work first (a release):
    inside :func:`host_call`, when the host returns; elsewhere (the host freed by the garbage
    collector) a KeyboardInterrupt in the main thread comes back as a new SIGINT, sent by a thread
    once the call has returned (sent now, Python would run its handler at once, still inside the
    call; a later call from C that it lands in catches it and sends it again), and anything else
    can only be remembered."""
    outside = getattr(_local, "host_calls", 0) == 0
    if outside and isinstance(interrupt, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
        try:
            threading.Thread(target=_interrupt_main_soon, name="delegate-redeliver", daemon=True).start()
            return
        except RuntimeError:  # no new threads at the interpreter's shutdown
            pass
    remember(interrupt)


def _interrupt_main_soon() -> None:
    time.sleep(REDELIVER_AFTER_S)
    _thread.interrupt_main()


def forget() -> None:
    """Drop an interrupt remembered by a call whose host caller did not ask for it."""
    _local.interrupt = None


def _take() -> BaseException | None:
    interrupt: BaseException | None = getattr(_local, "interrupt", None)
    _local.interrupt = None
    return interrupt


@contextmanager
def host_call() -> Iterator[None]:
    """A call into the host runtime that may call the plugin: an interrupt the plugin caught is
    raised when it returns, instead of the host's error for the failed call."""
    forget()
    _local.host_calls = getattr(_local, "host_calls", 0) + 1
    try:
        yield
    except Exception:
        interrupt = _take()
        if interrupt is None:
            raise
        raise interrupt from None  # the host's error only says that the plugin failed
    finally:
        _local.host_calls -= 1
    interrupt = _take()
    if interrupt is not None:
        raise interrupt
