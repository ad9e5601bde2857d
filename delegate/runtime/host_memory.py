"""The buffers of the runtime's arenas: over memory this process maps itself, in huge pages, on
devices that work in the host's memory in place; the driver's own elsewhere.

A CPU device reads a model's weights and writes its tensors in the host's memory. In pages of
4 KiB, MobileNetV3 (21 MB of weights) touches about 5,000 pages a run, more than a Zen 4 core's
second-level TLB holds (3,072 entries), so every run walks the page tables again; ResNet50
(100 MB) touches 25,000. Where the device uses the memory a buffer is made over
(``DeviceInfo.host_memory_in_place``: PoCL's CPU device), the constant and tensor arenas of at
least ``HUGE_PAGE`` bytes are made over a private anonymous mapping aligned to 2 MiB that asks the
kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``). Linux grants them where
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``always`` or ``madvise``; elsewhere the
mapping has ordinary pages and works the same. Other devices, smaller arenas, and a mapping the
system refuses (no memory or address space left) keep the driver's buffers.

The mapping is owned by the Runtime's ``Resources`` and unmapped after every OpenCL object.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable
from typing import Any

import numpy as np

from .._native import ffi
from . import driver
from .device import DeviceInfo
from .driver import Context, MemObject
from .resources import Resources

#: the huge page size on x86-64 and arm64 (4 KiB base pages); smaller arenas keep the driver's buffers
HUGE_PAGE = 2 << 20


def in_huge_pages(info: DeviceInfo, size: int) -> bool:
    """Is an arena of ``size`` bytes made over a mapping of this module's on this device?"""
    return info.host_memory_in_place and size >= HUGE_PAGE


def arena(
    info: DeviceInfo, context: Context, flags: int, size: int, owner: Resources, parts: Iterable[tuple[int, Any]] = ()
) -> MemObject:
    """The buffer of an arena of ``size`` bytes, zero but for each ``(offset, bytes-like)`` of
    ``parts`` copied in at its offset (no parts: uninitialised where it is the driver's), owned by
    ``owner``: over a mapping of this module's where ``in_huge_pages``, else the driver's own."""
    parts = [(offset, memoryview(data).cast("B")) for offset, data in parts]
    for offset, data in parts:
        if offset < 0 or offset + len(data) > size:
            raise ValueError(f"{len(data)} bytes at offset {offset} of a buffer of {size} bytes")
    if in_huge_pages(info, size):
        try:
            # one page more, to start at a huge page's boundary (the kernel backs aligned 2 MiB runs only)
            mapping = mmap.mmap(-1, size + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError:  # no memory or address space for it: the driver's buffer, which may still fit
            pass
        else:
            return _over(owner.mapping(mapping), context, flags, size, owner, parts)
    if not parts:
        return owner.memory(driver.buffer(context, flags, size))
    host = np.zeros(size, np.uint8)
    for offset, data in parts:
        host[offset : offset + len(data)] = np.frombuffer(data, np.uint8)
    return owner.memory(driver.buffer(context, flags, size, host=host))


def _over(
    mapping: mmap.mmap, context: Context, flags: int, size: int, owner: Resources, parts: list[tuple[int, memoryview]]
) -> MemObject:
    """The buffer over ``mapping`` from its first huge page boundary, ``parts`` copied in."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is not None:
        try:
            mapping.madvise(advice)
        except OSError:  # a kernel without transparent huge pages: ordinary pages
            pass
    whole = ffi.from_buffer(mapping)
    try:
        start = -int(ffi.cast("uintptr_t", whole)) % HUGE_PAGE
        host = ffi.cast("char *", whole) + start
        for offset, data in parts:
            source = ffi.from_buffer(data)
            ffi.memmove(host + offset, source, len(data))
            ffi.release(source)
        return owner.memory(driver.buffer_over(context, flags, size, host))
    finally:
        ffi.release(whole)  # the mapping's export: it can be unmapped when released
