"""How a partition is compiled for a device: the CompileOptions that the device's facts and the
user's choices give (the plugin asks; the compiler decides)."""

from __future__ import annotations

from typing import Protocol

from ..context.model import CalculationsPrecision, TensorStorageType
from ..errors import DelegateError
from .options import CompileOptions, KernelFamily
from .selectors.pair import PAIR_LOCAL_BYTES


class DeviceFacts(Protocol):
    """What compile choices depend on, of the device (runtime.DeviceInfo has them)."""

    @property
    def name(self) -> str: ...

    @property
    def is_gpu(self) -> bool: ...

    @property
    def local_mem_bytes(self) -> int: ...

    @property
    def max_work_group_size(self) -> int: ...

    @property
    def max_work_item_sizes(self) -> tuple[int, ...]: ...

    #: the CPU model the device's compiler targets ("" where unknown or not a CPU)
    @property
    def compiler_cpu(self) -> str: ...

    #: floats per vector register of code compiled for it: 16 on AVX-512 CPU models, else 8
    @property
    def vector_floats(self) -> int: ...

    #: kernels compiled for it may call the AVX512-VNNI dot product (CPU devices only)
    @property
    def int8_dot(self) -> bool: ...

    #: kernels compiled for it may call the AVX512-VBMI byte permute (CPU devices only)
    @property
    def byte_lookup(self) -> bool: ...


def pair_local_bytes(device: DeviceFacts) -> int:
    """How much local memory a depthwise + 1x1 pair kernel may hold on this device: none on a GPU
    (the pair kernel is shaped for CPU cores, see kernels/cpu/conv_pair.py)."""
    return 0 if device.is_gpu else min(PAIR_LOCAL_BYTES, device.local_mem_bytes)


def vector_width(device: DeviceFacts, requested: int) -> int:
    """Floats per vector register the matrix products are shaped for (option vector_width,
    ``requested``; 0 is auto): by default the device's (16 on CPU devices whose compiler targets
    AVX-512, else 8, GPUs included). 16 is refused elsewhere: PoCL's LLVM 15 crashes compiling
    some of those kernels for AVX2, and on GPUs they are untested."""
    native = 8 if device.is_gpu else device.vector_floats
    if requested == 16 and native != 16:
        target = "a GPU" if device.is_gpu else f"compiles for {device.compiler_cpu or 'an unknown CPU model'}"
        raise DelegateError(
            f"vector_width=16 needs a CPU device compiling for AVX-512, and {device.name} {target}; "
            "use vector_width=auto or 8"
        )
    return requested or native


def cpu_when_faster(device: DeviceFacts, requested: bool | None) -> bool:
    """Whether partitions the delegate cannot run faster than TFLite's CPU kernels stay there
    (option cpu_when_faster, ``requested``; None is auto): by default on CPU devices, where the
    delegate competes with the CPU kernels for the same cores; on GPUs the choice is the user's."""
    return (not device.is_gpu) if requested is None else requested


#: what option kernel_family accepts
FAMILIES = ("auto", "gpu", "cpu")
#: work-items per work-group the gpu family's convolutions aim at: two NVIDIA warps, one AMD wave
GPU_WORK_GROUP = 64


def kernel_family(device: DeviceFacts, requested: str) -> KernelFamily:
    """The kernel family of the matrix products (option kernel_family, ``requested``): auto picks
    gpu on GPU devices, cpu elsewhere; gpu or cpu is taken on any device (PoCL runs both)."""
    if requested not in FAMILIES:
        raise DelegateError(f"kernel_family must be one of {', '.join(FAMILIES)}, not {requested!r}")
    if requested == "auto":
        return KernelFamily.GPU if device.is_gpu else KernelFamily.CPU
    return KernelFamily(requested)


def gpu_work_group(device: DeviceFacts) -> int:
    """Work-items per work-group of the gpu family's convolutions on ``device``: GPU_WORK_GROUP, or
    the largest power of two below it that the device takes (its kernels require their size)."""
    limit = min(device.max_work_group_size, *(device.max_work_item_sizes[:1] or (GPU_WORK_GROUP,)))
    size = GPU_WORK_GROUP
    while size > 1 and size > limit:
        size //= 2
    return size


def compile_options(
    device: DeviceFacts,
    precision: CalculationsPrecision,
    storage: TensorStorageType,
    *,
    fuse: bool,
    requested_vector_width: int = 0,
    requested_family: str = "auto",
    integer_products: bool = True,
) -> CompileOptions:
    """The CompileOptions of a partition for ``device``; raises DelegateError for a vector width or
    kernel family it cannot take. ``integer_products`` (the option): int8 matrix products in
    integers where the device has the dot product for them."""
    family = kernel_family(device, requested_family)
    return CompileOptions(
        precision,
        storage,
        fuse,
        # the pair kernel is the cpu family's: the gpu family runs each node by itself
        pair_local_bytes(device) if family is KernelFamily.CPU else 0,
        vector_width(device, requested_vector_width),
        kernel_family=family,
        gpu_work_group=gpu_work_group(device),
        # the integer products are the cpu family's 16-wide matrix products
        int8_dot=integer_products and device.int8_dot and family is KernelFamily.CPU,
        byte_lookup=device.byte_lookup and family is KernelFamily.CPU,
    )
