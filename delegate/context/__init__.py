"""InferenceContext files: the model, the writer, the native reader and summaries."""

from .model import InferenceContext
from .native import ContextFile, ReadLimits, read_context
from .writer import serialize_context, write_context

__all__ = [
    "ContextFile",
    "InferenceContext",
    "ReadLimits",
    "read_context",
    "serialize_context",
    "write_context",
]
