"""Gives PoCL a CPU model its LLVM knows with the vector instructions the processor has.

PoCL asks LLVM for the host CPU's name once, when it sets up its CPU device, and compiles every
kernel for that name. The PoCL 3.0 of PyPI's ``pocl-binary-distribution`` carries LLVM 15, which
names no processor newer than AMD's Zen 3 family by its CPUID:

- on a Zen 5 (family 1Ah) it answers ``generic``, which its own compiler then rejects, so every
  program build fails with "unknown target CPU 'generic'";
- on a Zen 4 (family 19h, AVX-512 with VNNI) it answers ``znver3``: AVX2 code with 8-float vectors
  and no int8 dot product, so an int8 ResNet50 ran 4x slower than with ``cascadelake``
  (RESULTS.md). PoCL still links the AVX-512 build of its built-in library there (chosen from
  CPUID), and calls of built-ins on 16-float vectors between the two can abort the process in
  LLVM ("Cannot emit physreg copy instruction"), as the vision set's MLP-Mixer did.

That PoCL has no setting for the name (later PoCL reads ``POCL_LLVM_CPU_NAME``).

``repair_device`` finds the name in PoCL's device object and, where it is ``generic`` or lacks
AVX-512, AVX512-VNNI or AVX512-VBMI that the host has (cpu_models.py), gives the device the newest
processor LLVM 15 knows whose instruction sets the host's ``/proc/cpuinfo`` flags show:
``icelake-client`` (AVX-512 with VNNI, VBMI and Ice Lake's other sets, as on a Zen 4 or Zen 5),
``cascadelake`` (AVX-512 F/CD/BW/DQ/VL and VNNI), ``skx`` (LLVM's short name for skylake-avx512:
the same without VNNI), else ``znver3`` on AMD processors with Zen 3's instruction sets,
``haswell`` (AVX2 and FMA), ``nehalem`` (SSE4.2) or ``x86-64``. With an AVX-512 model the compiler
emits 16-float vectors as one register, and the compiler's matrix products use them
(cpu_models.py ``vector_floats``, ``CompileOptions.vector_width``); with VNNI the integer products
multiply int8 codes (``int8_dot``); with VBMI the int8 tables are read 64 bytes at a time
(``byte_lookup``). A name that fits in PoCL's string is written over it; a longer
one is a copy (``dlg_name_copy``, malloc's, so PoCL may free it with the device) that the device's
pointer is set to, PoCL's own string left as it was.

Nothing is written unless the object holds exactly what is expected: the device's LLVM triple, and
right after it a pointer to one CPU name, in writable memory; every read of PoCL's memory is
checked first (through a pipe, so a bad address is an error, not a crash; ``dlg_read_checked``,
csrc/pocl_repair.c). Set ``DELEGATE_POCL_CPU`` to ``off`` to leave PoCL alone, or to an LLVM CPU
name (at most ``MAX_NAME`` characters) to use that name over whatever name PoCL chose.

``repair_devices`` is the one step that does it, when the OpenCL loader is initialised
(opencl.loader(), before any program is built); it also reads, once, the name each PoCL device
compiles for (``target_name``), which DeviceInfo.compiler_cpu and the program cache key carry.

No cleaner lever exists for this PoCL: ``POCL_LLVM_CPU_NAME`` arrived in later PoCL (the 3.0
library names no such variable); a ``-target-cpu`` build option comes before the one PoCL appends
from the same field (the last wins) and would not reach its code generator, which also reads it;
PoCL refuses ``-target-feature`` ("Invalid build option"); kernels marked
``__attribute__((target("avx512f,...")))`` abort in LLVM's code generator; intercepting LLVM's
``getHostCPUName`` (pocl/pocl#1049) needs ``LD_PRELOAD`` before the process starts; and 3.0 is the
newest ``pocl-binary-distribution``.
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
from . import cpu_models

#: the value LLVM gives to a CPU it does not know, as PoCL stores it (with its terminator)
UNKNOWN_CPU = b"generic\0"
#: how many bytes of PoCL's device object are searched (3.0 keeps the name at offset 640)
_SEARCH_BYTES = 2048
#: bytes read of a CPU name in PoCL's memory, its terminator included
_NAME_BYTES = 16
#: the longest name read back, so the longest ``DELEGATE_POCL_CPU`` may give (LLVM 15's are at most 14)
MAX_NAME = _NAME_BYTES - 1
#: (name, /proc/cpuinfo flags it needs), best first; each name is one LLVM 15 knows
_AVX512 = frozenset("avx512f avx512cd avx512bw avx512dq avx512vl avx2 fma bmi1 bmi2 f16c movbe adx".split())
#: Ice Lake's instruction sets beyond cascadelake's (a Zen 4 or Zen 5 has them all)
_ICELAKE = frozenset(
    "avx512_vnni avx512vbmi avx512_vbmi2 avx512_bitalg avx512_vpopcntdq avx512ifma gfni vaes vpclmulqdq sha_ni "
    "rdpid".split()
)
_CANDIDATES: tuple[tuple[str, frozenset[str]], ...] = (
    # cascadelake with AVX512-VBMI and the rest of Ice Lake's, as on a Zen 4 or Zen 5: table
    # lookups of 64 bytes at a time (the int8 tables of quant_table.py)
    ("icelake-client", _AVX512 | _ICELAKE),
    # skx with AVX512-VNNI: the integer products' 16-lane dot product
    ("cascadelake", _AVX512 | {"avx512_vnni"}),
    # LLVM's short name for skylake-avx512: AVX-512 F/CD/BW/DQ/VL
    ("skx", _AVX512),
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


def _names_after_triples(reader: _MemoryReader, device_address: int) -> dict[int, tuple[int, bytes]]:
    """Address -> (address of the pointer to it, its first _NAME_BYTES), for each string that a
    pointer right after a pointer to an x86-64 LLVM triple points at, in the first
    ``_SEARCH_BYTES`` of the device object."""
    raw = reader.read(device_address, _SEARCH_BYTES) or reader.read(device_address, _SEARCH_BYTES // 2)
    if raw is None:
        return {}
    words = [value for (value,) in struct.iter_unpack("<Q", raw[: len(raw) // 8 * 8])]
    found: dict[int, tuple[int, bytes]] = {}
    for index in range(len(words) - 1):
        triple = reader.read(words[index], 8)
        if triple is None or not triple.startswith(b"x86_64-"):
            continue
        name = reader.read(words[index + 1], _NAME_BYTES) or reader.read(words[index + 1], len(UNKNOWN_CPU))
        if name is not None:
            found[words[index + 1]] = (device_address + 8 * (index + 1), name)
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
    return text.decode() if terminated and re.fullmatch(rb"[A-Za-z0-9_-]{1,%d}" % MAX_NAME, text) else None


def _find_name(reader: _MemoryReader, device_address: int) -> tuple[int, int, str] | None:
    """The address of the device's pointer to its CPU name, the name's address and its text, when
    exactly one is found."""
    found = {
        (slot, address, text)
        for address, (slot, raw) in _names_after_triples(reader, device_address).items()
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
        names = {_name_text(raw) for _, raw in _names_after_triples(reader, device_address).values() if b"\0" in raw}
    finally:
        reader.close()
    return (names.pop() or "") if len(names) == 1 else ""


#: held from reading a device's CPU name to writing the new one: two repairs of one device at once
#: would each find ``generic`` and write over a name the other is writing (opencl.loader() makes
#: its repair once, under its own lock; this one keeps direct callers safe too)
_REPAIRING = threading.Lock()


def repair_device(device_address: int, platform_name: str) -> str | None:
    """Gives a PoCL CPU device whose CPU name is ``generic``, or a name without AVX-512 or
    AVX512-VNNI that the host has, the newest name LLVM 15 knows for the host; or, where
    ``DELEGATE_POCL_CPU`` names one, that name over whatever name the device holds.

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


