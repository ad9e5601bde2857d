"""The OpenCL objects the runtime uses, made through the C API table (opencl.py).

In the manner of tinygrad's runtime: a device, a context with its queues, programs, and memory
objects (buffers and images), each a handle plus what it was made with, released by its owner
(``release``, idempotent). This replaces pyopencl's objects in the runtime, so that a warm start,
which only loads program binaries and allocates memory, does not pay pyopencl's import (50-90 ms
on the project's machine); pyopencl stays the provider of the ICD loader and PoCL, and tools that
want its objects wrap these handles (``from_int_ptr``; see ``Runtime.queue``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._native import ffi
from ..errors import DelegateError
from .opencl import cl_api, error_name, platforms

# cl.h constants (OpenCL 1.2), by the name the specification gives them
CL_DEVICE_TYPE_GPU = 1 << 2
CL_CONTEXT_PLATFORM = 0x1084
CL_QUEUE_PROFILING_ENABLE = 1 << 1
CL_MEM_READ_WRITE = 1 << 0
CL_MEM_WRITE_ONLY = 1 << 1
CL_MEM_READ_ONLY = 1 << 2
CL_MEM_USE_HOST_PTR = 1 << 3
CL_MEM_COPY_HOST_PTR = 1 << 5
CL_R, CL_RG, CL_RGBA = 0x10B0, 0x10B2, 0x10B5
CL_HALF_FLOAT, CL_FLOAT = 0x10DD, 0x10DE
CL_MEM_OBJECT_IMAGE2D, CL_MEM_OBJECT_IMAGE3D = 0x10F1, 0x10F2
CL_MEM_OBJECT_IMAGE2D_ARRAY, CL_MEM_OBJECT_IMAGE1D_BUFFER = 0x10F3, 0x10F6
CL_PROGRAM_BINARY_SIZES, CL_PROGRAM_BINARIES = 0x1165, 0x1166
CL_PROGRAM_KERNEL_NAMES = 0x1168
CL_PROGRAM_BUILD_LOG = 0x1183
CL_BUFFER_CREATE_TYPE_REGION = 0x1220
CL_KERNEL_WORK_GROUP_SIZE = 0x11B0
CL_KERNEL_COMPILE_WORK_GROUP_SIZE = 0x11B1
CL_PROFILING_COMMAND_START, CL_PROFILING_COMMAND_END = 0x1282, 0x1283

#: clGetDeviceInfo parameters: name -> (code, kind); kinds: str, bool, uint (cl_uint), ulong
#: (cl_ulong and cl_bitfield), size (size_t), sizes (size_t[])
DEVICE_PARAMS: dict[str, tuple[int, str]] = {
    "type": (0x1000, "ulong"),
    "max_compute_units": (0x1002, "uint"),
    "max_work_group_size": (0x1004, "size"),
    "max_work_item_sizes": (0x1005, "sizes"),
    "max_mem_alloc_size": (0x1010, "ulong"),
    "image2d_max_width": (0x1011, "size"),
    "image2d_max_height": (0x1012, "size"),
    "image3d_max_width": (0x1013, "size"),
    "image3d_max_height": (0x1014, "size"),
    "image3d_max_depth": (0x1015, "size"),
    "image_support": (0x1016, "bool"),
    "mem_base_addr_align": (0x1019, "uint"),
    "global_mem_size": (0x101F, "ulong"),
    "local_mem_size": (0x1023, "ulong"),
    "name": (0x102B, "str"),
    "vendor": (0x102C, "str"),
    "driver_version": (0x102D, "str"),
    "version": (0x102F, "str"),
    "extensions": (0x1030, "str"),
    "host_unified_memory": (0x1035, "bool"),
    "image_max_buffer_size": (0x1040, "size"),
    "image_max_array_size": (0x1041, "size"),
}


class OpenCLError(DelegateError):
    """An OpenCL call failed: ``code`` is OpenCL's error code, ``call`` the function, ``detail``
    what the driver said (a build log)."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call = call
        self.code = code
        self.detail = detail
        super().__init__(f"{call} failed: {error_name(code)}" + (f": {detail}" if detail else ""))


def check(code: int, call: str) -> None:
    if code != 0:
        raise OpenCLError(call, code)


def _query(call: str, getter: Any, *head: Any) -> bytes:
    """The bytes of one clGet*Info query: its size, then its value (``head``: the leading arguments)."""
    size = ffi.new("size_t *")
    check(getter(*head, 0, ffi.NULL, size), call)
    buf = ffi.new("char[]", max(size[0], 1))
    check(getter(*head, size[0], buf, ffi.NULL), call)
    return ffi.buffer(buf, size[0])[:]


def _decode(raw: bytes, kind: str) -> Any:
    if kind == "str":
        return raw.split(b"\0", 1)[0].decode(errors="replace")
    if kind == "sizes":
        count = len(raw) // ffi.sizeof("size_t")
        return tuple(ffi.unpack(ffi.cast("size_t *", ffi.from_buffer(raw)), count))
    return int.from_bytes(raw, "little") if kind != "bool" else bool(int.from_bytes(raw, "little"))


def handle_int(handle: Any) -> int:
    """The address of an OpenCL handle (what pyopencl's ``from_int_ptr`` takes)."""
    return int(ffi.cast("uintptr_t", handle))


class Device:
    """An OpenCL device and its platform (handles are never released: they belong to the driver)."""

    def __init__(self, handle: Any, platform: Any, platform_name: str) -> None:
        self.handle = handle
        self.platform = platform
        self.platform_name = platform_name

    def get(self, param: str) -> Any:
        """One fact of ``DEVICE_PARAMS`` by name (``device.get("name")``)."""
        code, kind = DEVICE_PARAMS[param]
        return _decode(_query(f"clGetDeviceInfo({param})", cl_api().get_device_info, self.handle, code), kind)

    @property
    def name(self) -> str:
        return str(self.get("name")).strip()

    @property
    def is_gpu(self) -> bool:
        return bool(self.get("type") & CL_DEVICE_TYPE_GPU)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and handle_int(other.handle) == handle_int(self.handle)

    def __hash__(self) -> int:
        return handle_int(self.handle)

    def __repr__(self) -> str:
        return f"<Device {self.platform_name.strip()} / {self.name}>"


def devices() -> list[tuple[int, int, Device]]:
    """Every device as (platform index, device index, device); platforms that fail to answer are skipped."""
    return [
        (p_index, d_index, Device(handle, platform, name))
        for p_index, platform, name, handles in platforms(cl_api())
        for d_index, handle in enumerate(handles)
    ]


class _Released:
    """A handle released once by ``release_name`` of the API table (``release`` is idempotent)."""

    _release_call = ""

    def __init__(self, handle: Any) -> None:
        self.handle = handle

    @property
    def int_ptr(self) -> int:
        return handle_int(self.handle)

    def release(self) -> None:
        if self.handle is not None:
            handle, self.handle = self.handle, None
            getattr(cl_api(), self._release_call)(handle)


class Context(_Released):
    """An OpenCL context on one device."""

    _release_call = "release_context"

    def __init__(self, device: Device) -> None:
        props = ffi.new("intptr_t[]", [CL_CONTEXT_PLATFORM, int(ffi.cast("intptr_t", device.platform)), 0])
        devs = ffi.new("cl_device_id[]", [device.handle])
        err = ffi.new("int32_t *")
        handle = cl_api().create_context(props, 1, devs, ffi.NULL, ffi.NULL, err)
        check(err[0], "clCreateContext")
        super().__init__(handle)
        self.device = device


class Queue(_Released):
    """An in-order command queue (with profiling when asked)."""

    _release_call = "release_command_queue"

    def __init__(self, context: Context, profiling: bool = False) -> None:
        err = ffi.new("int32_t *")
        props = CL_QUEUE_PROFILING_ENABLE if profiling else 0
        handle = cl_api().create_command_queue(context.handle, context.device.handle, props, err)
        check(err[0], "clCreateCommandQueue")
        super().__init__(handle)
        self.context = context

    def finish(self) -> None:
        if self.handle is not None:
            check(cl_api().finish(self.handle), "clFinish")

    def timed_launch(self, kernel: Any, global_size: Sequence[int], local_size: Sequence[int]) -> float:
        """Launch ``kernel`` once, wait, and return its device time in seconds (a profiling queue)."""
        api = cl_api()
        event = ffi.new("cl_event *")
        dims = len(global_size)
        check(
            api.enqueue_nd_range_kernel(
                self.handle, kernel, dims, ffi.NULL, ffi.new("size_t[]", list(global_size)),
                ffi.new("size_t[]", list(local_size)), 0, ffi.NULL, event,
            ),
            "clEnqueueNDRangeKernel",
        )  # fmt: skip
        try:
            check(api.wait_for_events(1, event), "clWaitForEvents")
            start, end = ffi.new("uint64_t *"), ffi.new("uint64_t *")
            check(
                api.get_event_profiling_info(event[0], CL_PROFILING_COMMAND_START, 8, start, ffi.NULL),
                "clGetEventProfilingInfo",
            )
            check(
                api.get_event_profiling_info(event[0], CL_PROFILING_COMMAND_END, 8, end, ffi.NULL),
                "clGetEventProfilingInfo",
            )
        finally:
            api.release_event(event[0])
        return (end[0] - start[0]) * 1e-9


