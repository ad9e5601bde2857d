"""The front door: ``load_delegate`` and ``Interpreter`` for tflite-runtime or ai-edge-litert."""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

from . import _native
from .errors import DelegateError
from .plugin import DelegateState, state_of_pointer
from .plugin.options import DelegateOptions

_HOSTS = ("tflite_runtime.interpreter", "ai_edge_litert.interpreter")


def host_runtime() -> ModuleType:
    """The installed TFLite Python runtime: tflite-runtime first, else ai-edge-litert.

    ``DELEGATE_TFLITE_HOST=ai_edge_litert`` (or ``tflite_runtime``) picks one explicitly.
    """
    errors = []
    chosen = os.environ.get("DELEGATE_TFLITE_HOST")
    for name in [f"{chosen}.interpreter"] if chosen else _HOSTS:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise DelegateError("no TFLite runtime is installed: pip install tflite-runtime (or ai-edge-litert); "
                        + "; ".join(errors))  # fmt: skip


def plugin_path() -> str:
    """The shared library to give ``load_delegate``: this package's native module is the plugin."""
    return os.fspath(_native.__file__)


def load_delegate(settings: Any = None, **options: Any) -> Any:
    """The host runtime's delegate object for this OpenCL delegate.

    ``options``: precision (F32, F32_F16, F16), storage_type, device, serialization_dir,
    model_token, max_delegated_partitions, program_cache (see ``DelegateOptions``).
    ``settings`` (TFLite's acceleration settings messages) are not mapped yet: pass options.
    """
    if settings is not None:
        raise DelegateError("settings= is not supported yet; pass the delegate options as keyword arguments")
    DelegateOptions.parse({k: str(v) for k, v in options.items()})  # clear errors before the host's wrapping
    host = host_runtime()
    return host.load_delegate(plugin_path(), {k: str(v) for k, v in options.items()})


def delegate_state(host_delegate: Any) -> DelegateState | None:
    """What a delegate object returned by ``load_delegate`` delegated (nodes, partitions, reasons, cache)."""
    return state_of_pointer(host_delegate._get_native_delegate_pointer())


_INTERPRETER_ARGS = {
    "model_content",
    "num_threads",
    "experimental_op_resolver_type",
    "experimental_preserve_all_tensors",
}


def Interpreter(model_path: str | None = None, settings: Any = None, **kwargs: Any) -> Any:
    """A host-runtime Interpreter with this delegate attached; other keywords are delegate options.

    The delegate object is at ``interpreter.opencl_delegate`` and its state at ``interpreter.opencl``.
    """
    host = host_runtime()
    interpreter_args = {k: kwargs.pop(k) for k in list(kwargs) if k in _INTERPRETER_ARGS}
    delegate = load_delegate(settings, **kwargs)
    interpreter = host.Interpreter(model_path=model_path, experimental_delegates=[delegate], **interpreter_args)
    interpreter.opencl_delegate = delegate
    interpreter.opencl = delegate_state(delegate)
    return interpreter
