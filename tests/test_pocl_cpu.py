"""PoCL's CPU name on processors its LLVM does not know (delegate.runtime.platforms.pocl_cpu).

The repair is tested on fake device objects laid out like PoCL 3.0's (a pointer to the LLVM
triple, then one to the CPU name), so it runs whatever processor the tests are on; the real
device is covered by every test that builds a program.
"""

from __future__ import annotations

import ctypes
import dataclasses
import mmap
import platform
import struct

import pytest

from delegate.runtime import device, driver, opencl
from delegate.runtime.platforms import cpu_models, pocl_cpu

POCL = "Portable Computing Language"
ZEN5_FLAGS = frozenset(
    "fpu sse2 sse4_2 popcnt avx avx2 fma bmi1 bmi2 f16c movbe adx sha_ni clzero vaes vpclmulqdq "
    "rdpid xsaves avx512f".split()
)
#: what a Zen 4 adds to AVX-512 F/CD/BW/DQ/VL, as /proc/cpuinfo spells it (Ice Lake's sets)
ICELAKE_FLAGS = frozenset(
    "avx512_vnni avx512vbmi avx512_vbmi2 avx512_bitalg avx512_vpopcntdq avx512ifma gfni vaes vpclmulqdq sha_ni "
    "rdpid".split()
)

needs_x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="the repair only applies on x86-64")


class FakeDevice:
    """A block of memory with PoCL 3.0's two neighbouring fields at ``offset`` (kept alive here)."""

    def __init__(self, cpu_name: bytes, triple: bytes = b"x86_64-unknown-linux-gnu\0", offset: int = 632) -> None:
        self.triple = ctypes.create_string_buffer(triple, len(triple))
        self.name = ctypes.create_string_buffer(cpu_name, len(cpu_name))
        self.block = ctypes.create_string_buffer(2048)
        self.slot = offset + 8  # where the name's pointer is
        struct.pack_into("<QQ", self.block, offset, ctypes.addressof(self.triple), ctypes.addressof(self.name))
        # other fields: an unmapped address and a small integer must be read safely
        struct.pack_into("<QQ", self.block, 8, 0xDEAD00000000, 42)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.block)

    @property
    def cpu(self) -> bytes:
        return self.name.raw


def test_cpu_flags_reads_the_first_processor() -> None:
    text = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nflags\t: sse2\n"
    assert pocl_cpu.cpu_flags(text) == ("AuthenticAMD", frozenset({"fpu", "avx2", "fma"}))
    assert pocl_cpu.cpu_flags("") == ("", frozenset())


def test_replacement_is_the_newest_name_the_flags_allow() -> None:
    avx512 = ZEN5_FLAGS | {"avx512cd", "avx512bw", "avx512dq", "avx512vl"}
    assert pocl_cpu.replacement_name("AuthenticAMD", avx512) == "skx"
    assert pocl_cpu.replacement_name("GenuineIntel", avx512) == "skx"
    assert cpu_models.vector_floats("skx") == 16 and not cpu_models.int8_dot("skx")
    # a Zen 4 or 5: AVX-512 with VNNI, which the integer products use
    assert pocl_cpu.replacement_name("AuthenticAMD", avx512 | {"avx512_vnni"}) == "cascadelake"
    assert cpu_models.vector_floats("cascadelake") == 16 and cpu_models.int8_dot("cascadelake")
    assert not cpu_models.byte_lookup("cascadelake")
    # a Zen 4 or 5 (or an Ice Lake): VBMI too, which the int8 tables' byte reads use
    for vendor in ("AuthenticAMD", "GenuineIntel"):
        assert pocl_cpu.replacement_name(vendor, avx512 | ICELAKE_FLAGS) == "icelake-client"
    assert pocl_cpu.replacement_name("AuthenticAMD", avx512 | ICELAKE_FLAGS - {"gfni"}) == "cascadelake"
    assert cpu_models.int8_dot("icelake-client") and cpu_models.byte_lookup("icelake-client")
    # AVX-512 F alone (no VL, BW, DQ) is not enough for skx
    assert pocl_cpu.replacement_name("AuthenticAMD", ZEN5_FLAGS) == "znver3"
    assert cpu_models.vector_floats("znver3") == 8
    assert cpu_models.vector_floats("") == 8
    # an Intel processor with the same flags gets the vendor-neutral AVX2 model
    assert pocl_cpu.replacement_name("GenuineIntel", ZEN5_FLAGS) == "haswell"
    # an AMD processor missing one of Zen 3's instruction sets
    assert pocl_cpu.replacement_name("AuthenticAMD", ZEN5_FLAGS - {"vaes"}) == "haswell"
    assert pocl_cpu.replacement_name("AuthenticAMD", frozenset({"sse4_2", "popcnt", "avx"})) == "nehalem"
    assert pocl_cpu.replacement_name("", frozenset()) == "x86-64"
    for name, _ in pocl_cpu._CANDIDATES:
        assert len(name) <= pocl_cpu.MAX_NAME


