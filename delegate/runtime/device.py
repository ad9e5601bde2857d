"""OpenCL device selection and the facts about a device the runtime depends on."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DeviceNotFoundError
from . import driver
from .driver import Device
from .opencl import loader
from .platforms import Platform, cpu_models, for_name


@dataclass(frozen=True)
class DeviceInfo:
    """What the runtime needs to know of an OpenCL device (queried once, in ``describe``)."""

    platform: str
    name: str
    vendor: str
    driver_version: str
    version: str
    is_gpu: bool
    fp16: bool
    images: bool
    image_3d_writes: bool
    max_work_group_size: int
    max_work_item_sizes: tuple[int, ...]
    max_mem_alloc_bytes: int
    global_mem_bytes: int
    local_mem_bytes: int
    mem_base_addr_align_bytes: int
    image2d_max: tuple[int, int]
    image3d_max: tuple[int, int, int]
    image_array_max_layers: int
    image_buffer_max_pixels: int
    #: CL_DEVICE_HOST_UNIFIED_MEMORY: the device works in host memory (CPU devices, integrated GPUs)
    host_unified_memory: bool = False
    #: CL_DEVICE_MAX_COMPUTE_UNITS (PoCL: its worker threads, one per core)
    compute_units: int = 1
    #: the CPU model the device's compiler targets, as its platform read it once, when the loader
    #: was initialised (opencl.loader, platforms/: PoCL's); "" for other drivers
    compiler_cpu: str = ""
    #: how the driver's worker threads are placed, as its platform asked when the loader was
    #: initialised (platforms/pocl_affinity.py); "" for other drivers
    worker_affinity: str = ""
    #: the driver keeps compiled programs for later processes by itself (platforms/: PoCL's
    #: kernel cache, where it lasts), so the default program cache stores no binaries
    driver_keeps_builds: bool = False

    @property
    def platform_rules(self) -> Platform:
        """The rules of the device's platform (platforms/): what the runtime asks instead of
        testing for a driver by name."""
        return for_name(self.platform)

    @property
    def host_memory_in_place(self) -> bool:
        """Does the device work in the host memory a buffer is made over (CL_MEM_USE_HOST_PTR),
        with nothing to map or copy around a run? Where its platform's driver does (PoCL's CPU
        device), on a device that shares the host's memory (not one of PoCL's remote devices)."""
        return self.host_unified_memory and self.platform_rules.host_memory_in_place(self.is_gpu)

    @property
    def vector_floats(self) -> int:
        """Floats per vector register of code compiled for this device: 16 on CPU devices whose
        compiler targets AVX-512 (platforms/cpu_models.py), else 8, GPUs included."""
        return self.platform_rules.vector_floats(self.is_gpu, self.compiler_cpu)

    @property
    def int8_dot(self) -> bool:
        """Can kernels compiled for this device call the AVX512-VNNI dot product
        (``__builtin_ia32_vpdpbusd512``)? Only CPU devices whose compiler targets a model with it
        (platforms/cpu_models.py); other drivers report no model."""
        return not self.is_gpu and cpu_models.int8_dot(self.compiler_cpu)

    @property
    def byte_lookup(self) -> bool:
        """Can kernels compiled for this device call the AVX512-VBMI byte permute
        (``__builtin_ia32_vpermi2varqi512``)? As ``int8_dot``, for that instruction set."""
        return not self.is_gpu and cpu_models.byte_lookup(self.compiler_cpu)

    @property
    def key(self) -> str:
        """What identifies compiled programs for this device (platform, device, driver, and what
        else its platform's binaries depend on: the CPU model PoCL compiles for)."""
        key = f"{self.platform}|{self.name}|{self.vendor}|{self.driver_version}|{self.version}"
        return self.platform_rules.program_key(key, self.compiler_cpu)


def describe(device: Device) -> DeviceInfo:
    get = device.get
    extensions = str(get("extensions")).split()
    start = loader().device_start(device.handle)  # what its platform read when the loader started
    images = bool(get("image_support"))
    return DeviceInfo(
        platform=device.platform_name.strip(),
        name=str(get("name")).strip(),
        vendor=str(get("vendor")).strip(),
        driver_version=str(get("driver_version")).strip(),
        version=str(get("version")).strip(),
        is_gpu=device.is_gpu,
        fp16="cl_khr_fp16" in extensions,
        images=images,
        image_3d_writes="cl_khr_3d_image_writes" in extensions,
        max_work_group_size=int(get("max_work_group_size")),
        max_work_item_sizes=tuple(int(v) for v in get("max_work_item_sizes")),
        max_mem_alloc_bytes=int(get("max_mem_alloc_size")),
        global_mem_bytes=int(get("global_mem_size")),
        local_mem_bytes=int(get("local_mem_size")),
        mem_base_addr_align_bytes=max(int(get("mem_base_addr_align")) // 8, 4),
        image2d_max=(int(get("image2d_max_width")), int(get("image2d_max_height"))) if images else (0, 0),
        image3d_max=(
            (int(get("image3d_max_width")), int(get("image3d_max_height")), int(get("image3d_max_depth")))
            if images
            else (0, 0, 0)
        ),
        image_array_max_layers=int(get("image_max_array_size")) if images else 0,
        image_buffer_max_pixels=int(get("image_max_buffer_size")) if images else 0,
        host_unified_memory=bool(get("host_unified_memory")),
        compute_units=max(int(get("max_compute_units")), 1),
        compiler_cpu=start.compiler_cpu,
        worker_affinity=start.worker_placement,
        driver_keeps_builds=start.keeps_builds,
    )


def list_devices() -> list[tuple[int, int, Device]]:
    """Every device as (platform index, device index, device)."""
    return driver.devices()


def _listing(found: list[tuple[int, int, Device]]) -> str:
    if not found:
        return "no OpenCL platform is installed (pip install pocl-binary-distribution for the CPU one)"
    return "available devices:\n" + "\n".join(
        f"  {p}:{d}  {dev.platform_name.strip()} / {dev.name}" for p, d, dev in found
    )


def select_device(request: str | int | object | None = None) -> Device:
    """Pick a device.

    ``None``: the first GPU of any platform, else the first device of a platform chosen without
    a GPU (PoCL's, platforms/), else the first device.
    ``"P:D"``: platform index P, device index D. ``int``, or a string of digits (options arrive as
    strings): index into the flat list of devices.
    Any other string: the first device whose "platform / device" name contains it (case-insensitive).
    A ``Device``, or a pyopencl ``Device`` (the same driver object, matched by its handle).
    """
    if isinstance(request, Device):
        return request
    found = list_devices()
    if request is not None and not isinstance(request, (str, int)):
        handle = getattr(request, "int_ptr", None)
        if not isinstance(handle, int):
            raise TypeError(
                "device must be None, an index, 'P:D', part of a device's name or a Device, "
                f"not {type(request).__name__}"
            )
        for _, _, dev in found:
            if driver.handle_int(dev.handle) == handle:
                return dev
        raise DeviceNotFoundError(
            f"{request!r} is not a device of the OpenCL loader this package uses; {_listing(found)}"
        )
    if request is None:
        for _, _, dev in found:
            if dev.is_gpu:
                return dev
        for _, _, dev in found:
            if for_name(dev.platform_name).chosen_without_gpu:
                return dev
        if found:
            return found[0][2]
        raise DeviceNotFoundError(f"no OpenCL device found; {_listing(found)}")
    if isinstance(request, str) and request.strip().isdigit():
        request = int(request)
    if isinstance(request, int):
        if 0 <= request < len(found):
            return found[request][2]
    elif ":" in request and all(part.strip().isdigit() for part in request.split(":", 1)):
        p, d = (int(part) for part in request.split(":", 1))
        for pi, di, dev in found:
            if (pi, di) == (p, d):
                return dev
    else:
        needle = request.lower()
        for _, _, dev in found:
            if needle in f"{dev.platform_name} / {dev.name}".lower():
                return dev
    raise DeviceNotFoundError(f"no OpenCL device matches {request!r}; {_listing(found)}")
