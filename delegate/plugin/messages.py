"""How the plugin words what goes wrong: its name in front of every message, an error's cause in
one line, and long lists of node names shortened."""

from __future__ import annotations

import logging

#: the plugin's logger: every plugin module logs here, under the package's ``delegate`` logger
log = logging.getLogger("delegate.plugin")

PLUGIN = "tflite-opencl-delegate"


def cause(exc: BaseException) -> str:
    """The first line of an error (and the line it introduces, such as a build log's first error),
    or its type when it has no text: never an empty message."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        detail = next((line for line in lines[1:] if "error" in line.lower()), lines[1])
        return f"{lines[0]} {detail[:300]}"
    return lines[0]


def shown(names: list[str]) -> str:
    """The first six of ``names``, and how many more."""
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
