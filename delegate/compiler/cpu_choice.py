"""Which partitions stay on TFLite's CPU kernels because the delegate cannot be faster there
(option ``cpu_when_faster``; on by default on CPU devices, device_policy.py).

The delegate pays a fixed cost at every invoke (enqueue, waking the device's threads, waiting for
the end) and one per kernel, whatever the kernels compute; TFLite's CPU kernels (XNNPACK) pay a
small cost per node and then the work at their throughput. A partition stays on CPU when the
delegate's fixed costs alone exceed the CPU's estimate for the whole partition: even kernels that
took no time would leave the delegate slower. That catches the small partitions where the fixed
costs dominate (a few small layers: tens of microseconds against one or two), and never a partition
where the delegate could win. It does not catch a large partition whose kernels are slower than
XNNPACK's: that is the kernels' matter, not a rule's (benchmarks/RESULTS.md, "CPU choice").

That case is caught by a measurement instead: ``delegate.Interpreter`` times the delegated model
against TFLite's CPU kernels once its kernels are built (delegate/measured_choice.py), and a
partition carrying a ``Measured`` decides by it, not by the estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..calibration import Calibration
from .graph import Graph, Node


def _elements(graph: Graph, index: int) -> int:
    return math.prod(graph.tensor(index).shape)


def _runtime(graph: Graph, ids: tuple[int, ...]) -> list[int]:
    return [i for i in ids if i >= 0 and not graph.tensor(i).is_constant]


def node_macs(node: Node, graph: Graph) -> int:
    """Multiply-adds of a matrix-product node (convolutions, fully connected, batch products); 0 for
    others: what its op says (``Op.macs``)."""
    from .ops import op_for  # the op tables, only to estimate: a warm start imports none of them

    op = op_for(node)
    return op.macs(node, graph) if op is not None else 0


#: how much faster than TFLite's CPU kernels the delegate must measure to keep a partition: within
#: it the measurement cannot tell them apart (2 cores, PoCL: a model measured at load 1.01-1.06x
#: the CPU kernels' latency ran 1.06-1.09x of it in back-to-back calls minutes later, and the
#: delegate kept on a measurement that favoured it left the model up to 1.10x slower than
#: TFLite's kernels by default), so there the host's own kernels are the safer choice
DELEGATE_LEAD = 0.03


@dataclass(frozen=True)
class Measured:
    """Latencies measured side by side (median milliseconds per invoke over ``rounds`` interleaved
    rounds) of the model with this delegate and on TFLite's CPU kernels alone, with the threads
    that ran them fastest."""

    delegate_ms: float
    cpu_ms: float
    rounds: int
    cpu_threads: int
    #: the delegate ran this partition alone (the model's other partitions on CPU), not the whole model
    alone: bool = False

    @property
    def cpu_faster(self) -> bool:
        """Do TFLite's CPU kernels get the model: they measured faster, or the delegate measured less
        than DELEGATE_LEAD faster than they did."""
        return self.delegate_ms > (1.0 - DELEGATE_LEAD) * self.cpu_ms

    def comparison(self) -> str:
        """``cpu_faster``'s reason in words."""
        if self.cpu_ms < self.delegate_ms:
            return "measured slower than TFLite's CPU kernels"
        return f"measured less than {DELEGATE_LEAD:.0%} faster than TFLite's CPU kernels"

    def as_dict(self) -> dict[str, object]:
        return {
            "delegate_ms": round(self.delegate_ms, 4),
            "cpu_ms": round(self.cpu_ms, 4),
            "rounds": self.rounds,
            "cpu_threads": self.cpu_threads,
            **({"alone": True} if self.alone else {}),
        }

    @classmethod
    def from_record(cls, value: object) -> Measured:
        """The figures ``as_dict`` wrote; raises ValueError for anything else."""
        keys = {"delegate_ms", "cpu_ms", "rounds", "cpu_threads"}
        if not isinstance(value, dict) or set(value) - {"alone"} != keys or value.get("alone", True) is not True:
            raise ValueError(f"its measurement {value!r} is not one")
        times, counts = [value["delegate_ms"], value["cpu_ms"]], [value["rounds"], value["cpu_threads"]]
        if not all(type(v) in (int, float) and math.isfinite(v) and v > 0 for v in times):
            raise ValueError(f"its measured times {times!r} are not times")
        if not all(type(v) is int and v >= 1 for v in counts):
            raise ValueError(f"its measured rounds and threads {counts!r} are not counts")
        return cls(float(times[0]), float(times[1]), *counts, alone="alone" in value)


