"""InferenceContext files: the model, the writer, the native reader and summaries."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import InferenceContext
from .native import ContextFile, ReadLimits, read_context

if TYPE_CHECKING:
    from .writer import serialize_context, write_context


def __getattr__(name: str) -> object:
    # The writer imports flatbuffers: only a cache miss or a tool writes contexts, and a warm start
    # (which reads them natively) should not pay for it.
    if name in ("serialize_context", "write_context"):
        from . import writer

        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ContextFile",
    "InferenceContext",
    "ReadLimits",
    "read_context",
    "serialize_context",
    "write_context",
]
