"""The on-disk caches of compiled partitions: where entries live, what keys them, how they are
written and read.

With the option ``serialization_dir`` each compiled partition is an InferenceContext file,
``<model_token>-<key>.ctx``, each candidate partition's cpu_when_faster decision a JSON record,
``<model_token>-<key>.json``, and program binaries go to ``programs/`` beside them; without it
the option ``program_cache`` says where binaries go (``ProgramBinaries``; runtime/programs.py keys
them and decides when a binary is used).
Entries are written atomically with a SHA-256 trailer that also holds the entry's full key
(_atomic.py, _integrity.py) and checked before use; temporaries left by writers killed mid-write
are removed when a cache is opened.

A cache is an optimisation, never a condition for running: a folder that cannot be created, read
or written (read-only, full, no permission, a name too long) is reported once per folder and
process (``CacheFolderWarning``, ``warn_unusable``) and the delegate runs without it.

The key of a partition hashes everything its compiled context depends on: this package's version,
the device (DeviceInfo.key), every field of its CompileOptions (so a new compile option is keyed
without touching this module), the plugin's other choices (``extra``: tuning, quantized
inference, the compiler's source fingerprint), the compiler's fingerprint of the partition's
nodes (op, version, tensors, parameters, shapes: ``compiler.fingerprint.partition_fingerprint``,
an opaque string here) and what identifies the weights (``model_id``).

Only stdlib and the package's leaf modules are imported here (the context writer too, on a miss),
so any layer may use it.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ._atomic import atomic_write, remove_stale_temps
from ._integrity import read_sealed, seal
from ._version import __version__
from ._warnings import warn
from .errors import CacheFolderWarning, CacheIntegrityError

#: hex digits of a partition's key in its file name (the seal holds all of it)
KEY_LENGTH = 40
#: the longest model_token kept as it is in entry names; a longer one is shortened and hashed
#: (a file name has at most 255 bytes, and the writer's temporary adds about 30 to the entry's)
TOKEN_LENGTH = 64
#: the largest entries read: a FlatBuffers file has 32-bit offsets; records are a few hundred bytes
CONTEXT_LIMIT = 1 << 31
RECORD_LIMIT = 1 << 20
PROGRAM_LIMIT = 1 << 30

_warned_lock = threading.Lock()
#: folders already reported unusable in this process (each report covers the folders inside it)
_warned: set[str] = set()


def warn_unusable(
    folder: str | os.PathLike[str],
    exc: OSError,
    what: str = "cache folder",
    *,
    remedy: str = "running without it (it only makes later starts faster)",
) -> None:
    """Report, once per process for ``folder`` and the folders inside or around it, that a cache
    there cannot be used (``exc``) and what the delegate does instead (``remedy``)."""
    name = os.path.abspath(folder)
    with _warned_lock:
        for seen in _warned:
            if os.path.commonpath([seen, name]) in (seen, name):
                return
        _warned.add(name)
    cause = exc.strerror or str(exc)
    shown = exc.filename and os.path.abspath(exc.filename) != name and not str(exc.filename).endswith(".tmp")
    where = f" ({exc.filename})" if shown else ""  # not the writer's temporary: its name says nothing
    warn(f"tflite-opencl-delegate: {what} {name} cannot be used: {cause}{where}; {remedy}", CacheFolderWarning)


def _reporting(folder: Path) -> Callable[[OSError], None]:
    return lambda exc: warn_unusable(folder, exc)


def entry_seal(kind: str, key: str, **more: str) -> dict[str, str]:
    """What a sealed entry was made for (``_integrity.seal``'s key): its kind, its cache's full key,
    this package's version, and ``more`` fields checked with it."""
    return {"kind": kind, "key": key, "version": __version__, **more}


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it: string enums by their value (the string they stand for, as
    the options spell it), other enums by name."""
    if isinstance(value, enum.Enum):
        return value.value if isinstance(value, str) else value.name
    return value


def options_fields(options: Any) -> dict[str, Any]:
    """Every field of a dataclass of options (CompileOptions), by name, enums as ``_plain`` writes them."""
    return {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options)}


#: the layout of what a partition key hashes; a new layout makes new keys, so entries of an older
#: one are never found (and their seals, which hold their full key, would not match)
KEY_FORMAT = "partition-key/2"


def partition_key(
    fingerprint: str,
    compile_options: Any,
    *,
    device_key: str,
    extra: Sequence[Any],
    model_id: bytes,
) -> str:
    """The serialization cache key of a partition whose nodes the compiler fingerprinted as
    ``fingerprint`` (compiler/fingerprint.py, opaque here), compiled with ``compile_options`` (a
    dataclass): 64 hex digits, the first KEY_LENGTH of them in the entry's name, all in its seal."""
    h = hashlib.sha256()
    header = [KEY_FORMAT, __version__, device_key, options_fields(compile_options), [*map(_plain, extra)]]
    h.update(json.dumps([*header, fingerprint]).encode())
    h.update(model_id)
    return h.hexdigest()


def default_program_dir() -> Path:
    """The user's program-binary cache: ``$XDG_CACHE_HOME`` (else ``~/.cache``)/tflite-opencl-delegate/programs."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tflite-opencl-delegate" / "programs"


def program_cache_dir(serialization_dir: str, program_cache: str) -> Path | Literal[False] | None:
    """Where program binaries are cached (Runtime.load's ``cache_dir``): ``programs/`` in the
    serialization folder, else the ``program_cache`` folder; None is the user's cache folder
    (``default``), False none (``none``)."""
    if serialization_dir:
        return Path(serialization_dir) / "programs"
    if program_cache == "none":
        return False
    if program_cache == "default":
        return None
    return Path(program_cache)


def _safe_token(model_token: str) -> str:
    """``model_token`` as part of a file name: other characters than letters, digits, - and _
    replaced, and a long one shortened with a hash of all of it (the seal holds the full key)."""
    token = "".join(c if c.isalnum() or c in "-_" else "_" for c in model_token) or "model"
    if len(token) > TOKEN_LENGTH:
        digest = hashlib.sha256(model_token.encode(errors="surrogatepass")).hexdigest()[:16]
        token = f"{token[: TOKEN_LENGTH - 17]}_{digest}"
    return token


@dataclass(frozen=True)
class SerializationCache:
    """A folder of sealed InferenceContext entries and records, named by model token and key.

    Reads and writes never fail a load: a bad entry raises CacheIntegrityError (the caller reports
    and rebuilds it), a folder that cannot be read or written is reported (``warn_unusable``) and
    treated as empty or not written."""

    folder: Path
    #: the model's name in entry names (option model_token, made safe for a file name)
    token: str

    @classmethod
    def open(cls, serialization_dir: str, model_token: str) -> SerializationCache | None:
        """The cache in ``serialization_dir`` (None when there is none), its stale temporaries removed."""
        if not serialization_dir:
            return None
        cache = cls(Path(serialization_dir), _safe_token(model_token))
        remove_stale_temps(cache.folder, on_error=_reporting(cache.folder))  # left by writers killed mid-write
        return cache

    def entry(self, key: str) -> Path:
        return self.folder / f"{self.token}-{key[:KEY_LENGTH]}.ctx"

    def read(self, path: Path, key: Mapping[str, str], limit: int = CONTEXT_LIMIT) -> memoryview | None:
        """The payload of entry ``path``, checked against its trailer and ``key``; None when there
        is no entry or the folder cannot be read (reported). Raises CacheIntegrityError for a bad entry."""
        try:
            return read_sealed(path, f"cache entry {path}", key, limit)
        except OSError as exc:
            warn_unusable(self.folder, exc)
            return None

    def write(self, path: Path, key: Mapping[str, str], payload: Callable[[], bytes]) -> bool:
        """Store ``payload()`` as entry ``path``, atomically, sealed with ``key``; False when the
        folder cannot be written (reported)."""
        try:
            atomic_write(path, seal(payload(), key))
        except OSError as exc:
            warn_unusable(self.folder, exc)
            return False
        return True

    def record(self, key: str) -> Path:
        """Where the record of a decision about a partition goes (``<token>-<key>.json``): what
        the rule cpu_when_faster decided from which figures, for partitions with or without a context."""
        return self.folder / f"{self.token}-{key[:KEY_LENGTH]}.json"

    def read_record(self, path: Path, key: Mapping[str, str]) -> dict[str, Any] | None:
        """The JSON object in record ``path``, checked against its trailer and ``key``; None when
        there is none. Raises CacheIntegrityError for a record that fails the check or is not an object."""
        payload = self.read(path, key, RECORD_LIMIT)
        if payload is None:
            return None
        try:
            value = json.loads(bytes(payload))
        except ValueError as exc:
            raise CacheIntegrityError(f"cache record {path} is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise CacheIntegrityError(f"cache record {path} holds {type(value).__name__}, not an object")
        return value

    def write_record(self, value: dict[str, Any], path: Path, key: Mapping[str, str]) -> bool:
        """Write a decision's record (a JSON object) to ``path`` (see ``write``)."""
        return self.write(path, key, lambda: json.dumps(value, sort_keys=True).encode())

    def write_context(self, ctx_model: Any, path: Path, key: Mapping[str, str]) -> bool:
        """Write a compiled partition (a context.model.InferenceContext) to ``path`` (see ``write``)."""
        return self.write(path, key, lambda: serialize(ctx_model))


def serialize(ctx_model: Any) -> bytes:
    from .context import serialize_context  # a miss only: the writer imports flatbuffers

    return serialize_context(ctx_model)


def write_record(value: dict[str, Any], path: Path, key: Mapping[str, str] | None = None) -> Path:
    """Write a decision's record (a JSON object) to ``path``: atomically, with its trailer (sealed
    with ``key``). Raises OSError."""
    return atomic_write(path, seal(json.dumps(value, sort_keys=True).encode(), key))


def write_cache_entry(ctx_model: Any, path: Path, key: Mapping[str, str] | None = None) -> Path:
    """Write a compiled partition (a context.model.InferenceContext) to ``path``: atomically, with
    its trailer (sealed with ``key``). Raises OSError."""
    return atomic_write(path, seal(serialize(ctx_model), key))


@dataclass(frozen=True)
class ProgramBinaries:
    """A folder of sealed OpenCL program binaries, ``<key>.bin``; the key is the caller's (64 hex
    digits) and is sealed into each entry. A folder that cannot be created, read or written is
    reported once (``warn_unusable``) and the binaries are built from source."""

    folder: Path

    @classmethod
    def open(cls, folder: Path) -> ProgramBinaries:
        """The binaries in ``folder``, its stale temporaries removed (the folder may not exist yet)."""
        remove_stale_temps(folder, on_error=_reporting(folder))  # left by writers killed mid-write
        return cls(folder)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.bin"

    def read(self, key: str) -> memoryview | None:
        """The binary stored under ``key``, checked against its trailer and key; None when there is
        none or it cannot be read (reported). Raises CacheIntegrityError for a bad entry."""
        try:
            what = f"program binary {self.path(key)}"
            return read_sealed(self.path(key), what, entry_seal("program", key), PROGRAM_LIMIT)
        except OSError as exc:
            warn_unusable(self.folder, exc)
            return None

    def discard(self, key: str) -> None:
        """Remove the binary under ``key`` (stale, corrupt, or rejected by the driver)."""
        try:
            self.path(key).unlink(missing_ok=True)
        except OSError as exc:
            warn_unusable(self.folder, exc)

    def write(self, key: str, binary: bytes) -> None:
        """Store ``binary`` under ``key``, atomically with its trailer; a folder that cannot be
        created or written is reported, not an error (the cache is an optimisation)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path(key), seal(binary, entry_seal("program", key)))
        except OSError as exc:
            warn_unusable(self.folder, exc)
