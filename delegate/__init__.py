"""An OpenCL GPU delegate for TensorFlow Lite.

``delegate.Interpreter(model, settings=..., **options)`` gives a ``DelegatedInterpreter``: the TFLite
host's Interpreter (ai-edge-litert, or tflite-runtime) with the delegate attached, by the same
methods; ``delegate.load_delegate`` gives the delegate object for an interpreter of your own;
``delegate.litert_environment(**options)`` an ai-edge-litert Environment whose CompiledModel GPU
accelerator is the delegate. Under them: a compiler from TFLite graphs to OpenCL kernels, the
InferenceContext file format
(schemas/serialization.fbs) it writes and a verifying native reader, and the OpenCL runtime.
TFLite's acceleration settings protos (schemas/configuration.proto) configure it.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from ._version import __version__
from .context import ContextFile, InferenceContext, ReadLimits, read_context
from .errors import (
    CacheFolderWarning,
    CacheIntegrityError,
    ContextFormatError,
    DelegateError,
    DeviceNotFoundError,
    DeviceResourceError,
    ExecutionError,
    InterpreterBusyError,
    ModelFormatError,
    ProgramBuildError,
    SettingsError,
)
from .interpreter import DelegatedInterpreter, ExecutionPath

if TYPE_CHECKING:
    from . import api as api
    from .api import Interpreter, c_plugin_path, delegate_state, load_delegate, plugin_path
    from .context.writer import serialize_context, write_context
    from .litert import litert_environment


def __getattr__(name: str) -> object:
    # The runtime and the plugin load OpenCL, the compiler and TFLite: only when asked for.
    if name == "Runtime":
        from .runtime import Runtime

        return Runtime
    if name in ("serialize_context", "write_context"):  # the writer imports flatbuffers
        from . import context

        return getattr(context, name)
    if name == "litert_environment":  # imports ai-edge-litert's Environment only when called
        from .litert import litert_environment

        return litert_environment
    if name in ("load_delegate", "Interpreter", "delegate_state", "plugin_path", "c_plugin_path", "api"):
        # import_module, not `from . import api`: that asks this function for "api" again
        api = import_module(f"{__name__}.api")
        return api if name == "api" else getattr(api, name)
    raise AttributeError(f"module 'delegate' has no attribute {name!r}")


__all__ = [
    "CacheFolderWarning",
    "CacheIntegrityError",
    "ContextFile",
    "ContextFormatError",
    "DelegateError",
    "DelegatedInterpreter",
    "DeviceNotFoundError",
    "DeviceResourceError",
    "ExecutionError",
    "ExecutionPath",
    "InferenceContext",
    "Interpreter",
    "InterpreterBusyError",
    "ModelFormatError",
    "ProgramBuildError",
    "ReadLimits",
    "Runtime",
    "SettingsError",
    "__version__",
    "c_plugin_path",
    "delegate_state",
    "litert_environment",
    "load_delegate",
    "plugin_path",
    "read_context",
    "serialize_context",
    "write_context",
]
