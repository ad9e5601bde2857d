# Only wires the cffi build; the project's metadata lives in pyproject.toml.
from setuptools import setup

setup(
    cffi_modules=["delegate/_build_native.py:ffibuilder"],
    # cffi builds the extension against the stable ABI (_native.abi3.so): one wheel for CPython 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
