"""Warnings of the library are attributed to the user's line, never to a line of its own source."""

from __future__ import annotations

import threading
import warnings

from delegate import _warnings


def _library_function() -> None:
    # runs as if defined in the package: its frame is the library's
    namespace = {"__name__": "delegate.plugin.example", "warn": _warnings.warn}
    exec("def inner():\n    warn('from the library')\ninner()", namespace)


def test_a_warning_points_at_the_callers_line():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _library_function()
    assert [w.filename for w in seen] == [__file__]


def test_a_warning_with_no_caller_of_the_users_names_the_library_without_a_source_line():
    # a thread the library started: every frame is threading's or the library's
    namespace = {"__name__": "delegate.warm_start", "warn": _warnings.warn, "threading": threading}
    exec("def build():\n    warn('from a library thread')\nthread = threading.Thread(target=build)", namespace)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        namespace["thread"].start()
        namespace["thread"].join()
    assert [(w.filename, w.lineno, str(w.message)) for w in seen] == [
        ("tflite-opencl-delegate", 0, "from a library thread")
    ]
