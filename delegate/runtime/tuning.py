"""Work-group size search: each node's kernel timed on a profiling queue with the sizes
``geometry.candidates`` lists; a size replaces the current one only when at least 3% faster."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .. import cancel
from ..context import model
from ..progress import report_progress
from . import driver
from .device import DeviceInfo
from .driver import OpenCLError, Queue
from .geometry import Grid, Tuning, candidates
from .plan import Launch

log = logging.getLogger(__name__)

#: a size is kept only when it is this much faster (timing noise on a busy machine is larger)
_GAIN = 0.97


@dataclass(frozen=True)
class TunedNode:
    """One node's work-group size and device time before and after tuning."""

    name: str
    before: tuple[int, ...]
    after: tuple[int, ...]
    before_seconds: float
    after_seconds: float
    tried: int


@dataclass(frozen=True)
class TuningReport:
    """What ``Runtime.tune`` did: per node the work-group size before and after, device times."""

    mode: str
    nodes: list[TunedNode]
    seconds: float
    #: why nothing was tuned, when nothing was
    skipped: str = ""

    @property
    def before_seconds(self) -> float:
        return sum(n.before_seconds for n in self.nodes)

    @property
    def after_seconds(self) -> float:
        return sum(n.after_seconds for n in self.nodes)


@dataclass(frozen=True)
class TuningTarget:
    """A node to tune: its name, launch as planned, grid, and whether its kernel requires its
    work-group size (timed, not searched)."""

    name: str
    launch: Launch
    grid: Grid
    required: bool


class _Timer:
    """Device time of launches on a profiling queue: the best of ``repeats`` after one launch
    that compiles (PoCL specialises a kernel per work-group size at its first launch)."""

    def __init__(self, queue: Queue, repeats: int) -> None:
        self._queue = queue
        self._repeats = repeats

    def __call__(self, kernel: Any, launch: tuple[tuple[int, ...], tuple[int, ...]]) -> float:
        cancel.checkpoint()  # exhaustive tuning runs many trials, each a compile on PoCL
        self._queue.timed_launch(kernel, *launch)
        return min(self._queue.timed_launch(kernel, *launch) for _ in range(self._repeats))


def _three_axes(size: tuple[int, ...]) -> tuple[int, int, int]:
    """A launch's local size on three axes (1 past its dimensions)."""
    x, y, z = (*(int(v) for v in size), 1, 1)[:3]
    return x, y, z


def _tune_one(
    target: TuningTarget, mode: Tuning, info: DeviceInfo, device: driver.Device, timed: _Timer
) -> tuple[TunedNode, Launch | None]:
    """The node's timings and, when it gets another work-group size, its new launch."""
    kernel, _, local_now = target.launch
    grid = target.grid
    limit = driver.kernel_work_group_size(kernel, device)
    current = _three_axes(local_now)
    best_wg, best_time = current, timed(kernel, grid.launch(current, info, limit))
    before_time = best_time
    tried = 1
    if target.required:  # its source fixes the size: nothing to search
        return TunedNode(target.name, current, current, before_time, best_time, tried), None
    for wg in candidates(grid, mode, info, limit):
        if wg == current:
            continue
        tried += 1
        try:
            seconds = timed(kernel, grid.launch(wg, info, limit))
        except OpenCLError:
            continue  # a size this kernel cannot run with
        if seconds < best_time * _GAIN:
            best_wg, best_time = wg, seconds
    if best_wg != current:  # confirm against the current size, measured alternately
        launch_current = grid.launch(current, info, limit)
        launch_best = grid.launch(best_wg, info, limit)
        for _ in range(2):
            before_time = min(before_time, timed(kernel, launch_current))
            best_time = min(best_time, timed(kernel, launch_best))
        if best_time >= before_time * _GAIN:
            best_wg, best_time = current, before_time
    node = TunedNode(target.name, current, best_wg, before_time, best_time, tried)
    return node, None if best_wg == current else Launch(kernel, *grid.launch(best_wg, info, limit))


def tune_nodes(
    targets: Sequence[TuningTarget],
    mode: Tuning,
    repeats: int,
    queue: Queue,
    info: DeviceInfo,
    chosen: Callable[[int, Launch, tuple[int, ...]], None],
    start: float,
) -> TuningReport:
    """Tune every target on the profiling ``queue`` (the tensors already hold data); ``chosen``
    hears at once of each node given another size: its index, new launch and work-group size.
    ``start``: when tuning began (``time.perf_counter``), for the report."""
    device = queue.context.device
    timed = _Timer(queue, repeats)
    tuned: list[TunedNode] = []
    step = f"tuning work-group sizes ({mode.value})"
    for k, target in enumerate(targets):
        report_progress(step, k, len(targets), target.name)
        node, launch = _tune_one(target, mode, info, device, timed)
        if launch is not None:
            chosen(k, launch, node.after)
        tuned.append(node)
    report_progress(step, len(tuned), len(targets))
    report = TuningReport(mode.value, tuned, time.perf_counter() - start)
    log.info(
        "tuned %d nodes (%s) in %.1f s: %d got another work-group size",
        len(tuned),
        mode.value,
        report.seconds,
        sum(t.before != t.after for t in tuned),
    )
    return report


class Tunable(Protocol):
    """What ``tune_context`` needs of a context's launches (launches.ContextLaunches)."""

    def ensure_node_kernels(self) -> None: ...
    def tuning_targets(self) -> list[TuningTarget]: ...
    def set_node_launch(self, k: int, launch: Launch) -> None: ...


def tune_context(
    launches: Tunable,
    ctx: model.InferenceContext,
    context: driver.Context,
    info: DeviceInfo,
    mode: Tuning,
    repeats: int,
    fill_tensors: Callable[[], None],
) -> tuple[TuningReport, bool]:
    """Tune every node of ``ctx`` on a profiling queue of its own: (the report, whether any node
    got another size). Each chosen size goes into ``launches`` and into ``ctx``'s node, so a
    context written afterwards starts tuned. ``fill_tensors`` runs the context once first, so that
    every tensor holds real data. Contexts with variable tensors are not tuned (running a node
    repeatedly would change their state)."""
    start = time.perf_counter()
    if mode == Tuning.NONE:
        return TuningReport(mode.value, [], 0.0, "tuning is off"), False
    if ctx.variable_ids_and_refs:
        return TuningReport(mode.value, [], 0.0, "the context has variable tensors"), False
    launches.ensure_node_kernels()
    queue = driver.Queue(context, profiling=True)
    changed = False

    def chosen(k: int, launch: Launch, work_group: tuple[int, ...]) -> None:
        nonlocal changed
        changed = True
        launches.set_node_launch(k, launch)
        op = ctx.nodes[k].gpu_op
        if op is not None:
            op.work_group_size = model.Int3(*work_group)

    try:
        fill_tensors()
        return tune_nodes(launches.tuning_targets(), mode, repeats, queue, info, chosen, start), changed
    finally:
        queue.finish()
        queue.release()
