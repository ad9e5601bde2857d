"""TFLite acceleration settings (TFLiteSettings / ComputeSettings) mapped onto this delegate.

The rules are upstream's GPU delegate rules (shared/reference/gpu-cl-serialization.md):
  - inference priorities: AUTO only after fully specified higher priorities, no repeats; when all
    three are AUTO, is_precision_loss_allowed picks MIN_LATENCY (true) or MAX_PRECISION (false)
    as the first;
  - precision: MAX_PRECISION first -> F32, second -> F32_F16, third or absent -> F16;
  - storage: MIN_LATENCY ranked above MIN_MEMORY_USAGE -> the vendor's fastest storage, else the
    one with least memory (BUFFER);
  - ComputeSettings.preference LOW_LATENCY -> the FAST work-group search when a partition is
    compiled (upstream tuned every model; here it is opt-in because on PoCL each size tried is a
    kernel compilation).

Upstream's rules name what a mobile GPU does fastest. Where the device is known (``DeviceKind``),
the precision they allow is narrowed to what is fastest on it: a CPU device computes in float32
whatever the storage, so half storage only adds a conversion at every load and store, and the
allowed loss buys nothing (F32); a GPU without cl_khr_fp16 keeps half storage with float math
(F32_F16); image storage needs a device with images. docs/settings.md has the table.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message

from .._generated import configuration_pb2 as pb
from ..effective import Effective
from ..errors import SettingsError
from .codec import SettingsFormat, load_settings_file, parse_settings
from .message_types import BINARY_DEFAULT, RUNNABLE, message_type, type_for_fields

P = pb.GPUInferencePriority
_NAMES = {
    P.GPU_PRIORITY_AUTO: "AUTO",
    P.GPU_PRIORITY_MAX_PRECISION: "MAX_PRECISION",
    P.GPU_PRIORITY_MIN_LATENCY: "MIN_LATENCY",
    P.GPU_PRIORITY_MIN_MEMORY_USAGE: "MIN_MEMORY_USAGE",
}
_UNAVAILABLE = {pb.NNAPI: "NNAPI", pb.HEXAGON: "HEXAGON", pb.EDGETPU: "EDGETPU", pb.EDGETPU_CORAL: "EDGETPU_CORAL"}


def _tflite_settings(settings: Message) -> tuple[pb.TFLiteSettings, bool]:
    """The TFLiteSettings in ``settings``, and whether a ComputeSettings forces the CPU."""
    if isinstance(settings, pb.ComputeSettings):
        return settings.tflite_settings, settings.preference == pb.FORCE_CPU
    if isinstance(settings, pb.TFLiteSettings):
        return settings, False
    raise SettingsError(f"expected ComputeSettings or TFLiteSettings, not {type(settings).__name__}")


def priorities(gpu: pb.GPUSettings) -> tuple[int, int, int]:
    """The three priorities after upstream's defaults, validated; SettingsError when invalid."""
    given = (gpu.inference_priority1, gpu.inference_priority2, gpu.inference_priority3)
    if given == (P.GPU_PRIORITY_AUTO,) * 3:
        first = P.GPU_PRIORITY_MIN_LATENCY if gpu.is_precision_loss_allowed else P.GPU_PRIORITY_MAX_PRECISION
        return (first, P.GPU_PRIORITY_AUTO, P.GPU_PRIORITY_AUTO)
    names = ", ".join(_NAMES[p] for p in given)
    seen_auto = False
    for p in given:
        if p == P.GPU_PRIORITY_AUTO:
            seen_auto = True
        elif seen_auto:
            raise SettingsError(
                f"invalid GPU inference priorities ({names}): AUTO may only follow fully specified higher "
                "priorities, e.g. MIN_LATENCY, AUTO, AUTO or MIN_LATENCY, MAX_PRECISION, AUTO"
            )
    explicit = [p for p in given if p != P.GPU_PRIORITY_AUTO]
    if len(explicit) != len(set(explicit)):
        raise SettingsError(f"invalid GPU inference priorities ({names}): a priority is given twice")
    return given  # type: ignore[return-value]


@dataclass(frozen=True)
class DeviceKind:
    """The facts of an OpenCL device that the mapping reads (runtime.DeviceInfo has them)."""

    vendor: str
    name: str
    is_gpu: bool
    #: cl_khr_fp16: half arithmetic
    fp16: bool
    #: image support (CL_DEVICE_IMAGE_SUPPORT)
    images: bool


def upstream_precision(prios: tuple[int, int, int]) -> str:
    """The precision upstream's rule gives: MAX_PRECISION first F32, second F32_F16, else F16."""
    if prios[0] == P.GPU_PRIORITY_MAX_PRECISION:
        return "F32"
    if prios[1] == P.GPU_PRIORITY_MAX_PRECISION:
        return "F32_F16"
    return "F16"


def precision_for(prios: tuple[int, int, int], device: DeviceKind | None = None) -> str:
    """The precision for ``prios`` on ``device``: upstream's rule, narrowed to what is fastest on
    the device when it is known (module doc); upstream's name without a device."""
    allowed = upstream_precision(prios)
    if device is None or allowed == "F32":
        return allowed
    if not device.is_gpu:
        return "F32"  # float math either way: half storage would only add conversions
    return allowed if device.fp16 else "F32_F16"


def _rank(prios: tuple[int, int, int], which: int) -> int:
    return prios.index(which) if which in prios else 3


def fastest_storage(device: DeviceKind | None) -> str:
    """Upstream's fastest tensor storage per GPU vendor; BUFFER for CPU devices, devices without
    images and the unknown."""
    if device is None or not device.is_gpu or not device.images:
        return "BUFFER"
    text = f"{device.vendor} {device.name}".lower()
    if "qualcomm" in text or "adreno" in text:
        return "TEXTURE_2D"
    if "nvidia" in text or "amd" in text or "advanced micro devices" in text:
        return "IMAGE_BUFFER"
    return "BUFFER"


