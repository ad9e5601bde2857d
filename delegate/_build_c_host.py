"""Build of the plugin library for hosts without Python (csrc/c_host_plugin.c), run by setup.py.

A plain shared library: it links no Python (so a C program can load it) and learns at build time
which libpython, Python home and standard library to start when its host has none.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig

from setuptools import Extension


def _c_string(text: str) -> str:
    return json.dumps(text)


def extension() -> Extension:
    libpython = ""
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        folder = sysconfig.get_config_var("LIBDIR") or ""
        name = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY") or ""
        libpython = os.path.join(folder, name) if folder and name else ""
    facts = {
        "DLG_LIBPYTHON": libpython,
        "DLG_PYTHON_HOME": sys.base_prefix,
        "DLG_PYTHON_STDLIB": sysconfig.get_paths()["stdlib"],
    }
    return Extension(
        "delegate._c_host",
        sources=["csrc/c_host_plugin.c"],
        include_dirs=["csrc"],
        define_macros=[(key, _c_string(value)) for key, value in facts.items()],
        extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror"],
        libraries=["dl", "pthread"],
        py_limited_api=True,
    )
