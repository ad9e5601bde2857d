"""The TFLite external-delegate plugin: csrc/plugin.c plus its Python callbacks."""

from .callbacks import live_kernels, live_runtimes, state_of_pointer
from .options import DelegateOptions, OptionsError
from .report import DelegateState

__all__ = ["DelegateOptions", "DelegateState", "OptionsError", "live_kernels", "live_runtimes", "state_of_pointer"]
