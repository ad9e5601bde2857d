"""Run InferenceContexts on OpenCL devices: device selection, program assembly, memory, the C loop."""

from .device import DeviceInfo, describe, list_devices, select_device
from .driver import Device, OpenCLError
from .geometry import Tuning
from .runtime import MemoryReport, Runtime, TuningReport

__all__ = [
    "Device",
    "DeviceInfo",
    "MemoryReport",
    "OpenCLError",
    "Runtime",
    "Tuning",
    "TuningReport",
    "describe",
    "list_devices",
    "select_device",
]
