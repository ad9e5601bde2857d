"""The delegates and kernels alive in this process, by the ids csrc/plugin.c holds.

Each created delegate is a Delegate: its options and report (``interpreter.opencl``), the plan
its Prepares follow, and the Prepares in progress. New delegates take the registry's current plan;
tests inject fakes there (``REGISTRY.plan``, ``REGISTRY.using``) instead of patching module attributes.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .._native import ffi
from ..runtime import Runtime
from .kernels import KernelEntry
from .options import DelegateOptions
from .prepare import PreparePlan, Preparing
from .report import DelegateState, PartitionId, partition_id


@dataclass(eq=False)
class Delegate:
    """One created delegate (one ``load_delegate``)."""

    ident: int
    #: its options and what it delegated: the report ``interpreter.opencl`` shows
    state: DelegateState
    #: claim -> choose -> compile, with its collaborators
    plan: PreparePlan
    #: Prepares in progress, by TfLiteContext address: interpreters sharing this delegate may
    #: prepare at the same time (the GIL is released while the interpreter runs C code)
    preparing: dict[int, Preparing] = field(default_factory=dict)

    @property
    def options(self) -> DelegateOptions:
        return self.state.options


class Registry:
    """Delegates by id, kernels by handle; ``lock`` guards both, and the reports' counters that
    interpreters sharing a delegate update at once."""

    def __init__(self, plan: PreparePlan | None = None) -> None:
        # re-entrant: a collection inside a locked section (any allocation may start one) runs
        # finalizers, such as a host's Delegate.__del__ that destroys another delegate here, on
        # the thread that holds the lock; a plain lock deadlocks there
        self.lock = threading.RLock()
        self._ids = itertools.count(1)
        self._delegates: dict[int, Delegate] = {}
        self._kernels: dict[int, KernelEntry] = {}
        self._plan = plan or PreparePlan()

    def create(self, options: DelegateOptions) -> Delegate:
        with self.lock:
            delegate = Delegate(next(self._ids), DelegateState(options), self._plan)
            self._delegates[delegate.ident] = delegate
        return delegate

    def destroy(self, ident: int) -> None:
        with self.lock:
            self._delegates.pop(ident, None)

    def delegate(self, ident: int) -> Delegate | None:
        return self._delegates.get(ident)

    def at_pointer(self, pointer: int) -> Delegate | None:
        """The delegate at a native ``TfLiteDelegate*`` address (as the host runtime holds it)."""
        if not pointer:
            return None
        native = ffi.cast("TfLiteDelegate *", pointer)
        return self._delegates.get(int(ffi.cast("int64_t *", native.data_)[0]))

    def add_kernel(self, entry: KernelEntry) -> int:
        with self.lock:
            handle = next(self._ids)
            self._kernels[handle] = entry
        return handle

    def kernel(self, handle: int) -> KernelEntry | None:
        return self._kernels.get(handle)

    def pop_kernel(self, handle: int) -> KernelEntry | None:
        with self.lock:
            return self._kernels.pop(handle, None)

    def live_kernels(self) -> int:
        return len(self._kernels)

    def live_runtimes(self) -> list[Runtime]:
        with self.lock:
            return [k.runtime for k in list(self._kernels.values())]  # a finalizer may pop one

    def contexts_of(self, state: DelegateState) -> dict[PartitionId, Any]:
        """The compiled contexts of the delegate ``state``'s live kernels, by partition."""
        with self.lock:
            entries = [k for k in list(self._kernels.values()) if k.state is state]
        return {partition_id(k.report.index, k.partition[0]): k.runtime.model for k in entries}

    @property
    def plan(self) -> PreparePlan:
        """The plan delegates created from now on follow (set it to inject collaborators)."""
        return self._plan

    @plan.setter
    def plan(self, plan: PreparePlan) -> None:
        with self.lock:
            self._plan = plan

    @contextmanager
    def using(self, plan: PreparePlan) -> Iterator[PreparePlan]:
        """Delegates created inside follow ``plan`` (tests: fake collaborators); the plan before
        is restored on exit."""
        with self.lock:
            before, self._plan = self._plan, plan
        try:
            yield plan
        finally:
            with self.lock:
                self._plan = before


REGISTRY = Registry()


def state_of_pointer(pointer: int) -> DelegateState | None:
    """The state of the delegate at a native ``TfLiteDelegate*`` address (as the host runtime holds it)."""
    delegate = REGISTRY.at_pointer(pointer)
    return delegate.state if delegate is not None else None


def compiled_contexts(state: DelegateState) -> dict[PartitionId, Any]:
    """The contexts the delegate of ``state`` compiled (or read) for its partitions alive now, by
    partition: what a Selection loads instead of compiling them again."""
    return REGISTRY.contexts_of(state)


def live_kernels() -> int:
    """Compiled partitions currently alive (for leak checks)."""
    return REGISTRY.live_kernels()


def live_runtimes() -> list[Runtime]:
    """The Runtimes of the compiled partitions currently alive, oldest first (for tools and tests)."""
    return REGISTRY.live_runtimes()
