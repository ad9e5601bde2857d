"""The OpenCL entry points the C enqueue loop calls, resolved from pyopencl's ICD loader."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pyopencl as cl

from .._native import ffi, lib
from ..errors import DelegateError

_ERROR_NAMES = {v: k for k, v in vars(cl.status_code).items() if isinstance(v, int) and not k.startswith("_")}


def error_name(code: int) -> str:
    return _ERROR_NAMES.get(code, f"OpenCL error {code}")


def _loader_path() -> str:
    """The libOpenCL pyopencl loaded (so both use one ICD loader and one set of handles)."""

    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "libOpenCL" in Path(path).name:
                return path
    except OSError:
        pass
    import ctypes.util  # only here: it imports subprocess, which a warm start does not need

    found = ctypes.util.find_library("OpenCL")
    if found:
        return found
    raise DelegateError("cannot find the OpenCL ICD loader (libOpenCL) that pyopencl uses")


@cache
def cl_api() -> object:
    """The process-wide table of OpenCL function pointers for the C loop (a ``dlg_cl_api *``)."""
    api = ffi.new("dlg_cl_api *")
    err = ffi.new("char[512]")
    if lib.dlg_cl_load(_loader_path().encode(), api, err, 512) != 0:
        raise DelegateError(ffi.string(err).decode())
    return api
