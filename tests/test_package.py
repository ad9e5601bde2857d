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


def test_the_api_module_and_plugin_path_after_a_plain_import():
    # a fresh process: nothing has imported delegate.api yet
    import subprocess
    import sys

    code = "import delegate, os; p = delegate.api.plugin_path(); assert p == delegate.plugin_path(); "
    code += "print(os.path.isfile(p))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr
