"""What a serialized partition's seal holds beyond its key: a sample of the model's weights, when
the option model_token stands for them.

With ``model_token`` the cache key names the model by its token, not by its weights (hashing all
constants costs 14-16 ms of MobileNetV2's 280-380 ms warm start on a 2-core VM, which the token is
there to save). A sample of every constant (its size and 64 bytes at its start, middle and end)
costs 0.5-0.6 ms there and turns a stale token (the same token for retrained weights) into
a rebuild with a warning instead of a silent wrong answer; docs/runtime.md, "Caches on disk".
"""

from __future__ import annotations

import hashlib
from typing import Any

from .._native import ffi, lib

#: bytes hashed at each of the three places sampled in every constant
SAMPLE_BYTES = 64


def weights_sample(context: Any, graph: Any) -> str:
    """A SHA-256 (hex) of the size and three samples of each constant of the model in ``graph``
    (compiler.graph.Graph), read in place from TFLite's ``context``."""
    h = hashlib.sha256()
    for i in sorted(graph.tensors):
        if not graph.tensors[i].is_constant or i >= context.tensors_size:
            continue  # past the context's: an unrolled WHILE's copy of a body constant, in the key
        t = context.tensors[i]
        if t.allocation_type != lib.kTfLiteMmapRo or t.data.raw == ffi.NULL:
            continue  # made constant by folding: determined by a constant sampled here
        size = int(t.bytes)
        data = ffi.buffer(t.data.raw, size)
        h.update(f"{i}:{size};".encode())
        for start in sorted({0, max(0, (size - SAMPLE_BYTES) // 2), max(0, size - SAMPLE_BYTES)}):
            h.update(data[start : start + SAMPLE_BYTES])
    return h.hexdigest()
