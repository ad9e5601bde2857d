"""The OpenCL loader: the API table the C enqueue loop and driver.py call, the platforms and their
devices, and error names.

The table is resolved from one ICD loader per process: one already loaded (pyopencl's, when the
application imported it first), else the one pyopencl's wheel ships beside PoCL (found without
importing pyopencl, which costs 50-90 ms), else the system's ``libOpenCL``. Either way pyopencl,
if imported later, loads the same library, so handles pass between the two.

Initialising the loader (``loader()``, once per process) is also when PoCL's CPU devices get a CPU
name their LLVM knows (pocl_cpu.py), before any program is built, and when the name each one
compiles for is read; nothing later rescans the driver's memory. Just before it, PoCL is asked to
pin its worker threads one per CPU where that is sound (pocl_affinity.py), and pointed at a
writable kernel cache folder where its default one cannot be written (pocl_cache.py).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from .._native import ffi, lib
from ..errors import DelegateError
from . import pocl_affinity, pocl_cache, pocl_cpu

# cl.h constants (OpenCL 1.2) the platform listing needs; driver.py has the rest
CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
CL_PLATFORM_NAME = 0x0902

#: OpenCL's error codes (cl.h), by value
_ERROR_NAMES = {
    0: "SUCCESS",
    -1: "DEVICE_NOT_FOUND",
    -2: "DEVICE_NOT_AVAILABLE",
    -3: "COMPILER_NOT_AVAILABLE",
    -4: "MEM_OBJECT_ALLOCATION_FAILURE",
    -5: "OUT_OF_RESOURCES",
    -6: "OUT_OF_HOST_MEMORY",
    -7: "PROFILING_INFO_NOT_AVAILABLE",
    -8: "MEM_COPY_OVERLAP",
    -9: "IMAGE_FORMAT_MISMATCH",
    -10: "IMAGE_FORMAT_NOT_SUPPORTED",
    -11: "BUILD_PROGRAM_FAILURE",
    -12: "MAP_FAILURE",
    -13: "MISALIGNED_SUB_BUFFER_OFFSET",
    -14: "EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST",
    -15: "COMPILE_PROGRAM_FAILURE",
    -16: "LINKER_NOT_AVAILABLE",
    -17: "LINK_PROGRAM_FAILURE",
    -18: "DEVICE_PARTITION_FAILED",
    -19: "KERNEL_ARG_INFO_NOT_AVAILABLE",
    -30: "INVALID_VALUE",
    -31: "INVALID_DEVICE_TYPE",
    -32: "INVALID_PLATFORM",
    -33: "INVALID_DEVICE",
    -34: "INVALID_CONTEXT",
    -35: "INVALID_QUEUE_PROPERTIES",
    -36: "INVALID_COMMAND_QUEUE",
    -37: "INVALID_HOST_PTR",
    -38: "INVALID_MEM_OBJECT",
    -39: "INVALID_IMAGE_FORMAT_DESCRIPTOR",
    -40: "INVALID_IMAGE_SIZE",
    -41: "INVALID_SAMPLER",
    -42: "INVALID_BINARY",
    -43: "INVALID_BUILD_OPTIONS",
    -44: "INVALID_PROGRAM",
    -45: "INVALID_PROGRAM_EXECUTABLE",
    -46: "INVALID_KERNEL_NAME",
    -47: "INVALID_KERNEL_DEFINITION",
    -48: "INVALID_KERNEL",
    -49: "INVALID_ARG_INDEX",
    -50: "INVALID_ARG_VALUE",
    -51: "INVALID_ARG_SIZE",
    -52: "INVALID_KERNEL_ARGS",
    -53: "INVALID_WORK_DIMENSION",
    -54: "INVALID_WORK_GROUP_SIZE",
    -55: "INVALID_WORK_ITEM_SIZE",
    -56: "INVALID_GLOBAL_OFFSET",
    -57: "INVALID_EVENT_WAIT_LIST",
    -58: "INVALID_EVENT",
    -59: "INVALID_OPERATION",
    -60: "INVALID_GL_OBJECT",
    -61: "INVALID_BUFFER_SIZE",
    -62: "INVALID_MIP_LEVEL",
    -63: "INVALID_GLOBAL_WORK_SIZE",
    -64: "INVALID_PROPERTY",
    -65: "INVALID_IMAGE_DESCRIPTOR",
    -66: "INVALID_COMPILER_OPTIONS",
    -67: "INVALID_LINKER_OPTIONS",
    -68: "INVALID_DEVICE_PARTITION_COUNT",
    -69: "INVALID_PIPE_SIZE",
    -70: "INVALID_DEVICE_QUEUE",
    -1001: "PLATFORM_NOT_FOUND_KHR",
}


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"OpenCL error {code}")


def _loaded_loader() -> str | None:
    """The libOpenCL already mapped into this process (pyopencl's, when it was imported first)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) >= 6 and Path(fields[-1]).name.startswith("libOpenCL"):
            return fields[-1]
    return None


def _wheel_libs() -> Path | None:
    """pyopencl's wheel folder of shared libraries (its ICD loader and PoCL), found without importing
    pyopencl; ``PYOPENCL_HOME`` is set as pyopencl's own import sets it, so that the loader reads
    the ``*.icd`` files there."""
    spec = find_spec("pyopencl")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    libs = package / ".libs"
    if not libs.is_dir():
        return None
    os.environ.setdefault("PYOPENCL_HOME", str(package))
    return libs


def _preload_drivers(libs: Path) -> None:
    """Load the drivers the ``*.icd`` files in ``libs`` name. The loader opens each by its bare
    soname, which resolves from ``libs`` only through the RPATH of pyopencl's extension, and only
    when the loader came in as its dependency (not when it is opened directly, as here, nor when
    a sanitizer's dlopen interceptor stands between them); a library already loaded under that
    soname is found whatever the caller."""
    err = ffi.new("char[512]")
    for icd in sorted(libs.glob("*.icd")):
        try:
            driver = libs / icd.read_text().strip()
        except OSError:
            continue
        if driver.is_file() and lib.dlg_preload(str(driver).encode(), err, 512) != 0:
            warnings.warn(f"{ffi.string(err).decode()}: that OpenCL driver will be missing", stacklevel=3)


def _loader_path() -> str:
    """The loader already in the process, else pyopencl's wheel's, else the system's."""
    libs = _wheel_libs()
    wheel = sorted(libs.glob("libOpenCL*.so*")) if libs is not None else []
    path = _loaded_loader() or (str(wheel[0]) if wheel else None)
    if path is not None:
        if libs is not None and Path(path).resolve().parent == libs.resolve():
            _preload_drivers(libs)  # the wheel's loader: load the drivers it names first
        return path
    import ctypes.util  # only here: it imports subprocess, which a warm start does not need

    found = ctypes.util.find_library("OpenCL")
    if found:
        return found
    raise DelegateError(
        "cannot find an OpenCL ICD loader (libOpenCL): install pyopencl's wheel (pip install pyopencl), "
        "which ships one, or your system's ocl-icd package"
    )


def _platform_name(api: Any, platform: Any) -> str | None:
    size = ffi.new("size_t *")
    if api.get_platform_info(platform, CL_PLATFORM_NAME, 0, ffi.NULL, size) != 0:
        return None
    buf = ffi.new("char[]", max(size[0], 1))
    if api.get_platform_info(platform, CL_PLATFORM_NAME, size[0], buf, ffi.NULL) != 0:
        return None
    return ffi.string(buf).decode(errors="replace")


def platforms(api: Any) -> list[tuple[int, Any, str, list[Any]]]:
    """Every platform with devices, as (platform index, handle, name, device handles); platforms
    that fail to answer are skipped (their index is not reused)."""
    count = ffi.new("uint32_t *")
    if api.get_platform_ids(0, ffi.NULL, count) != 0 or count[0] == 0:
        return []  # -1001 (PLATFORM_NOT_FOUND_KHR): no platform is installed
    handles = ffi.new("cl_platform_id[]", count[0])
    if api.get_platform_ids(count[0], handles, ffi.NULL) != 0:
        return []
    found = []
    for index in range(count[0]):
        platform = handles[index]
        name = _platform_name(api, platform)
        n = ffi.new("uint32_t *")
        if name is None or api.get_device_ids(platform, CL_DEVICE_TYPE_ALL, 0, ffi.NULL, n) != 0 or n[0] == 0:
            continue
        ids = ffi.new("cl_device_id[]", n[0])
        if api.get_device_ids(platform, CL_DEVICE_TYPE_ALL, n[0], ids, ffi.NULL) != 0:
            continue
        found.append((index, platform, name, [ids[d] for d in range(n[0])]))
    return found


@dataclass(frozen=True)
class Loader:
    """The process's OpenCL loader, initialised once (``loader()``)."""

    path: str
    #: the table of OpenCL function pointers (a ``dlg_cl_api *``)
    api: Any
    #: device address -> the CPU model that PoCL device compiles for, read after the repair
    #: (pocl_cpu.py); other drivers' devices are not in it
    compiler_cpus: Mapping[int, str]
    #: whether PoCL was asked to pin its workers one per CPU (pocl_affinity.py), and why
    worker_affinity: pocl_affinity.WorkerAffinity

    def compiler_cpu(self, device: Any) -> str:
        """The CPU model ``device`` (a ``cl_device_id``) compiles for: "" for other drivers."""
        return self.compiler_cpus.get(int(ffi.cast("uintptr_t", device)), "")


class _Once:
    """The process's Loader, made by the first caller under ``lock``: two first callers at once
    would both start PoCL, repair its devices and set ``POCL_AFFINITY`` (PoCL then crashed in
    clGetDeviceInfo); a caller that finds it made reads it without the lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: Loader | None = None


_LOADER = _Once()


def loader() -> Loader:
    """Load the OpenCL API table and repair PoCL's CPU devices (pocl_cpu.py), once per process;
    safe to call from any thread."""
    made = _LOADER.value
    if made is not None:
        return made
    with _LOADER.lock:  # held while PoCL starts (C only: it never waits for the GIL)
        if _LOADER.value is None:
            _LOADER.value = _initialise()
        return _LOADER.value


def _initialise() -> Loader:
    """What ``loader`` makes once (an error leaves nothing made: the next caller tries again)."""
    preloaded = _loaded_loader() is not None
    affinity = pocl_affinity.request()
    kernel_cache = pocl_cache.request()  # PoCL finds no device when it cannot write its cache folder
    if affinity.requested and preloaded:  # pyopencl (or another library) may have started PoCL already
        affinity = pocl_affinity.WorkerAffinity(
            True, affinity.reason + "; the OpenCL loader was in the process before, so only if PoCL had not started"
        )
    try:
        path = _loader_path()
        api = ffi.new("dlg_cl_api *")
        err = ffi.new("char[512]")
        if lib.dlg_cl_load(path.encode(), api, err, 512) != 0:
            raise DelegateError(ffi.string(err).decode())
        devices = [(int(ffi.cast("uintptr_t", d)), name) for _, _, name, ids in platforms(api) for d in ids]
    finally:
        pocl_affinity.withdraw(affinity)  # PoCL's workers have started: child processes get the caller's environment
        pocl_cache.withdraw(kernel_cache)
    return Loader(path, api, pocl_cpu.repair_devices(devices), affinity)


def cl_api() -> Any:
    """The process-wide table of OpenCL function pointers (a ``dlg_cl_api *``)."""
    return loader().api