@needs_x86_64
def test_generic_is_replaced_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "skx")  # fits in generic's 7 characters
    fake = FakeDevice(b"generic\0")
    written = pocl_cpu.repair_device(fake.address, POCL)
    assert written in {name for name, _ in pocl_cpu._CANDIDATES}
    assert fake.cpu == written.encode() + b"\0" * (8 - len(written))
    # done once: the name is no longer 'generic'
    assert pocl_cpu.repair_device(fake.address, POCL) is None


@needs_x86_64
def test_setting_chooses_or_disables(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDevice(b"generic\0")
    monkeypatch.setenv("DELEGATE_POCL_CPU", "off")
    assert pocl_cpu.repair_device(fake.address, POCL) is None
    assert fake.cpu == b"generic\0"
    monkeypatch.setenv("DELEGATE_POCL_CPU", "x86-64")
    assert pocl_cpu.repair_device(fake.address, POCL) == "x86-64"
    assert fake.cpu == b"x86-64\0\0"
    for bad in ("x" * (pocl_cpu.MAX_NAME + 1), "znver3; rm"):
        monkeypatch.setenv("DELEGATE_POCL_CPU", bad)
        with pytest.raises(ValueError, match="DELEGATE_POCL_CPU"):
            pocl_cpu.repair_device(FakeDevice(b"generic\0").address, POCL)


@needs_x86_64
@pytest.mark.parametrize(
    "fake",
    [
        pytest.param(lambda: FakeDevice(b"znver3\0"), id="known-cpu"),
        pytest.param(lambda: FakeDevice(b"icelake-client\0"), id="known-avx512-cpu"),
        pytest.param(lambda: FakeDevice(b"generic\0", triple=b"aarch64-unknown-linux-gnu\0"), id="other-triple"),
        pytest.param(lambda: FakeDevice(b"generic-ish\0"), id="longer-name"),
    ],
)
def test_nothing_is_written_unless_the_object_is_as_expected(monkeypatch: pytest.MonkeyPatch, fake) -> None:
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "znver3")  # an AVX2 host: znver3 is its right name
    device = fake()
    before = device.cpu
    assert pocl_cpu.repair_device(device.address, POCL) is None
    assert device.cpu == before


def slot_name(fake: FakeDevice) -> bytes:
    """The string the fake device's name pointer points at now."""
    (address,) = struct.unpack_from("<Q", fake.block, fake.slot)
    return ctypes.string_at(address)


@needs_x86_64
def test_a_name_llvm_knows_is_kept_where_it_has_what_the_host_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "cascadelake")
    for name in (b"icelake-client\0", b"sapphirerapids\0"):
        fake = FakeDevice(name)
        assert pocl_cpu.repair_device(fake.address, POCL) is None and fake.cpu == name
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "skx")  # a Skylake-X: no VNNI to gain
    fake = FakeDevice(b"skylake-avx512\0")
    assert pocl_cpu.repair_device(fake.address, POCL) is None and fake.cpu == b"skylake-avx512\0"


