"""TFLite model files verified before any host runtime reads them (the C verifier, csrc/tflmodel.c).

A truncated or corrupt model makes TFLite's Interpreter read out of bounds or recurse without
end; ``verify_model`` refuses it first with a :class:`ModelFormatError` that names the field and
the byte offset. It checks the FlatBuffer's structure against TFLite's schema and the indices,
sizes and subgraph references TFLite uses unchecked (docs/model-files.md lists them).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Union

from ._native import ffi, lib
from .errors import ModelFormatError

#: the file identifier of TFLite models (bytes 4-8)
TFLITE_IDENTIFIER = b"TFL3"

Model = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview]


def has_tflite_identifier(path: str | os.PathLike[str]) -> bool:
    """Whether the file at ``path`` starts like a TFLite model (its identifier; nothing else checked)."""
    with open(path, "rb") as f:
        return f.read(8)[4:8] == TFLITE_IDENTIFIER


def _verify_buffer(data: bytes | bytearray | memoryview | mmap.mmap, source: str) -> None:
    err = ffi.new("dlg_model_error *")
    size = len(data)
    if size:
        with ffi.from_buffer(data) as buf:  # released before the caller closes an mmap
            rc = lib.dlg_model_verify(buf, size, err)
    else:
        rc = lib.dlg_model_verify(ffi.NULL, 0, err)
    if rc == lib.DLG_MODEL_NOMEM:
        raise MemoryError(f"{source}: out of memory while verifying the model")
    if rc != lib.DLG_MODEL_OK:
        raise ModelFormatError(
            ffi.string(err.message).decode("utf-8", "replace"),
            field=ffi.string(err.field).decode("utf-8", "replace"),
            offset=int(err.offset),
            source=source,
        )


def verify_model(model: Model, source: str | None = None) -> None:
    """Raise :class:`ModelFormatError` unless ``model`` (a path, or the file's bytes) is a valid model.

    ``source`` names the model in the message (default: the path, or ``<buffer>``). A file is
    mapped, not read, so a large model costs no copy.
    """
    if isinstance(model, (bytes, bytearray, memoryview)):
        _verify_buffer(model, source or "<buffer>")
        return
    path = Path(model)
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            _verify_buffer(b"", source or str(path))
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            _verify_buffer(view, source or str(path))