class MemObject(_Released):
    """A buffer or an image: ``size`` in bytes; ``parent``: the buffer an image is made over."""

    _release_call = "release_mem_object"

    def __init__(self, handle: Any, size: int, parent: MemObject | None = None) -> None:
        super().__init__(handle)
        self.size = size
        self.parent = parent


def buffer(context: Context, flags: int, size: int, host: Any = None) -> MemObject:
    """A buffer of ``size`` bytes; ``host`` (bytes-like, at least ``size`` long) is copied in."""
    err = ffi.new("int32_t *")
    data = ffi.NULL
    if host is not None:
        data = ffi.from_buffer(host)
        flags |= CL_MEM_COPY_HOST_PTR
        if len(data) < size:
            raise ValueError(f"a buffer of {size} bytes from {len(data)} bytes of host memory")
    handle = cl_api().create_buffer(context.handle, flags, size, data, err)
    check(err[0], "clCreateBuffer")
    return MemObject(handle, size)


def buffer_over(context: Context, flags: int, size: int, host: Any) -> MemObject:
    """A buffer over ``size`` bytes of host memory at ``host`` (a cdata pointer), which the caller
    keeps valid until the buffer and every object made from it are released."""
    err = ffi.new("int32_t *")
    handle = cl_api().create_buffer(context.handle, flags | CL_MEM_USE_HOST_PTR, size, host, err)
    check(err[0], "clCreateBuffer")
    return MemObject(handle, size)


def sub_buffer(parent: MemObject, flags: int, origin: int, size: int) -> MemObject:
    """A buffer over ``size`` bytes of ``parent`` from byte ``origin`` (clCreateSubBuffer; the
    origin must be a multiple of the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN)."""
    err = ffi.new("int32_t *")
    region = ffi.new("size_t[2]", [origin, size])
    handle = cl_api().create_sub_buffer(parent.handle, flags, CL_BUFFER_CREATE_TYPE_REGION, region, err)
    check(err[0], "clCreateSubBuffer")
    return MemObject(handle, size, parent)


def image(
    context: Context,
    flags: int,
    channel_order: int,
    channel_type: int,
    dims: Sequence[int],
    *,
    is_array: bool = False,
    over: MemObject | None = None,
    host: Any = None,
    size: int = 0,
) -> MemObject:
    """An image of ``dims`` pixels (1 dim: an IMAGE1D_BUFFER over ``over``; 2: 2D; 3: 3D, or a 2D
    array with ``is_array``); ``host`` is copied in; ``size``: its bytes, for the memory report."""
    fmt = ffi.new("dlg_image_format *", [channel_order, channel_type])
    desc = ffi.new("dlg_image_desc *")
    if len(dims) == 1:
        if over is None:
            raise ValueError("a 1D image is made over a buffer here")
        desc.image_type = CL_MEM_OBJECT_IMAGE1D_BUFFER
        desc.buffer = over.handle
    elif len(dims) == 2:
        desc.image_type = CL_MEM_OBJECT_IMAGE2D
    else:
        desc.image_type = CL_MEM_OBJECT_IMAGE2D_ARRAY if is_array else CL_MEM_OBJECT_IMAGE3D
    desc.image_width = dims[0]
    desc.image_height = dims[1] if len(dims) > 1 else 1
    if len(dims) == 3:
        if is_array:
            desc.image_array_size = dims[2]
        else:
            desc.image_depth = dims[2]
    data = ffi.NULL
    if host is not None:
        data = ffi.from_buffer(host)
        flags |= CL_MEM_COPY_HOST_PTR
    err = ffi.new("int32_t *")
    handle = cl_api().create_image(context.handle, flags, fmt, desc, data, err)
    check(err[0], "clCreateImage")
    return MemObject(handle, size, over)