@needs_x86_64
def test_a_name_without_the_hosts_avx512_is_replaced_by_pointer(monkeypatch: pytest.MonkeyPatch) -> None:
    """LLVM 15 names a Zen 4 (AVX-512 with VNNI) ``znver3``, whose code has neither: the device is
    pointed at a copy of the host's name, as that is longer than PoCL's string; PoCL's own string
    is left as it was."""
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "cascadelake")
    for old in (b"znver3\0", b"generic\0"):
        fake = FakeDevice(old)
        assert pocl_cpu.repair_device(fake.address, POCL) == "cascadelake"
        assert slot_name(fake) == b"cascadelake" and fake.cpu == old
        assert pocl_cpu.target_name(fake.address, POCL) == "cascadelake"
        assert pocl_cpu.repair_device(fake.address, POCL) is None  # done once
    fake = FakeDevice(b"skylake-avx512\0")  # no VNNI; long enough to be written over in place
    assert pocl_cpu.repair_device(fake.address, POCL) == "cascadelake"
    assert fake.cpu == b"cascadelake\0\0\0\0"


@needs_x86_64
def test_a_setting_names_any_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shorter than PoCL's name: written in place; longer: given by pointer."""
    monkeypatch.setenv("DELEGATE_POCL_CPU", "skx")
    for old in (b"znver3\0", b"haswell\0", b"icelake-client\0"):
        fake = FakeDevice(old)
        assert pocl_cpu.repair_device(fake.address, POCL) == "skx"
        assert fake.cpu == b"skx".ljust(len(old), b"\0")
        assert pocl_cpu.target_name(fake.address, POCL) == "skx"
    monkeypatch.setenv("DELEGATE_POCL_CPU", "icelake-server")
    fake = FakeDevice(b"znver3\0")
    assert pocl_cpu.repair_device(fake.address, POCL) == "icelake-server"
    assert slot_name(fake) == b"icelake-server" and fake.cpu == b"znver3\0"
    longest = "k" * pocl_cpu.MAX_NAME  # the longest setting is read back: it keys the device's programs
    monkeypatch.setenv("DELEGATE_POCL_CPU", longest)
    fake = FakeDevice(b"znver3\0")
    assert pocl_cpu.repair_device(fake.address, POCL) == longest
    assert pocl_cpu.target_name(fake.address, POCL) == longest


@needs_x86_64
def test_a_pointer_in_read_only_memory_is_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "cascadelake")
    fake = FakeDevice(b"znver3\0")
    monkeypatch.setattr(pocl_cpu, "_writable", lambda address, size: address != fake.address + fake.slot)
    assert pocl_cpu.repair_device(fake.address, POCL) is None
    assert slot_name(fake) == b"znver3"


@needs_x86_64
def test_the_device_compiles_for_the_hosts_vector_instructions() -> None:
    """On a processor with AVX-512 (and VNNI), PoCL's CPU device compiles code that uses them,
    whatever name its LLVM gives the processor (a Zen 4 is ``znver3`` to LLVM 15)."""
    found = [dev for _, _, dev in driver.devices() if "portable computing language" in dev.platform_name.lower()]
    host = pocl_cpu.host_name()
    compiler_cpu = device.describe(found[0]).compiler_cpu
    assert cpu_models.vector_floats(compiler_cpu) >= cpu_models.vector_floats(host)
    assert cpu_models.int8_dot(compiler_cpu) >= cpu_models.int8_dot(host)
    assert cpu_models.byte_lookup(compiler_cpu) >= cpu_models.byte_lookup(host)


@needs_x86_64
def test_a_name_in_read_only_memory_is_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "skx")  # fits: written in place, if at all
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = libc.mmap(None, 4096, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert page not in (None, ctypes.c_void_p(-1).value)
    try:
        ctypes.memmove(page, b"generic\0", 8)
        assert libc.mprotect(page, 4096, mmap.PROT_READ) == 0
        fake = FakeDevice(b"unused\0")
        struct.pack_into("<QQ", fake.block, 632, ctypes.addressof(fake.triple), page)
        assert pocl_cpu.repair_device(fake.address, POCL) is None
        assert ctypes.string_at(page, 8) == b"generic\0"
    finally:
        libc.munmap(page, 4096)


def test_other_platforms_and_bad_addresses_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    fake = FakeDevice(b"generic\0")
    assert pocl_cpu.repair_device(fake.address, "NVIDIA CUDA") is None
    assert fake.cpu == b"generic\0"
    # an address where nothing is mapped is read as nothing, not dereferenced
    assert pocl_cpu.repair_device(0xDEAD00000000, POCL) is None
    assert pocl_cpu.repair_device(0, POCL) is None


@needs_x86_64
def test_repair_devices_repairs_and_reads_pocl_devices_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "znver3")
    generic, known, other = FakeDevice(b"generic\0"), FakeDevice(b"znver3\0"), FakeDevice(b"generic\0")
    names = pocl_cpu.repair_devices([(generic.address, POCL), (known.address, POCL), (other.address, "NVIDIA CUDA")])
    assert names == {generic.address: generic.cpu.rstrip(b"\0").decode(), known.address: "znver3"}
    assert names[generic.address] in {name for name, _ in pocl_cpu._CANDIDATES}
    assert other.cpu == b"generic\0"


