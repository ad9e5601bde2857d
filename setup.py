# Only wires the builds; the project's metadata lives in pyproject.toml.
import runpy

from setuptools import setup

# by path: importing the package here would need its runtime dependencies in the build environment
c_host = runpy.run_path("delegate/_build_c_host.py")["extension"]()

setup(
    cffi_modules=["delegate/_build_native.py:ffibuilder"],
    # the plugin library for hosts without Python (delegate.c_plugin_path())
    ext_modules=[c_host],
    # cffi builds the extension against the stable ABI (_native.abi3.so): one wheel for CPython 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