class Program(_Released):
    """A program made from source or from a binary; ``build`` compiles or loads it for the device."""

    _release_call = "release_program"

    def __init__(self, context: Context, *, source: str | None = None, binary: bytes | None = None) -> None:
        api = cl_api()
        err = ffi.new("int32_t *")
        if source is not None:
            text = source.encode()
            chars = ffi.new("char[]", text)  # alive until the call returns
            strings = ffi.new("const char *[]", [chars])
            lengths = ffi.new("size_t[]", [len(text)])
            handle = api.create_program_with_source(context.handle, 1, strings, lengths, err)
            call = "clCreateProgramWithSource"
        else:
            assert binary is not None
            data = ffi.from_buffer(binary)
            pointers = ffi.new("const unsigned char *[]", [ffi.cast("const unsigned char *", data)])
            lengths = ffi.new("size_t[]", [len(binary)])
            status = ffi.new("int32_t *")
            devs = ffi.new("cl_device_id[]", [context.device.handle])
            handle = api.create_program_with_binary(context.handle, 1, devs, lengths, pointers, status, err)
            call = "clCreateProgramWithBinary"
            if err[0] == 0 and status[0] != 0:
                if handle != ffi.NULL:
                    api.release_program(handle)
                raise OpenCLError(call, status[0], "the driver rejects this binary")
        check(err[0], call)
        super().__init__(handle)
        self.context = context

    def build(self, options: str) -> str:
        """Build for the context's device; returns the build log (a driver's remarks). Raises
        OpenCLError with the log as its ``detail`` when the build fails."""
        api = cl_api()
        devs = ffi.new("cl_device_id[]", [self.context.device.handle])
        code = api.build_program(self.handle, 1, devs, options.encode(), ffi.NULL, ffi.NULL)
        log = self.build_log()
        if code != 0:
            raise OpenCLError("clBuildProgram", code, log)
        return log

    def build_log(self) -> str:
        try:
            raw = _query(
                "clGetProgramBuildInfo", cl_api().get_program_build_info, self.handle, self.context.device.handle,
                CL_PROGRAM_BUILD_LOG,
            )  # fmt: skip
        except OpenCLError:
            return ""
        return _decode(raw, "str")

    def binary(self) -> bytes:
        """The program's binary for its device (what ``Program(binary=...)`` loads)."""
        api = cl_api()
        (size,) = _decode(
            _query("clGetProgramInfo", api.get_program_info, self.handle, CL_PROGRAM_BINARY_SIZES), "sizes"
        )
        data = ffi.new("unsigned char[]", max(size, 1))
        pointers = ffi.new("unsigned char *[]", [data])
        check(
            api.get_program_info(self.handle, CL_PROGRAM_BINARIES, ffi.sizeof(pointers), pointers, ffi.NULL),
            "clGetProgramInfo(BINARIES)",
        )
        return ffi.buffer(data, size)[:]

    def kernel_names(self) -> frozenset[str]:
        """The kernels of the built program (what clCreateKernel can make)."""
        raw = _query("clGetProgramInfo", cl_api().get_program_info, self.handle, CL_PROGRAM_KERNEL_NAMES)
        return frozenset(name for name in _decode(raw, "str").split(";") if name)


def _kernel_work_group_info(kernel: Any, device: Device, param: int, count: int) -> tuple[int, ...]:
    """clGetKernelWorkGroupInfo for a parameter that is ``count`` size_t values."""
    values = ffi.new("size_t[]", count)
    check(
        cl_api().get_kernel_work_group_info(kernel, device.handle, param, count * ffi.sizeof("size_t"), values,
                                            ffi.NULL),
        "clGetKernelWorkGroupInfo",
    )  # fmt: skip
    return tuple(int(v) for v in values)


def kernel_work_group_size(kernel: Any, device: Device) -> int:
    """CL_KERNEL_WORK_GROUP_SIZE: the largest work-group this kernel can launch with on ``device``."""
    return _kernel_work_group_info(kernel, device, CL_KERNEL_WORK_GROUP_SIZE, 1)[0]


def kernel_required_work_group_size(kernel: Any, device: Device) -> tuple[int, ...] | None:
    """CL_KERNEL_COMPILE_WORK_GROUP_SIZE: the work-group size the kernel's source requires
    (``reqd_work_group_size``), or None when it leaves the size open."""
    size = _kernel_work_group_info(kernel, device, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, 3)
    return None if size == (0, 0, 0) else size
