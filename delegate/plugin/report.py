"""What a delegate delegated: one report per subgraph it was applied to, with its partitions, and
the delegate's state (``interpreter.opencl``). Plain data: the plugin's modules fill it in, none of
them is imported here."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache import SerializationCache
from ..compiler.cpu_choice import CpuChoice, Measured
from ..host import HostInfo
from .options import DelegateOptions


@dataclass
class PartitionInfo:
    """One delegated partition: its nodes, how its context was obtained, and its init time."""

    nodes: list[int]
    cache: str  # "hit", "miss", "off" or "memory" (loader.py, CacheState)
    init_ms: float
    #: kernels the partition launches, and ops run inside other kernels (elementwise ops linked into
    #: their producer, concatenations read in place by their consumer)
    kernels: int = 0
    fused_ops: int = 0
    #: times it was compiled for new shapes after a resize
    recompiles: int = 0


@dataclass(frozen=True)
class ChoiceRecord:
    """Where a partition's cpu_when_faster record lives in the serialization folder, and its seal."""

    store: SerializationCache
    path: Path
    seal: dict[str, str]


#: a partition of a model: its subgraph's index (``SubgraphReport.index``) and its nodes, sorted
PartitionId = tuple[int, tuple[int, ...]]


def partition_id(subgraph: int, nodes: Iterable[int]) -> PartitionId:
    return subgraph, tuple(sorted(nodes))


@dataclass
class Selection:
    """Which of a model's partitions a delegate delegates, where the rule cpu_when_faster applies
    (the others stay on TFLite's CPU kernels), and the contexts already compiled for them in this
    process, by partition: each is loaded once instead of compiled (a later Prepare, after a
    resize, compiles for its shapes). delegate/measured_choice.py makes such delegates to time
    partitions alone and to run the partitions it kept."""

    delegated: frozenset[PartitionId]
    contexts: dict[PartitionId, Any] = field(default_factory=dict, repr=False)
    #: why a partition left out stays on CPU (``unsupported``)
    reason: str = "left on TFLite's CPU kernels by the measurement of cpu_when_faster"

    def take_context(self, subgraph: int, nodes: Iterable[int]) -> Any:
        """The compiled context of the partition ``nodes`` (None: compile it), given out once."""
        return self.contexts.pop(partition_id(subgraph, nodes), None)


@dataclass
class SubgraphReport:
    """What one Prepare (one subgraph of a model: the main graph, or the body of an IF, WHILE or
    CALL_ONCE) delegated."""

    #: position among the subgraphs this delegate was applied to, in the order TFLite prepared them
    index: int
    total_nodes: int = 0
    delegated_nodes: list[int] = field(default_factory=list)
    #: node name -> why it stays on CPU
    unsupported: dict[str, str] = field(default_factory=dict)
    partitions: list[PartitionInfo] = field(default_factory=list)
    #: partitions that fell back to CPU: {"nodes": [names], "cause": text}
    fallbacks: list[dict[str, Any]] = field(default_factory=list)
    #: each candidate partition's figures of the rule cpu_when_faster, and its decision
    #: (compiler/cpu_choice.py): those left on CPU have their nodes in ``unsupported`` too
    cpu_choices: list[CpuChoice] = field(default_factory=list)
    #: whether the rule cpu_when_faster applies here (delegate/measured_choice.py measures where it does)
    cpu_rule: bool = False
    #: the record of each candidate partition (by its nodes), with a serialization folder
    choice_records: dict[tuple[int, ...], ChoiceRecord] = field(default_factory=dict, repr=False)
    #: the composite whose decomposition, or the WHILE whose condition or body, this subgraph is, run
    #: in that node's partition (inlined, unrolled): TFLite never runs it, the delegate claims none
    #: of it, and its nodes count as delegated; else ""
    inlined_into: str = ""


