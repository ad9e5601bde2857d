"""The on-disk caches of compiled partitions: where entries live, what keys them, how they are
written and read.

With the option ``serialization_dir`` each compiled partition is an InferenceContext file,
``<model_token>-<key>.ctx``, each candidate partition's cpu_when_faster decision a JSON record,
``<model_token>-<key>.json``, and program binaries go to ``programs/`` beside them; without it
the option ``program_cache`` says where binaries go (``ProgramBinaries``; runtime/programs.py keys
them and decides when a binary is used).
Entries are written atomically with a SHA-256 trailer (_atomic.py, _integrity.py) and checked
before use; temporaries left by writers killed mid-write are removed when a cache is opened.

The key of a partition hashes everything its compiled context depends on: this package's version,
the device (DeviceInfo.key), every field of its CompileOptions (so a new compile option is keyed
without touching this module), the plugin's other choices (``extra``: tuning, quantized
inference, the compiler's source fingerprint), the partition's nodes (op, version, tensors,
parameters, shapes) and what identifies the weights (``model_id``).

Only stdlib and the package's leaf modules are imported here (the context writer too, on a miss),
so any layer may use it.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ._atomic import atomic_write, remove_stale_temps
from ._integrity import seal, unseal
from ._version import __version__
from .errors import CacheIntegrityError

#: hex digits of a partition's key in its file name
KEY_LENGTH = 40


def _plain(value: Any) -> Any:
    """``value`` as JSON can hold it: enums by name."""
    return value.name if isinstance(value, enum.Enum) else value


def options_fields(options: Any) -> dict[str, Any]:
    """Every field of a dataclass of options (CompileOptions), by name, enums by name."""
    return {f.name: _plain(getattr(options, f.name)) for f in dataclasses.fields(options)}


def partition_key(
    graph: Any,
    nodes: Sequence[int],
    compile_options: Any,
    *,
    device_key: str,
    extra: Sequence[Any],
    model_id: bytes,
) -> str:
    """The serialization cache key of the partition ``nodes`` of ``graph`` (compiler.graph.Graph)."""
    h = hashlib.sha256()
    h.update(json.dumps([__version__, device_key, options_fields(compile_options), [*map(_plain, extra)]]).encode())
    for index in nodes:
        node = graph.nodes[index]
        shapes = [graph.tensor(i).shape if i >= 0 else None for i in (*node.inputs, *node.outputs)]
        # the quantization of tensors carried in float (compiler/quant.py) is written into the kernels
        carried = [repr(graph.tensor(i).carried) if i >= 0 else None for i in (*node.inputs, *node.outputs)]
        fields = [node.op, node.version, node.inputs, node.outputs, sorted(node.params.items()), shapes, carried]
        if node.custom_name or node.custom_options:  # a custom op is its name and its options
            fields += [node.custom_name, node.custom_options.hex()]
        h.update(json.dumps(fields, default=str).encode())
    h.update(model_id)
    return h.hexdigest()[:KEY_LENGTH]


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


@dataclass(frozen=True)
class SerializationCache:
    """A folder of sealed InferenceContext entries, named by model token and key."""

    folder: Path
    #: the model's name in entry names (option model_token, made safe for a file name)
    token: str

    @classmethod
    def open(cls, serialization_dir: str, model_token: str) -> SerializationCache | None:
        """The cache in ``serialization_dir`` (None when there is none), its stale temporaries removed."""
        if not serialization_dir:
            return None
        token = "".join(c if c.isalnum() or c in "-_" else "_" for c in model_token) or "model"
        cache = cls(Path(serialization_dir), token)
        remove_stale_temps(cache.folder)  # left by writers killed mid-write
        return cache

    def entry(self, key: str) -> Path:
        return self.folder / f"{self.token}-{key}.ctx"

    def read(self, path: Path) -> memoryview | None:
        """The context in entry ``path``, checked against its trailer; None when there is no entry.
        Raises CacheIntegrityError for an entry that fails the check."""
        if not path.exists():
            return None
        return unseal(path.read_bytes(), f"cache entry {path}")

    def record(self, key: str) -> Path:
        """Where the record of a decision about a partition goes (``<token>-<key>.json``): what
        the rule cpu_when_faster decided from which figures, for partitions with or without a context."""
        return self.folder / f"{self.token}-{key}.json"

    def read_record(self, path: Path) -> dict[str, Any] | None:
        """The JSON object in record ``path``, checked against its trailer; None when there is
        none. Raises CacheIntegrityError for a record that fails the check or is not an object."""
        payload = self.read(path)
        if payload is None:
            return None
        try:
            value = json.loads(bytes(payload))
        except ValueError as exc:
            raise CacheIntegrityError(f"cache record {path} is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise CacheIntegrityError(f"cache record {path} holds {type(value).__name__}, not an object")
        return value


def write_record(value: dict[str, Any], path: Path) -> Path:
    """Write a decision's record (a JSON object) to ``path``: atomically, with its SHA-256 trailer."""
    return atomic_write(path, seal(json.dumps(value, sort_keys=True).encode()))


def write_cache_entry(ctx_model: Any, path: Path) -> Path:
    """Write a compiled partition (a context.model.InferenceContext) to ``path``: atomically, with
    its SHA-256 trailer."""
    from .context import serialize_context  # a miss only: the writer imports flatbuffers

    return atomic_write(path, seal(serialize_context(ctx_model)))


@dataclass(frozen=True)
class ProgramBinaries:
    """A folder of sealed OpenCL program binaries, ``<key>.bin``; the key is the caller's."""

    folder: Path

    @classmethod
    def open(cls, folder: Path) -> ProgramBinaries:
        """The binaries in ``folder``, its stale temporaries removed (the folder may not exist yet)."""
        remove_stale_temps(folder)  # left by writers killed mid-write
        return cls(folder)

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.bin"

    def read(self, key: str) -> memoryview | None:
        """The binary stored under ``key``, checked against its trailer; None when there is none
        or it cannot be read. Raises CacheIntegrityError for one that fails the check."""
        try:
            data = self.path(key).read_bytes()
        except OSError:
            return None
        return unseal(data, f"program binary {self.path(key)}")

    def discard(self, key: str) -> None:
        """Remove the binary under ``key`` (stale, corrupt, or rejected by the driver)."""
        self.path(key).unlink(missing_ok=True)

    def write(self, key: str, binary: bytes) -> None:
        """Store ``binary`` under ``key``, atomically with its trailer; an unwritable folder is
        not an error (the cache is an optimisation)."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path(key), seal(binary))
        except OSError:
            pass
