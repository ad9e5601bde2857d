"""Delegate options: what ``load_delegate(**options)`` accepts, parsed from the plugin's strings."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

from ..cache import warn_unusable
from ..compiler.op_names import BUILTIN_OPERATORS
from ..context.model import CalculationsPrecision, TensorStorageType
from ..errors import DelegateError
from ..runtime.geometry import Tuning

#: what exclude_ops takes: any builtin op's name (WHILE and STABLEHLO_COMPOSITE keep the loop or
#: composite on TFLite's kernels, not unrolled or inlined)
_OP_NAMES = frozenset(BUILTIN_OPERATORS.values())


class OptionsError(DelegateError, ValueError):
    """An option the delegate does not know, or a value it cannot use."""


#: the options that take true or false
_BOOLEAN_OPTIONS = (
    "fuse",
    "enable_quantized_inference",
    "compile_fallback",
    "warm_up",
    "persistent",
    "integer_products",
)


@dataclass(frozen=True)
class DelegateOptions:
    """The delegate's options, as given to ``load_delegate`` (see ``parse``)."""

    #: F32, F32_F16 or F16
    precision: CalculationsPrecision = CalculationsPrecision.F32
    #: tensor storage: BUFFER, IMAGE_BUFFER, TEXTURE_2D, TEXTURE_ARRAY, TEXTURE_3D
    storage_type: TensorStorageType = TensorStorageType.BUFFER
    #: OpenCL device: "P:D", an index, or part of its name; empty for the default
    device: str = ""
    #: folder for compiled partitions (InferenceContext files) and program binaries; empty: none
    serialization_dir: str = ""
    #: identifies the model in the cache; without it the weights are hashed
    model_token: str = ""
    #: 0: no limit; else only the largest N partitions are delegated
    max_delegated_partitions: int = 0
    #: program-binary cache folder when there is no serialization_dir: a path, "default" or "none"
    program_cache: str = "default"
    #: comma-separated builtin op names (e.g. "SOFTMAX,MEAN") to leave on TFLite's CPU kernels
    exclude_ops: frozenset[str] = frozenset()
    #: link chains of elementwise ops into the kernel of their producer
    fuse: bool = True
    #: fold DEQUANTIZE of constant fp16 / int8 weights into float weights (GPUSettings'
    #: enable_quantized_inference); off, such weights and their consumers stay on CPU
    enable_quantized_inference: bool = True
    #: a partition that fails to compile or load stays on CPU with a warning (else Prepare fails)
    compile_fallback: bool = False
    #: work-group size search when a partition is compiled: none, fast or exhaustive (the sizes
    #: found are stored in the serialized context, so a cached partition starts tuned)
    tuning: Tuning = Tuning.NONE
    #: run each partition once on zeros in Prepare, so a driver that compiles at a kernel's first
    #: launch (PoCL without its kernel cache) does it in Prepare rather than in the first invoke
    warm_up: bool = False
    #: on devices that are not GPUs, run consecutive nodes as one persistent kernel (no launch
    #: between them; runtime/persistent.py); false launches every node by itself
    persistent: bool = True
    #: floats per vector the matrix-product kernels group output channels by: 0 (auto: 16 on CPU
    #: devices compiling for AVX-512, else 8), 8, or 16 (only on such devices)
    vector_width: int = 0
    #: on CPU devices with AVX512-VNNI, the matrix products of full-integer models multiply int8
    #: codes (compiler/quant.py); false keeps them in float, as on every other device
    integer_products: bool = True
    #: leave a partition on TFLite's CPU kernels when the delegate's fixed costs alone exceed the
    #: CPU's estimate for it (compiler/cpu_choice.py): None (auto: on for CPU devices, off on
    #: GPUs), True or False
    cpu_when_faster: bool | None = None
    #: the kernels of convolutions, depthwise and fully connected: auto (by device type), gpu or cpu
    kernel_family: str = "auto"
    #: the model's file, read for what TFLite's delegate interface does not give: the inputs and
    #: outputs of the subgraphs a WHILE runs (plugin/loops.py); empty: every WHILE stays on CPU
    model_file: str = ""

    @classmethod
    def parse(cls, pairs: dict[str, str]) -> DelegateOptions:
        """The options from ``load_delegate``'s strings: this delegate's names, or upstream's
        (``upstream_options``: ``is_precision_loss_allowed``, ``inference_priority1`` ...)."""
        from .upstream_options import UPSTREAM_NAMES, translate

        known = {f.name for f in fields(cls)}
        unknown = sorted(set(pairs) - known - UPSTREAM_NAMES)
        if unknown:
            raise OptionsError(
                f"unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}; "
                f"upstream's names: {', '.join(sorted(UPSTREAM_NAMES))}"
            )
        pairs = translate(pairs)
        values: dict[str, object] = {}
        for key, raw in pairs.items():
            text = str(raw).strip()
            if key == "precision":
                values[key] = _enum(CalculationsPrecision, text, key)
            elif key == "storage_type":
                values[key] = _enum(TensorStorageType, text, key, refused=_STORAGE_REFUSED)
            elif key == "max_delegated_partitions":
                try:
                    values[key] = int(text)
                except ValueError:
                    raise OptionsError(f"max_delegated_partitions must be an integer, not {text!r}") from None
                if values[key] < 0:  # type: ignore[operator]
                    raise OptionsError("max_delegated_partitions must be >= 0")
            elif key == "vector_width":
                if text.lower() not in ("auto", "8", "16"):
                    raise OptionsError(f"vector_width must be auto, 8 or 16, not {text!r}")
                values[key] = 0 if text.lower() == "auto" else int(text)
            elif key == "cpu_when_faster":
                if text.lower() not in ("auto", "true", "false", "1", "0"):
                    raise OptionsError(f"cpu_when_faster must be auto, true or false, not {text!r}")
                values[key] = None if text.lower() == "auto" else text.lower() in ("true", "1")
            elif key == "kernel_family":
                if text.lower() not in ("auto", "gpu", "cpu"):
                    raise OptionsError(f"kernel_family must be auto, gpu or cpu, not {text!r}")
                values[key] = text.lower()
            elif key == "tuning":
                try:
                    values[key] = Tuning(text.lower())
                except ValueError:
                    raise OptionsError(f"tuning must be none, fast or exhaustive, not {text!r}") from None
            elif key in _BOOLEAN_OPTIONS:
                if text.lower() not in ("true", "false", "1", "0"):
                    raise OptionsError(f"{key} must be true or false, not {text!r}")
                values[key] = text.lower() in ("true", "1")
            elif key == "exclude_ops":
                names = {n.strip().upper() for n in text.split(",") if n.strip()}
                unknown_ops = sorted(n for n in names if n not in _OP_NAMES)
                if unknown_ops:
                    raise OptionsError(f"exclude_ops: unknown op name(s) {', '.join(unknown_ops)}")
                values[key] = frozenset(names)
            elif key == "model_file" or (
                key in ("serialization_dir", "program_cache") and text not in ("default", "none")
            ):
                values[key] = os.path.expanduser(text)
            else:
                values[key] = text
        opts = cls(**values)  # type: ignore[arg-type]
        if opts.serialization_dir and not os.path.isdir(opts.serialization_dir):
            try:
                Path(opts.serialization_dir).mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # the cache is an optimisation: reported, and the model runs without it
                warn_unusable(opts.serialization_dir, exc, "serialization_dir")
        return opts


#: storage types of the schema that cannot hold every tensor (UNKNOWN is no storage; a single
#: texture holds one slice), so no option may ask for them
_STORAGE_REFUSED = frozenset({"UNKNOWN", "SINGLE_TEXTURE_2D"})


def _enum(kind: type, text: str, key: str, refused: frozenset[str] = frozenset()) -> object:
    """The member of ``kind`` named ``text`` (any case); the error lists only the names taken."""
    names = ", ".join(m.name for m in kind if m.name not in refused)
    if text.upper() in refused:
        raise OptionsError(f"{key} {text} cannot hold every tensor; use one of {names}")
    try:
        return kind[text.upper()]
    except KeyError:
        raise OptionsError(f"{key} must be one of {names}, not {text!r}") from None
