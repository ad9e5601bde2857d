"""The installed package: imports, public names, native module."""

from __future__ import annotations

import delegate


def test_public_api():
    for name in delegate.__all__:
        assert hasattr(delegate, name), name
    assert issubclass(delegate.ContextFormatError, delegate.DelegateError)
    assert issubclass(delegate.ContextFormatError, ValueError)
    from importlib.metadata import version

    assert delegate.__version__ == version("tflite-opencl-delegate")  # one version, read statically


def test_native_module_is_built_from_csrc():
    from delegate._native import ffi, lib

    limits = ffi.new("dlg_limits *")
    lib.dlg_default_limits(limits)
    assert limits.max_depth == 32 and limits.max_tables == 1_000_000
