"""A delegate kernel (one partition TFLite replaced with it): its runtime, what the C kernel points
at, and what compiling it again after a resize needs."""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from ..compiler.kernel_names import fused_ops
from ..errors import DelegateError
from ..runtime import Runtime
from .binding import bind_kernel
from .capture import capture_tensors
from .prepare import PreparePlan, Preparing
from .report import DelegateState, PartitionInfo, SubgraphReport


@dataclass
class KernelEntry:
    """A delegate kernel's runtime and the cffi arrays its C side points at."""

    runtime: Runtime
    #: the delegate's report, and the plan that compiles the partition again after a resize
    state: DelegateState
    plan: PreparePlan
    report: SubgraphReport
    #: the subgraph's nodes (as Prepare captured them: kernel callbacks may not ask TFLite for
    #: nodes) and execution plan, and the partition's nodes, inputs and outputs
    nodes: dict[int, Any]
    execution: list[int]
    partition: tuple[list[int], list[int], list[int]]
    arrays: list[Any] = field(default_factory=list)  # cffi arrays the C kernel points at
    #: the TFLite dims of the bound inputs and outputs it was compiled for
    dims: list[tuple[int, ...]] = field(default_factory=list)


def partition_info(runtime: Runtime, nodes: list[int], cache_state: str, start: float) -> PartitionInfo:
    """The report's line of a partition ready since ``start`` (time.perf_counter)."""
    names = runtime.node_names
    fused = sum(fused_ops(name) for name in names)
    return PartitionInfo(nodes, cache_state, (time.perf_counter() - start) * 1e3, len(names), fused)


def record_device(state: DelegateState, runtime: Runtime) -> None:
    """What the delegate reports of the device its partitions run on."""
    state.device = f"{runtime.device_info.platform} / {runtime.device_info.name}"
    state.worker_affinity = runtime.device_info.worker_affinity
    state.precision = runtime.precision.name
    state.storage_type = state.options.storage_type.name


def recompile(context: Any, entry: KernelEntry, kernel: Any, lock: AbstractContextManager[Any]) -> None:
    """Compile ``entry``'s partition for the shapes its tensors have now, and swap it in (``lock``:
    the registry's, held while the report's partitions change)."""
    nodes = entry.partition[0]
    prep = Preparing(capture_tensors(context, entry.nodes), entry.report, entry.execution)
    # The partition's nodes must still be the ones Prepare would claim with these shapes.
    supported, unsupported, _ = entry.plan.claim(context, prep, entry.state.options)
    lost = [prep.graph.nodes[i].name for i in nodes if i not in supported]
    if lost:
        why = unsupported.get(lost[0], "not claimed")
        raise DelegateError(f"{lost[0]} cannot run on the delegate with the new shapes: {why}")
    start = time.perf_counter()
    runtime, cache_state = entry.plan.load(context, entry.partition, entry.state.options, prep)
    if (runtime.input_ids, runtime.output_ids) != (entry.runtime.input_ids, entry.runtime.output_ids):
        runtime.close()
        raise DelegateError("the recompiled partition binds other tensors than before")
    old = entry.runtime
    entry.runtime = runtime
    entry.dims, entry.arrays = bind_kernel(context, entry.runtime, kernel)
    old.close()
    info = partition_info(runtime, nodes, cache_state, start)
    with lock:
        partitions = entry.report.partitions
        for k, p in enumerate(partitions):
            if p.nodes == nodes:
                info.recompiles = p.recompiles + 1
                partitions[k] = info
