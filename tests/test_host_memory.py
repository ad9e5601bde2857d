"""Large arenas over host memory in huge pages (runtime/host_memory.py), on devices that work in
host memory in place: the device reads and writes that memory itself, the results are those of
the driver's own buffers, the kernel is asked for huge pages, and a closed Runtime unmaps it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from delegate._native import ffi

from delegate import Runtime
from delegate.runtime import driver, host_memory
from delegate.runtime.device import describe, select_device
from delegate.runtime.resources import Resources

from .helpers import benchmark_module
from .runtime_helpers import chain

_THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> bytes:
    """A 1x1 convolution 32x32x1024 -> 512 (ReLU6): 2 MB of weights and 6 MB of tensors, both
    arenas over 2 MiB."""
    path = tmp_path_factory.mktemp("wide") / "wide.tflite"
    path.write_bytes(benchmark_module("layer_compare").conv(np.random.default_rng(0), 32, 1024, 512, 1, 1))
    return benchmark_module("harness.contexts").compiled_context(path, [])


@pytest.fixture(scope="module")
def in_place() -> bool:
    info = describe(select_device())
    if not info.host_memory_in_place:
        pytest.skip(f"{info.name} does not work in host memory in place: its driver's buffers are kept")
    return True


def _inputs(rt: Runtime) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.random(shape, dtype=np.float32) for shape in rt.input_shapes]


def test_the_arenas_give_what_the_drivers_buffers_give(wide, in_place, tmp_path, monkeypatch):
    with Runtime.load(wide, cache_dir=tmp_path) as rt:
        assert len(rt._resources._mappings) == 2  # the constant arena and the tensor arena
        xs = _inputs(rt)
        got = rt.run(xs)
    monkeypatch.setattr(host_memory, "in_huge_pages", lambda info, size: False)
    with Runtime.load(wide, cache_dir=tmp_path) as plain:
        assert plain._resources._mappings == []
        for a, b in zip(got, plain.run(xs), strict=True):
            np.testing.assert_array_equal(a, b)


def test_the_device_reads_the_weights_where_they_were_mapped(wide, in_place, tmp_path):
    with Runtime.load(wide, cache_dir=tmp_path) as rt:
        xs = _inputs(rt)
        before = rt.run(xs)[0]
        weights = min(rt._resources._mappings, key=len)  # 2 MB of weights against 6 MB of tensors
        weights[:] = bytes(len(weights))  # no copy in between: the next run reads zero weights
        after = rt.run(xs)[0]
    assert np.count_nonzero(before) > before.size // 4
    assert not after.any()  # every weight and bias zero


def test_the_mappings_ask_for_huge_pages(wide, in_place, tmp_path):
    setting = _THP_SETTING.read_text() if _THP_SETTING.exists() else ""
    if "[always]" not in setting and "[madvise]" not in setting:
        pytest.skip(f"this kernel offers no transparent huge pages to ask for ({setting.strip() or 'no THP'})")
    with Runtime.load(wide, cache_dir=tmp_path) as rt:
        for mapping in rt._resources._mappings:
            start = ffi.from_buffer(mapping)
            address = int(ffi.cast("uintptr_t", start))
            ffi.release(start)
            assert _smaps_field(address, "THPeligible") == "1"


def _smaps_field(address: int, field: str) -> str:
    """``field`` of the mapping of this process that holds ``address`` (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and head == f"{field}:":
            return line.split()[1]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_closing_the_runtime_unmaps_its_host_memory(wide, in_place, tmp_path):
    rt = Runtime.load(wide, cache_dir=tmp_path)
    mappings = list(rt._resources._mappings)
    rt.run(_inputs(rt))
    rt.close()
    assert mappings and all(mapping.closed for mapping in mappings)


def test_small_arenas_and_other_devices_keep_the_drivers_buffers(tmp_path):
    with Runtime.load(chain(3), cache_dir=tmp_path) as rt:
        assert rt._resources._mappings == []  # a few hundred bytes: a huge page would be mostly waste
        info = rt.device_info
    elsewhere = dataclasses.replace(info, host_unified_memory=False)  # a GPU's own memory, a remote device
    assert not host_memory.in_huge_pages(elsewhere, 1 << 30)
    assert host_memory.in_huge_pages(info, host_memory.HUGE_PAGE) == info.host_memory_in_place
    assert not host_memory.in_huge_pages(info, host_memory.HUGE_PAGE - 1)


def test_an_arena_holds_its_parts_at_their_offsets_and_refuses_one_past_its_end():
    owner = Resources()
    context = owner.adopt(driver.Context(select_device()))
    info = describe(context.device)
    size = host_memory.HUGE_PAGE
    try:
        parts = [(0, b"abc"), (size - 3, np.arange(3, dtype=np.uint8))]
        host_memory.arena(info, context, driver.CL_MEM_READ_WRITE, size, owner, parts)
        if info.host_memory_in_place:
            (mapping,) = owner._mappings
            whole = np.frombuffer(mapping, np.uint8)
            start = -whole.ctypes.data % host_memory.HUGE_PAGE
            assert bytes(whole[start : start + 3]) == b"abc"
            assert list(whole[start + size - 3 : start + size]) == [0, 1, 2]
            assert not whole[start + 3 : start + size - 3].any()
            del whole
        with pytest.raises(ValueError, match="3 bytes at offset 4094 of a buffer of 4096 bytes"):
            host_memory.arena(info, context, driver.CL_MEM_READ_WRITE, 4096, owner, [(4094, b"abc")])
    finally:
        owner.release()


def test_a_mapping_the_system_refuses_leaves_the_drivers_buffer(wide, in_place, tmp_path, monkeypatch):
    with Runtime.load(wide, cache_dir=tmp_path) as rt:
        xs = _inputs(rt)
        expected = rt.run(xs)

    def refused(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(host_memory.mmap, "mmap", refused)
    with Runtime.load(wide, cache_dir=tmp_path) as rt:
        assert rt._resources._mappings == []
        for got, want in zip(rt.run(xs), expected, strict=True):
            np.testing.assert_array_equal(got, want)
