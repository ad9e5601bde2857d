"""Upstream's GPU delegate option names, translated into this delegate's options.

Two spellings exist upstream and both are accepted:
  - the fields of ``TfLiteGpuDelegateOptionsV2`` (tensorflow/lite/delegates/gpu/delegate_options.h),
    the keys upstream's GPU plugin takes through ``load_delegate``: ``is_precision_loss_allowed``,
    ``inference_preference``, ``inference_priority1..3``, ``experimental_flags`` (and
    ``max_delegated_partitions``, ``serialization_dir``, ``model_token``, which are this
    delegate's names too);
  - the flags of upstream's GPU delegate provider (benchmark_model, evaluation tools):
    ``gpu_precision_loss_allowed``, ``gpu_experimental_enable_quant``,
    ``gpu_inference_for_sustained_speed``, ``gpu_backend``, ``delegate_serialize_dir``,
    ``delegate_serialize_token``.

Priorities map as the settings mapping maps GPUSettings (settings/mapping.py, the same code), an
explicit ``is_precision_loss_allowed`` picks the first priority as upstream's delegate does, and an
upstream option that contradicts one of this delegate's options given with it is an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from .options import OptionsError

if TYPE_CHECKING:
    from ..settings.mapping import DeviceKind

#: TfLiteGpuDelegateOptionsV2 fields that are not this delegate's own names
STRUCT_NAMES = (
    "is_precision_loss_allowed",
    "inference_preference",
    "inference_priority1",
    "inference_priority2",
    "inference_priority3",
    "experimental_flags",
)
#: the GPU delegate provider's flags (and its common serialization flags)
PROVIDER_NAMES = (
    "gpu_precision_loss_allowed",
    "gpu_experimental_enable_quant",
    "gpu_inference_for_sustained_speed",
    "gpu_backend",
    "delegate_serialize_dir",
    "delegate_serialize_token",
)
UPSTREAM_NAMES = frozenset(STRUCT_NAMES + PROVIDER_NAMES)

#: TfLiteGpuExperimentalFlags bits
FLAG_BITS = {"NONE": 0, "ENABLE_QUANT": 1, "CL_ONLY": 2, "GL_ONLY": 4, "ENABLE_SERIALIZATION": 8}
_FLAG_PREFIX = "TFLITE_GPU_EXPERIMENTAL_FLAGS_"
#: TfLiteGpuInferencePriority, with the values GPUInferencePriority gives them
_PRIORITIES = {"AUTO": 0, "MAX_PRECISION": 1, "MIN_LATENCY": 2, "MIN_MEMORY_USAGE": 3}
_PRIORITY_PREFIXES = ("TFLITE_GPU_INFERENCE_PRIORITY_", "GPU_PRIORITY_")
_USAGE_PREFIX = "TFLITE_GPU_INFERENCE_PREFERENCE_"


_BOOLEAN_KEYS = ("enable_quantized_inference",)
#: the provider's serialization flags and this delegate's options of the same meaning
_PROVIDER_SERIALIZATION = (("delegate_serialize_dir", "serialization_dir"), ("delegate_serialize_token", "model_token"))


def _bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("1", "0", "true", "false"):
        raise OptionsError(f"{key} must be 1, 0, true or false, not {text!r}")
    return value in ("1", "true")


def _named_number(key: str, text: str, names: Mapping[str, int], prefixes: tuple[str, ...]) -> int:
    value = text.strip().upper()
    for prefix in prefixes:
        value = value.removeprefix(prefix)
    if value in names:
        return names[value]
    try:
        number = int(value, 0)
    except ValueError:
        number = -1
    if number in names.values():
        return number
    choices = ", ".join(f"{name} ({number})" for name, number in names.items())
    raise OptionsError(f"{key} must be one of {choices}, not {text!r}")


def parse_flags(text: str) -> int:
    """experimental_flags: a number (decimal or 0x...) or flag names joined by | or , ."""
    value = text.strip()
    try:
        bits = int(value, 0)
    except ValueError:
        bits = 0
        for part in value.replace(",", "|").split("|"):
            name = part.strip().upper().removeprefix(_FLAG_PREFIX)
            if name not in FLAG_BITS:
                raise OptionsError(
                    f"experimental_flags: unknown flag {part.strip()!r}; flags: {', '.join(FLAG_BITS)} "
                    "(names, with or without TFLITE_GPU_EXPERIMENTAL_FLAGS_, or their sum as a number)"
                ) from None
            bits |= FLAG_BITS[name]
    unknown = bits & ~sum(FLAG_BITS.values())
    if bits < 0 or unknown:
        raise OptionsError(
            f"experimental_flags {text!r} sets bits this delegate does not know ({unknown:#x}); "
            f"it knows {', '.join(f'{n}={b}' for n, b in FLAG_BITS.items())}"
        )
    return bits


def _normal(key: str, value: str, exact: bool) -> str:
    text = value.strip()
    if exact:
        return text
    if key in _BOOLEAN_KEYS and text.lower() in ("1", "true", "0", "false"):
        return str(text.lower() in ("1", "true")).lower()
    return text.lower()


def _set(out: dict[str, str], key: str, value: str, because: str, *, exact: bool = False) -> None:
    """Set ``out[key]``, refusing a different value already there (given by the caller or derived)."""
    given = out.get(key)
    if given is not None and _normal(key, given, exact) != _normal(key, value, exact):
        raise OptionsError(
            f"{key}={given.strip()} conflicts with {because}, which means {key}={value} here; give only one of them"
        )
    out[key] = value


def _gl_refused(because: str) -> OptionsError:
    return OptionsError(
        f"{because} asks for the OpenGL backend, which is not available here: this delegate runs OpenCL "
        "(use CL_ONLY / gpu_backend=cl, or neither)"
    )


def device_kind(device: str) -> DeviceKind | None:
    """The facts the settings mapping reads of the device ``device`` selects; None without any
    OpenCL device."""
    from ..errors import DeviceNotFoundError
    from ..runtime.device import describe, select_device
    from ..settings.mapping import DeviceKind

    try:
        info = describe(select_device(device or None))
    except DeviceNotFoundError:
        return None
    return DeviceKind(info.vendor, info.name, info.is_gpu, info.fp16, info.images)


def _priorities(given: dict[str, str], out: dict[str, str]) -> None:
    """precision (and storage_type unless given) from the upstream precision and priority options."""
    # here, not at the top: protobuf's import is a tenth of a warm start, and most options have no priorities
    from .._generated import configuration_pb2 as pb
    from ..errors import SettingsError
    from ..settings.mapping import latency_outranks_memory, precision_for, priorities, storage_for, upstream_precision

    loss_keys = [k for k in ("is_precision_loss_allowed", "gpu_precision_loss_allowed") if k in given]
    losses = {k: given[k] for k in loss_keys if given[k].strip() != "-1"}  # -1: upstream's "not set"
    values = {k: _bool(k, v) for k, v in losses.items()}
    if len(set(values.values())) > 1:
        raise OptionsError(f"{' and '.join(f'{k}={losses[k]}' for k in values)} contradict each other")
    prio_keys = [f"inference_priority{i}" for i in (1, 2, 3) if f"inference_priority{i}" in given]
    if values and prio_keys:
        raise OptionsError(
            f"{next(iter(values))} and {', '.join(prio_keys)} are both given: upstream's delegate then "
            "ignores the priorities; give the priorities alone, or is_precision_loss_allowed alone"
        )
    if values:
        loss = next(iter(values.values()))
        gpu = pb.GPUSettings(is_precision_loss_allowed=loss)
        because = f"{next(iter(values))}={losses[next(iter(values))]}"
    elif prio_keys:
        # unset priorities take TfLiteGpuDelegateOptionsV2Default's values: MAX_PRECISION, AUTO, AUTO
        number = {
            k: _named_number(k, given[k], _PRIORITIES, _PRIORITY_PREFIXES)
            for k in ("inference_priority1", "inference_priority2", "inference_priority3")
            if k in given
        }
        gpu = pb.GPUSettings(
            inference_priority1=number.get("inference_priority1", pb.GPU_PRIORITY_MAX_PRECISION),
            inference_priority2=number.get("inference_priority2", pb.GPU_PRIORITY_AUTO),
            inference_priority3=number.get("inference_priority3", pb.GPU_PRIORITY_AUTO),
        )
        because = ", ".join(f"{k}={given[k]}" for k in prio_keys)
    else:
        return
    try:
        prios = priorities(gpu)
    except SettingsError as exc:
        raise OptionsError(str(exc)) from None
    # the device matters only where the priorities allow a loss, or latency outranks memory
    allowed = upstream_precision(prios)
    device = device_kind(out.get("device", "")) if allowed != "F32" or latency_outranks_memory(prios) else None
    explicit = "precision" in out
    _set(out, "precision", allowed, because)  # a precision given with them must mean the same
    if not explicit:  # what the priorities allow, narrowed to what is fastest on the device
        out["precision"] = precision_for(prios, device)
    if "storage_type" not in out:
        out["storage_type"] = storage_for(prios, device)


def translate(pairs: Mapping[str, object]) -> dict[str, str]:
    """``pairs`` with upstream's option names replaced by this delegate's options (see the module doc).

    Options that are not upstream's pass through unchanged; OptionsError for a value that
    cannot be taken or a contradiction.
    """
    out = {k: str(v) for k, v in pairs.items() if k not in UPSTREAM_NAMES}
    given = {k: str(v).strip() for k, v in pairs.items() if k in UPSTREAM_NAMES}
    if not given:
        return out
    from ..settings.mapping import USAGES, tuning_for_usage

    _priorities(given, out)
    if "inference_preference" in given or "gpu_inference_for_sustained_speed" in given:
        usages = {}
        if "inference_preference" in given:
            usages["inference_preference"] = _named_number(
                "inference_preference", given["inference_preference"], USAGES, (_USAGE_PREFIX,)
            )
        if "gpu_inference_for_sustained_speed" in given:
            sustained = _bool("gpu_inference_for_sustained_speed", given["gpu_inference_for_sustained_speed"])
            usage = USAGES["SUSTAINED_SPEED" if sustained else "FAST_SINGLE_ANSWER"]
            usages["gpu_inference_for_sustained_speed"] = usage
        for key, usage in usages.items():
            _set(out, "tuning", tuning_for_usage(usage), f"{key}={given[key]}")
    for upstream_key, key in _PROVIDER_SERIALIZATION:
        if upstream_key in given:
            _set(out, key, given[upstream_key], f"{upstream_key}={given[upstream_key]}", exact=True)
    if "gpu_backend" in given:
        backend = given["gpu_backend"].lower()
        if backend == "gl":
            raise _gl_refused("gpu_backend=gl")
        if backend not in ("cl", ""):
            raise OptionsError(f"gpu_backend must be cl or gl (upstream's values), not {given['gpu_backend']!r}")
    if "gpu_experimental_enable_quant" in given:
        quant = _bool("gpu_experimental_enable_quant", given["gpu_experimental_enable_quant"])
        _set(out, "enable_quantized_inference", str(quant).lower(), f"gpu_experimental_enable_quant={quant}")
    if "experimental_flags" in given:
        bits = parse_flags(given["experimental_flags"])
        because = f"experimental_flags={given['experimental_flags']}"
        if bits & FLAG_BITS["GL_ONLY"]:
            raise _gl_refused(because)
        if bits & FLAG_BITS["ENABLE_SERIALIZATION"] and not out.get("serialization_dir"):
            raise OptionsError(
                f"{because} sets ENABLE_SERIALIZATION, which needs serialization_dir (model_token is optional "
                "here: without it the weights are hashed); set serialization_dir, or drop the flag"
            )
        _set(out, "enable_quantized_inference", str(bool(bits & FLAG_BITS["ENABLE_QUANT"])).lower(), because)
    return out
