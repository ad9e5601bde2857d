"""Fingerprints for cache keys, made where the graph model is known: the compiler's own code (a
serialized partition made by one compiler must not be used by another, even within one package
version: a development install) and a partition's nodes, so that caches key partitions without
reading compiler internals."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from .graph import Graph


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


def partition_fingerprint(graph: Graph, nodes: Sequence[int]) -> str:
    """SHA-256 (hex) of what the compiled partition ``nodes`` of ``graph`` depends on besides the
    weights' values: each node's op, version, tensors, parameters and shapes, in ``nodes`` order."""
    h = hashlib.sha256()
    for index in nodes:
        node = graph.nodes[index]
        edges = (*node.inputs, *node.outputs)
        shapes = [graph.tensor(i).shape if i >= 0 else None for i in edges]
        # the quantization of tensors carried in float (quant.py) is written into the kernels
        carried = [repr(graph.tensor(i).carried) if i >= 0 else None for i in edges]
        fields = [node.op, node.version, node.inputs, node.outputs, sorted(node.params.items()), shapes, carried]
        if node.custom_name or node.custom_options:  # a custom op is its name and its options
            fields += [node.custom_name, node.custom_options.hex()]
        h.update(json.dumps(fields, default=str).encode())
    return h.hexdigest()
