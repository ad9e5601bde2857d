"""Any OpenCL platform without rules of its own: GPU drivers (NVIDIA, AMD, Intel) and other CPU
drivers. Nothing is done around the loader's start, and its devices report no CPU model: programs
are keyed by the device alone, vector code is shaped for 8 floats. Persistent kernels run on
devices that are not GPUs (their constants are sub-buffers of one arena, and NVIDIA's driver
crashed releasing sub-buffers; a GPU gains nothing from them anyway)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...calibration import Calibration
from . import cpu_models
from .base import DeviceStart


class _NothingToDo:
    """The loader start of a platform that needs none."""

    def withdraw(self) -> None:
        pass

    def devices_listed(self, devices: Sequence[tuple[int, str]]) -> Mapping[int, DeviceStart]:
        return {}


class GenericPlatform:
    """Every OpenCL platform that no other platform serves (listed last in ``PLATFORMS``)."""

    name = "opencl"
    chosen_without_gpu = False
    #: nothing measured: the rule cpu_when_faster is off by default on GPUs (compiler/device_policy.py)
    calibration: Calibration | None = None
    builds_in_processes = False

    def serves(self, platform_name: str) -> bool:
        return True

    def start_loader(self, *, preloaded: bool) -> _NothingToDo:
        return _NothingToDo()

    def vector_floats(self, is_gpu: bool, compiler_cpu: str) -> int:
        return cpu_models.device_vector_floats(is_gpu, compiler_cpu)  # 8: its devices report no CPU model

    def program_key(self, device_key: str, compiler_cpu: str) -> str:
        return cpu_models.program_key(device_key, compiler_cpu)  # the device alone: no CPU model

    def persistent_kernels(self, is_gpu: bool) -> bool:
        return not is_gpu

    def host_memory_in_place(self, is_gpu: bool) -> bool:
        return False  # an unknown driver may copy behind a mapping: the spec's map and unmap
