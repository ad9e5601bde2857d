"""``litert_environment``: an ai-edge-litert ``Environment`` whose GPU accelerator is this delegate.

LiteRT's ``CompiledModel`` looks for GPU accelerators in the environment's runtime folder, first
``libLiteRtGpuAccelerator.so`` (docs/litert_accelerator.md). This module makes a private folder
per set of options holding that name as a link to the package's accelerator library
(csrc/litert_accelerator.c) and an options file the accelerator reads when LiteRT asks it for a
delegate; the delegate itself is the plugin's (``plugin_path()``), with those options.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import threading
from importlib import metadata
from pathlib import Path
from typing import Any

from .errors import DelegateError

#: The LiteRT release series the accelerator's ABI (accelerator definition 1.0, runtime context
#: 1.2) was read from and tested with; csrc/litert_accelerator.c pins the same.
SUPPORTED_LITERT = ("2.3",)
#: Set to 1 to skip the version check (the accelerator then checks only the ABI's major versions).
ANY_VERSION_VARIABLE = "DELEGATE_LITERT_ANY_VERSION"
ACCELERATOR_NAME = "libLiteRtGpuAccelerator.so"
OPTIONS_FILE = "tflite-opencl-delegate.options"
OPTIONS_MAGIC = b"tflite-opencl-delegate litert-options 1\n"
#: LiteRT asked for the GPU: a partition must not be left on its CPU kernels because PoCL is a CPU
#: device (the rule cpu_when_faster), or a GPU-only CompiledModel fails. Given options win.
DEFAULTS = {"cpu_when_faster": "false"}

# One folder per set of options for the process's life (LiteRT reads it whenever a model is
# compiled), removed at exit; the lock makes two threads asking for the same options share one.
_folders: dict[str, Path] = {}
_lock = threading.Lock()


class LiteRtVersionError(DelegateError):
    """The installed ai-edge-litert is not a version the accelerator was built for."""


def litert_distribution() -> tuple[str, str]:
    """(distribution, version) of the installed ``ai_edge_litert`` (release or nightly)."""
    for name in metadata.packages_distributions().get("ai_edge_litert", []):
        return name, metadata.version(name)
    raise DelegateError("ai-edge-litert is not installed: pip install 'ai-edge-litert==2.3.*'")


def check_litert_version(version: str) -> None:
    """Refuse a LiteRT whose accelerator ABI this package was not built for."""
    series = ".".join(version.split(".")[:2])
    if series in SUPPORTED_LITERT or os.environ.get(ANY_VERSION_VARIABLE) == "1":
        return
    supported = ", ".join(f"{s}.x" for s in SUPPORTED_LITERT)
    raise LiteRtVersionError(
        f"ai-edge-litert {version} is not supported by the CompiledModel GPU accelerator (built for "
        f"ai-edge-litert {supported}); install one of those, or set {ANY_VERSION_VARIABLE}=1 to try anyway"
    )


def accelerator_library() -> Path:
    """The package's accelerator library (built by pip install next to the plugin)."""
    here = Path(__file__).resolve().parent
    found = sorted(here.glob("_litert_accelerator*.so"))
    if not found:
        raise DelegateError(f"the LiteRT accelerator library is missing from {here}; reinstall the package")
    return found[0]


def options_file_bytes(plugin: str, options: dict[str, str], any_abi: bool) -> bytes:
    """The options file: the magic line, then NUL-terminated key and value strings."""
    pairs = {"litert.plugin": plugin, **({"litert.runtime_abi": "any"} if any_abi else {}), **options}
    if any("\0" in k + v for k, v in pairs.items()):
        raise DelegateError("delegate options must not contain NUL characters")
    return OPTIONS_MAGIC + b"".join(k.encode() + b"\0" + v.encode() + b"\0" for k, v in pairs.items())


def runtime_folder(options: dict[str, str]) -> Path:
    """The private runtime folder for ``options`` (made once per process)."""
    from .api import plugin_path

    any_abi = os.environ.get(ANY_VERSION_VARIABLE) == "1"
    content = options_file_bytes(plugin_path(), options, any_abi)
    key = hashlib.sha256(content).hexdigest()
    with _lock:
        folder = _folders.get(key)
        if folder is not None and (folder / OPTIONS_FILE).is_file():
            return folder
        folder = Path(tempfile.mkdtemp(prefix="delegate-litert-"))  # mode 0700: nobody else writes it
        (folder / ACCELERATOR_NAME).symlink_to(accelerator_library())
        (folder / OPTIONS_FILE).write_bytes(content)
        if not _folders:
            atexit.register(_remove_folders)
        _folders[key] = folder
        return folder


def _remove_folders() -> None:
    with _lock:
        for folder in _folders.values():
            shutil.rmtree(folder, ignore_errors=True)
        _folders.clear()


def litert_environment(**options: Any) -> Any:
    """An ai-edge-litert ``Environment`` whose GPU accelerator is this delegate with ``options``
    (``load_delegate``'s). Use it with ``CompiledModel.from_file(model, hardware_accel=
    HardwareAccelerator.GPU | HardwareAccelerator.CPU, environment=env)``; GPU alone requires
    every node to be delegated."""
    _, version = litert_distribution()
    check_litert_version(version)
    try:
        from ai_edge_litert.environment import Environment
    except ImportError as exc:
        raise DelegateError(f"ai-edge-litert {version} has no Environment: {exc}") from exc
    from .plugin.options import DelegateOptions

    strings = {**DEFAULTS, **{k: str(v) for k, v in options.items()}}
    DelegateOptions.parse(strings)  # the plugin's own validation: clear errors now, not at compile
    return Environment.create(runtime_path=os.fspath(runtime_folder(strings)))
