"""OpenCL device selection and the facts about a device the runtime depends on."""

from __future__ import annotations

from dataclasses import dataclass

import pyopencl as cl

from ..errors import DeviceNotFoundError


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

    @property
    def key(self) -> str:
        """What identifies compiled programs for this device (platform, device, driver)."""
        return f"{self.platform}|{self.name}|{self.vendor}|{self.driver_version}|{self.version}"


def describe(device: cl.Device) -> DeviceInfo:
    extensions = device.extensions.split()
    images = bool(device.image_support)
    return DeviceInfo(
        platform=device.platform.name.strip(),
        name=device.name.strip(),
        vendor=device.vendor.strip(),
        driver_version=device.driver_version.strip(),
        version=device.version.strip(),
        is_gpu=bool(device.type & cl.device_type.GPU),
        fp16="cl_khr_fp16" in extensions,
        images=images,
        image_3d_writes="cl_khr_3d_image_writes" in extensions,
        max_work_group_size=int(device.max_work_group_size),
        max_work_item_sizes=tuple(int(v) for v in device.max_work_item_sizes),
        max_mem_alloc_bytes=int(device.max_mem_alloc_size),
        global_mem_bytes=int(device.global_mem_size),
        local_mem_bytes=int(device.local_mem_size),
        mem_base_addr_align_bytes=max(int(device.mem_base_addr_align) // 8, 4),
        image2d_max=(int(device.image2d_max_width), int(device.image2d_max_height)) if images else (0, 0),
        image3d_max=(
            (int(device.image3d_max_width), int(device.image3d_max_height), int(device.image3d_max_depth))
            if images
            else (0, 0, 0)
        ),
        image_array_max_layers=int(device.image_max_array_size) if images else 0,
        image_buffer_max_pixels=int(device.image_max_buffer_size) if images else 0,
    )


def list_devices() -> list[tuple[int, int, cl.Device]]:
    """Every device as (platform index, device index, device)."""
    found = []
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    for p_index, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        found.extend((p_index, d_index, device) for d_index, device in enumerate(devices))
    return found


def _listing(devices: list[tuple[int, int, cl.Device]]) -> str:
    if not devices:
        return "no OpenCL platform is installed (pip install pocl-binary-distribution for the CPU one)"
    return "available devices:\n" + "\n".join(
        f"  {p}:{d}  {dev.platform.name.strip()} / {dev.name.strip()}" for p, d, dev in devices
    )


def select_device(request: str | int | None = None) -> cl.Device:
    """Pick a device.

    ``None``: the first GPU of any platform, else the first PoCL device, else the first device.
    ``"P:D"``: platform index P, device index D. ``int``: index into the flat list of devices.
    Any other string: the first device whose "platform / device" name contains it (case-insensitive).
    """
    devices = list_devices()
    if request is None:
        for _, _, dev in devices:
            if dev.type & cl.device_type.GPU:
                return dev
        for _, _, dev in devices:
            if "portable computing language" in dev.platform.name.lower() or "pocl" in dev.platform.name.lower():
                return dev
        if devices:
            return devices[0][2]
        raise DeviceNotFoundError(f"no OpenCL device found; {_listing(devices)}")
    if isinstance(request, int):
        if 0 <= request < len(devices):
            return devices[request][2]
    elif ":" in request and all(part.strip().isdigit() for part in request.split(":", 1)):
        p, d = (int(part) for part in request.split(":", 1))
        for pi, di, dev in devices:
            if (pi, di) == (p, d):
                return dev
    else:
        needle = request.lower()
        for _, _, dev in devices:
            if needle in f"{dev.platform.name} / {dev.name}".lower():
                return dev
    raise DeviceNotFoundError(f"no OpenCL device matches {request!r}; {_listing(devices)}")
