"""The rule cpu_when_faster's decisions, recorded with the serialized partitions.

With a serialization folder each candidate partition's figures and decision are written as a sealed
JSON record (cache.py, ``SerializationCache.record``) the first time it is prepared, and read back,
not estimated again, by later processes: the decision and its figures are kept with the partition,
whether it was delegated (its context lies beside the record) or left on CPU (it has no context). A
record that is unreadable, tampered with, sealed for another key or for other nodes is replaced, with
a warning; a folder that cannot be written is reported once and the decision is estimated each time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .._warnings import warn
from ..cache import SerializationCache, entry_seal, partition_key
from ..compiler.cpu_choice import POCL_CPU, CpuChoice, estimate
from ..compiler.fingerprint import compiler_fingerprint, partition_fingerprint
from ..errors import CacheIntegrityError

log = logging.getLogger("delegate.plugin")

_PLUGIN = "tflite-opencl-delegate"


def decide(
    store: SerializationCache | None,
    graph: Any,
    members: list[int],
    *,
    applied: bool,
    device_key: str,
    model_id: Callable[[], bytes],
) -> CpuChoice:
    """The rule's choice for the partition ``members`` of ``graph``: its record's when ``store``
    holds one, else estimated (and recorded when there is a ``store``). ``model_id`` is called for
    the bytes identifying the weights only when there is a ``store``."""
    if store is None:
        return estimate(graph, members, applied=applied)
    extra = ["cpu_when_faster", applied, compiler_fingerprint()]
    nodes = partition_fingerprint(graph, members)
    key = partition_key(nodes, POCL_CPU, device_key=device_key, extra=extra, model_id=model_id())
    path = store.record(key)
    sealed = entry_seal("record", key)
    names = tuple(graph.nodes[i].name for i in members)
    try:
        record = store.read_record(path, sealed)
        if record is not None:
            return CpuChoice.from_record(record, members, names)
    except (CacheIntegrityError, ValueError) as exc:
        log.warning("cache record %s is unusable (%s); estimating again", path, exc)
        warn(f"{_PLUGIN}: cache record {path} is unusable ({exc}); estimating again")
    choice = estimate(graph, members, applied=applied)
    store.write_record({k: v for k, v in choice.as_dict().items() if k != "source"}, path, sealed)
    return choice
