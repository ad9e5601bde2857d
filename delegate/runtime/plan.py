"""What a run enqueues: typed launches, the plan's mode, and the ``dlg_plan`` csrc/runtime.c runs.

A ``Schedule`` is the launches of a plan with what each runs (its label); in PERSISTENT mode some
of them are persistent kernels (persistent.py) running consecutive nodes, in ONE_BY_ONE mode every
node is a launch of its own. ``NativePlan`` lays a schedule out in C memory with the transfers
and flush policy.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from .._native import ffi, lib
from ..context import model
from .driver import Context, MemObject, Queue
from .opencl import cl_api, error_name

_STAGES = {1: "uploading input", 2: "launching", 3: "downloading output", 4: "finishing", 5: "profiling"}


class Launch(NamedTuple):
    """One kernel launch, geometry resolved (global = groups x local, launch order applied)."""

    kernel: Any  # cl_kernel handle
    global_size: tuple[int, ...]
    local_size: tuple[int, ...]


class PlanMode(Enum):
    #: every node launched by itself
    ONE_BY_ONE = "one by one"
    #: runs of consecutive nodes launched as persistent kernels
    PERSISTENT = "persistent"


@dataclass(frozen=True)
class Schedule:
    """The launches of a plan, in order, with a label each (``Runtime.launch_names``)."""

    launches: tuple[Launch, ...]
    labels: tuple[str, ...]
    mode: PlanMode


@dataclass(frozen=True)
class Transfer:
    """An input or output: its staging buffer and the conversion kernel argument that is bound
    to it (or, with zero copy, to a buffer over the caller's memory)."""

    staging: MemObject
    kernel: Any
    arg_index: int


#: the most node source a context's persistent kernels take, the nodes past it running one by one:
#: a persistent kernel inlines its nodes' code with their own constants, so it is built anew, where
#: node kernels of one text are built once; this bounds a cold start's build (PoCL, 2 cores: 3.1 MB
#: of DenseNet121's persistent kernels built in 13 s more than its node kernels, and it then ran 2x
#: faster). A bound on the whole context instead made a model just past it run all node by node:
#: DenseNet121's 4.1 MB, with 0.1 MB more text, 1.4x slower.
MAX_PERSISTENT_SOURCE = 4 << 20

#: the most source one persistent program holds: a longer run is cut into several programs, since
#: the OpenCL compiler's time grows faster than a program's length (PoCL: the persistent kernel of
#: a 20,000-op chain, 600 nodes and 8 MB in one program, did not build in 15 minutes)
MAX_PERSISTENT_PROGRAM = 1 << 20
#: the most nodes one persistent program runs: each is a step of the kernel function, and PoCL's
#: code generation (work-groups as loops) grows much faster than the steps of one function (a
#: chain of nodes alike, one node function: 47 steps built in 3.5 s, 60 in 5.6 s, 75 in 9.9 s,
#: 94 in 47 s); DenseNet121's 245 nodes make 4 programs within it
MAX_PERSISTENT_STEPS = 64


def persistent_segments(source: int, parts: int) -> int:
    """Segments (persistent_runs) for ``source`` bytes of eligible node source, which the builder
    would make ``parts`` programs: enough that none holds more than MAX_PERSISTENT_PROGRAM."""
    return max(parts, -(-source // MAX_PERSISTENT_PROGRAM))


def within_source_budget(eligible: Sequence[bool], sizes: Sequence[int], budget: int) -> list[bool]:
    """``eligible`` with the nodes past ``budget`` (MAX_PERSISTENT_SOURCE) bytes of eligible source
    (``sizes``), counted in order, made ineligible: those run one by one."""
    kept, used = [], 0
    for ok, size in zip(eligible, sizes, strict=True):
        used += size if ok else 0
        kept.append(ok and used <= budget)
    return kept


def persistent_runs(
    eligible: Sequence[bool], preludes: Sequence[str], sizes: Sequence[int] = (), segments: int = 1
) -> list[range]:
    """The nodes in runs, in order: a run of two or more consecutive eligible nodes of one
    prelude becomes a persistent kernel; every other node is a run of one, launched by itself.
    With ``segments`` > 1, a run is cut where its nodes' source (``sizes``) passes each
    1/``segments`` of the context's eligible source, into pieces of two nodes or more; a piece
    of more than MAX_PERSISTENT_STEPS nodes is cut into even pieces within it."""
    runs = []
    k = 0
    while k < len(eligible):
        end = k
        while end < len(eligible) and eligible[end] and preludes[end] == preludes[k]:
            end += 1
        end = end if end - k >= 2 else k + 1
        runs.append(range(k, end))
        k = end
    if segments >= 2:
        share = sum(sizes[i] for run in runs if len(run) > 1 for i in run) / segments
        runs = [piece for run in runs for piece in (_cut(run, sizes, share) if len(run) > 1 else [run])]
    return [piece for run in runs for piece in _in_steps(run)]


def _in_steps(run: range) -> list[range]:
    """``run`` in pieces of at most MAX_PERSISTENT_STEPS nodes, as even as they come."""
    pieces = -(-len(run) // MAX_PERSISTENT_STEPS)
    bounds = [run.start + len(run) * i // pieces for i in range(pieces + 1)]
    return [range(a, b) for a, b in itertools.pairwise(bounds)] if pieces > 1 else [run]


def _cut(run: range, sizes: Sequence[int], share: float) -> list[range]:
    """``run`` in pieces of about ``share`` bytes of source, each of two nodes or more."""
    pieces, start, total = [], run.start, 0
    for k in run:
        total += sizes[k]
        if total >= share and k + 1 - start >= 2 and run.stop - (k + 1) >= 2:
            pieces.append(range(start, k + 1))
            start, total = k + 1, 0
    pieces.append(range(start, run.stop))
    return pieces


def failure_message(status: Any, schedule: Schedule, nodes: range, node_names: Sequence[str], device: str) -> str:
    """What a failed run's ``dlg_run_status`` says: the error, the stage, and where: the launch
    (a persistent plan's label) or the node (``nodes``: the node positions one by one)."""
    stage = _STAGES.get(status.stage, "running")
    where = ""
    if status.stage == 2 or status.stage == 5:
        i = status.index
        if schedule.mode is PlanMode.PERSISTENT and 0 <= i < len(schedule.labels):
            where = f" launch {i} ({schedule.labels[i]})"
        elif i in nodes:
            where = f" node {node_names[i - nodes.start]!r}"
        else:
            where = f" launch {i} (input/output conversion)"
    return f"{error_name(status.cl_error)} while {stage}{where} on {device}"


class NativePlan:
    """A schedule in C memory (``handle``: the ``dlg_plan *``), with its transfers; ``release``
    lets go of the buffers zero-copy transfers made over host memory."""

    def __init__(
        self,
        schedule: Schedule,
        queue: Queue,
        context: Context,
        transfers: tuple[Sequence[Transfer], Sequence[Transfer]],
        ctx: model.InferenceContext,
        *,
        zero_copy: bool,
        keep_wrapped: bool,
        host_memory_in_place: bool = False,
    ) -> None:
        self.schedule = schedule
        launches = schedule.launches
        c_launches = ffi.new("dlg_launch[]", max(len(launches), 1))
        for i, (kernel, global_size, local_size) in enumerate(launches):
            c = c_launches[i]
            c.kernel = kernel
            c.work_dim = len(global_size)
            for axis in range(len(global_size)):
                c.global_size[axis] = global_size[axis]
                c.local_size[axis] = local_size[axis]
        inputs, outputs = transfers
        c_inputs, c_outputs = _transfers(inputs, zero_copy), _transfers(outputs, zero_copy)
        plan = ffi.new("dlg_plan *")
        plan.api = cl_api()
        plan.queue = queue.handle
        plan.context = context.handle
        plan.inputs, plan.inputs_count = c_inputs, len(inputs)
        plan.launches, plan.launches_count = c_launches, len(launches)
        plan.outputs, plan.outputs_count = c_outputs, len(outputs)
        plan.need_flush = ctx.need_flush
        plan.flush_periodically = ctx.flush_periodically
        plan.flush_period = ctx.flush_period
        plan.keep_wrapped = keep_wrapped
        plan.host_memory_in_place = host_memory_in_place
        self._memory = (c_launches, c_inputs, c_outputs)  # what the plan points at
        self.handle = plan

    def run(self, inputs: Sequence[Any], outputs: Sequence[Any], launch_ns: Any) -> Any:
        """One ``dlg_run`` of the plan over host arrays (C-contiguous, in the plan's input and output
        order): None when it succeeded, else the ``dlg_run_status`` saying where it failed."""
        c_in = ffi.new("void *[]", [ffi.from_buffer(a) for a in inputs] or [ffi.NULL])
        c_out = ffi.new("void *[]", [ffi.from_buffer(o, require_writable=True) for o in outputs] or [ffi.NULL])
        status = ffi.new("dlg_run_status *")
        return None if lib.dlg_run(self.handle, c_in, c_out, launch_ns, status) == 0 else status

    def release(self) -> None:
        if self.handle is not None:
            lib.dlg_plan_release(self.handle)
            self.handle = None


def _transfers(transfers: Sequence[Transfer], zero_copy: bool) -> Any:
    arr = ffi.new("dlg_transfer[]", max(len(transfers), 1))
    for i, t in enumerate(transfers):
        arr[i].buffer = t.staging.handle
        arr[i].bytes = t.staging.size
        arr[i].kernel = t.kernel
        arr[i].arg_index = t.arg_index
        arr[i].zero_copy = zero_copy
    return arr
