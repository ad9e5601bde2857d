"""How a partition is compiled: ``CompileOptions``, and the kernel choices among its fields.

Below every op and selector (ops/, selectors/ read it through ``EmitContext.options``), so they
import it without reaching the partition driver. Every field is part of the serialization cache
key (delegate/cache.py writes string enums by their value, so the typed choices key as the strings
they stand for).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..context.model import CalculationsPrecision, TensorStorageType


class _Choice(str, Enum):
    """A choice whose value is the string written in options and cache keys."""

    def __str__(self) -> str:
        return self.value


class KernelFamily(_Choice):
    """The kernels of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED: ``cpu`` (a work-item holds a
    block of pixels x channel groups in registers, shaped for CPU cores) or ``gpu``
    (kernels/gpu/gpu_conv.py: a work-item per pixel or two, work-groups sharing weights through
    local memory)."""

    CPU = "cpu"
    GPU = "gpu"


class ConvKernels(_Choice):
    """The convolution kernels: the matrix products (buffer storages only), or the generic ones,
    ``blocked`` (4 pixels x 2 slices per work-item, what texture storages get) or ``plain`` (one
    output FLT4 each)."""

    GEMM = "gemm"
    BLOCKED = "blocked"
    PLAIN = "plain"


@dataclass(frozen=True)
class CompileOptions:
    """How a partition is compiled: precision, tensor storage, fusion, kernel choices."""

    precision: CalculationsPrecision = CalculationsPrecision.F32
    storage: TensorStorageType = TensorStorageType.BUFFER
    #: link elementwise ops into the kernel of their producer (fusion.py)
    fuse: bool = True
    #: local memory a depthwise + 1x1 pair kernel may hold (selectors/pair.py); 0 (the default)
    #: keeps every pair as two kernels. The plugin sets it for CPU devices only (with ``fuse``).
    pair_local_bytes: int = 0
    #: floats per vector register of the device's compiler target: 16 makes the matrix-product
    #: kernels use 16-channel (AVX-512) accumulators where the channel counts suit them
    #: (selectors/gemm.gemm_width). The plugin sets it for CPU devices compiling for AVX-512.
    vector_width: int = 8
    #: the convolution kernels: the generic ones only for comparisons (tests, benchmarks)
    conv_kernels: ConvKernels = ConvKernels.GEMM
    #: the kernels of CONV_2D, DEPTHWISE_CONV_2D and FULLY_CONNECTED; device_policy picks gpu on GPU
    #: devices unless option kernel_family says otherwise
    kernel_family: KernelFamily = KernelFamily.CPU
    #: work-items per work-group of the gpu family's convolutions: a power of two <= the device's limit
    gpu_work_group: int = 64
    #: at F16 and F32_F16, store in float32 the tensors whose rounding a high-gain consumer would
    #: magnify (precision.py); off only to measure what it saves
    widen_sensitive: bool = True
    #: the device compiles the AVX512-VNNI dot product (DeviceInfo.int8_dot): matrix products
    #: over a carried int8 / uint8 input with symmetric int8 weights multiply the integers
    #: (selectors/gemm.integer_input). The plugin sets it for CPU devices that have it.
    int8_dot: bool = False
    #: the device compiles the AVX512-VBMI byte permute (DeviceInfo.byte_lookup): the tables of
    #: int8 values (quant_table.py) are read 64 codes at a time on 16-float vectors
    #: (quant_table.byte_read_code). The plugin sets it for CPU devices that have it.
    byte_lookup: bool = False

    def __post_init__(self) -> None:
        # tests and benchmarks name the choices by their strings ("gpu", "plain")
        object.__setattr__(self, "conv_kernels", ConvKernels(self.conv_kernels))
        object.__setattr__(self, "kernel_family", KernelFamily(self.kernel_family))

    @property
    def linear_storage(self) -> bool:
        """Runtime tensors live in buffers, so kernels may address them linearly (Offset / ReadAt)."""
        return self.storage in (TensorStorageType.BUFFER, TensorStorageType.IMAGE_BUFFER)
