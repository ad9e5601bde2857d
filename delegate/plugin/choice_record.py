"""The rule cpu_when_faster's decisions, recorded with the serialized partitions.

With a serialization folder each candidate partition's figures and decision are written as a sealed
JSON record (cache.py, ``SerializationCache.record``) the first time it is prepared, and read back,
not estimated again, by later processes: the decision and its figures are kept with the partition,
whether it was delegated (its context lies beside the record) or left on CPU (it has no context).
delegate.Interpreter's measurement against TFLite's CPU kernels (measured_choice.py) is added to
the records of the partitions it measured: the whole model's (``record_measurement``), or each
partition's own, measured with it alone delegated (``record_partition_measurements``); a record
holding one decides by it. A record that is unreadable, tampered with, sealed for another key or for other
nodes is replaced, with a warning; a folder that cannot be written is reported once and the
decision is estimated each time.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from .._warnings import warn
from ..cache import SerializationCache, entry_seal, partition_key
from ..calibration import Calibration
from ..compiler.cpu_choice import CpuChoice, Measured, estimate
from ..compiler.fingerprint import compiler_fingerprint, partition_fingerprint
from ..compiler.graph import Graph
from ..errors import CacheIntegrityError
from .report import ChoiceRecord, DelegateState, PartitionId, SubgraphReport, partition_id

log = logging.getLogger("delegate.plugin")

_PLUGIN = "tflite-opencl-delegate"


def decide(
    store: SerializationCache | None,
    graph: Graph,
    members: list[int],
    *,
    applied: bool,
    calibration: Calibration,
    device_key: str,
    model_id: Callable[[], bytes],
    counted: list[int] | None = None,
) -> tuple[CpuChoice, ChoiceRecord | None]:
    """The rule's choice for the partition ``members`` of ``graph``, from the device's measured
    costs (``calibration``): its record's when ``store`` holds one, else estimated (and recorded
    when there is a ``store``), with where its record is. ``model_id`` is called for the bytes
    identifying the weights only when there is a ``store``. ``counted``: the nodes whose work is
    estimated, where ``members`` holds composites (compiler/composites.py: their nodes)."""
    if store is None:
        return _estimated(graph, members, counted, applied, calibration), None
    extra = ["cpu_when_faster", applied, compiler_fingerprint()]
    nodes = partition_fingerprint(graph, members)
    key = partition_key(nodes, calibration, device_key=device_key, extra=extra, model_id=model_id())
    path = store.record(key)
    sealed = entry_seal("record", key)
    names = tuple(graph.nodes[i].name for i in members)
    where = ChoiceRecord(store, path, sealed)
    try:
        record = store.read_record(path, sealed)
        if record is not None:
            return CpuChoice.from_record(record, members, names), where
    except (CacheIntegrityError, ValueError) as exc:
        log.warning("cache record %s is unusable (%s); estimating again", path, exc)
        warn(f"{_PLUGIN}: cache record {path} is unusable ({exc}); estimating again")
    choice = _estimated(graph, members, counted, applied, calibration)
    _write(choice, where)
    return choice, where


def _write(choice: CpuChoice, where: ChoiceRecord) -> bool:
    value = {k: v for k, v in choice.as_dict().items() if k != "source"}
    return where.store.write_record(value, where.path, where.seal)


def measured_partitions(state: DelegateState) -> tuple[int, int]:
    """How many delegated partitions the rule applies to, and how many of them hold a measurement."""
    with state._lock:
        choices = [c for r in state.subgraphs for c in r.cpu_choices if c.applied and not c.on_cpu]
    return len(choices), sum(c.measured is not None for c in choices)


def record_measurement(state: DelegateState, measured: Measured) -> int:
    """Give every delegated partition the rule applies to the measurement of the whole model (in the
    report, and in its record where there is a serialization folder); the number of records written."""
    # left on CPU by the estimate: never ran on the delegate
    return _record(state, measured, lambda _, c: measured if c.applied and not c.on_cpu else None)


def measured_candidates(state: DelegateState) -> list[PartitionId]:
    """The partitions the rule applies to that were delegated (and compiled: none fell back), in
    subgraph and plan order: what is measured alone."""
    with state._lock:
        return [
            partition_id(r.index, c.nodes)
            for r in state.subgraphs
            for c in r.cpu_choices
            if c.applied and not c.on_cpu and set(c.nodes) <= set(r.delegated_nodes)
        ]


def record_partition_measurements(state: DelegateState, whole: Measured, each: dict[PartitionId, Measured]) -> int:
    """Give each partition of ``each`` its own measurement (in the report, and in its record where
    there is a serialization folder), ``whole`` being the model's with all of them delegated; the
    number of records written."""
    return _record(state, whole, lambda r, c: each.get(partition_id(r.index, c.nodes)))


def _record(
    state: DelegateState, whole: Measured, measured_of: Callable[[SubgraphReport, CpuChoice], Measured | None]
) -> int:
    """The model's measurement ``whole`` in ``state``, and each candidate partition's own
    (``measured_of``; None: none) in the report and in its record; the number of records written."""
    written = 0
    with state._lock:
        state.measured = whole
        for report in state.subgraphs:
            for number, choice in enumerate(report.cpu_choices):
                measured = measured_of(report, choice)
                if measured is None:
                    continue
                report.cpu_choices[number] = updated = dataclasses.replace(choice, measured=measured)
                where = report.choice_records.get(choice.nodes)
                if where is not None and _write(updated, where):
                    written += 1
    return written


def leave_on_cpu(state: DelegateState, left: set[PartitionId]) -> None:
    """Report the partitions ``left`` on TFLite's CPU kernels, by their measurement: the model runs on
    an interpreter that does not delegate them (measured_choice.py)."""
    with state._lock:
        for report in state.subgraphs:
            for choice in report.cpu_choices:
                if partition_id(report.index, choice.nodes) not in left:
                    continue
                nodes = set(choice.nodes)
                report.delegated_nodes = [n for n in report.delegated_nodes if n not in nodes]
                report.partitions = [p for p in report.partitions if not set(p.nodes) <= nodes]
                report.unsupported.update(dict.fromkeys(choice.names, choice.reason()))


def _estimated(
    graph: Graph, members: list[int], counted: list[int] | None, applied: bool, calibration: Calibration
) -> CpuChoice:
    """The estimate over ``counted`` (default ``members``), as the choice of ``members``."""
    choice = estimate(graph, counted or members, applied=applied, calibration=calibration)
    names = tuple(graph.nodes[i].name for i in members)
    return dataclasses.replace(choice, nodes=tuple(members), names=names)
