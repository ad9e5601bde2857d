"""What a Runtime owns and must release: memory objects, kernels, programs, queue, context, and
the host memory mappings buffers are made over (host_memory.py).

Every part of a load (allocation, constants, kernels, plan) records what it creates here as soon
as it exists, so a load that fails halfway releases exactly what it made.
"""

from __future__ import annotations

import mmap
from typing import Any, Protocol, TypeVar

from .driver import MemObject
from .opencl import cl_api


class _Releasable(Protocol):
    def release(self) -> None: ...


_R = TypeVar("_R", bound=_Releasable)


class Resources:
    """OpenCL objects of one Runtime, released once: memory objects last made first (an image
    or sub-buffer is always made after the buffer it is over, so children go before their
    parents), then kernels (last made first), then what they were made from (program builder,
    queue, context: last adopted first), and last the host memory buffers were made over."""

    def __init__(self) -> None:
        self._memory: list[MemObject] = []
        self._kernels: list[Any] = []  # cl_kernel handles
        self._owners: list[_Releasable] = []
        self._mappings: list[mmap.mmap] = []

    def memory(self, obj: MemObject) -> MemObject:
        """Own ``obj`` (released at ``release``); returns it."""
        self._memory.append(obj)
        return obj

    def kernel(self, handle: Any) -> Any:
        """Own a cl_kernel handle; returns it."""
        self._kernels.append(handle)
        return handle

    def mapping(self, mapping: mmap.mmap) -> mmap.mmap:
        """Own host memory a buffer is made over (unmapped at ``release``, after the context); returns it."""
        self._mappings.append(mapping)
        return mapping

    def adopt(self, obj: _R) -> _R:
        """Own a context, queue or program builder (released after every kernel); returns it."""
        self._owners.append(obj)
        return obj

    def release_order(self) -> list[MemObject]:
        """Every memory object, each before the one it was made from (each once)."""
        seen: set[int] = set()
        out = []
        for obj in reversed(self._memory):
            if id(obj) not in seen:
                seen.add(id(obj))
                out.append(obj)
        return out

    def release(self) -> None:
        """Release everything; one that an interrupt stopped may be called again: each object is
        released once (the memory objects forget their handles, the rest leave the lists first)."""
        for obj in self.release_order():
            obj.release()
        self._memory = []
        if self._kernels:
            api = cl_api()
            while self._kernels:
                api.release_kernel(self._kernels.pop())
        while self._owners:
            self._owners.pop().release()
        while self._mappings:
            self._mappings.pop().close()
