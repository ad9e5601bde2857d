"""The TFLite Python runtime the delegate plugs into: ai-edge-litert (LiteRT) or tflite-runtime.

Both expose the same ``Interpreter`` / ``load_delegate`` API and load the same plugin. LiteRT is
the default: it is what TFLite ships today, takes numpy 2 and reads models from current
converters. ``DELEGATE_TFLITE_HOST`` picks one by any of the names people type for it.
"""

from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass
from types import ModuleType

from .errors import DelegateError

ENVIRONMENT_VARIABLE = "DELEGATE_TFLITE_HOST"


@dataclass(frozen=True)
class Host:
    """One supported host: its distribution (what pip installs) and the module holding its API."""

    distribution: str
    module: str
    install_hint: str


LITERT = Host("ai-edge-litert", "ai_edge_litert.interpreter", "pip install ai-edge-litert")
TFLITE_RUNTIME = Host(
    "tflite-runtime",
    "tflite_runtime.interpreter",
    "pip install 'tflite-opencl-delegate[tflite-runtime]' (tflite-runtime 2.14 needs numpy < 2 and Python <= 3.11)",
)
#: tried in this order when DELEGATE_TFLITE_HOST is not set
DEFAULT_ORDER = (LITERT, TFLITE_RUNTIME)

_ALIASES = {
    "ai-edge-litert": LITERT,
    "ai_edge_litert": LITERT,
    "litert": LITERT,
    "tflite-runtime": TFLITE_RUNTIME,
    "tflite_runtime": TFLITE_RUNTIME,
}


@dataclass(frozen=True)
class HostInfo:
    """Which host runs the interpreters, for reports (``run --json``, ``interpreter.opencl.host``)."""

    name: str
    numpy_version: str

    @functools.cached_property
    def version(self) -> str:
        """The distribution's installed version, read when first asked (once per HostInfo):
        importlib.metadata costs a tenth of a warm start."""
        return _installed_version(self.name) or "unknown"

    def __repr__(self) -> str:
        return f"HostInfo(name={self.name!r}, version={self.version!r}, numpy_version={self.numpy_version!r})"

    def __str__(self) -> str:
        return f"{self.name} {self.version} (numpy {self.numpy_version})"


def requested_host() -> Host | None:
    """The host DELEGATE_TFLITE_HOST names, None when unset; an unknown name is an error."""
    raw = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if not raw:
        return None
    host = _ALIASES.get(raw.lower())
    if host is None:
        names = ", ".join(sorted(_ALIASES))
        raise DelegateError(
            f"{ENVIRONMENT_VARIABLE}={raw!r} is not a TFLite host this package knows; use one of {names}"
        )
    return host


def _import(host: Host) -> ModuleType:
    try:
        return importlib.import_module(host.module)
    except ImportError as exc:
        if _installed_version(host.distribution) is None:
            raise ModuleNotFoundError(f"{host.distribution} is not installed ({host.install_hint})") from exc
        # Installed but broken: most often tflite-runtime (built for numpy 1.x) beside numpy 2.
        raise ImportError(
            f"{host.distribution} is installed but does not import ({exc}); "
            f"with numpy {_installed_version('numpy')}: {host.install_hint}"
        ) from exc


def host_module() -> tuple[Host, ModuleType]:
    """The host to use and its interpreter module (DELEGATE_TFLITE_HOST's, else the first that imports)."""
    chosen = requested_host()
    if chosen is not None:
        try:
            return chosen, _import(chosen)
        except ImportError as exc:
            raise DelegateError(f"{ENVIRONMENT_VARIABLE}={os.environ[ENVIRONMENT_VARIABLE]}: {exc}") from exc
    errors = []
    for host in DEFAULT_ORDER:
        try:
            return host, _import(host)
        except ImportError as exc:
            errors.append(str(exc))
    raise DelegateError("no TFLite runtime imports: " + "; ".join(errors))


def _installed_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def describe_host(host: Host) -> HostInfo:
    return HostInfo(host.distribution, _numpy_version())


def _numpy_version() -> str:
    import numpy

    return str(numpy.__version__)


def installed_hosts() -> list[HostInfo]:
    """The supported hosts whose distributions are installed (without importing them: cheap)."""
    numpy_version = _installed_version("numpy") or "not installed"
    found = []
    for host in DEFAULT_ORDER:
        if _installed_version(host.distribution) is not None:
            found.append(HostInfo(host.distribution, numpy_version))
    return found
