# Only wires the native builds; the project's metadata lives in pyproject.toml.
import runpy

from setuptools import Extension, setup

# The LiteRT CompiledModel GPU accelerator (csrc/litert_accelerator.c): a plain shared library
# with no Python symbols that LiteRT dlopens as libLiteRtGpuAccelerator.so (delegate/litert.py
# links it into the environment's runtime folder); it reaches the plugin (_native) with dlopen.
litert_accelerator = Extension(
    "delegate._litert_accelerator",
    sources=["csrc/litert_accelerator.c"],
    include_dirs=["csrc"],
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden"],
    libraries=["dl"],
    py_limited_api=True,
)

# The plugin library for hosts without Python (delegate.c_plugin_path()); by path: importing the
# package here would need its runtime dependencies in the build environment.
c_host = runpy.run_path("delegate/_build_c_host.py")["extension"]()

setup(
    cffi_modules=["delegate/_build_native.py:ffibuilder"],
    ext_modules=[litert_accelerator, c_host],
    # cffi builds the extension against the stable ABI (_native.abi3.so): one wheel for CPython 3.10+.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