def _falls_short(current: str, name: str) -> bool:
    """Does code compiled for ``current`` leave out vector instructions that ``name``'s has and
    the kernels use: 16-float registers (AVX-512), the 16-lane int8 dot product (VNNI) or the
    64-byte table lookup (VBMI)?"""
    if current.encode() + b"\0" == UNKNOWN_CPU:
        return True
    wider = cpu_models.vector_floats(name) > cpu_models.vector_floats(current)
    dot = cpu_models.int8_dot(name) > cpu_models.int8_dot(current)
    return wider or dot or cpu_models.byte_lookup(name) > cpu_models.byte_lookup(current)


def _rewrite_name(device_address: int, setting: str) -> str | None:
    """``repair_device``'s read and write of the name (under ``_REPAIRING``)."""
    reader = _MemoryReader()
    try:
        found = _find_name(reader, device_address)
    finally:
        reader.close()
    if found is None:
        return None
    slot, address, current = found
    name = setting or host_name()
    if current == name or not (setting or _falls_short(current, name)):
        return None  # nothing to change, or PoCL's own choice has what the host has
    if len(name) <= len(current):
        size = len(current) + 1
        if not _writable(address, size):
            return None
        ffi.memmove(ffi.cast("char *", address), name.encode().ljust(size, b"\0"), size)
        return name
    # no room in PoCL's string: point the device at a copy of the name (PoCL's own string stays)
    if not _writable(slot, 8):
        return None
    copy = lib.dlg_name_copy(name.encode(), len(name))
    if copy == ffi.NULL:
        return None
    ffi.memmove(ffi.cast("char *", slot), struct.pack("<Q", int(ffi.cast("uintptr_t", copy))), 8)
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
