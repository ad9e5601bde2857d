"""The TFLite external-delegate plugin: csrc/plugin.c plus its Python callbacks."""

from . import callbacks  # noqa: F401  (attaches the callbacks the library calls)
from .options import DelegateOptions, OptionsError
from .registry import live_kernels, live_runtimes, state_of_pointer
from .report import DelegateState

__all__ = ["DelegateOptions", "DelegateState", "OptionsError", "live_kernels", "live_runtimes", "state_of_pointer"]
