"""Device specifics behind one interface: the core runtime asks a device's platform (``for_name``,
from the OpenCL platform's name) and never tests for a driver by name.

``Platform`` (base.py) is the interface; ``PoclPlatform`` (pocl.py, with pocl_cpu.py,
pocl_affinity.py, pocl_cache.py) and ``GenericPlatform`` (generic.py: GPUs and any other OpenCL
driver) are its implementations. ``PLATFORMS`` is every one, in the order a platform's name is
matched: the first that serves it answers for its devices, the generic one last.
"""

from __future__ import annotations

from .base import DeviceStart, LoaderStart, Platform
from .generic import GenericPlatform
from .pocl import PoclPlatform

__all__ = ["PLATFORMS", "DeviceStart", "GenericPlatform", "LoaderStart", "Platform", "PoclPlatform", "for_name"]

#: every platform, the generic one last (it serves every name)
PLATFORMS: tuple[Platform, ...] = (PoclPlatform(), GenericPlatform())


def for_name(platform_name: str) -> Platform:
    """The platform that answers for the devices of the OpenCL platform named ``platform_name``."""
    return next(p for p in PLATFORMS if p.serves(platform_name))
