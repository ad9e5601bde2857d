"""The runtime's own OpenCL layer (delegate/runtime/driver.py), checked against pyopencl's view of
the same driver, and the warm start that it makes free of pyopencl."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from delegate import DeviceNotFoundError, Runtime, write_context
from delegate.runtime import driver
from delegate.runtime.device import describe, select_device
from delegate.runtime.driver import OpenCLError

from .runtime_helpers import chain

pytestmark = pytest.mark.opencl


def _pyopencl_twin(device: driver.Device):
    """pyopencl's object for the same driver device (exactly one)."""
    import pyopencl as cl

    (twin,) = [dev for platform in cl.get_platforms() for dev in platform.get_devices()
               if dev.int_ptr == driver.handle_int(device.handle)]  # fmt: skip
    return twin


def test_devices_and_their_facts_match_pyopencls_view():
    import pyopencl as cl

    ours = [(p, d, dev.platform_name, dev.name) for p, d, dev in driver.devices()]
    theirs = [
        (p, d, platform.name, device.name.strip())
        for p, platform in enumerate(cl.get_platforms())
        for d, device in enumerate(platform.get_devices())
    ]
    assert ours == theirs
    device = select_device()
    info = describe(device)
    twin = _pyopencl_twin(device)
    assert info.name == twin.name.strip() and info.driver_version == twin.driver_version.strip()
    assert info.max_work_item_sizes == tuple(twin.max_work_item_sizes)
    assert info.max_mem_alloc_bytes == twin.max_mem_alloc_size
    assert info.mem_base_addr_align_bytes == max(twin.mem_base_addr_align // 8, 4)
    assert info.host_unified_memory == bool(twin.host_unified_memory)
    assert info.image2d_max == (twin.image2d_max_width, twin.image2d_max_height)
    assert info.fp16 == ("cl_khr_fp16" in twin.extensions.split())


def test_a_program_round_trips_through_its_binary_and_bad_input_is_an_opencl_error():
    device = select_device()
    context = driver.Context(device)
    try:
        program = driver.Program(context, source="__kernel void k(__global float* x) { x[0] = 2.0f; }")
        program.build("-cl-std=CL1.2")
        binary = program.binary()
        assert len(binary) > 0
        again = driver.Program(context, binary=binary)
        again.build("-cl-std=CL1.2")
        broken = driver.Program(context, source="__kernel void k(__global float* x) { x[0] = oops; }")
        with pytest.raises(OpenCLError, match="BUILD_PROGRAM_FAILURE") as failure:
            broken.build("")
        assert failure.value.call == "clBuildProgram" and "oops" in failure.value.detail
        with pytest.raises(OpenCLError, match="clCreateBuffer failed: INVALID_BUFFER_SIZE"):
            driver.buffer(context, driver.CL_MEM_READ_WRITE, 0)
        with pytest.raises(ValueError, match="a buffer of 16 bytes from 4 bytes"):
            driver.buffer(context, driver.CL_MEM_READ_ONLY, 16, host=b"abcd")
        for held in (program, again, broken):
            held.release()
            held.release()  # idempotent
    finally:
        context.release()


def test_a_runtime_dropped_without_close_releases_its_memory(tmp_path):
    import pyopencl as cl

    rt = Runtime.load(chain(2), cache_dir=tmp_path)
    rt.run([np.ones(rt.input_shapes[0], np.float32)])
    arena = next(o for o in rt._release_order() if isinstance(o, driver.MemObject))
    view = cl.Buffer.from_int_ptr(arena.int_ptr, retain=True)  # the driver's own reference count
    assert view.get_info(cl.mem_info.REFERENCE_COUNT) == 2
    del rt, arena
    gc.collect()
    assert view.get_info(cl.mem_info.REFERENCE_COUNT) == 1  # only the view's reference is left


def test_a_warm_start_does_not_import_pyopencl(tmp_path):
    # pyopencl's import is a third of a warm start on PoCL (benchmarks/RESULTS.md): the runtime
    # reaches OpenCL through its own table, and pyopencl is loaded only for tools that ask for it.
    path = tmp_path / "chain.ctx"
    write_context(chain(3), path)
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        from delegate import Runtime
        with Runtime.load({str(path)!r}, cache_dir={str(tmp_path / "programs")!r}) as rt:
            (y,) = rt.run([np.ones(rt.input_shapes[0], np.float32)])
            before = "pyopencl" in sys.modules
            rt.queue.finish()  # a tool asks for pyopencl's view: imported now, same driver objects
            print(json.dumps({{"before": before, "after": "pyopencl" in sys.modules,
                              "built": rt.build_stats.built_from_source, "y": float(y.mean())}}))
    """)
    runs = [
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300) for _ in range(2)
    ]
    results = []
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
        results.append(json.loads(run.stdout.strip().splitlines()[-1]))
    # the first start builds one program (the persistent kernel that runs the conversions and the
    # nodes on this CPU device); the second loads its binary
    assert [r["built"] for r in results] == [1, 0]
    assert all(r["before"] is False and r["after"] is True for r in results)
    assert results[0]["y"] == results[1]["y"] == pytest.approx((1 + 1) + (1 + 3))  # (x + 1) + (x + 3) for x = 1


def test_select_device_takes_our_device_or_pyopencls_and_refuses_other_types():

    default = select_device()
    assert select_device(default) is default
    assert select_device(_pyopencl_twin(default)) == default
    with pytest.raises(TypeError, match="device must be None, an index, 'P:D', part of a device's name or a Device"):
        select_device(3.5)  # type: ignore[arg-type]


@pytest.mark.opencl
def test_a_device_index_may_come_as_a_string():
    # options (load_delegate's, run --option device=0) arrive as strings
    assert select_device("0") == select_device(0)
    assert select_device(" 0 ") == select_device(0)
    with pytest.raises(DeviceNotFoundError, match="99"):
        select_device("99")
