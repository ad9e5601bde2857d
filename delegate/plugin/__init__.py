"""The TFLite external-delegate plugin: csrc/plugin.c plus its Python callbacks."""

from .callbacks import DelegateState, live_kernels, live_runtimes, state_of_pointer
from .options import DelegateOptions, OptionsError

__all__ = ["DelegateOptions", "DelegateState", "OptionsError", "live_kernels", "live_runtimes", "state_of_pointer"]