def latency_outranks_memory(prios: tuple[int, int, int]) -> bool:
    """Whether MIN_LATENCY is ranked above MIN_MEMORY_USAGE (then the storage depends on the device)."""
    return _rank(prios, P.GPU_PRIORITY_MIN_LATENCY) < _rank(prios, P.GPU_PRIORITY_MIN_MEMORY_USAGE)


def storage_for(prios: tuple[int, int, int], device: DeviceKind | None = None) -> str:
    if latency_outranks_memory(prios):
        return fastest_storage(device)
    return "BUFFER"


#: upstream's TfLiteGpuInferenceUsage (TfLiteGpuDelegateOptionsV2.inference_preference)
USAGES = {"FAST_SINGLE_ANSWER": 0, "SUSTAINED_SPEED": 1, "BALANCED": 2}


def tuning_for_usage(usage: int) -> str:
    """The work-group search for an upstream inference usage.

    Upstream tunes every model: fast for a single answer, exhaustively for sustained speed. Here a
    search costs a kernel compilation per size tried on PoCL, so a single answer (upstream's
    default) keeps this project's default of no search; BALANCED searches fast and SUSTAINED_SPEED
    exhaustively (with serialization_dir, once: the sizes are stored with the partition).
    """
    if usage == USAGES["SUSTAINED_SPEED"]:
        return "exhaustive"
    if usage == USAGES["BALANCED"]:
        return "fast"
    return "none"


def resolve(settings: Message, device: DeviceKind | None = None) -> Effective:
    """Map settings onto this project on ``device`` (None: no device known, upstream's names).
    Raises SettingsError for settings it cannot honour."""
    tfl, force_cpu = _tflite_settings(settings)
    threads = tfl.cpu_settings.num_threads if tfl.HasField("cpu_settings") else -1
    num_threads = threads if threads > 0 else None
    fallback = tfl.fallback_settings
    compile_fb = fallback.allow_automatic_fallback_on_compilation_error
    exec_fb = fallback.allow_automatic_fallback_on_execution_error
    common = {"num_threads": num_threads, "compile_fallback": compile_fb, "execution_fallback": exec_fb}
    if force_cpu:
        return Effective("builtin", "ComputeSettings.preference is FORCE_CPU: no delegate at all", **common)
    if tfl.delegate in _UNAVAILABLE:
        raise SettingsError(
            f"the {_UNAVAILABLE[tfl.delegate]} delegate is not available here: this package runs "
            "the GPU delegate over OpenCL, or TFLite's CPU kernels (delegate NONE or XNNPACK)"
        )
    if tfl.delegate == pb.XNNPACK:
        xnn = tfl.xnnpack_settings.num_threads if tfl.HasField("xnnpack_settings") else 0
        return Effective("xnnpack", "delegate is XNNPACK", **(common | {"num_threads": xnn or num_threads}))
    if tfl.delegate == pb.NONE and tfl.HasField("delegate"):
        return Effective("builtin", "delegate is NONE", **common)
    gpu = tfl.gpu_settings
    prios = priorities(gpu)
    if gpu.force_backend == pb.OPENGL:
        if compile_fb:
            return Effective(
                "cpu",
                "OpenGL backend is not available here; compilation fallback runs the model on CPU",
                priorities=tuple(_NAMES[p] for p in prios),
                **common,
            )  # type: ignore[arg-type]
        raise SettingsError(
            "the OpenGL backend is not available here (this delegate runs OpenCL); use force_backend "
            "OPENCL or UNSET, or allow compilation fallback to run on CPU"
        )
    options = {
        "precision": precision_for(prios, device),
        "storage_type": storage_for(prios, device),
        "enable_quantized_inference": str(gpu.enable_quantized_inference).lower(),
        "compile_fallback": str(compile_fb).lower(),
    }
    if tfl.max_delegated_partitions > 0:
        options["max_delegated_partitions"] = str(tfl.max_delegated_partitions)
    if isinstance(settings, pb.ComputeSettings) and settings.preference == pb.LOW_LATENCY:
        options["tuning"] = "fast"  # a work-group search once, stored with the serialized context
    return Effective("gpu", "", options, priorities=tuple(_NAMES[p] for p in prios), **common)  # type: ignore[arg-type]


def load_settings(source: Any, kind: Any = None) -> Message:
    """Settings from a message, serialized bytes, a file path (.textproto/.pbtxt/.json/binary) or a dict.

    ``kind`` (a message class or its name, e.g. "TFLiteSettings") is the type to read. Without
    it, text, JSON and dicts are typed by their fields (ComputeSettings or TFLiteSettings) and
    bytes are read as ComputeSettings (``BINARY_DEFAULT``).
    """
    if isinstance(source, Message):
        return source
    if isinstance(source, (bytes, bytearray)):
        return parse_settings(bytes(source), SettingsFormat.BINARY, kind)
    if isinstance(source, dict):
        chosen = message_type(kind) if kind is not None else type_for_fields(source, RUNNABLE, "settings dict")
        message = (chosen or BINARY_DEFAULT)()
        try:
            json_format.ParseDict(source, message)
        except json_format.ParseError as exc:
            raise SettingsError(f"settings dict is not a valid {message.DESCRIPTOR.name}: {exc}") from exc
        return message
    if isinstance(source, (str, os.PathLike)):
        return load_settings_file(Path(source), kind)
    raise SettingsError(f"settings must be a message, bytes, a file path or a dict, not {type(source).__name__}")
