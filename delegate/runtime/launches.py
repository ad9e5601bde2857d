"""Every launch of a loaded context, bound: input conversions, nodes, output conversions.

Each node's source is assembled (source.py), its constants uploaded (constants.py) and its
arguments resolved (binding.py); all kernels are then built as one program. When one persistent
kernel will run every node, the node kernels are built only if a tool, tuning or a failed
persistent build needs them: a warm start then loads one program binary of the node code instead
of two. The input and output conversions join the persistent kernels' runs (one launch per call
instead of three); those left to run by themselves build in the persistent kernels' batch (in
helper processes beside them, where the platform builds so), the others only for a plan without
persistent kernels. ``schedule`` plans the
launches: persistent kernels where they can run, else one by one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..context import model
from ..context.model import CalculationsPrecision
from ..errors import ProgramBuildError
from . import build_processes, driver
from . import persistent as persistent_kernels
from .allocation import Allocation
from .binding import BoundKernel, KernelBinder, set_kernel_args
from .constants import ConstantStore
from .conversions import conversion_op
from .device import DeviceInfo
from .driver import CL_MEM_READ_WRITE, Context, MemObject, Program
from .geometry import Grid, grid_of, launch_of, required_work_group
from .graph import RuntimeTensor, semantic
from .plan import (
    MAX_PERSISTENT_SOURCE,
    Launch,
    PlanMode,
    Schedule,
    Transfer,
    persistent_runs,
    persistent_segments,
    within_source_budget,
)
from .programs import ProgramBuilder
from .resources import Resources
from .source import SourceError, assemble
from .tuning import TuningTarget

#: a launch's global and local sizes
_Sizes = tuple[tuple[int, ...], tuple[int, ...]]


class ContextLaunches:
    """The launches of ``ctx`` (tensors checked, memory allocated) on ``context``, bound to
    ``allocation`` and to constants uploaded here (``arena``: into one arena, which persistent
    kernels read); what is made is owned by ``owner``."""

    def __init__(
        self,
        ctx: model.InferenceContext,
        tensors: Mapping[int, RuntimeTensor],
        allocation: Allocation,
        *,
        context: Context,
        info: DeviceInfo,
        builder: ProgramBuilder,
        owner: Resources,
        arena: bool,
    ) -> None:
        self._context, self._info, self._builder, self._owner = context, info, builder, owner
        self._tensors = tensors
        #: the selector rewrites of the nodes' codes, shared by the nodes of one code (source.assemble)
        self._rewrites: dict[tuple, tuple[str, dict[str, set[str]]]] = {}
        self.constants = ConstantStore(context, info, owner, arena=arena)
        self.binder = KernelBinder(builder, allocation, owner)
        self.inputs = [tensors[i] for i in ctx.input_ids]
        self.outputs = [tensors[i] for i in ctx.output_ids]
        self.node_names = [node.name or f"node {index}" for index, node in enumerate(ctx.nodes)]
        #: why the persistent kernel is not used, when it failed to build
        self.persistent_error: str | None = None
        #: why some nodes the persistent kernels could take run one by one (their source)
        self.persistent_note: str | None = None
        #: per node, its grid (tuning searches sizes for it)
        self.grids: list[Grid] = []
        precision = CalculationsPrecision(ctx.precision)
        ins = [self._conversion(t, s, True) for t, s in zip(self.inputs, allocation.input_staging, strict=True)]
        nodes = [self._node(node, self.node_names[k], precision) for k, node in enumerate(ctx.nodes)]
        outs = [self._conversion(t, s, False) for t, s in zip(self.outputs, allocation.output_staging, strict=True)]
        self._nodes = [k for k, _ in nodes]
        #: the nodes' argument values with constants as places in the arena (persistent kernels)
        self._arena_values = [list(k.values) for k in self._nodes]
        self.constants.seal([k.values for k, _ in ins + nodes + outs])
        self._lazy = (
            self.constants.has_arena
            and len(self._nodes) >= 2
            and all(persistent_kernels.eligible(k.src) for k in self._nodes)
        )
        self._ins, self._outs = [k for k, _ in ins], [k for k, _ in outs]
        #: every bound kernel in ``launches``' order (conversions, nodes, conversions)
        self._bound = self._ins + self._nodes + self._outs
        #: the conversions not built yet: those of a persistent load, until its kernels build
        self._unbuilt: list[BoundKernel] = self._ins + self._outs if self._lazy else []
        #: the transfers of the conversions the schedule runs inside a persistent kernel, by their
        #: position in ``launches``: the staging buffer is that kernel's argument
        self._folded: dict[int, Transfer] = {}
        if not self._lazy:
            self.binder.make(self._bound)
        #: every launch one by one, in order; a kernel not built yet (see the module docstring)
        #: has kernel None until ``ensure_node_kernels`` or the persistent build
        self.launches = [Launch(k.kernel, *geometry) for k, geometry in ins + nodes + outs]
        #: positions of the nodes in ``launches``
        self.node_launches = range(len(ins), len(ins) + len(nodes))
        #: node positions whose kernel requires its work-group size (tuning leaves them alone)
        self.required = self._required_work_groups(context.device)

    def _conversion(self, t: RuntimeTensor, staging: MemObject, to_device: bool) -> tuple[BoundKernel, _Sizes]:
        op = conversion_op(t, to_device)
        src = assemble(op, {"tensor": t.desc}, self._info, CalculationsPrecision.F32)
        name = f"{'input' if to_device else 'output'} {t.tensor_id}"
        kernel = self.binder.bind(src, name, {"tensor": t}, {"staging": staging}, {})
        return kernel, launch_of(op, grid_of(op, t, name), self._info)

    def _node(self, node: model.CLNode, name: str, precision: CalculationsPrecision) -> tuple[BoundKernel, _Sizes]:
        op = node.gpu_op
        assert op is not None
        bound = {n: self._tensors[i] for n, i in zip(op.src_tensors_names, node.input_ids, strict=True)}
        bound.update({n: self._tensors[i] for n, i in zip(op.dst_tensors_names, node.output_ids, strict=True)})
        args = op.arguments or model.Arguments()
        object_tensors = {e.key: e.value for e in args.tensor_objects if e.key and e.value}
        try:
            src = assemble(op, {n: t.desc for n, t in bound.items()}, self._info, precision, self._rewrites)
        except SourceError as exc:
            raise ProgramBuildError(name, str(exc), op.code or "") from None
        objects = self.constants.objects(op, name)
        kernel = self.binder.bind(src, name, bound, objects, object_tensors)
        dst = bound.get(op.dst_tensors_names[0]) if op.dst_tensors_names else None
        grid = grid_of(op, dst, name)
        self.grids.append(grid)
        return kernel, launch_of(op, grid, self._info)

    def _required_work_groups(self, device: driver.Device) -> set[int]:
        """The nodes whose kernel requires a work-group size (``reqd_work_group_size``); a node
        the context launches with another size is refused: it could not run."""
        fixed: set[int] = set()
        for k, index in enumerate(self.node_launches):
            required = required_work_group(self._nodes[k].src, self.launches[index].kernel, device)
            if required is None:
                continue
            fixed.add(k)
            local_size = self.launches[index].local_size
            launched = tuple(local_size) + (1,) * (3 - len(local_size))
            if launched != required:
                raise semantic(
                    f"node {self.node_names[k]!r}: its kernel requires work-group size {required} "
                    f"(reqd_work_group_size) but the context launches it with {launched}; the context "
                    "was edited or damaged: compile the model again (delete the cache entry)"
                )
        return fixed

    @property
    def transfers(self) -> tuple[list[Transfer], list[Transfer]]:
        """The input and output transfers through the conversions (built now if they are not and
        the schedule does not run them inside a persistent kernel)."""
        own = [(i, k) for i, k in enumerate(self._bound) if i not in self.node_launches]
        self._make([k for i, k in own if i not in self._folded and k.kernel is None])
        transfers = [self._folded.get(i) or _transfer(k) for i, k in own]
        return transfers[: len(self._ins)], transfers[len(self._ins) :]

    def ensure_node_kernels(self) -> None:
        """Build the node kernels a persistent load left for later (see the module docstring)."""
        if not self._lazy:
            return
        self._make(self._unbuilt + self._nodes)
        self._lazy = False

    def _make(
        self, kernels: list[BoundKernel], alongside: Sequence[tuple[str, str]] = ()
    ) -> list[Program | ProgramBuildError]:
        """``binder.make`` of ``kernels`` (and ``alongside``), their launches then given the kernels."""
        if not kernels and not alongside:
            return []
        others = self.binder.make(kernels, alongside)
        self._unbuilt = [k for k in self._unbuilt if k.kernel is None]
        made = {id(k) for k in kernels}
        for index, k in enumerate(self._bound):
            if id(k) in made:
                self.launches[index] = self.launches[index]._replace(kernel=k.kernel)
        return others

    def tuning_targets(self) -> list[TuningTarget]:
        """Every node as ``tuning.tune_nodes`` searches it (node kernels built)."""
        return [
            TuningTarget(self.node_names[k], self.launches[i], self.grids[k], k in self.required)
            for k, i in enumerate(self.node_launches)
        ]

    def set_node_launch(self, k: int, launch: Launch) -> None:
        """Launch node ``k`` as ``launch`` (another work-group size) from the next schedule on."""
        self.launches[self.node_launches[k]] = launch

    def one_by_one_names(self) -> list[str]:
        return [
            *(f"input {t.tensor_id}" for t in self.inputs),
            *self.node_names,
            *(f"output {t.tensor_id}" for t in self.outputs),
        ]

    def schedule(self) -> Schedule:
        """The launches a run enqueues: runs of consecutive nodes a persistent kernel can take
        become one launch each when persistent kernels are on (constants in an arena) and have
        not failed to build; every other launch by itself."""
        self._folded = {}
        if self.constants.has_arena and self.persistent_error is None:
            try:
                return self._persistent_schedule()
            except ProgramBuildError as exc:  # the plan below builds the conversions (raising where they fail)
                self.persistent_error = f"the persistent kernel did not build: {exc}"
        self.ensure_node_kernels()
        return Schedule(tuple(self.launches), tuple(self.one_by_one_names()), PlanMode.ONE_BY_ONE)

    def _free_grid(self, k: int) -> tuple[int, ...] | None:
        """Node ``k``'s grid (work-items per launch axis) when its kernel takes any work-group size
        (none required) and its axes launch in order; else None."""
        grid = self.grids[k]
        if k in self.required or grid.order != (0, 1, 2):
            return None
        return grid.size[: grid.dims]

    def _persistent_schedule(self) -> Schedule:
        # The conversions take part like nodes: one in a persistent kernel's run is one launch
        # fewer per call, each of whose starts wakes the device's sleeping workers (PoCL).
        values = [*(k.values for k in self._ins), *self._arena_values, *(k.values for k in self._outs)]
        kernels = [
            persistent_kernels.NodeKernel(
                bound.src,
                bound_values,
                tuple(launch.global_size),
                tuple(launch.local_size),
                self._free_grid(i - self.node_launches.start) if i in self.node_launches else None,
            )
            for i, (bound, bound_values, launch) in enumerate(zip(self._bound, values, self.launches, strict=True))
        ]
        sizes = persistent_kernels.source_sizes(kernels)
        able = [persistent_kernels.eligible(n.src) for n in kernels]
        eligible = within_source_budget(able, sizes, MAX_PERSISTENT_SOURCE)
        source = sum(size for size, ok in zip(sizes, eligible, strict=True) if ok)
        if eligible != able:
            self.persistent_note = (
                f"the context's kernels have {sum(sizes)} bytes of source, over the {MAX_PERSISTENT_SOURCE} "
                "persistent kernels take (each inlines its nodes' code with their own constants, built anew, "
                "once for nodes alike): the nodes past that much run one by one"
            )
        runs = persistent_runs(
            eligible,
            [n.src.prelude for n in kernels],
            sizes,
            persistent_segments(source, build_processes.part_count(sum(sizes), self._builder.processes)),
        )
        if any(len(run) == 1 and run.start in self.node_launches for run in runs):
            self.ensure_node_kernels()  # those nodes are launched by themselves
        names = self.one_by_one_names()
        long_runs = [run for run in runs if len(run) > 1]
        inside = {i for run in long_runs for i in run if i not in self.node_launches}
        unbuilt = {id(k) for k in self._unbuilt}
        persistent = self._persistent_kernels(
            [(kernels[run.start : run.stop], names[run.start : run.stop]) for run in long_runs],
            [k for i, k in enumerate(self._bound) if id(k) in unbuilt and i not in inside],
        )
        folded: dict[int, Transfer] = {}
        launches, labels = [], []
        for run in runs:
            if len(run) == 1:
                launches.append(self.launches[run.start])
                labels.append(names[run.start])
                continue
            launch, buffers = persistent.pop(0)
            launches.append(launch)
            labels.append(f"persistent {names[run.start]} .. {names[run.stop - 1]}")
            for i in run:
                if i not in self.node_launches:  # a conversion: its staging buffer is an argument here
                    staging = _transfer(self._bound[i]).staging
                    position = next(k for k, b in enumerate(buffers) if b is staging)
                    folded[i] = Transfer(staging, launch.kernel, position)
        self._folded = folded
        mode = PlanMode.PERSISTENT if long_runs else PlanMode.ONE_BY_ONE
        return Schedule(tuple(launches), tuple(labels), mode)

    def _persistent_kernels(
        self, runs: Sequence[tuple[Sequence[persistent_kernels.NodeKernel], list[str]]], conversions: list[BoundKernel]
    ) -> list[tuple[Launch, list]]:
        """A persistent kernel's launch and tensor buffers (its first arguments) for each run of
        (kernels, names), their programs built at once (in helper processes where the platform
        builds faster so, build_processes.py), with ``conversions``: those not built yet that run
        by themselves (the others are built only if a plan without persistent kernels needs them)."""
        units = min(self._info.compute_units, persistent_kernels.MAX_UNITS)
        built = [persistent_kernels.build(nodes, names, units) for nodes, names in runs]
        what = [f"persistent kernel of {names[0]} .. {names[-1]}" for _, names in runs]
        programs = self._make(conversions, [(b.source, w) for b, w in zip(built, what, strict=True)])
        launches = []
        for program, kernel, (_, names) in zip(programs, built, runs, strict=True):
            if isinstance(program, ProgramBuildError):
                raise program
            launches.append((self._persistent_launch(program, kernel, names), kernel.tensor_buffers))
        return launches

    def _persistent_launch(
        self, program: driver.Program, built: persistent_kernels.PersistentKernel, names: list[str]
    ) -> Launch:
        units = min(self._info.compute_units, persistent_kernels.MAX_UNITS)
        handle = self.binder.create(program, built.name, names[0], built.source)
        counters = counter_buffer(self._context, built.counter_words)
        self._owner.memory(counters)
        set_kernel_args(handle, [*built.tensor_buffers, self.constants.arena_buffer, counters], names[0])
        return Launch(handle, (units,), (1,))


def counter_buffer(context: Context, words: int) -> MemObject:
    """A persistent kernel's counters (``words`` of them), zero before its first run; each run
    leaves the counters it used at zero again (persistent.py)."""
    return driver.buffer(context, CL_MEM_READ_WRITE, words * 4, host=np.zeros(words, np.uint32))


def _transfer(conversion: BoundKernel) -> Transfer:
    """The conversion's transfer: its staging buffer, bound to its own kernel's argument."""
    staging = next(i for i, p in enumerate(conversion.src.params) if p.name == "staging")
    value = conversion.values[staging]
    assert isinstance(value, MemObject)
    return Transfer(value, conversion.kernel, staging)
