"""Gives PoCL a CPU model its LLVM knows, on x86-64 processors newer than that LLVM.

PoCL asks LLVM for the host CPU's name once, when it sets up its CPU device, and compiles every
kernel for that name. The PoCL 3.0 of PyPI's ``pocl-binary-distribution`` carries LLVM 15, which
names no processor newer than AMD's Zen 3 family by its CPUID: on a Zen 5 (family 1Ah) it answers
``generic``, which its own compiler then rejects, so every program build fails with "unknown
target CPU 'generic'". That PoCL has no setting for the name (later PoCL reads
``POCL_LLVM_CPU_NAME``).

``repair_device`` finds the name in PoCL's device object and writes, in place of ``generic``, the
newest processor LLVM 15 knows whose instruction sets the host has, as the host's ``/proc/cpuinfo``
flags show: ``skx`` (LLVM's short name for skylake-avx512) where AVX-512 F/CD/BW/DQ/VL are there,
as on a Zen 5; else ``znver3`` on AMD processors with Zen 3's instruction sets, ``haswell`` (AVX2
and FMA), ``nehalem`` (SSE4.2) or ``x86-64``. With an AVX-512 model the compiler emits 16-float
vectors as one register, and the compiler's matrix products use them (cpu_models.py
``vector_floats``, ``CompileOptions.vector_width``). A name LLVM knows is left alone: LLVM 15 calls a Zen 4 (AVX-512,
executed as two 256-bit halves) ``znver3``, and compiling for ``skx`` there was measured neither
faster nor slower overall (benchmarks/experiments/pocl_target_race.py, RESULTS.md "PoCL's CPU name").

Nothing is written unless the object holds exactly what is expected: the device's LLVM triple, and
right after it a pointer to one CPU name, in writable memory, with room for the new one; every read
of PoCL's memory is checked first (through a pipe, so a bad address is an error, not a crash;
``dlg_read_checked``, csrc/pocl_repair.c). Set ``DELEGATE_POCL_CPU`` to ``off`` to leave PoCL alone,
or to a name of at most 7 characters to use that name instead, over ``generic`` or over the name
PoCL chose where it fits in its place (``skx`` over ``znver3``).

``repair_devices`` is the one step that does it, when the OpenCL loader is initialised
(opencl.loader(), before any program is built); it also reads, once, the name each PoCL device
compiles for (``target_name``), which DeviceInfo.compiler_cpu and the program cache key carry.

No cleaner lever exists for this PoCL: ``POCL_LLVM_CPU_NAME`` arrived in later PoCL (the 3.0
library names no such variable); a ``-target-cpu`` build option comes before the one PoCL appends
from the same field (the last wins) and would not reach its code generator, which also reads it;
intercepting LLVM's ``getHostCPUName`` (pocl/pocl#1049) needs ``LD_PRELOAD`` before the process
starts; and 3.0 is the newest ``pocl-binary-distribution``.
"""

from __future__ import annotations

import os
import platform
import re
import struct
import threading
from collections.abc import Iterable
from pathlib import Path

from ..._native import ffi, lib

#: the value LLVM gives to a CPU it does not know, as PoCL stores it (with its terminator)
UNKNOWN_CPU = b"generic\0"
#: how many bytes of PoCL's device object are searched (3.0 keeps the name at offset 640)
_SEARCH_BYTES = 2048
#: the replacement is written over "generic" in place: at most 7 characters and a terminator
MAX_NAME = len(UNKNOWN_CPU) - 1
#: (name, /proc/cpuinfo flags it needs), best first; each name is one LLVM 15 knows
_CANDIDATES: tuple[tuple[str, frozenset[str]], ...] = (
    # LLVM's short name for skylake-avx512: AVX-512 F/CD/BW/DQ/VL, which a Zen 5 runs at full width
    ("skx", frozenset("avx512f avx512cd avx512bw avx512dq avx512vl avx2 fma bmi1 bmi2 f16c movbe adx".split())),
    (
        "znver3",
        frozenset("avx2 fma bmi1 bmi2 f16c movbe adx sha_ni clzero vaes vpclmulqdq rdpid xsaves".split()),
    ),
    ("haswell", frozenset("avx2 fma bmi1 bmi2 f16c movbe".split())),
    ("nehalem", frozenset("sse4_2 popcnt".split())),
    ("x86-64", frozenset()),
)


def cpu_flags(cpuinfo: str) -> tuple[str, frozenset[str]]:
    """The vendor and the flags of the first processor in ``/proc/cpuinfo``'s text."""
    vendor, flags = "", frozenset[str]()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "vendor_id" and not vendor:
            vendor = value.strip()
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return vendor, flags


def replacement_name(vendor: str, flags: frozenset[str]) -> str:
    """The newest CPU name LLVM 15 knows whose instruction sets the host has."""
    for name, needed in _CANDIDATES:
        if name == "znver3" and vendor != "AuthenticAMD":
            continue
        if needed <= flags:
            return name
    return "x86-64"


