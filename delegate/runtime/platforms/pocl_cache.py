"""PoCL's kernel cache folder made writable before PoCL starts.

PoCL 3.0 compiles every program inside its kernel cache folder: ``$POCL_CACHE_DIR`` when that names
an existing folder, else ``$XDG_CACHE_HOME/pocl/kcache``, else ``$HOME/.cache/pocl/kcache``, else
``/tmp/pocl/kcache``. When it cannot create that folder it reports no devices at all, so a
read-only ``XDG_CACHE_HOME`` (or home) looked like a machine without OpenCL. Before PoCL starts
(``opencl.loader()``), where the caller has not set ``POCL_CACHE_DIR`` and PoCL's default folder
cannot be written (a read-only file system, no write permission, under 8 MiB free), the delegate
points ``POCL_CACHE_DIR`` at a private temporary folder, removed at exit, and reports it once
(cache.warn_unusable). The variable is withdrawn once PoCL has read it, so child processes inherit
the caller's environment (and make the same check themselves).
"""

from __future__ import annotations

import atexit
import errno
import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

from ...cache import warn_unusable

#: PoCL's own setting
VARIABLE = "POCL_CACHE_DIR"
#: free space below which PoCL's folder counts as full (a program's files take hundreds of KiB)
MIN_FREE_BYTES = 8 << 20


@dataclass(frozen=True)
class KernelCache:
    """Where this process asked PoCL to compile: ``private`` is the temporary folder set in
    ``POCL_CACHE_DIR`` ("" when PoCL's own choice was left alone)."""

    private: str = ""


def default_folder(environ: Mapping[str, str]) -> Path:
    """PoCL's kernel cache folder when ``POCL_CACHE_DIR`` is not set."""
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "pocl" / "kcache"
    if environ.get("HOME"):
        return Path(environ["HOME"]) / ".cache" / "pocl" / "kcache"
    return Path("/tmp/pocl/kcache")


def unwritable(folder: Path) -> tuple[Path, OSError] | None:
    """Why ``folder`` (or the nearest folder above it that exists, where it would be created)
    cannot be written: that folder and the error; None when it can."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    try:
        if not existing.is_dir():
            return existing, NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(existing))
        space = os.statvfs(existing)
    except OSError as exc:
        return existing, exc
    if space.f_flag & os.ST_RDONLY:
        return existing, OSError(errno.EROFS, os.strerror(errno.EROFS), str(existing))
    if not os.access(existing, os.W_OK | os.X_OK):
        return existing, PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(existing))
    if space.f_bavail * space.f_frsize < MIN_FREE_BYTES:
        return existing, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(existing))
    return None


def request(environ: MutableMapping[str, str] | None = None) -> KernelCache:
    """Set ``POCL_CACHE_DIR`` to a private temporary folder where PoCL's default one cannot be
    written and the caller has not set it (see the module docstring)."""
    env = os.environ if environ is None else environ
    if VARIABLE in env:
        return KernelCache()
    problem = unwritable(default_folder(env))
    if problem is None:
        return KernelCache()
    import shutil  # here: only a process whose cache folder is unwritable needs them
    import tempfile

    try:
        private = tempfile.mkdtemp(prefix="tflite-opencl-delegate-pocl-")
    except OSError:
        return KernelCache()  # nowhere to go: PoCL reports its own error
    atexit.register(shutil.rmtree, private, ignore_errors=True)
    folder, exc = problem
    env[VARIABLE] = private
    warn_unusable(
        folder,
        exc,
        "PoCL's kernel cache folder",
        remedy=f"PoCL compiles in the private folder {private} instead (removed at exit; POCL_CACHE_DIR chooses one)",
    )
    return KernelCache(private)


def keeps_builds(choice: KernelCache, environ: Mapping[str, str] | None = None) -> bool:
    """Does PoCL keep what it compiles for later processes? Yes unless its kernel cache is off
    (``POCL_KERNEL_CACHE=0``) or is the private folder ``request`` chose (removed at exit)."""
    env = os.environ if environ is None else environ
    return not choice.private and env.get("POCL_KERNEL_CACHE", "1").strip() != "0"


def withdraw(choice: KernelCache, environ: MutableMapping[str, str] | None = None) -> None:
    """Take back what ``request`` set, once PoCL has read it (when the loader lists the devices)."""
    env = os.environ if environ is None else environ
    if choice.private and env.get(VARIABLE) == choice.private:
        del env[VARIABLE]
