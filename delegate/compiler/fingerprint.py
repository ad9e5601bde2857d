"""A fingerprint of the compiler's own code, for cache keys: a serialized partition made by one
compiler must not be used by another, even within one package version (a development install)."""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path


@cache
def compiler_fingerprint() -> str:
    """SHA-256 (hex, 16 characters) over the compiler's Python sources, by relative path."""
    return source_fingerprint(Path(__file__).resolve().parent)


def source_fingerprint(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]
