"""Content hashes for cache entries: a SHA-256 trailer that is checked before an entry is used.

A sealed entry is ``payload + SHA-256(payload) + MAGIC``. The trailer sits after the payload, so a
sealed InferenceContext is still a valid FlatBuffers file (readers ignore bytes past the root's
tree) and the entry stays one file, replaced atomically as a whole. An entry whose hash does not
match (tampered, bit rot, or written by a version without the trailer) is refused.
"""

from __future__ import annotations

import hashlib

from .errors import CacheIntegrityError

MAGIC = b"DLGSHA2\x01"
TRAILER = hashlib.sha256().digest_size + len(MAGIC)


def seal(payload: bytes | memoryview) -> bytes:
    """``payload`` with its SHA-256 trailer appended."""
    return bytes(payload) + hashlib.sha256(payload).digest() + MAGIC


def unseal(data: bytes | memoryview, what: str) -> memoryview:
    """The payload of a sealed entry (a view of ``data``); raises CacheIntegrityError naming ``what``."""
    view = memoryview(data).cast("B")
    if len(view) < TRAILER or view[len(view) - len(MAGIC) :] != MAGIC:
        raise CacheIntegrityError(f"{what} has no integrity trailer (written by another version, or truncated)")
    payload = view[: len(view) - TRAILER]
    stored = view[len(view) - TRAILER : len(view) - len(MAGIC)]
    if hashlib.sha256(payload).digest() != bytes(stored):
        raise CacheIntegrityError(f"{what} does not match its SHA-256 (modified after it was written)")
    return payload
