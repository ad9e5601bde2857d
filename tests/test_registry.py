"""The plugin's registry of live delegates and kernels (delegate/plugin/registry.py)."""

from __future__ import annotations

import gc
import threading

from delegate.plugin.options import DelegateOptions
from delegate.plugin.registry import Registry


class _DestroysOnCollection:
    """Garbage whose finalizer destroys a delegate, as a host's ``Delegate.__del__`` does when a
    collection runs it: on whichever thread allocated at that moment."""

    def __init__(self, registry: Registry, ident: int) -> None:
        self.registry, self.ident, self.cycle = registry, ident, self

    def __del__(self) -> None:
        self.registry.destroy(self.ident)


def test_a_collection_inside_a_locked_section_can_destroy_a_delegate():
    """A collection may start at any allocation, also inside the registry's locked sections (a
    delegate's creation allocates its state there): finalizers that destroy a delegate then run on
    the thread holding the lock, and must not wait for it (a plain lock hung the process there)."""
    registry = Registry()
    doomed = registry.create(DelegateOptions()).ident
    kept = registry.create(DelegateOptions()).ident
    _DestroysOnCollection(registry, doomed)  # unreachable at once: a cycle only a collection frees

    def collect_inside_the_lock() -> None:
        with registry.lock:
            gc.collect()

    worker = threading.Thread(target=collect_inside_the_lock, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the finalizer waited for the lock its own thread holds"
    assert registry.delegate(doomed) is None
    assert registry.delegate(kept) is not None
