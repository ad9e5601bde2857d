# Only wires the cffi build; the project's metadata lives in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["delegate/_build_native.py:ffibuilder"])
