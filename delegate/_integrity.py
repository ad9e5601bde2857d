"""Content hashes for cache entries: a SHA-256 trailer, with the key the entry was made for, checked
before an entry is used; and the one way cache entries are opened.

A sealed entry is ``payload + KEY + len(KEY) + SHA-256(payload + KEY + len(KEY)) + MAGIC``, where
KEY is a small JSON object naming what the entry was made for (the cache's full key: model, graph,
options, device, driver, package version, program source). The trailer sits after the payload, so
a sealed InferenceContext is still a valid FlatBuffers file (readers ignore bytes past the root's
tree) and the entry stays one file, replaced atomically as a whole. An entry whose hash does not
match (tampered, bit rot, or written by a version without this trailer) is refused, and so is one
sealed for another key (a valid entry copied over this one: another model's, another graph's,
another program's).

Entries are opened by ``read_sealed`` only: a regular file of bounded size, never a symbolic link,
a FIFO or a device, which could hang the reader or feed it without end.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import CacheIntegrityError

MAGIC = b"DLGSHA2\x02"  # \x02: the key is sealed in with the payload
_LENGTH_BYTES = 4
#: the fixed part of the trailer (the key's length, the hash, the magic); the key comes before it
TRAILER = _LENGTH_BYTES + hashlib.sha256().digest_size + len(MAGIC)

#: what each field of a key stands for, in messages about an entry made for another key
_FIELD_MEANING = {
    "kind": "kind of entry",
    "key": "model, graph, options, device or driver",
    "version": "package version",
    "weights": "weights (the same model_token, another model)",
}


def _key_bytes(key: Mapping[str, str] | None) -> bytes:
    return json.dumps(dict(key or {}), sort_keys=True, separators=(",", ":")).encode()


def seal(payload: bytes | memoryview, key: Mapping[str, str] | None = None) -> bytes:
    """``payload`` with its trailer appended: ``key`` (what the entry is for) and the SHA-256 of both."""
    body = bytes(payload) + _key_bytes(key)
    body += (len(body) - len(payload)).to_bytes(_LENGTH_BYTES, "little")
    return body + hashlib.sha256(body).digest() + MAGIC


def _split(data: bytes | memoryview, what: str) -> tuple[memoryview, dict[str, str]]:
    """The payload and the key of a sealed entry, its hash checked."""
    view = memoryview(data).cast("B")
    if len(view) < TRAILER or view[len(view) - len(MAGIC) :] != MAGIC:
        raise CacheIntegrityError(f"{what} has no integrity trailer (written by another version, or truncated)")
    end = len(view) - TRAILER  # where the key's length is
    body, stored = view[: end + _LENGTH_BYTES], view[end + _LENGTH_BYTES : len(view) - len(MAGIC)]
    if hashlib.sha256(body).digest() != bytes(stored):
        raise CacheIntegrityError(f"{what} does not match its SHA-256 (modified after it was written)")
    key_size = int.from_bytes(view[end : end + _LENGTH_BYTES], "little")
    if key_size > end:
        raise CacheIntegrityError(f"{what} has a malformed trailer")
    try:
        key = json.loads(bytes(view[end - key_size : end]))
    except ValueError:
        key = None
    if not isinstance(key, dict):
        raise CacheIntegrityError(f"{what} has a malformed trailer")
    return view[: end - key_size], key


def entry_key(data: bytes | memoryview, what: str = "entry") -> dict[str, str]:
    """The key an entry was sealed with (for tools and tests); raises CacheIntegrityError as ``unseal``."""
    return _split(data, what)[1]


def unseal(data: bytes | memoryview, what: str, key: Mapping[str, str] | None = None) -> memoryview:
    """The payload of a sealed entry (a view of ``data``); raises CacheIntegrityError naming
    ``what`` when it fails its hash or, given ``key``, was sealed for another key."""
    payload, stored = _split(data, what)
    if key is not None and stored != dict(key):
        fields = sorted(f for f in {*stored, *key} if stored.get(f) != key.get(f))
        differ = ", ".join(_FIELD_MEANING.get(f, f) for f in fields)
        verb = "differs" if len(fields) == 1 else "differ"
        raise CacheIntegrityError(f"{what} was made for another entry (its {differ} {verb}): substituted or stale")
    return payload


def read_sealed(path: Path, what: str, key: Mapping[str, str] | None, limit: int) -> memoryview | None:
    """The checked payload of the entry at ``path`` (see ``unseal``); None when there is none.

    Only a regular file of at most ``limit`` bytes is read: a symbolic link, a FIFO, a device or
    a larger file raises CacheIntegrityError (a bad entry, to be rebuilt) without blocking and
    without reading more than ``limit + 1`` bytes. Any other failure to open or read it (no
    permission, a name too long, an I/O error) raises the OSError.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.islink(path):  # O_NOFOLLOW's ELOOP (EMLINK on some systems)
            raise CacheIntegrityError(f"{what} is a symbolic link, not a cache entry") from None
        raise exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CacheIntegrityError(f"{what} is not a regular file (mode {stat.filemode(info.st_mode)})")
        if info.st_size > limit:
            raise CacheIntegrityError(f"{what} is {info.st_size} bytes, over the bound of {limit}")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise CacheIntegrityError(f"{what} grew past the bound of {limit} bytes while it was read")
    return unseal(data, what, key)
