"""Run InferenceContexts on OpenCL devices: device selection, program assembly, memory, the C loop."""

from .device import DeviceInfo, describe, list_devices, select_device
from .runtime import MemoryReport, Runtime

__all__ = ["DeviceInfo", "MemoryReport", "Runtime", "describe", "list_devices", "select_device"]
