"""The platform interface: what the core runtime asks of an OpenCL platform's driver.

A platform answers for the devices of the OpenCL platforms it serves (``serves``, from the
platform's name): what to do around the loader's start (``start_loader``: environment the driver
reads while it starts, taken back afterwards, and what it learns of each device once the devices
are listed, such as the CPU model its compiler targets), how that target shows in the program
cache key (``program_key``) and in the compiler's vector width (``vector_floats``), whether runs
may use persistent kernels (``persistent_kernels``), whether a buffer over host memory is that
memory (``host_memory_in_place``), whether its driver keeps compiled programs
for later processes by itself (``DeviceStart.keeps_builds``), whether its devices are the default when no
GPU is found (``chosen_without_gpu``), and the measured costs the rule cpu_when_faster weighs
(``calibration``, data of delegate/calibration.py), and whether programs build faster in
several processes (``builds_in_processes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ...calibration import Calibration


@dataclass(frozen=True)
class DeviceStart:
    """What a platform learned of one of its devices when the loader started (read once)."""

    #: the CPU model the device's compiler targets ("" where unknown, or not a CPU device's driver)
    compiler_cpu: str = ""
    #: how the driver's worker threads are placed, in words ("" where the platform does not say)
    worker_placement: str = ""
    #: the driver keeps the programs it compiles for later processes by itself (PoCL's kernel
    #: cache), so binaries stored beside it would only cost their making on a cold start
    keeps_builds: bool = False


class LoaderStart(Protocol):
    """A platform's part in one start of the OpenCL loader (``Platform.start_loader``)."""

    def withdraw(self) -> None:
        """Take back the environment set for the driver's start, once the loader listed the devices
        (whether or not that succeeded)."""
        ...

    def devices_listed(self, devices: Sequence[tuple[int, str]]) -> Mapping[int, DeviceStart]:
        """After the loader listed ``devices`` (device address, platform name; those this platform
        serves): any repair of the driver's state, and what each device's start was, by address."""
        ...


class Platform(Protocol):
    """The rules of one kind of OpenCL platform (see the module docstring)."""

    #: a short name for messages and tests
    name: str
    #: whether a device of it is taken by default when no GPU is found (device.select_device)
    chosen_without_gpu: bool
    #: the measured costs of the rule cpu_when_faster on its devices; None where none were measured
    calibration: Calibration | None
    #: its driver compiles one program at a time in a process (PoCL's compiler lock), so a
    #: context's programs build faster in several processes (runtime/build_processes.py)
    builds_in_processes: bool

    def serves(self, platform_name: str) -> bool:
        """Is the OpenCL platform named ``platform_name`` one of this kind?"""
        ...

    def start_loader(self, *, preloaded: bool) -> LoaderStart:
        """Before the OpenCL loader starts the drivers (once per process, under the loader's lock);
        ``preloaded``: the loader was in the process already, so a driver may have started."""
        ...

    def vector_floats(self, is_gpu: bool, compiler_cpu: str) -> int:
        """Floats per vector register of code compiled for a device of it."""
        ...

    def program_key(self, device_key: str, compiler_cpu: str) -> str:
        """What identifies compiled programs for a device of it: ``device_key`` (platform, device,
        driver) and whatever else its binaries depend on."""
        ...

    def persistent_kernels(self, is_gpu: bool) -> bool:
        """May runs on a device of it launch persistent kernels (runtime/persistent.py)?"""
        ...

    def host_memory_in_place(self, is_gpu: bool) -> bool:
        """Is a buffer its driver makes over host memory (CL_MEM_USE_HOST_PTR) that memory itself on
        a device of it, so that zero-copy runs need no map and unmap to see the host's writes and
        to let the host read the device's (``dlg_plan.host_memory_in_place``)?"""
        ...
