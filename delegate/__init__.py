"""An OpenCL GPU delegate for TensorFlow Lite.

What exists today: the InferenceContext file format (the compiled GPU program
of a model, schemas/serialization.fbs) written from Python and read by a
verifying native reader, and TFLite's acceleration settings messages
(schemas/configuration.proto).
"""

from typing import TYPE_CHECKING

from ._version import __version__
from .context import ContextFile, InferenceContext, ReadLimits, read_context
from .errors import (
    CacheIntegrityError,
    ContextFormatError,
    DelegateError,
    DeviceNotFoundError,
    DeviceResourceError,
    ExecutionError,
    ModelFormatError,
    ProgramBuildError,
    SettingsError,
)

if TYPE_CHECKING:
    from .context.writer import serialize_context, write_context


def __getattr__(name: str) -> object:
    # The runtime and the plugin load OpenCL, the compiler and TFLite: only when asked for.
    if name == "Runtime":
        from .runtime import Runtime

        return Runtime
    if name in ("serialize_context", "write_context"):  # the writer imports flatbuffers
        from . import context

        return getattr(context, name)
    if name in ("load_delegate", "Interpreter", "delegate_state"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'delegate' has no attribute {name!r}")


__all__ = [
    "CacheIntegrityError",
    "ContextFile",
    "ContextFormatError",
    "DelegateError",
    "DeviceNotFoundError",
    "DeviceResourceError",
    "ExecutionError",
    "InferenceContext",
    "Interpreter",
    "ModelFormatError",
    "ProgramBuildError",
    "ReadLimits",
    "Runtime",
    "SettingsError",
    "__version__",
    "delegate_state",
    "load_delegate",
    "read_context",
    "serialize_context",
    "write_context",
]
