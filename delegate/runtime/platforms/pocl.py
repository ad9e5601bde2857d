"""PoCL (Portable Computing Language), the CPU driver pyopencl's wheel ships: its rules.

Around the loader's start (once per process, under the loader's lock): its worker threads pinned
one per CPU where that is sound (pocl_affinity.py) and a writable kernel cache folder where its
default one cannot be written (pocl_cache.py), both asked through the environment before PoCL
starts and taken back afterwards; once the devices are listed, the CPU name its LLVM compiles for
repaired where that LLVM does not know the processor, and read (pocl_cpu.py). That name keys
compiled programs and sets the compiler's vector width (16 floats on AVX-512 models). Persistent
kernels run on its CPU devices. Its kernel cache keeps every program it compiles (the source's
build and each kernel's compiled form), so where that cache lasts the runtime stores no program
binaries of its own by default: asking PoCL for one compiles every kernel once more. Its work-group
specialisation is turned off (``POCL_WORK_GROUP_SPECIALIZATION=0`` unless the caller set it, kept
for the process's life since PoCL reads it at every launch): a program binary then holds the code
its kernels run, so the first launch of one built in a helper process (build_processes.py) compiles
nothing more, where a specialised launch compiles each kernel again (MobileNetV2: 3.9 s; the
persistent kernels, launched with one work-item per group, ran within 1% either way). Its kernel
compiler makes work-groups as plain loops over the work-items (``POCL_WORK_GROUP_METHOD=loops``
unless the caller set it; PoCL fixes the method once per process): the default, ``loopvec``, runs
LLVM's loop and SLP vectorisers in both of the kernel compiler's optimisation passes, about 4% of
the instructions building a persistent program (MobileNetV2's 850 KB segment: 31.5 against 30.3
billion; its kernel compile 8% of the CPU time) for nothing at run time, the kernels being written
in vectors already (persistent MobileNetV2 and DenseNet121, and MobileNetV2 kernel by kernel, ran
0.92-0.99 of loopvec's time, both in one process).
The rule cpu_when_faster weighs its measured costs (calibration.POCL_CPU).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ...calibration import POCL_CPU, Calibration
from . import cpu_models, pocl_affinity, pocl_cache, pocl_cpu
from .base import DeviceStart

#: PoCL's setting: compile each kernel again for the work-group size of its launch
SPECIALIZATION = "POCL_WORK_GROUP_SPECIALIZATION"
#: PoCL's setting: how its kernel compiler makes a work-group of work-items
WORK_GROUP_METHOD = "POCL_WORK_GROUP_METHOD"


class PoclStart:
    """PoCL's part in one start of the loader: the environment asked for, then the devices' repair."""

    def __init__(self, *, preloaded: bool) -> None:
        os.environ.setdefault(SPECIALIZATION, "0")  # see the module docstring
        os.environ.setdefault(WORK_GROUP_METHOD, "loops")  # see the module docstring: compiles faster
        affinity = pocl_affinity.request()
        self.kernel_cache = pocl_cache.request()  # PoCL finds no device when it cannot write its cache folder
        if affinity.requested and preloaded:  # pyopencl (or another library) may have started PoCL already
            affinity = pocl_affinity.WorkerAffinity(
                True, affinity.reason + "; the OpenCL loader was in the process before, so only if PoCL had not started"
            )
        self.affinity = affinity

    def withdraw(self) -> None:
        # PoCL's workers have started: child processes get the caller's environment
        pocl_affinity.withdraw(self.affinity)
        pocl_cache.withdraw(self.kernel_cache)

    def devices_listed(self, devices: Sequence[tuple[int, str]]) -> Mapping[int, DeviceStart]:
        placement = self.affinity.describe()
        keeps = pocl_cache.keeps_builds(self.kernel_cache)
        return {
            address: DeviceStart(name, placement if name else "", keeps_builds=keeps)
            for address, name in pocl_cpu.repair_devices(devices).items()
        }


class PoclPlatform:
    """PoCL's platforms (by name: "Portable Computing Language", or one naming PoCL)."""

    name = "pocl"
    chosen_without_gpu = True
    calibration: Calibration | None = POCL_CPU
    builds_in_processes = True

    def serves(self, platform_name: str) -> bool:
        name = platform_name.lower()
        return "portable computing language" in name or "pocl" in name

    def start_loader(self, *, preloaded: bool) -> PoclStart:
        return PoclStart(preloaded=preloaded)

    def vector_floats(self, is_gpu: bool, compiler_cpu: str) -> int:
        return cpu_models.device_vector_floats(is_gpu, compiler_cpu)  # 16 where it compiles for AVX-512

    def program_key(self, device_key: str, compiler_cpu: str) -> str:
        return cpu_models.program_key(device_key, compiler_cpu)  # the CPU model it compiles for

    def persistent_kernels(self, is_gpu: bool) -> bool:
        return not is_gpu  # its CPU devices (a PoCL GPU driver has the GPUs' reasons against them)

    def host_memory_in_place(self, is_gpu: bool) -> bool:
        # its CPU driver's buffer over a host pointer is the pointer (its alloc_mem_obj), and its map
        # and unmap of it copy nothing; each is still a command its worker threads take in turn
        return not is_gpu