class _MemoryReader:
    """Reads the process's own memory without trusting an address (``dlg_read_checked``: through
    a pipe with the write system call, which fails where nothing is mapped)."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()
        self._out = ffi.new("char[]", 4096)

    def read(self, address: int, size: int) -> bytes | None:
        if not 0x1000 <= address < 1 << 47 or not 0 < size <= 4096:
            return None
        if lib.dlg_read_checked(self._write_fd, self._read_fd, address, self._out, size) != 0:
            return None
        return ffi.buffer(self._out, size)[:]

    def close(self) -> None:
        os.close(self._read_fd)
        os.close(self._write_fd)


def _applies(platform_name: str) -> bool:
    """Is this PoCL on x86-64, where the CPU name is looked for at all?"""
    return "portable computing language" in platform_name.lower() and platform.machine() == "x86_64"


def _names_after_triples(reader: _MemoryReader, device_address: int) -> dict[int, bytes]:
    """Address -> first 16 bytes, for each string that a pointer right after a pointer to an
    x86-64 LLVM triple points at, in the first ``_SEARCH_BYTES`` of the device object."""
    raw = reader.read(device_address, _SEARCH_BYTES) or reader.read(device_address, _SEARCH_BYTES // 2)
    if raw is None:
        return {}
    words = [value for (value,) in struct.iter_unpack("<Q", raw[: len(raw) // 8 * 8])]
    found: dict[int, bytes] = {}
    for index in range(len(words) - 1):
        triple = reader.read(words[index], 8)
        if triple is None or not triple.startswith(b"x86_64-"):
            continue
        name = reader.read(words[index + 1], 16) or reader.read(words[index + 1], len(UNKNOWN_CPU))
        if name is not None:
            found[words[index + 1]] = name
    return found


def host_name() -> str:
    """The name ``replacement_name`` gives this host, from ``/proc/cpuinfo``."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""
    return replacement_name(*cpu_flags(cpuinfo))


def _name_text(raw: bytes) -> str | None:
    """The CPU name a string read from PoCL's memory holds: up to its terminator, when that is a
    plausible LLVM CPU name; else None."""
    text, terminated, _ = raw.partition(b"\0")
    return text.decode() if terminated and re.fullmatch(rb"[A-Za-z0-9_-]{1,32}", text) else None


def _find_name(reader: _MemoryReader, device_address: int) -> tuple[int, str] | None:
    """The address and the text of the device's CPU name, when exactly one is found."""
    found = {
        (address, text)
        for address, raw in _names_after_triples(reader, device_address).items()
        if (text := _name_text(raw)) is not None
    }
    return found.pop() if len(found) == 1 else None


def _writable(address: int, size: int) -> bool:
    """Is ``[address, address + size)`` inside one writable mapping of this process (a name in
    read-only data is never written)?"""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return False
    for line in maps.splitlines():
        span, _, rest = line.partition(" ")
        start, _, end = span.partition("-")
        if int(start, 16) <= address and address + size <= int(end, 16):
            return rest[1:2] == "w"
    return False


def target_name(device_address: int, platform_name: str) -> str:
    """The CPU name a PoCL device compiles for ("" for other drivers, or where it is not found):
    part of what identifies its compiled programs."""
    if not _applies(platform_name):
        return ""
    reader = _MemoryReader()
    try:
        names = {_name_text(raw) for raw in _names_after_triples(reader, device_address).values() if b"\0" in raw}
    finally:
        reader.close()
    return (names.pop() or "") if len(names) == 1 else ""


#: held from reading a device's CPU name to writing the new one: two repairs of one device at once
#: would each find ``generic`` and write over a name the other is writing (opencl.loader() makes
#: its repair once, under its own lock; this one keeps direct callers safe too)
_REPAIRING = threading.Lock()


def repair_device(device_address: int, platform_name: str) -> str | None:
    """Gives a PoCL CPU device whose CPU name is ``generic`` a name its LLVM knows; or, where
    ``DELEGATE_POCL_CPU`` names one, that name over whatever name the device holds (where it fits).

    Returns the name written, or None when nothing was done (not PoCL on x86-64, a name that
    needs no change, ``DELEGATE_POCL_CPU=off``, or a device object that does not look as expected).
    """
    if not _applies(platform_name):
        return None
    setting = os.environ.get("DELEGATE_POCL_CPU", "").strip()
    if setting.lower() == "off":
        return None
    if setting and (len(setting) > MAX_NAME or not re.fullmatch(r"[A-Za-z0-9_-]+", setting)):
        raise ValueError(
            f"DELEGATE_POCL_CPU={setting!r}: give 'off' or an LLVM CPU name of at most {MAX_NAME} characters"
        )
    with _REPAIRING:
        return _rewrite_name(device_address, setting)


def _rewrite_name(device_address: int, setting: str) -> str | None:
    """``repair_device``'s read and write of the name (under ``_REPAIRING``)."""
    reader = _MemoryReader()
    try:
        found = _find_name(reader, device_address)
    finally:
        reader.close()
    if found is None:
        return None
    address, current = found
    if setting:
        name = setting
        if current == name or len(name) > len(current):
            return None  # nothing to change, or no room for it in the string PoCL holds
    else:
        if current.encode() + b"\0" != UNKNOWN_CPU:
            return None  # a name LLVM knows: it is PoCL's own choice
        name = host_name()
    size = max(len(current), len(name)) + 1
    if not _writable(address, size):
        return None
    ffi.memmove(ffi.cast("char *", address), name.encode().ljust(size, b"\0"), size)
    return name


def repair_devices(devices: Iterable[tuple[int, str]]) -> dict[int, str]:
    """Repair every PoCL device of ``devices`` (device address, platform name) whose CPU name is
    ``generic`` (``repair_device``); the CPU name each PoCL device then compiles for, by address."""
    names: dict[int, str] = {}
    for address, platform_name in devices:
        if not _applies(platform_name):
            continue
        repair_device(address, platform_name)
        names[address] = target_name(address, platform_name)
    return names