def test_the_repair_is_done_once_when_the_loader_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing and describing devices afterwards reads no driver memory: the names were cached."""
    loader = opencl.loader()

    def rescan(*args: object) -> None:
        raise AssertionError("PoCL's memory was read again")

    monkeypatch.setattr(pocl_cpu, "repair_device", rescan)
    monkeypatch.setattr(pocl_cpu, "target_name", rescan)
    for _, _, dev in device.list_devices():
        info = device.describe(dev)
        assert info.compiler_cpu == loader.compiler_cpu(dev.handle)
        pocl = "portable computing language" in dev.platform_name.lower()
        assert bool(info.compiler_cpu) == (pocl and platform.machine() == "x86_64")
    assert opencl.loader() is loader


def test_listed_pocl_devices_build_programs() -> None:
    """After the loader started, PoCL compiles: on a CPU its LLVM does not know, this is the repair."""
    found = [dev for _, _, dev in driver.devices() if "portable computing language" in dev.platform_name.lower()]
    assert found, "PoCL is a dependency of the package: it must be listed"
    context = driver.Context(found[0])
    try:
        program = driver.Program(context, source="__kernel void twice(__global float *a) { a[0] *= 2.0f; }")
        try:
            program.build("")
        finally:
            program.release()
    finally:
        context.release()


@needs_x86_64
def test_target_name_reads_the_cpu_a_device_compiles_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    assert pocl_cpu.target_name(FakeDevice(b"znver3\0").address, POCL) == "znver3"
    fake = FakeDevice(b"generic\0")
    assert pocl_cpu.target_name(fake.address, POCL) == "generic"
    written = pocl_cpu.repair_device(fake.address, POCL)
    assert pocl_cpu.target_name(fake.address, POCL) == written
    assert pocl_cpu.target_name(fake.address, "NVIDIA CUDA") == ""
    assert pocl_cpu.target_name(FakeDevice(b"\x01\x02\0").address, POCL) == ""


def test_device_key_names_the_compiler_cpu() -> None:
    """Programs compiled for one CPU model are never taken for another's (the cache key)."""
    found = [dev for _, _, dev in driver.devices() if "portable computing language" in dev.platform_name.lower()]
    info = device.describe(found[0])
    if platform.machine() == "x86_64":
        assert info.compiler_cpu and info.compiler_cpu != "generic"
        assert info.key.endswith("|" + info.compiler_cpu)
    other = dataclasses.replace(info, compiler_cpu="x86-64")
    assert other.key != info.key


def test_checked_reads_never_trust_the_address() -> None:
    import os

    from delegate._native import ffi, lib

    read_fd, write_fd = os.pipe()
    try:
        source = ctypes.create_string_buffer(b"0123456789abcdef", 16)
        out = ffi.new("char[]", 4096)
        assert lib.dlg_read_checked(write_fd, read_fd, ctypes.addressof(source), out, 16) == 0
        assert ffi.buffer(out, 16)[:] == b"0123456789abcdef"
        for address, size in (
            (0, 8),
            (0xDEAD00000000, 8),
            (ctypes.addressof(source), 0),
            (ctypes.addressof(source), 4097),
        ):
            assert lib.dlg_read_checked(write_fd, read_fd, address, out, size) == -1
        # the pipe is left empty: the next read sees its own bytes
        assert lib.dlg_read_checked(write_fd, read_fd, ctypes.addressof(source) + 8, out, 8) == 0
        assert ffi.buffer(out, 8)[:] == b"89abcdef"
    finally:
        os.close(read_fd)
        os.close(write_fd)
