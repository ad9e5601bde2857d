"""Warnings attributed to the caller's code.

The plugin's callbacks run inside the TFLite host (the host's Python wrapper calls C, which calls
back into this package), so a warning raised there with a fixed ``stacklevel`` points at a line of
this package or of the host, and Python prints that line of library source under the message. The
first frame outside both is the line the user wrote (``delegate.Interpreter(...)``,
``interpreter.allocate_tensors()``): the warning is attributed to it, as a warning about a call is.
"""

from __future__ import annotations

import sys
import warnings

#: modules whose frames are not the user's: this package and the TFLite hosts it runs inside
_LIBRARY_PREFIXES = ("delegate", "ai_edge_litert", "tflite_runtime", "tensorflow", "warnings", "threading")


def _is_library(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in _LIBRARY_PREFIXES)


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the first frame outside the library; where
    every frame is the library's (a thread it started), to the library by name, with no line."""
    frame = sys._getframe(1)
    level = 1
    while _is_library(str(frame.f_globals.get("__name__", ""))):
        if frame.f_back is None:
            warnings.warn_explicit(message, category, "tflite-opencl-delegate", 0, "delegate", _REGISTRY)
            return
        frame = frame.f_back
        level += 1
    warnings.warn(message, category, stacklevel=level + 1)


#: what was shown once already, for warnings with no user frame (as a module's __warningregistry__)
_REGISTRY: dict[object, object] = {}
