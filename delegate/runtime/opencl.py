"""The OpenCL loader: the API table the C enqueue loop and driver.py call, the platforms and their
devices, and error names.

The table is resolved from one ICD loader per process: one already loaded (pyopencl's, when the
application imported it first), else the one pyopencl's wheel ships beside PoCL (found without
importing pyopencl, which costs 50-90 ms), else the system's ``libOpenCL``. Either way pyopencl,
if imported later, loads the same library, so handles pass between the two.

Initialising the loader (``loader()``, once per process, under a lock) is also when each platform
(platforms/) does what its driver needs around its start: before it, environment the driver reads
while it starts (PoCL: its worker placement, a writable kernel cache folder), taken back after;
once the devices are listed, repairs of the driver's state and what each device compiles for
(PoCL: a CPU name its LLVM knows, before any program is built). Nothing later rescans the
driver's memory.
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
from .platforms import PLATFORMS, DeviceStart, LoaderStart, Platform, for_name

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
    #: device address -> what its platform learned of it when the loader started (platforms/:
    #: the CPU model a PoCL device compiles for, read after the repair, and its worker placement);
    #: devices of platforms that learn nothing are not in it
    starts: Mapping[int, DeviceStart]

    def device_start(self, device: Any) -> DeviceStart:
        """What the platform of ``device`` (a ``cl_device_id``) learned of it at the start."""
        return self.starts.get(int(ffi.cast("uintptr_t", device)), DeviceStart())

    def compiler_cpu(self, device: Any) -> str:
        """The CPU model ``device`` (a ``cl_device_id``) compiles for: "" for other drivers."""
        return self.device_start(device).compiler_cpu


class _Once:
    """The process's Loader, made by the first caller under ``lock``: two first callers at once
    would both start the drivers and run the platforms' start (PoCL: both repaired its devices and
    set ``POCL_AFFINITY``, and PoCL then crashed in clGetDeviceInfo); a caller that finds it made
    reads it without the lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: Loader | None = None


_LOADER = _Once()


def loader() -> Loader:
    """Load the OpenCL API table and run each platform's start (platforms/: PoCL's CPU devices
    repaired), once per process; safe to call from any thread."""
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
    started: list[tuple[Platform, LoaderStart]] = []
    try:
        for platform in PLATFORMS:  # before the drivers start: what they read while they start
            started.append((platform, platform.start_loader(preloaded=preloaded)))
        path = _loader_path()
        api = ffi.new("dlg_cl_api *")
        err = ffi.new("char[512]")
        if lib.dlg_cl_load(path.encode(), api, err, 512) != 0:
            raise DelegateError(ffi.string(err).decode())
        devices = [(int(ffi.cast("uintptr_t", d)), name) for _, _, name, ids in platforms(api) for d in ids]
    finally:
        for _, start in started:  # the drivers have started: child processes get the caller's environment
            start.withdraw()
    starts: dict[int, DeviceStart] = {}
    for platform, start in started:
        starts.update(start.devices_listed([(a, name) for a, name in devices if for_name(name) is platform]))
    return Loader(path, api, starts)


def cl_api() -> Any:
    """The process-wide table of OpenCL function pointers (a ``dlg_cl_api *``)."""
    return loader().api
