"""The type of what ``delegate.Interpreter`` returns: the host's Interpreter, plus what we add to it.

The host (ai-edge-litert or tflite-runtime) is untyped, so this Protocol states the methods both
hosts' Interpreters have, for type checkers and editors; at run time the object is an
``ExclusiveInterpreter`` (one call at a time, below) around the host's own, or around a wrapper
with the same methods: the execution fallback's (fallback.py) or, while the delegate compiles in
the background, warm_start.WarmStartInterpreter (which adds ``wait_for_delegate``,
``build_finished`` and ``close``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from .errors import InterpreterBusyError

if TYPE_CHECKING:
    import numpy as np

    from .effective import Effective
    from .plugin import DelegateState

TensorDetails = dict[str, Any]


class DelegatedInterpreter(Protocol):
    """A TFLite Interpreter with this delegate attached (or on CPU, as the settings asked)."""

    #: what the delegate did (nodes, partitions, reasons a node stayed on CPU, cache, host); None on CPU
    opencl: DelegateState | None
    #: the host's delegate object, for ``experimental_delegates`` of another interpreter; None on CPU
    opencl_delegate: Any
    #: how the acceleration settings mapped onto the delegate; None without settings
    effective: Effective | None

    def allocate_tensors(self) -> None: ...

    def invoke(self) -> None: ...

    def get_input_details(self) -> list[TensorDetails]: ...

    def get_output_details(self) -> list[TensorDetails]: ...

    def get_tensor_details(self) -> list[TensorDetails]: ...

    def set_tensor(self, tensor_index: int, value: np.ndarray) -> None: ...

    def get_tensor(self, tensor_index: int, subgraph_index: int = 0) -> np.ndarray: ...

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]: ...

    def resize_tensor_input(self, input_index: int, tensor_size: Sequence[int], strict: bool = False) -> None: ...

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]: ...

    def get_signature_runner(self, signature_key: str | None = None) -> Any: ...

    def reset_all_variables(self) -> None: ...


class _Calls:
    """Which calls are inside an interpreter now: one that changes it (``exclusive``) or any number
    that only read it (``shared``). A call that would overlap another is refused at once, never
    queued: overlapping calls are a race in the caller's code, which a wait would hide."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (call, thread name) of the exclusive call inside, if any
        self._writer: tuple[str, str] | None = None
        self._readers = 0

    def _busy(self, call: str) -> InterpreterBusyError:
        inside = f"{self._writer[0]} in thread {self._writer[1]!r}" if self._writer else "a read of its tensors"
        return InterpreterBusyError(
            f"{call}: the interpreter is in use by another thread ({inside}); a TFLite interpreter takes "
            "one call at a time: give each thread its own interpreter, or hold a lock around its calls"
        )

    @contextmanager
    def exclusive(self, call: str) -> Iterator[None]:
        with self._lock:
            if self._writer is not None or self._readers:
                raise self._busy(call)
            self._writer = (call, threading.current_thread().name)
        try:
            yield
        finally:
            with self._lock:
                self._writer = None

    @contextmanager
    def shared(self, call: str) -> Iterator[None]:
        with self._lock:
            if self._writer is not None:
                raise self._busy(call)
            self._readers += 1
        try:
            yield
        finally:
            with self._lock:
                self._readers -= 1


#: the calls of a background-compile wrapper (warm_start.py) that switch or drop its interpreter
_EXCLUSIVE_EXTRAS = frozenset({"wait_for_delegate", "close"})


class ExclusiveInterpreter:
    """What ``delegate.Interpreter`` returns: ``inner`` (the host's Interpreter, or a wrapper with
    its methods) taking one call at a time. TFLite's interpreter is not safe for concurrent calls
    (two invokes share its tensor arena and its kernels' scratch memory; a resize or an allocate
    frees memory another call reads): a call that changes the interpreter while another thread is
    inside it, or any call while one that changes it runs, raises InterpreterBusyError. Reading
    tensors (``get_tensor``, the details) may overlap other reads. Everything else goes straight to
    ``inner``; the arrays ``tensor()`` gives are views the caller must not read during an invoke.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._calls = _Calls()

    def __getattr__(self, name: str) -> Any:
        if name in ("_inner", "_calls"):  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        value = getattr(self._inner, name)
        if name not in _EXCLUSIVE_EXTRAS:
            return value

        def exclusive(*args: Any, **kwargs: Any) -> Any:
            with self._calls.exclusive(name):
                return value(*args, **kwargs)

        return exclusive

    # The delegate's reports live on ``inner``; the properties type them as the Protocol does.
    @property
    def opencl(self) -> DelegateState | None:
        return self._inner.opencl

    @opencl.setter
    def opencl(self, value: DelegateState | None) -> None:
        self._inner.opencl = value

    @property
    def opencl_delegate(self) -> Any:
        return self._inner.opencl_delegate

    @opencl_delegate.setter
    def opencl_delegate(self, value: Any) -> None:
        self._inner.opencl_delegate = value

    @property
    def effective(self) -> Effective | None:
        return self._inner.effective

    @effective.setter
    def effective(self, value: Effective | None) -> None:
        self._inner.effective = value

    def tensor(self, tensor_index: int) -> Callable[[], np.ndarray]:
        return self._inner.tensor(tensor_index)

    def get_signature_list(self) -> dict[str, dict[str, list[str]]]:
        return self._inner.get_signature_list()

    def allocate_tensors(self) -> None:
        with self._calls.exclusive("allocate_tensors"):
            self._inner.allocate_tensors()

    def invoke(self) -> None:
        with self._calls.exclusive("invoke"):
            self._inner.invoke()

    def set_tensor(self, tensor_index: int, value: np.ndarray) -> None:
        with self._calls.exclusive("set_tensor"):
            self._inner.set_tensor(tensor_index, value)

    def resize_tensor_input(self, input_index: int, tensor_size: Sequence[int], strict: bool = False) -> None:
        with self._calls.exclusive("resize_tensor_input"):
            self._inner.resize_tensor_input(input_index, tensor_size, strict)

    def reset_all_variables(self) -> None:
        with self._calls.exclusive("reset_all_variables"):
            self._inner.reset_all_variables()

    def get_signature_runner(self, signature_key: str | None = None) -> Any:
        with self._calls.exclusive("get_signature_runner"):
            return self._inner.get_signature_runner(signature_key)

    # Arguments beyond the index pass as given: hosts differ in them (subgraph_index).
    def get_tensor(self, tensor_index: int, *args: Any) -> np.ndarray:
        with self._calls.shared("get_tensor"):
            return self._inner.get_tensor(tensor_index, *args)

    def get_input_details(self) -> list[TensorDetails]:
        with self._calls.shared("get_input_details"):
            return self._inner.get_input_details()

    def get_output_details(self) -> list[TensorDetails]:
        with self._calls.shared("get_output_details"):
            return self._inner.get_output_details()

    def get_tensor_details(self, *args: Any) -> list[TensorDetails]:
        with self._calls.shared("get_tensor_details"):
            return self._inner.get_tensor_details(*args)
