"""The loaded context: programs built, memory allocated, arguments bound; runs go through C.

``Runtime.load`` does all the work that needs Python (device, programs, memory, kernel
arguments, launch geometry: graph.py, allocation.py, launches.py, plan.py); ``Runtime.run`` is
one call into csrc/runtime.c, which uploads the inputs, enqueues every kernel and downloads the
outputs with no Python per node.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._native import ffi, lib
from ..cache import default_program_dir
from ..context import model
from ..context.model import CalculationsPrecision
from ..context.semantics import check_semantics
from ..errors import ContextFormatError, ExecutionError
from . import driver
from .allocation import Allocation, MemoryReport, TensorAllocator
from .device import DeviceInfo, describe, select_device
from .driver import Device, MemObject
from .geometry import Tuning
from .graph import check_graph, load_model
from .launches import ContextLaunches
from .limits import check_context
from .plan import Launch, NativePlan, PlanMode, failure_message
from .programs import BuildStats, ProgramBuilder
from .resources import Resources
from .source import effective_precision
from .tuning import TunedNode, TuningReport, tune_context

__all__ = ["MemoryReport", "Runtime", "TunedNode", "TuningReport"]


def _cache_folder(cache_dir: str | os.PathLike[str] | bool | None, info: DeviceInfo) -> Path | None:
    """Where program binaries go: a folder given is used; by default the user's cache folder,
    except where the driver keeps its builds itself (PoCL), whose binaries would only cost
    a second compile of every kernel on a cold start."""
    if cache_dir is False:
        return None
    if cache_dir is None or cache_dir is True:
        return None if info.driver_keeps_builds else default_program_dir()
    return Path(cache_dir)


class Runtime:
    """A context loaded on one OpenCL device, ready to run. Not thread-safe: one run at a time."""

    device_info: DeviceInfo
    precision: CalculationsPrecision
    #: the context file's precision; ``precision`` is what it runs as on this device
    stored_precision: CalculationsPrecision
    build_stats: BuildStats
    memory: MemoryReport
    #: where each tensor lives (buffers, offsets, images, staging), for tools
    allocation: Allocation
    #: input and output conversions use the caller's memory directly (see ``load``)
    zero_copy: bool

    @classmethod
    def load(
        cls,
        source: str | os.PathLike[str] | bytes | model.InferenceContext,
        device: str | int | Device | object | None = None,
        *,
        cache_dir: str | os.PathLike[str] | bool | None = None,
        profiling: bool = False,
        zero_copy: bool | None = None,
        persistent: bool | None = None,
    ) -> Runtime:
        """Load a context (file path, bytes or model) on ``device`` (see ``select_device``: an index,
        ``"P:D"``, part of a name, a ``Device`` or a pyopencl Device).

        ``cache_dir``: program-binary cache folder; None for the default
        (``$XDG_CACHE_HOME/tflite-opencl-delegate/programs``, except on drivers that keep their
        builds themselves, PoCL: none), False to disable.
        ``profiling``: enable per-node timing (``run_profiled``).
        ``zero_copy``: the input and output conversion kernels read and write the caller's memory
        directly (a buffer over it, CL_MEM_USE_HOST_PTR) instead of copying through a staging
        buffer; None (default) turns it on for devices sharing host memory
        (CL_DEVICE_HOST_UNIFIED_MEMORY: CPU devices such as PoCL, integrated GPUs).
        ``persistent``: run consecutive nodes as one persistent kernel (runtime/persistent.py: one
        work-group per compute unit walks the nodes, no launch between them); on by default (None
        or True) where the device's platform allows them (runtime/platforms/: devices that are not
        GPUs) when ``profiling`` is off, never on GPUs; False
        launches every node by itself. Nodes it cannot take, and
        every node when its kernel fails to build (``persistent_error`` says why), are launched
        one by one as usual.
        """
        ctx_model, file = load_model(source)
        try:
            return cls(
                ctx_model, device, cache_dir=cache_dir, profiling=profiling, zero_copy=zero_copy, persistent=persistent
            )
        except ContextFormatError as exc:
            if file is None or exc.source != "context":
                raise
            raise ContextFormatError(exc.detail, offset=exc.offset, kind=exc.kind, source=file.source) from None
        finally:
            if file is not None:
                file.close()  # the weights are on the device now

    def __init__(
        self,
        ctx: model.InferenceContext,
        device: str | int | Device | object | None = None,
        *,
        cache_dir: str | os.PathLike[str] | bool | None = None,
        profiling: bool = False,
        zero_copy: bool | None = None,
        persistent: bool | None = None,
    ) -> None:
        """Load the context model ``ctx``; the arguments as for ``load``, which also reads files."""
        self._closed = True  # until the load is complete: a failed load releases what it made here
        self._released = True  # until the load is complete; then until close() has finished
        self._resources = owned = Resources()
        try:
            check_semantics(ctx)  # before a device is touched
            dev = device if isinstance(device, Device) else select_device(device)
            self.device_info = info = describe(dev)
            check_context(ctx, info)  # resource bounds, before anything is allocated or built
            self.zero_copy = info.host_unified_memory if zero_copy is None else zero_copy
            self.stored_precision = CalculationsPrecision(ctx.precision)
            self.precision = effective_precision(self.stored_precision, info)
            self._model = ctx
            self._profiling = profiling
            self._keep_wrapped = False
            self._cl_context = owned.adopt(driver.Context(dev))
            self._queue = owned.adopt(driver.Queue(self._cl_context, profiling))
            self._builder = owned.adopt(ProgramBuilder(self._cl_context, info, _cache_folder(cache_dir, info)))
            self.build_stats = self._builder.stats
            # slice planes off the 4 KiB grid on CPU devices, whose L1 caches they would alias in
            tensors = check_graph(ctx, padded=not info.is_gpu)
            self.allocation = TensorAllocator(self._cl_context, info, tensors, owned).allocate(ctx)
            # persistent kernels where the device's platform allows them (platforms/: not on GPUs)
            arena = info.platform_rules.persistent_kernels(info.is_gpu) and persistent is not False and not profiling
            self._launches = ContextLaunches(
                ctx, tensors, self.allocation, context=self._cl_context, info=info, builder=self._builder,
                owner=owned, arena=arena,
            )  # fmt: skip
            self.memory = self.allocation.report(self._launches.constants.bytes)
            self._plan = self._make_plan()
        except BaseException:
            owned.release()
            raise
        self._closed = self._released = False

    def _make_plan(self) -> NativePlan:
        return NativePlan(
            self._launches.schedule(),
            self._queue,
            self._cl_context,
            self._launches.transfers,
            self._model,
            zero_copy=self.zero_copy,
            keep_wrapped=self._keep_wrapped,
            host_memory_in_place=self.device_info.host_memory_in_place,
        )

    def _install_plan(self) -> None:
        """Replace the plan with one of the current launches (new work-group sizes)."""
        plan = self._make_plan()
        self._plan.release()
        self._plan = plan

    # ------------------------------------------------------------------ what it runs

    @property
    def persistent(self) -> bool:
        """Whether runs launch persistent kernels (see ``load``)."""
        return self._plan.schedule.mode is PlanMode.PERSISTENT

    @property
    def persistent_error(self) -> str | None:
        """Why the persistent kernel is not used, when it failed to build."""
        return self._launches.persistent_error

    @property
    def persistent_note(self) -> str | None:
        """Why some nodes a persistent kernel could take run one by one (the context's source)."""
        return self._launches.persistent_note

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes ``run`` takes, in ``input_ids`` order: BHWC, or BHWDC when D > 1."""
        return [t.host_shape for t in self._launches.inputs]

    @property
    def output_shapes(self) -> list[tuple[int, ...]]:
        return [t.host_shape for t in self._launches.outputs]

    @property
    def input_ids(self) -> list[int]:
        """The context's ``input_ids``: which tensor each ``run`` input is."""
        return [t.tensor_id for t in self._launches.inputs]

    @property
    def output_ids(self) -> list[int]:
        return [t.tensor_id for t in self._launches.outputs]

    @property
    def node_names(self) -> list[str]:
        return list(self._launches.node_names)

    @property
    def launch_names(self) -> list[str]:
        """What each launch of ``launches()`` runs, in the same order: ``input N`` (the conversion
        of input tensor N into its device layout), the node names, then ``output N``; ``persistent
        A .. B`` for a persistent kernel running A to B of ``one_by_one_names`` (conversions too)."""
        return list(self._plan.schedule.labels)

    @property
    def one_by_one_names(self) -> list[str]:
        """What each of ``one_by_one_launches`` runs: ``input N``, the node names, ``output N``;
        a persistent kernel's functions ``n0``, ``n1``, ... run its span of these in order."""
        return self._launches.one_by_one_names()

    @property
    def one_by_one_launches(self) -> list[Launch]:
        """Every launch by itself (conversions, then each node, then conversions), as tuning and
        a plan without persistent kernels launch them; a persistent kernel runs the nodes with
        these sizes too. A node kernel not built yet (persistent loads) has kernel None."""
        return list(self._launches.launches)

    @property
    def model(self) -> model.InferenceContext:
        """The context this Runtime runs; ``tune`` writes the sizes it picks into it."""
        return self._model

    # ------------------------------------------------------------------- run

    def _run(self, inputs: Sequence[np.ndarray], launch_ns: Any) -> list[np.ndarray]:
        if self._closed:
            raise ExecutionError("this Runtime is closed")
        expected = self._launches.inputs
        if len(inputs) != len(expected):
            raise ValueError(f"expected {len(expected)} inputs, got {len(inputs)}")
        arrays = []
        for index, (array, t) in enumerate(zip(inputs, expected, strict=True)):
            a = np.ascontiguousarray(array, dtype=np.float32)
            if a.shape != t.host_shape:
                raise ValueError(f"input {index} (tensor {t.tensor_id}) must have shape {t.host_shape}, not {a.shape}")
            arrays.append(a)
        outputs = [np.empty(t.host_shape, dtype=np.float32) for t in self._launches.outputs]
        failure = self._plan.run(arrays, outputs, launch_ns)
        if failure is not None:
            raise ExecutionError(self._describe_failure(failure))
        return outputs

    def _describe_failure(self, status: Any) -> str:
        launches = self._launches
        return failure_message(
            status, self._plan.schedule, launches.node_launches, launches.node_names, self.device_info.name
        )

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run once: float32 inputs in ``input_ids`` order, outputs in ``output_ids`` order."""
        return self._run(inputs, ffi.NULL)

    def run_profiled(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[tuple[str, float]]]:
        """Run once and time every node on the device: (outputs, [(node name, seconds)])."""
        if not self._profiling:
            raise ExecutionError("load the context with profiling=True to time nodes")
        ns = ffi.new("uint64_t[]", max(len(self._plan.schedule.launches), 1))
        outputs = self._run(inputs, ns)
        names = self._launches.node_names
        return outputs, [(names[k], ns[i] * 1e-9) for k, i in enumerate(self._launches.node_launches)]

    def enqueue_launches_only(self, repeats: int = 1) -> None:
        """Enqueue every launch ``repeats`` times from C, without transfers or waiting (benchmarks)."""
        if self._closed:
            raise ExecutionError("this Runtime is closed")
        status = ffi.new("dlg_run_status *")
        if lib.dlg_enqueue_launches(self._plan.handle, repeats, status) != 0:
            raise ExecutionError(self._describe_failure(status))

    def _run_on_zeros(self) -> None:
        self.run([np.zeros(shape, np.float32) for shape in self.input_shapes])

    def warm_up(self) -> None:
        """Run once on zero inputs, so that a driver finishing its compilation at a kernel's first
        launch (PoCL specialises every kernel per work-group size; with its kernel cache off that
        costs seconds for a MobileNet) does it now rather than in the first real run. Contexts with
        variable tensors are not run (a run would change their state)."""
        if self._closed:
            raise ExecutionError("this Runtime is closed")
        if not self._model.variable_ids_and_refs:
            self._run_on_zeros()

    def tune(self, mode: Tuning | str = Tuning.FAST, repeats: int = 3) -> TuningReport:
        """Search every node's work-group size on a profiling queue and keep the fastest.

        FAST tries a handful of shapes per node, EXHAUSTIVE every power-of-two shape (see
        geometry.candidates); a size replaces the current one only when it is at least 3% faster.
        The chosen sizes go into the plan and into ``model`` (tuning.tune_context), so a context
        written afterwards starts tuned; contexts with variable tensors are not tuned.
        """
        if self._closed:
            raise ExecutionError("this Runtime is closed")
        report, changed = tune_context(
            self._launches, self._model, self._cl_context, self.device_info, Tuning(mode), repeats, self._run_on_zeros
        )
        if changed:
            self._install_plan()  # the new sizes, in persistent kernels too
        return report

    # ------------------------------------------------------------------ for tools and C callers

    def launches(self) -> list[tuple[Any, tuple[int, ...], tuple[int, ...]]]:
        """The launches (pyopencl Kernel, global size, local size) the plan enqueues, for tools and
        comparisons (imports pyopencl)."""
        if self._closed:
            raise ExecutionError("this Runtime is closed")
        wrapper = self._launches.binder.wrapper
        return [(wrapper(k), tuple(g), tuple(loc)) for k, g, loc in self._plan.schedule.launches]

    @property
    def queue(self) -> Any:
        """The plan's queue as a pyopencl CommandQueue, for tools (imports pyopencl; the wrapper holds
        its own reference)."""
        if self._closed or self._queue.handle is None:
            raise ExecutionError("this Runtime is closed")
        import pyopencl as cl

        return cl.CommandQueue.from_int_ptr(self._queue.int_ptr, retain=True)

    @property
    def native_plan(self) -> Any:
        """The ``dlg_plan *`` that ``run`` hands to csrc/runtime.c, for C code that runs the plan
        itself (the plugin's invoke calls ``dlg_run`` with TFLite's tensor memory). Valid until
        ``tune`` replaces the plan or ``close``."""
        if self._closed:
            raise ExecutionError("this Runtime is closed")
        return self._plan.handle

    def keep_host_buffers(self) -> None:
        """Keep the buffers zero-copy transfers make over the caller's memory from one run to the
        next (``dlg_plan.keep_wrapped``), for callers whose memory outlives this Runtime and stays
        where it is between runs, as TFLite's tensors do; by default they are released at the end
        of every run (``run``'s arrays are temporaries). Holds for plans ``tune`` makes too."""
        self._keep_wrapped = True
        self._plan.handle.keep_wrapped = 1

    # --------------------------------------------------------------- release

    def close(self) -> None:
        """Release every OpenCL object; the Runtime cannot run afterwards. A close that Ctrl-C
        interrupted finishes when called again: each step releases only what is left."""
        if self._released:
            return
        self._closed = True
        self._queue.finish()
        self._plan.release()  # buffers zero-copy transfers made over host memory
        self._launches.binder.drop_wrappers()
        self._resources.release()
        self._released = True

    def _release_order(self) -> list[MemObject]:
        """Every memory object, in the order ``close`` releases them (tests)."""
        return self._resources.release_order()

    def __del__(self) -> None:
        # A Runtime dropped without close(): release its OpenCL objects (not while the interpreter
        # shuts down, when the driver may already be gone).
        if not self._released and not sys.is_finalizing():
            self.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
