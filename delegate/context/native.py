"""Read InferenceContext files with the verifying C reader (csrc/ctxfile.c).

``ContextFile`` holds the file's bytes (an mmap for files: nothing is copied)
and the native tree the C reader built after verifying them. ``to_model()``
turns that tree into the dataclasses of model.py, with every ``data`` field a
zero-copy ``memoryview`` of the file.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._native import ffi, lib
from ..errors import ContextFormatError
from .fields import Kind, field_specs
from .model import InferenceContext

_ERROR_KINDS = {lib.DLG_ERR_FORMAT: "format", lib.DLG_ERR_LIMIT: "limit", lib.DLG_ERR_NOMEM: "memory"}


@dataclass(frozen=True)
class ReadLimits:
    """Resource limits of one read; 0 keeps the native default.

    Defaults: nesting depth 32, 1,000,000 tables visited, and 16 MiB + 32 bytes
    per file byte for the decoded tree (weights are never copied, so this only
    bounds files whose offsets are shared many times over).
    """

    max_depth: int = 0
    max_tables: int = 0
    max_memory: int = 0


class ContextFile:
    """A verified InferenceContext read from bytes (``ContextFile(data)``) or a file (``open``)."""

    def __init__(self, buffer: Any, *, source: str = "<buffer>", limits: ReadLimits | None = None) -> None:
        self.source = source
        self._mmap: mmap.mmap | None = None
        self._view = memoryview(buffer).cast("B")
        self._c_buffer = ffi.from_buffer("uint8_t[]", self._view)
        self._base = int(ffi.cast("uintptr_t", self._c_buffer))
        out = ffi.new("dlg_context **")
        err = ffi.new("dlg_error *")
        c_limits = ffi.NULL
        if limits is not None:
            c_limits = ffi.new("dlg_limits *", [limits.max_depth, limits.max_tables, limits.max_memory])
        status = lib.dlg_context_read(self._c_buffer, len(self._view), c_limits, out, err)
        if status != lib.DLG_OK:
            ffi.release(self._c_buffer)
            self._view.release()
            message = ffi.string(err.message).decode("utf-8", "replace")
            raise ContextFormatError(
                message, offset=int(err.offset), kind=_ERROR_KINDS.get(status, "format"), source=source
            )
        self._ctx = ffi.gc(out[0], lib.dlg_context_free)
        #: the verified native tree (a ``dlg_inference_context *``), valid until close()
        self.root = lib.dlg_context_root(self._ctx)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, limits: ReadLimits | None = None) -> ContextFile:
        """Map ``path`` read-only and verify it."""
        file_path = Path(path)
        with open(file_path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return cls(b"", source=str(file_path), limits=limits)
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            ctx = cls(mapped, source=str(file_path), limits=limits)
        except BaseException:
            mapped.close()
            raise
        ctx._mmap = mapped
        return ctx

    @property
    def size(self) -> int:
        """Bytes in the file."""
        return len(self._view)

    @property
    def memory_bytes(self) -> int:
        """Bytes the native tree takes (weights and strings stay in the file)."""
        return int(lib.dlg_context_memory(self._ctx))

    @property
    def tables(self) -> int:
        """Tables the reader visited."""
        return int(lib.dlg_context_tables(self._ctx))

    def to_model(self) -> InferenceContext:
        """The context as model dataclasses; ``data`` fields are views of the file."""
        return _Converter(self._view, self._base).table(InferenceContext, self.root[0])

    def close(self) -> None:
        """Free the native tree and unmap the file.

        Views returned by ``to_model()`` keep the mapping alive until they are
        garbage-collected; the native tree (``root``) must not be used after this.
        """
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            ffi.release(ctx)
            self._ctx = None
            self.root = ffi.NULL
        if ctx is not None:
            ffi.release(self._c_buffer)
            self._view.release()
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                pass  # still exported by a model's memoryview; unmapped when that dies
            self._mmap = None

    def __enter__(self) -> ContextFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_context(path: str | os.PathLike[str], *, limits: ReadLimits | None = None) -> InferenceContext:
    """Read, verify and convert a context file in one call."""
    with ContextFile.open(path, limits=limits) as ctx:
        return ctx.to_model()


class _Converter:
    """Turns native structs into model dataclasses, slicing ``data`` out of ``view``."""

    def __init__(self, view: memoryview, base: int) -> None:
        self._view = view
        self._base = base
        self._plans: dict[type, list[tuple[str, Callable[[Any], Any]]]] = {}

    def _string(self, s: Any) -> str | None:
        if s.ptr == ffi.NULL:
            return None
        return ffi.unpack(s.ptr, s.len).decode("utf-8")

    def _bytes(self, b: Any) -> memoryview:
        if b.ptr == ffi.NULL:
            return self._view[0:0]
        start = int(ffi.cast("uintptr_t", b.ptr)) - self._base
        return self._view[start : start + b.len]

    def _plan(self, cls: type) -> list[tuple[str, Callable[[Any], Any]]]:
        plan = self._plans.get(cls)
        if plan is None:
            plan = [(spec.name, self._field_reader(spec.name, spec.kind, spec.target)) for spec in field_specs(cls)]
            self._plans[cls] = plan
        return plan

    def _field_reader(self, name: str, kind: Kind, target: type | None) -> Callable[[Any], Any]:
        count = name + "_count"
        if kind is Kind.BOOL:
            return lambda c: bool(getattr(c, name))
        if kind in (Kind.INT32, Kind.UINT32, Kind.FLOAT32):
            return lambda c: getattr(c, name)
        if kind is Kind.ENUM:
            assert target is not None
            return lambda c: target(getattr(c, name))
        if kind is Kind.STRING:
            return lambda c: self._string(getattr(c, name))
        if kind is Kind.BYTES:
            return lambda c: self._bytes(getattr(c, name))
        if kind is Kind.TABLE:
            assert target is not None
            return lambda c: None if getattr(c, name) == ffi.NULL else self.table(target, getattr(c, name)[0])
        if kind is Kind.TABLE_LIST:
            assert target is not None
            return lambda c: [self.table(target, getattr(c, name)[i]) for i in range(getattr(c, count))]
        if kind is Kind.STRING_LIST:
            return lambda c: [self._string(getattr(c, name)[i]) for i in range(getattr(c, count))]
        # INT32_LIST / FLOAT32_LIST
        return lambda c: list(ffi.unpack(getattr(c, name), getattr(c, count))) if getattr(c, count) else []

    def table(self, cls: type, c: Any) -> Any:
        return cls(**{name: read(c) for name, read in self._plan(cls)})