@dataclass
class DelegateState:
    """What one delegate (one ``load_delegate`` call) knows: its options and what it delegated.

    ``subgraphs`` has one report per subgraph the delegate was applied to (a model with IF, WHILE
    or CALL_ONCE has several; a subgraph prepared again, after a resize, replaces its report);
    ``total_nodes``, ``delegated_nodes``, ``unsupported``, ``partitions``, ``fallbacks`` and ``cpu_choices`` are
    their totals (node names carry the subgraph, ``sub1/name``, past the first).
    """

    options: DelegateOptions
    subgraphs: list[SubgraphReport] = field(default_factory=list)
    device: str = ""
    precision: str = ""
    storage_type: str = ""
    #: the TFLite runtime this delegate was loaded into (set by ``delegate.load_delegate``)
    host: HostInfo | None = None
    #: what delegate.Interpreter's background compile did (delegate.warm_start.BackgroundCompile), None without it
    background_compile: Any = None
    #: the threads delegate.Interpreter gave TFLite's kernels on a CPU device (delegate.cpu_threads.TfliteThreads),
    #: None where it did not choose (a GPU, or num_threads given)
    tflite_threads: Any = None
    #: a PoCL CPU device: how its worker threads are placed (delegate/runtime/platforms/pocl_affinity.py); "" otherwise
    worker_affinity: str = ""
    #: delegate.Interpreter's measurement of the model with the delegate against TFLite's CPU kernels
    #: (delegate/measured_choice.py); None where it was not measured in this process
    measured: Measured | None = None
    #: set before the delegate's first Prepare: only these partitions are delegated (None: as the rule decides)
    selection: Selection | None = None
    prepares: int = 0
    #: TfLiteContext address -> its report, so that a second Prepare of a subgraph replaces it
    _by_context: dict[int, SubgraphReport] = field(default_factory=dict, repr=False, compare=False)
    #: TfLiteContext address of a composite's decomposition or a WHILE's subgraph -> the delegated
    #: node's name (``SubgraphReport.inlined_into``)
    _inlined: dict[int, str] = field(default_factory=dict, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def total_nodes(self) -> int:
        return sum(r.total_nodes for r in self.subgraphs)

    @property
    def delegated_nodes(self) -> list[int]:
        return [n for r in self.subgraphs for n in r.delegated_nodes]

    @property
    def unsupported(self) -> dict[str, str]:
        return {_qualified(r, name): why for r in self.subgraphs for name, why in r.unsupported.items()}

    @property
    def cpu_rule_applies(self) -> bool:
        """Whether the rule cpu_when_faster applied to any subgraph prepared (none prepared: False)."""
        return any(r.cpu_rule for r in self.subgraphs)

    @property
    def partitions(self) -> list[PartitionInfo]:
        return [p for r in self.subgraphs for p in r.partitions]

    @property
    def fallbacks(self) -> list[dict[str, Any]]:
        return [{**f, "nodes": [_qualified(r, n) for n in f["nodes"]]} for r in self.subgraphs for f in r.fallbacks]

    @property
    def cpu_choices(self) -> list[dict[str, Any]]:
        """The figures of cpu_when_faster per candidate partition (CpuChoice.as_dict), with its
        subgraph and its nodes' names."""
        return [
            {"subgraph": r.index, **c.as_dict(), "names": [_qualified(r, n) for n in c.names]}
            for r in self.subgraphs
            for c in r.cpu_choices
        ]

    def mark_inlined(self, address: int, node: str) -> None:
        """The subgraph at ``address`` is run by the delegated ``node`` (a composite, a WHILE)."""
        with self._lock:
            self._inlined[address] = node

    def take_inlined(self, address: int) -> str | None:
        """The delegated node that runs the subgraph at ``address``, once: a
        later Prepare of it (another model's subgraph at that address) is a Prepare as any other."""
        with self._lock:
            return self._inlined.pop(address, None)

    def report_for(self, address: int) -> SubgraphReport:
        """A fresh report for a Prepare of the TfLiteContext at ``address``, replacing that
        subgraph's earlier one."""
        with self._lock:
            old = self._by_context.get(address)
            report = SubgraphReport(old.index if old is not None else len(self.subgraphs))
            if old is not None:
                self.subgraphs[self.subgraphs.index(old)] = report
            else:
                self.subgraphs.append(report)
            self._by_context[address] = report
        return report


def _qualified(report: SubgraphReport, name: str) -> str:
    return name if report.index == 0 else f"sub{report.index}/{name}"