@dataclass(frozen=True)
class CpuChoice:
    """One partition's figures: what it does, the delegate's fixed costs and the CPU's estimate."""

    nodes: tuple[int, ...]
    names: tuple[str, ...]
    #: nodes TFLite's CPU kernels run, and the least number of kernels the delegate launches
    cpu_nodes: int
    kernels: int
    macs: int
    elements: int
    delegate_us: float
    cpu_us: float
    #: whether the rule was applied (off: the figures are reported, the partition is delegated)
    applied: bool = True
    #: read from the partition's record in the serialization folder, not estimated in this process
    recorded: bool = False
    #: the model measured with the delegate (running the whole model, or this partition alone) and
    #: without it; when present it decides
    measured: Measured | None = None

    @property
    def on_cpu(self) -> bool:
        if not self.applied:
            return False
        if self.measured is not None:
            return self.measured.cpu_faster
        return self.delegate_us > self.cpu_us

    def reason(self) -> str:
        """Why a node of this partition stays on CPU (``interpreter.opencl.unsupported``)."""
        if self.measured is not None:
            m = self.measured
            delegated = "with the delegate running this partition alone" if m.alone else "with the delegate"
            # within DELEGATE_LEAD the delegate is not counted faster: the figures say which side was
            lead = "" if m.cpu_ms < m.delegate_ms else f", less than {DELEGATE_LEAD:.0%} faster"
            return (
                f"faster on TFLite's CPU kernels: measured on this device, the model took {m.cpu_ms:.3f} ms per "
                f"invoke on them ({m.cpu_threads} thread(s)) against {m.delegate_ms:.3f} ms {delegated}{lead} "
                f"(median of {m.rounds} rounds); "
                "cpu_when_faster=false delegates it"
            )
        return (
            f"faster on TFLite's CPU kernels: the delegate's fixed costs for its partition of {len(self.nodes)} "
            f"node(s) ({self.delegate_us:.0f} us per invoke) exceed the CPU's estimate ({self.cpu_us:.1f} us); "
            "cpu_when_faster=false delegates it"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "nodes": list(self.nodes),
            "cpu_nodes": self.cpu_nodes,
            "kernels": self.kernels,
            "macs": self.macs,
            "elements": self.elements,
            "delegate_us": round(self.delegate_us, 2),
            "cpu_us": round(self.cpu_us, 2),
            "applied": self.applied,
            "decision": "cpu" if self.on_cpu else "delegate",
            "source": "record" if self.recorded else "measured" if self.measured is not None else "estimate",
            **({"measured": self.measured.as_dict()} if self.measured is not None else {}),
        }

    @classmethod
    def from_record(cls, record: dict[str, object], nodes: list[int], names: tuple[str, ...]) -> CpuChoice:
        """The choice a record (``as_dict`` as written) holds for the partition ``nodes``; raises
        ValueError for a record that does not hold one for these nodes or contradicts itself."""
        if record.get("nodes") != list(nodes):
            raise ValueError(f"it is for the nodes {record.get('nodes')!r}, not {list(nodes)!r}")
        counts = [record.get(k) for k in ("cpu_nodes", "kernels", "macs", "elements")]
        figures = [record.get(k) for k in ("delegate_us", "cpu_us")]
        applied = record.get("applied")
        if not all(type(v) is int and v >= 0 for v in counts):
            raise ValueError(f"its counts {counts!r} are not whole numbers")
        if not all(type(v) in (int, float) and math.isfinite(v) and v >= 0 for v in figures):  # type: ignore[arg-type]
            raise ValueError(f"its figures {figures!r} are not times")
        if type(applied) is not bool:
            raise ValueError(f"its applied {applied!r} is not true or false")
        measured = Measured.from_record(record["measured"]) if "measured" in record else None
        choice = cls(tuple(nodes), names, *counts, *map(float, figures), applied, True, measured)  # type: ignore[arg-type]
        if record.get("decision") != ("cpu" if choice.on_cpu else "delegate"):
            raise ValueError(f"its decision {record.get('decision')!r} does not follow from its figures")
        return choice


def estimate(graph: Graph, nodes: list[int], *, applied: bool, calibration: Calibration) -> CpuChoice:
    """The figures of the partition ``nodes`` of ``graph`` with the device's measured costs
    (``applied``: whether the rule decides)."""
    from .ops import op_for  # see node_macs
    from .while_loop import UNROLLED  # (it imports the op tables too)

    cpu_nodes = kernels = macs = elements = 0
    # an unrolled WHILE counts as its body's copies (while_loop.py), which both sides run
    for index in (m for n in nodes for m in graph.nodes[n].params.get(UNROLLED, (n,))):
        node = graph.nodes[index]
        inputs = _runtime(graph, node.inputs)
        if not inputs:  # folded into constants (fold.py, shapes.py): neither side runs it
            continue
        cpu_nodes += 1
        op = op_for(node)
        # ops linked into another node's kernel, views, concatenations read in place: no kernel
        if op is not None and op.traits(node.op).own_kernel:
            kernels += 1
        macs += node_macs(node, graph)
        elements += sum(_elements(graph, i) for i in (*inputs, *_runtime(graph, node.outputs)))
    kernels = max(kernels, 1) if cpu_nodes else 0  # a partition of linked ops is still one kernel
    c = calibration
    delegate_us = c.invoke_us + c.kernel_us * kernels
    cpu_us = c.cpu_node_us * cpu_nodes + macs / c.cpu_macs_per_us + elements / c.cpu_elements_per_us
    names = tuple(graph.nodes[i].name for i in nodes)
    return CpuChoice(tuple(nodes), names, cpu_nodes, kernels, macs, elements, delegate_us, cpu_us, applied)
