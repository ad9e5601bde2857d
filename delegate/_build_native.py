"""cffi build script of the native module ``delegate._native``.

The C declarations live once, in csrc/*.h: this script feeds those headers to
cffi's cdef with their preprocessor lines removed. Set DELEGATE_SANITIZE=1 to
build with AddressSanitizer and UndefinedBehaviorSanitizer.
"""

from __future__ import annotations

import json
import os
import re
import sys
import sysconfig
from pathlib import Path

from cffi import FFI

CSRC = Path("csrc")
HEADERS = ["ctxfile.h", "runtime.h", "pocl_repair.h", "tflite_abi.h", "plugin.h", "tflmodel.h"]
SOURCES = [
    "ctxfile.c",
    "runtime.c",
    "pocl_repair.c",
    "plugin.c",
    "python_side.c",
    "fbverify.c",
    "tflmodel_verify.c",
    "tflmodel.c",
]
WARNINGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter"]
SANITIZERS = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]


def _cdef_text(header: Path) -> str:
    text = header.read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    return "\n".join(lines)


def _compile_args() -> tuple[list[str], list[str]]:
    compile_args = list(WARNINGS)
    link_args: list[str] = []
    if os.environ.get("DELEGATE_SANITIZE") == "1":
        compile_args += [*SANITIZERS, "-O1", "-g"]
        link_args += SANITIZERS
    return compile_args, link_args


def _build_facts() -> list[tuple[str, str]]:
    """What the library needs to import its package in a process that did not (csrc/python_side.c):
    the site folders of the environment it is built in and the Python version, as C strings."""
    paths = sysconfig.get_paths()
    sites = os.pathsep.join(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    return [("DLG_BUILD_SITES", json.dumps(sites)), ("DLG_BUILD_PYTHON", json.dumps(version))]


#: The plugin's callbacks into Python (delegate/plugin/callbacks.py); "+C" makes them callable from plugin.c.
PYTHON_CALLBACKS = """
extern "Python+C" int64_t dlg_py_create(const char *const *keys, const char *const *values, int count,
                                        char *error, size_t error_size);
extern "Python+C" void dlg_py_destroy(int64_t id);
extern "Python+C" int dlg_py_prepare(TfLiteContext *context, TfLiteDelegate *delegate, int64_t id);
extern "Python+C" int dlg_py_kernel_init(TfLiteContext *context, const TfLiteDelegateParams *params,
                                         dlg_kernel *kernel);
extern "Python+C" int dlg_py_kernel_prepare(TfLiteContext *context, dlg_kernel *kernel, int propagated);
extern "Python+C" void dlg_py_kernel_free(int64_t handle);
"""

ffibuilder = FFI()
_root = Path(__file__).resolve().parent.parent
ffibuilder.cdef("\n".join(_cdef_text(_root / CSRC / h) for h in HEADERS) + PYTHON_CALLBACKS)
_compile, _link = _compile_args()
ffibuilder.set_source(
    "delegate._native",
    "\n".join(f'#include "{h}"' for h in HEADERS),
    sources=[str(CSRC / s) for s in SOURCES],
    include_dirs=[str(CSRC)],
    extra_compile_args=_compile,
    extra_link_args=_link,
    libraries=["dl"],
    define_macros=_build_facts(),
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
