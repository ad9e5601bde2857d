"""The loaded context: programs built, memory allocated, arguments bound; runs go through C.

``Runtime.load`` does all the work that needs Python (device, programs, memory, kernel
arguments, launch geometry); ``Runtime.run`` is one call into csrc/runtime.c, which uploads the
inputs, enqueues every kernel and downloads the outputs with no Python per node.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._native import ffi, lib
from ..context import ContextFile, model
from ..context.model import CalculationsPrecision, DataType, TensorStorageType, TensorToGrid
from ..context.schedule import schedule_violation
from ..errors import ContextFormatError, DeviceResourceError, ExecutionError, ProgramBuildError
from ..progress import report_progress
from . import driver, memory
from . import persistent as persistent_kernels
from .device import DeviceInfo, describe, select_device
from .driver import CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, Device, MemObject, OpenCLError
from .geometry import Grid, Tuning, candidates
from .limits import check_context, check_native
from .opencl import cl_api, error_name
from .persistent import ArenaSlice
from .programs import BuildStats, ProgramBuilder, default_cache_dir
from .source import KernelSource, SourceError, assemble, effective_precision

log = logging.getLogger(__name__)

_REQUIRED_SIZE = re.compile(r"reqd_work_group_size\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def _required_in_source(src: KernelSource) -> tuple[int, ...] | None:
    """The ``reqd_work_group_size`` a kernel's source declares, if any."""
    match = _REQUIRED_SIZE.search(src.body) if "reqd_work_group_size" in src.body else None
    return None if match is None else tuple(int(v) for v in match.groups())


_STAGES = {1: "uploading input", 2: "launching", 3: "downloading output", 4: "finishing", 5: "profiling"}
_DEFAULT_WORK_GROUP = (8, 4, 1)

# Conversion kernels between a float32 BHWDC staging buffer and a tensor in any storage.
_CONVERSION_HEAD = """
MAIN_FUNCTION($0) {
  int gx = get_global_id(0);
  int gy = get_global_id(1);
  int s = get_global_id(2);
  int B = args.tensor.Batch(); int D = args.tensor.Depth(); int W = args.tensor.Width();
  int H = args.tensor.Height(); int C = args.tensor.Channels();
  if (gx >= W * B || gy >= H * D || s >= args.tensor.Slices()) return;
  // Integer division is slow on CPUs (a call or a long-latency instruction per work-item): the
  // usual batch 1, depth 1 tensors skip it (about 25% of this kernel on PoCL).
  int x = gx, b = 0, y = gy, z = 0;
  if (B != 1) { x = gx / B; b = gx % B; }
  if (D != 1) { y = gy / D; z = gy % D; }
  int base = (((b * H + y) * W + x) * D + z) * C + s * 4;
"""

_TO_DEVICE = (
    _CONVERSION_HEAD
    + """  __global float* src = args.staging.GetPtr();
  float4 v = (float4)(0.0f);
  v.x = src[base];
  if (s * 4 + 1 < C) v.y = src[base + 1];
  if (s * 4 + 2 < C) v.z = src[base + 2];
  if (s * 4 + 3 < C) v.w = src[base + 3];
  args.tensor.Write(v, x, y, z, s, b);
}
"""
)

_FROM_DEVICE = (
    _CONVERSION_HEAD
    + """  __global float* dst = args.staging.GetPtr();
  float4 v = convert_float4(args.tensor.Read(x, y, z, s, b));
  dst[base] = v.x;
  if (s * 4 + 1 < C) dst[base + 1] = v.y;
  if (s * 4 + 2 < C) dst[base + 2] = v.z;
  if (s * 4 + 3 < C) dst[base + 3] = v.w;
}
"""
)


#: Pixels of a row per work-item in the row conversions (batch 1, depth 1: an image's input),
#: for tensors of up to _ROW_SLICES slices (the code is unrolled over slices).
_ROW_PIXELS = 8
_ROW_SLICES = 4


def _row_conversion_code(channels: int, slices: int, to_device: bool) -> str:
    """A conversion for batch 1, depth 1 tensors: a work-item moves ``_ROW_PIXELS`` pixels of a
    row, every slice, with the channel count a literal (no lane checks at run time). On PoCL about
    3x faster than the per-element kernels for MobileNetV2's 224x224x3 input (150 -> 47 us)."""
    lines = []
    for s in range(slices):
        lanes = [f"x * {channels} + {s * 4 + k}" if s * 4 + k < channels else None for k in range(4)]
        if to_device:
            values = ", ".join(f"row[{i}]" if i else "0.0f" for i in lanes)
            lines.append(f"    args.tensor.Write((float4)({values}), x, y, 0, {s}, 0);\n")
        else:
            lines.append(f"    {{\n    float4 v = convert_float4(args.tensor.Read(x, y, 0, {s}, 0));\n")
            lines += [f"    row[{i}] = v.{'xyzw'[k]};\n" for k, i in enumerate(lanes) if i]
            lines.append("    }\n")
    return f"""
MAIN_FUNCTION($0) {{
  int x0 = get_global_id(0) * {_ROW_PIXELS};
  int y = get_global_id(1);
  int W = args.tensor.Width();
  if (x0 >= W || y >= args.tensor.Height()) return;
  __global float* row = args.staging.GetPtr();
  row += y * W * {channels};
  int end = x0 + {_ROW_PIXELS} < W ? x0 + {_ROW_PIXELS} : W;
  for (int x = x0; x < end; ++x) {{
{"".join(lines)}  }}
}}
"""


@dataclass(frozen=True)
class MemoryReport:
    """Device memory of a loaded context: tensors (with and without sharing) and constants."""

    #: bytes of device memory holding runtime tensors (shared arena, textures, variables)
    tensor_bytes: int
    #: the largest sum of sizes of tensors alive at the same time (what perfect sharing needs)
    lower_bound_bytes: int
    #: what the tensors would take with no sharing at all
    unshared_bytes: int
    #: constant objects (weights, biases) uploaded once
    constant_bytes: int


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
class _Tensor:
    """A runtime tensor: id, descriptor and shape."""

    tensor_id: int
    desc: model.TensorDescriptor
    shape: memory.Shape

    @property
    def host_shape(self) -> tuple[int, ...]:
        s = self.shape
        return (s.b, s.h, s.w, s.d, s.c) if s.d > 1 else (s.b, s.h, s.w, s.c)


@dataclass
class _Pending:
    """A kernel waiting for its program: source, node name, argument values; then the kernel."""

    src: KernelSource
    node: str
    values: list[Any]
    kernel: Any = None


def _load_model(source: Any) -> tuple[model.InferenceContext, ContextFile | None]:
    if isinstance(source, model.InferenceContext):
        return source, None
    if isinstance(source, (bytes, bytearray, memoryview)):
        file = ContextFile(source)
    else:
        file = ContextFile.open(os.fspath(source))
    try:
        check_native(file.root)  # before a Python object is made of each node
    except BaseException:
        file.close()
        raise
    return file.to_model(), file


def _semantic(message: str) -> ContextFormatError:
    return ContextFormatError(message, kind="semantic", source="context")


class Runtime:
    """A context loaded on one OpenCL device, ready to run. Not thread-safe: one run at a time."""

    device_info: DeviceInfo
    precision: CalculationsPrecision
    build_stats: BuildStats
    memory: MemoryReport
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
        (``$XDG_CACHE_HOME/tflite-opencl-delegate/programs``), False to disable.
        ``profiling``: enable per-node timing (``run_profiled``).
        ``zero_copy``: the input and output conversion kernels read and write the caller's memory
        directly (a buffer over it, CL_MEM_USE_HOST_PTR) instead of copying through a staging
        buffer; None (default) turns it on for devices sharing host memory
        (CL_DEVICE_HOST_UNIFIED_MEMORY: CPU devices such as PoCL, integrated GPUs).
        ``persistent``: run consecutive nodes as one persistent kernel (runtime/persistent.py: one
        work-group per compute unit walks the nodes, no launch between them); on by default (None
        or True) for devices that are not GPUs when ``profiling`` is off, never on GPUs; False
        launches every node by itself. Nodes it cannot take, and
        every node when its kernel fails to build (``persistent_error`` says why), are launched
        one by one as usual.
        """
        rt = cls.__new__(cls)
        rt._closed = True
        ctx_model, file = _load_model(source)
        try:
            rt._load(ctx_model, device, cache_dir, profiling, zero_copy, persistent)
        except BaseException:
            rt._release()
            raise
        finally:
            if file is not None:
                file.close()
        rt._closed = False
        return rt

    # ------------------------------------------------------------------ load

    def _load(
        self,
        ctx: model.InferenceContext,
        device: Any,
        cache_dir: Any,
        profiling: bool,
        zero_copy: bool | None,
        persistent: bool | None,
    ) -> None:
        self._keep: list[Any] = []  # OpenCL objects and cffi memory the C plan points at
        self._kernel_handles: list[Any] = []  # cl_kernel handles this Runtime created (released in _release)
        self._kernel_objects: dict[int, Any] = {}  # pyopencl Kernels over the handles, made on demand
        self._staging_args: dict[int, tuple[Any, int]] = {}  # staging buffer -> conversion kernel, arg
        dev = device if isinstance(device, Device) else select_device(device)
        self.device_info = info = describe(dev)
        check_context(ctx, info)  # resource bounds, before anything is allocated or built
        self.zero_copy = info.host_unified_memory if zero_copy is None else zero_copy
        self.precision = effective_precision(CalculationsPrecision(ctx.precision), info)
        self._cl_context = driver.Context(dev)
        self._queue = driver.Queue(self._cl_context, profiling)
        self._profiling = profiling
        # persistent kernels only on devices that are not GPUs (their constants are sub-buffers of
        # one arena, and NVIDIA's driver crashed releasing sub-buffers; a GPU gains nothing anyway)
        wanted = not info.is_gpu and persistent is not False
        #: constants go into one arena (sub-buffers for the node kernels) when a persistent kernel may read them
        self._arena: list[tuple[int, bytes]] | None = [] if wanted and not profiling else None
        self._arena_size = 0
        self.persistent_error: str | None = None
        if cache_dir is False:
            folder = None
        else:
            folder = Path(cache_dir) if cache_dir not in (None, True) else default_cache_dir()
        self._builder = ProgramBuilder(self._cl_context, info, folder)
        self.build_stats = self._builder.stats

        self._tensors = self._check_graph(ctx)
        self._allocate_tensors(ctx)
        launches: list[tuple[Any, tuple[int, ...], tuple[int, ...]]] = []
        self._node_names: list[str] = []
        self._grids: list[Grid] = []  # per node, for tuning
        self._model = ctx
        self._constant_bytes = 0
        self._inputs = [self._tensors[i] for i in ctx.input_ids]
        self._outputs = [self._tensors[i] for i in ctx.output_ids]
        self._input_staging = [self._staging(t) for t in self._inputs]
        self._output_staging = [self._staging(t) for t in self._outputs]
        for t, staging in zip(self._inputs, self._input_staging, strict=True):
            launches.append(self._conversion(t, staging, _TO_DEVICE, f"input {t.tensor_id}"))
        first_node = len(launches)
        for index, node in enumerate(ctx.nodes):
            name = node.name or f"node {index}"
            self._node_names.append(name)
            launches.append(self._node_launch(node, name, ctx))
        self._node_launches = range(first_node, first_node + len(ctx.nodes))
        for t, staging in zip(self._outputs, self._output_staging, strict=True):
            launches.append(self._conversion(t, staging, _FROM_DEVICE, f"output {t.tensor_id}"))
        # the nodes as a persistent kernel reads them: constants as places in the arena
        self._node_values = [list(launches[i][0].values) for i in self._node_launches]
        self._seal_arena([pending for pending, _, _ in launches])
        self._node_sources = [launches[i][0].src for i in self._node_launches]
        # When one persistent kernel will run every node, the node kernels are built only if a
        # tool, tuning or a failed persistent build needs them: a warm start then loads one
        # program binary of the node code instead of two.
        lazy = (
            self._arena is not None
            and len(ctx.nodes) >= 2
            and all(map(persistent_kernels.eligible, self._node_sources))
        )
        self._pending_nodes = [launches[i][0] for i in self._node_launches] if lazy else None
        self._make_kernels([p for i, (p, _, _) in enumerate(launches) if not lazy or i not in self._node_launches])
        launches = [(pending.kernel, global_size, local_size) for pending, global_size, local_size in launches]
        # node positions tuning leaves alone
        self._required_sizes = self._required_work_groups(launches, from_source=lazy)
        self._staging_args = {ptr: (pending.kernel, index) for ptr, (pending, index) in self._staging_args.items()}
        #: every launch one by one (conversions and nodes); the plan runs these or persistent kernels
        self._launches = launches
        self._install_plan()
        self.memory = MemoryReport(
            tensor_bytes=self._tensor_bytes,
            lower_bound_bytes=self._lower_bound,
            unshared_bytes=self._unshared_bytes,
            constant_bytes=self._constant_bytes,
        )

    def _check_graph(self, ctx: model.InferenceContext) -> dict[int, _Tensor]:
        tensors: dict[int, _Tensor] = {}
        for t in ctx.tensors:
            if t.id in tensors:
                raise _semantic(f"tensor id {t.id} is declared twice")
            if t.desc is None:
                raise _semantic(f"tensor {t.id} has no descriptor")
            try:
                shape = memory.Shape.of(t.desc)
                memory.element_bytes(t.desc)
            except ValueError as exc:
                raise _semantic(f"tensor {t.id}: {exc}") from None
            if t.desc.storage_type == TensorStorageType.UNKNOWN:
                raise _semantic(f"tensor {t.id} has storage type UNKNOWN")
            if t.desc.storage_type == TensorStorageType.SINGLE_TEXTURE_2D and shape.c > 4:
                raise _semantic(f"tensor {t.id} is a SINGLE_TEXTURE_2D with {shape.c} channels (at most 4)")
            tensors[t.id] = _Tensor(t.id, t.desc, shape)
        for where, ids in [("input_ids", ctx.input_ids), ("output_ids", ctx.output_ids)]:
            for i in ids:
                if i not in tensors:
                    raise _semantic(f"{where} names tensor {i}, which is not declared")
        for index, node in enumerate(ctx.nodes):
            op = node.gpu_op
            if op is None:
                raise _semantic(f"node {index} ({node.name}) has no gpu_op")
            for i in [*node.input_ids, *node.output_ids]:
                if i not in tensors:
                    raise _semantic(f"node {index} ({node.name}) uses tensor {i}, which is not declared")
            if len(op.src_tensors_names) != len(node.input_ids):
                raise _semantic(
                    f"node {index} ({node.name}): {len(node.input_ids)} inputs but "
                    f"{len(op.src_tensors_names)} src_tensors_names"
                )
            if len(op.dst_tensors_names) != len(node.output_ids):
                raise _semantic(
                    f"node {index} ({node.name}): {len(node.output_ids)} outputs but "
                    f"{len(op.dst_tensors_names)} dst_tensors_names"
                )
        problem = schedule_violation(ctx)
        if problem is not None:
            raise _semantic(problem)
        return tensors

    # ---------------------------------------------------------------- memory

    def _image(self, flags: int, data_type: Any, dims: tuple[int, ...], channels: int = 4, **kwargs: Any) -> MemObject:
        """An image of float (or half, for FLOAT16) pixels of 1, 2 or 4 channels (driver.image)."""
        order = {1: driver.CL_R, 2: driver.CL_RG}.get(channels, driver.CL_RGBA)
        half = data_type == DataType.FLOAT16
        kind = driver.CL_HALF_FLOAT if half else driver.CL_FLOAT
        size = int(np.prod(dims)) * {1: 1, 2: 2}.get(channels, 4) * (2 if half else 4)
        return driver.image(self._cl_context, flags, order, kind, dims, size=size, **kwargs)

    def _check_image(self, t: _Tensor, dims: tuple[int, ...]) -> None:
        info = self.device_info
        st = TensorStorageType(t.desc.storage_type)
        if st == TensorStorageType.IMAGE_BUFFER:
            limit: tuple[int, ...] = (info.image_buffer_max_pixels,)
        elif st in (TensorStorageType.TEXTURE_2D, TensorStorageType.SINGLE_TEXTURE_2D):
            limit = info.image2d_max
        elif st == TensorStorageType.TEXTURE_ARRAY:
            limit = (*info.image2d_max, info.image_array_max_layers)
        else:
            limit = info.image3d_max
        if not info.images:
            raise DeviceResourceError(f"tensor {t.tensor_id} uses {st.name}, but {info.name} has no images")
        if any(d > m for d, m in zip(dims, limit, strict=True)):
            raise DeviceResourceError(
                f"tensor {t.tensor_id} needs a {st.name} of {'x'.join(map(str, dims))} pixels; "
                f"{info.name} allows at most {'x'.join(map(str, limit))}: use BUFFER storage"
            )

    def _allocate_tensors(self, ctx: model.InferenceContext) -> None:
        n = len(ctx.nodes)
        first: dict[int, int] = {i: -1 for i in ctx.input_ids}
        last: dict[int, int] = {i: n for i in ctx.output_ids}
        for index, node in enumerate(ctx.nodes):
            for i in [*node.input_ids, *node.output_ids]:
                first[i] = min(first.get(i, index), index)
                last[i] = max(last.get(i, index), index)
        for i in first:
            last.setdefault(i, first[i])
        variables: dict[int, list[int]] = {}
        for pair in ctx.variable_ids_and_refs:
            if pair.first not in self._tensors:
                raise _semantic(f"variable_ids_and_refs names tensor {pair.first}, which is not declared")
            variables.setdefault(pair.second, []).append(pair.first)
        variable_ids = {i for ids in variables.values() for i in ids}

        lifetimes = {
            i: memory.Lifetime(i, first[i], last[i], memory.storage_bytes(self._tensors[i].desc)) for i in first
        }
        self._lower_bound = memory.lower_bound(list(lifetimes.values()))
        self._unshared_bytes = sum(lt.size for lt in lifetimes.values())
        info = self.device_info
        self._buffers: dict[int, MemObject] = {}
        self._buffer_offsets: dict[int, int] = {}  # bytes into the buffer (the arena's tensors)
        self._images: dict[int, MemObject] = {}
        total = 0

        def fits(nbytes: int, what: str) -> None:
            if nbytes > info.max_mem_alloc_bytes:
                raise DeviceResourceError(
                    f"{what} needs {nbytes} bytes in one allocation; {info.name} allows at most "
                    f"{info.max_mem_alloc_bytes} (CL_DEVICE_MAX_MEM_ALLOC_SIZE)"
                )

        # Variables: one persistent allocation per ref, zero-initialised.
        for ref, ids in variables.items():
            descs = [self._tensors[i].desc for i in ids]
            size = max(memory.storage_bytes(d) for d in descs)
            fits(size, f"variable tensor {ids[0]} (ref {ref})")
            t0 = self._tensors[ids[0]]
            if t0.desc.storage_type in memory.BUFFER_BACKED:
                buf = driver.buffer(self._cl_context, CL_MEM_READ_WRITE, size, host=np.zeros(size, np.uint8))
                for i in ids:
                    self._bind_buffer(i, buf)
            else:
                if any(d != t0.desc for d in descs):
                    raise _semantic(f"variable tensors {ids} (ref {ref}) are textures with different descriptors")
                image = self._make_image(t0)
                for i in ids:
                    self._images[i] = image
            total += size

        # Plain buffers share one arena, each tensor at its offset (a kernel argument: no OpenCL
        # sub-buffers, which NVIDIA's driver crashed releasing); IMAGE_BUFFER tensors share whole
        # buffers (a 1D image cannot sit at an offset); textures share whole images.
        arena_items = []
        image_items: list[tuple[memory.Lifetime, tuple]] = []
        for i, lt in lifetimes.items():
            if i in variable_ids:
                continue
            t = self._tensors[i]
            st = TensorStorageType(t.desc.storage_type)
            if st == TensorStorageType.BUFFER:
                arena_items.append(lt)
            elif st == TensorStorageType.IMAGE_BUFFER:
                self._check_image(t, memory.image_dims(t.desc))
                image_items.append((lt, ("image_buffer",)))
            else:
                self._check_image(t, memory.image_dims(t.desc))
                image_items.append((lt, (st, t.desc.data_type, memory.image_dims(t.desc), t.shape.c)))
        offsets, arena_size = memory.greedy_offsets(arena_items, info.mem_base_addr_align_bytes)
        if arena_items:
            fits(arena_size, "the shared tensor arena")
            if max(offsets.values()) > np.iinfo(np.int32).max:
                raise DeviceResourceError(
                    f"the shared tensor arena needs {arena_size} bytes; tensors sit at most 2 GiB into it "
                    "(their offsets are 32-bit kernel arguments): use a smaller input shape or split the model"
                )
            arena = driver.buffer(self._cl_context, CL_MEM_READ_WRITE, max(arena_size, 4))
            self._keep.append(arena)
            for lt in arena_items:
                self._bind_buffer(lt.tensor_id, arena, offsets[lt.tensor_id])
            total += arena_size
        for group in memory.greedy_textures(image_items):
            size = max(m.size for m in group.members)
            if group.key == ("image_buffer",):
                fits(size, f"IMAGE_BUFFER tensor {group.members[0].tensor_id}")
                buf = driver.buffer(self._cl_context, CL_MEM_READ_WRITE, size)
                for m in group.members:
                    self._bind_buffer(m.tensor_id, buf)
            else:
                image = self._make_image(self._tensors[group.members[0].tensor_id])
                for m in group.members:
                    self._images[m.tensor_id] = image
            total += size
        self._tensor_bytes = total

    def _bind_buffer(self, tensor_id: int, buf: MemObject, offset: int = 0) -> None:
        self._buffers[tensor_id] = buf
        self._buffer_offsets[tensor_id] = offset
        t = self._tensors[tensor_id]
        if t.desc.storage_type == TensorStorageType.IMAGE_BUFFER:
            dims = memory.image_dims(t.desc)
            self._check_image(t, dims)
            self._images[tensor_id] = self._image(CL_MEM_READ_ONLY, t.desc.data_type, dims, over=buf)

    def _make_image(self, t: _Tensor) -> MemObject:
        dims = memory.image_dims(t.desc)
        self._check_image(t, dims)
        st = t.desc.storage_type
        channels = t.shape.c if st == TensorStorageType.SINGLE_TEXTURE_2D else 4
        return self._image(
            CL_MEM_READ_WRITE, t.desc.data_type, dims, channels, is_array=st == TensorStorageType.TEXTURE_ARRAY
        )

    def _staging(self, t: _Tensor) -> MemObject:
        s = t.shape
        return driver.buffer(self._cl_context, CL_MEM_READ_WRITE, s.b * s.h * s.w * s.d * s.c * 4)

    # --------------------------------------------------------------- kernels

    def _constant(self, data: Any, fallback_size: int) -> MemObject | ArenaSlice:
        if self._arena is not None:  # a place in the arena; the sub-buffer comes in _seal_arena
            size = len(data) if len(data) else max(fallback_size, 4)
            align = max(self.device_info.mem_base_addr_align_bytes, 64)
            place = ArenaSlice(self._arena_size, size)
            self._arena.append((place.offset, bytes(data)))
            self._arena_size += -(-size // align) * align
            self._constant_bytes += size
            return place
        if not len(data):
            self._constant_bytes += max(fallback_size, 4)
            return driver.buffer(self._cl_context, CL_MEM_READ_WRITE, max(fallback_size, 4))
        self._constant_bytes += len(data)
        return driver.buffer(self._cl_context, CL_MEM_READ_ONLY, len(data), host=data)

    def _object_args(self, op: model.GPUOperation, node: str) -> dict[str, Any]:
        """Upload the constant objects of ``op`` once; name -> OpenCL memory object."""
        args = op.arguments or model.Arguments()
        objects: dict[str, Any] = {}
        for e in args.buffer_objects:
            if e.key and e.value:
                objects[e.key] = self._constant(e.value.data, e.value.size)
        for e in args.tensor_linear_objects:
            if not (e.key and e.value):
                continue
            d = e.value
            if d.storage_type == model.LinearStorageType.TEXTURE_2D:
                elem = 2 if d.element_type == DataType.FLOAT16 else 4
                width = max(len(d.data) // (4 * elem), 1)
                host = np.frombuffer(d.data, np.uint8) if len(d.data) else np.zeros(width * 4 * elem, np.uint8)
                if host.nbytes < width * 4 * elem:
                    host = np.concatenate([host, np.zeros(width * 4 * elem - host.nbytes, np.uint8)])
                objects[e.key] = self._image(CL_MEM_READ_ONLY, d.element_type, (width, 1), host=host)
                self._constant_bytes += host.nbytes
            else:
                objects[e.key] = self._constant(d.data, d.size * 16)
        for e in args.texture2d_objects:
            if not (e.key and e.value):
                continue
            d = e.value
            size = d.size or model.Int2(1, 1)
            elem = 2 if d.element_type == DataType.FLOAT16 else 4
            need = size.x * size.y * 4 * elem
            if len(d.data) not in (0, need):
                raise _semantic(f"node {node!r}: texture {e.key!r} holds {len(d.data)} bytes, {need} expected")
            host = np.frombuffer(d.data, np.uint8) if len(d.data) else np.zeros(need, np.uint8)
            data_type = d.element_type or DataType.FLOAT32
            objects[e.key] = self._image(CL_MEM_READ_ONLY, data_type, (size.x, size.y), host=host)
            self._constant_bytes += need
        for e in args.tensor_objects:
            if not (e.key and e.value):
                continue
            if e.value.storage_type not in memory.BUFFER_BACKED:
                raise _semantic(f"node {node!r}: constant tensor {e.key!r} must use BUFFER storage here")
            objects[e.key] = self._constant(e.value.data, memory.storage_bytes(e.value))
        self._keep.extend(objects.values())
        return objects

    def _shape_arg(self, t: _Tensor | model.TensorDescriptor) -> np.ndarray:
        """The tensor's ``int8`` argument: W, H, D, slices, B, C, its byte offset in its buffer, 0."""
        if isinstance(t, _Tensor):
            s, offset = t.shape, self._buffer_offsets.get(t.tensor_id, 0)
        else:
            s, offset = memory.Shape.of(t), 0
        return np.array([s.w, s.h, s.d, s.slices, s.b, s.c, offset, 0], dtype=np.int32)

    def _seal_arena(self, pending: list[_Pending]) -> None:
        """Upload the constant arena and give every kernel a sub-buffer of it where it has an
        ArenaSlice."""
        if self._arena is None:
            return
        host = np.zeros(max(self._arena_size, 64), np.uint8)
        for offset, data in self._arena:
            host[offset : offset + len(data)] = np.frombuffer(data, np.uint8)
        self._arena_buffer = driver.buffer(self._cl_context, CL_MEM_READ_WRITE, host.nbytes, host=host)
        views: dict[ArenaSlice, MemObject] = {}
        try:
            for p in pending:
                for i, value in enumerate(p.values):
                    if isinstance(value, ArenaSlice):
                        if value not in views:
                            views[value] = driver.sub_buffer(
                                self._arena_buffer, CL_MEM_READ_WRITE, value.offset, value.size
                            )
                        p.values[i] = views[value]
        finally:
            self._keep.extend(views.values())  # released before the arena they are made over
            self._keep.append(self._arena_buffer)
        self._arena = []  # the bytes are on the device now

    def _ensure_node_kernels(self) -> None:
        """Build the node kernels a persistent load left for later (see ``_load``)."""
        pending, self._pending_nodes = self._pending_nodes, None
        if pending:
            self._make_kernels(pending)
            for index, p in zip(self._node_launches, pending, strict=True):
                self._launches[index] = (p.kernel, *self._launches[index][1:])

    def _install_plan(self) -> None:
        """Build the plan from ``_launches``: runs of consecutive nodes a persistent kernel can
        take become one launch each when persistent kernels are on."""
        launches = list(self._launches)
        labels = self._one_by_one_names()
        if self._arena is not None and self.persistent_error is None:
            try:
                launches, labels = self._persistent_launches()
            except ProgramBuildError as exc:
                self.persistent_error = f"the persistent kernel did not build: {exc}"
                self._ensure_node_kernels()
                launches, labels = list(self._launches), self._one_by_one_names()
        if getattr(self, "_plan", None) is not None:
            lib.dlg_plan_release(self._plan)
        self._plan_labels = labels
        self._build_plan(self._model, launches)

    def _free_grid(self, k: int) -> tuple[int, ...] | None:
        """Node ``k``'s grid (work-items per launch axis) when its kernel takes any work-group size
        (none required) and its axes launch in order; else None."""
        grid = self._grids[k]
        if k in self._required_sizes or grid.order != (0, 1, 2):
            return None
        return grid.size[: grid.dims]

    def _persistent_launches(self) -> tuple[list[tuple], list[str]]:
        first, stop = self._node_launches.start, self._node_launches.stop
        nodes = [
            persistent_kernels.NodeKernel(
                src, values, tuple(self._launches[i][1]), tuple(self._launches[i][2]), self._free_grid(k)
            )
            for k, (src, values, i) in enumerate(
                zip(self._node_sources, self._node_values, self._node_launches, strict=True)
            )
        ]
        ok = [persistent_kernels.eligible(n.src) for n in nodes]
        launches, labels = list(self._launches[:first]), self._one_by_one_names()[:first]
        k = 0
        while k < len(nodes):
            end = k
            while end < len(nodes) and ok[end] and nodes[end].src.prelude == nodes[k].src.prelude:
                end += 1
            if end - k >= 2:
                launches.append(self._persistent_kernel(nodes[k:end], self._node_names[k:end]))
                labels.append(f"persistent {self._node_names[k]} .. {self._node_names[end - 1]}")
                k = end
            else:
                self._ensure_node_kernels()
                launches.append(self._launches[first + k])
                labels.append(self._node_names[k])
                k += 1
        launches += self._launches[stop:]
        labels += self._one_by_one_names()[stop:]
        return launches, labels

    def _persistent_kernel(self, nodes: list[persistent_kernels.NodeKernel], names: list[str]) -> tuple:
        built = persistent_kernels.build(nodes, names)
        units = min(self.device_info.compute_units, persistent_kernels.MAX_UNITS)
        program = self._builder.build(built.source, "-cl-std=CL1.2", f"persistent kernel of {names[0]} .. {names[-1]}")
        api = cl_api()
        err = ffi.new("int32_t *")
        handle = api.create_kernel(program.handle, built.name.encode(), err)
        if err[0] != 0 or handle == ffi.NULL:
            raise ProgramBuildError(
                names[0], f"clCreateKernel({built.name}) failed: {error_name(err[0])}", built.source
            )
        self._kernel_handles.append(handle)
        counters = driver.buffer(
            self._cl_context, CL_MEM_READ_WRITE, built.counter_words * 4, host=np.zeros(built.counter_words, np.uint32)
        )
        self._keep.append(counters)
        for index, value in enumerate([*built.tensor_buffers, self._arena_buffer, counters]):
            self._set_arg(api, handle, index, value, names[0])
        return (handle, (units,), (1,))

    @property
    def persistent(self) -> bool:
        """Whether runs launch persistent kernels (see ``load``)."""
        return any(label.startswith("persistent ") for label in getattr(self, "_plan_labels", []))

    def _kernel(self, src: KernelSource, node: str, tensors: dict[str, _Tensor], objects: dict[str, Any]) -> _Pending:
        """The kernel of ``src`` with its arguments resolved; built later, with all the others
        (``_make_kernels``: one program for the whole context)."""
        values: list[Any] = []
        for param in src.params:
            if param.kind == "tensor_buffer":
                value = self._buffers[tensors[param.name].tensor_id] if param.name in tensors else objects[param.name]
            elif param.kind == "tensor_image":
                value = self._images[tensors[param.name].tensor_id]
            elif param.kind == "tensor_shape":
                value = self._shape_arg(tensors[param.name] if param.name in tensors else self._object_desc(param.name))
            elif param.kind in ("object_buffer", "object_image"):
                value = objects[param.name]
            else:
                value = {"int4": src.int4s, "float4": src.float4s, "half4": src.half4s}[param.kind][param.index]
            values.append(value)
        return _Pending(src, node, values)

    def _make_kernels(self, pending: list[_Pending]) -> None:
        """Build the programs, then create the kernels and set their arguments through the C API
        table (``_kernel_object`` wraps a handle in a pyopencl Kernel when a tool asks)."""
        programs = self._builder.build_many([(p.src, p.node) for p in pending], "-cl-std=CL1.2")
        api = cl_api()
        err = ffi.new("int32_t *")
        for p, (program, name) in zip(pending, programs, strict=True):
            handle = api.create_kernel(program.handle, name.encode(), err)
            if err[0] != 0 or handle == ffi.NULL:
                raise ProgramBuildError(p.node, f"clCreateKernel({name}) failed: {error_name(err[0])}", p.src.text)
            self._kernel_handles.append(handle)
            for index, value in enumerate(p.values):
                self._set_arg(api, handle, index, value, p.node)
            p.kernel = handle

    @staticmethod
    def _set_arg(api: Any, handle: Any, index: int, value: Any, node: str) -> None:
        if isinstance(value, MemObject):
            mem = ffi.new("cl_mem *", value.handle)
            rc = api.set_kernel_arg(handle, index, ffi.sizeof("cl_mem"), mem)
        elif isinstance(value, np.ndarray):
            data = np.ascontiguousarray(value)
            rc = api.set_kernel_arg(handle, index, data.nbytes, ffi.from_buffer(data))
        else:
            raise TypeError(f"node {node!r}: kernel argument {index} has type {type(value).__name__}")
        if rc != 0:
            raise ExecutionError(f"node {node!r}: clSetKernelArg({index}) failed: {error_name(rc)}")

    def _kernel_object(self, handle: Any) -> Any:
        """A pyopencl Kernel over a kernel handle of the plan (it holds its own reference), for
        tools; pyopencl is imported only here."""
        key = driver.handle_int(handle)
        kernel = self._kernel_objects.get(key)
        if kernel is None:
            import pyopencl as cl

            kernel = self._kernel_objects[key] = cl.Kernel.from_int_ptr(key, retain=True)
        return kernel

    def _object_desc(self, name: str) -> model.TensorDescriptor:
        return self._current_tensor_objects[name]

    def _grid(self, op: model.GPUOperation, dst: _Tensor | None, node: str) -> Grid:
        ttg = TensorToGrid(op.tensor_to_grid)
        if ttg != TensorToGrid.CUSTOM and dst is None:
            raise _semantic(f"node {node!r}: tensor_to_grid {ttg.name} but the node has no output tensor")
        if ttg == TensorToGrid.CUSTOM:
            if op.grid_size is None:
                raise _semantic(f"node {node!r}: tensor_to_grid CUSTOM needs grid_size")
            size = (op.grid_size.x, op.grid_size.y, op.grid_size.z)
        else:
            assert dst is not None
            s = dst.shape
            size = {
                TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z: (s.w * s.b, s.h * s.d, s.slices),
                TensorToGrid.WB_TO_X_HD_TO_Y_Z_IS_1: (s.w * s.b, s.h * s.d, 1),
                TensorToGrid.WB_TO_X_H_TO_Y_D_TO_Z: (s.w * s.b, s.h, s.d),
                TensorToGrid.B_TO_X_Y_IS_1_Z_IS_1: (s.b, 1, 1),
            }[ttg]
        dims = op.grid_dimension or 3
        if not 1 <= dims <= 3:
            raise _semantic(f"node {node!r}: grid_dimension {dims} is not 1, 2 or 3")
        order = (
            (0, 1, 2)
            if op.work_group_launch_order is None
            else (op.work_group_launch_order.x, op.work_group_launch_order.y, op.work_group_launch_order.z)
        )
        if sorted(order[:dims]) != list(range(dims)):
            raise _semantic(f"node {node!r}: work_group_launch_order {order} is not a permutation")
        return Grid(size, dims, order)

    def _geometry(self, op: model.GPUOperation, grid: Grid) -> tuple[tuple[int, ...], ...]:
        wg = (
            _DEFAULT_WORK_GROUP
            if op.work_group_size is None
            else (op.work_group_size.x, op.work_group_size.y, op.work_group_size.z)
        )
        return grid.launch(wg, self.device_info)

    def _node_launch(self, node: model.CLNode, name: str, ctx: model.InferenceContext) -> tuple:
        op = node.gpu_op
        assert op is not None
        bound = {n: self._tensors[i] for n, i in zip(op.src_tensors_names, node.input_ids, strict=True)}
        bound.update({n: self._tensors[i] for n, i in zip(op.dst_tensors_names, node.output_ids, strict=True)})
        args = op.arguments or model.Arguments()
        self._current_tensor_objects = {e.key: e.value for e in args.tensor_objects if e.key and e.value}
        try:
            src = assemble(
                op,
                {n: t.desc for n, t in bound.items()},
                self.device_info,
                CalculationsPrecision(ctx.precision),
            )
        except SourceError as exc:
            raise ProgramBuildError(name, str(exc), op.code or "") from None
        objects = self._object_args(op, name)
        kernel = self._kernel(src, name, bound, objects)
        dst = bound.get(op.dst_tensors_names[0]) if op.dst_tensors_names else None
        grid = self._grid(op, dst, name)
        self._grids.append(grid)
        return (kernel, *self._geometry(op, grid))

    def _required_work_groups(self, launches: list[tuple], *, from_source: bool = False) -> set[int]:
        """The positions of the nodes whose kernel requires a work-group size
        (``reqd_work_group_size``); a node the context launches with another size is refused: it
        could not run. ``from_source``: read the attribute from the kernel sources (node kernels
        a persistent load has not built) rather than from the built kernels."""
        device = self._cl_context.device
        fixed: set[int] = set()
        for k, index in enumerate(self._node_launches):
            kernel, _, local_size = launches[index]
            if from_source:
                required = _required_in_source(self._node_sources[k])
            else:
                required = driver.kernel_required_work_group_size(kernel, device)
            if required is None:
                continue
            fixed.add(k)
            launched = tuple(local_size) + (1,) * (3 - len(local_size))
            if launched != required:
                raise _semantic(
                    f"node {self._node_names[k]!r}: its kernel requires work-group size {required} "
                    f"(reqd_work_group_size) but the context launches it with {launched}; the context "
                    "was edited or damaged: compile the model again (delete the cache entry)"
                )
        return fixed

    def _conversion(self, t: _Tensor, staging: MemObject, code: str, name: str) -> tuple:
        staging_desc = model.BufferDescriptor(element_type=DataType.FLOAT32, element_size=1)
        op = model.GPUOperation(
            code=code,
            arguments=model.Arguments(buffer_objects=[model.BufferDescriptorMapValue("staging", staging_desc)]),
            tensor_to_grid=TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z,
            work_group_size=model.Int3(8, 4, 1),
        )
        s = t.shape
        if s.b == 1 and s.d == 1 and s.slices <= _ROW_SLICES:  # an image: rows of pixels, every slice, per work-item
            op.code = _row_conversion_code(s.c, s.slices, code == _TO_DEVICE)
            op.tensor_to_grid = TensorToGrid.CUSTOM
            blocks = -(-s.w // _ROW_PIXELS)
            op.grid_size = model.Int3(blocks, s.h, 1)
            op.work_group_size = model.Int3(min(blocks, 32), 1, 1)
        src = assemble(op, {"tensor": t.desc}, self.device_info, CalculationsPrecision.F32)
        kernel = self._kernel(src, name, {"tensor": t}, {"staging": staging})
        self._keep.append(staging)
        self._staging_args[staging.int_ptr] = (kernel, next(i for i, p in enumerate(src.params) if p.name == "staging"))
        return (kernel, *self._geometry(op, self._grid(op, t, name)))

    def _build_plan(self, ctx: model.InferenceContext, launches: list[tuple]) -> None:
        c_launches = ffi.new("dlg_launch[]", max(len(launches), 1))
        for i, (kernel, global_size, local_size) in enumerate(launches):
            c = c_launches[i]
            c.kernel = kernel
            c.work_dim = len(global_size)
            for axis in range(len(global_size)):
                c.global_size[axis] = global_size[axis]
                c.local_size[axis] = local_size[axis]

        def transfers(buffers: list[MemObject]) -> Any:
            arr = ffi.new("dlg_transfer[]", max(len(buffers), 1))
            for i, buf in enumerate(buffers):
                arr[i].buffer = buf.handle
                arr[i].bytes = buf.size
                kernel, arg_index = self._staging_args[buf.int_ptr]
                arr[i].kernel = kernel
                arr[i].arg_index = arg_index
                arr[i].zero_copy = self.zero_copy
            return arr

        c_inputs = transfers(self._input_staging)
        c_outputs = transfers(self._output_staging)
        plan = ffi.new("dlg_plan *")
        plan.api = cl_api()
        plan.queue = self._queue.handle
        plan.context = self._cl_context.handle
        plan.inputs, plan.inputs_count = c_inputs, len(self._input_staging)
        plan.launches, plan.launches_count = c_launches, len(launches)
        plan.outputs, plan.outputs_count = c_outputs, len(self._output_staging)
        plan.need_flush = ctx.need_flush
        plan.flush_periodically = ctx.flush_periodically
        plan.flush_period = ctx.flush_period
        self._keep.extend([c_launches, c_inputs, c_outputs])
        self._plan = plan
        self._launch_count = len(launches)

    # ------------------------------------------------------------------- run

    @property
    def input_shapes(self) -> list[tuple[int, ...]]:
        """Shapes ``run`` takes, in ``input_ids`` order: BHWC, or BHWDC when D > 1."""
        return [t.host_shape for t in self._inputs]

    @property
    def output_shapes(self) -> list[tuple[int, ...]]:
        return [t.host_shape for t in self._outputs]

    @property
    def input_ids(self) -> list[int]:
        """The context's ``input_ids``: which tensor each ``run`` input is."""
        return [t.tensor_id for t in self._inputs]

    @property
    def output_ids(self) -> list[int]:
        return [t.tensor_id for t in self._outputs]

    @property
    def node_names(self) -> list[str]:
        return list(self._node_names)

    @property
    def launch_names(self) -> list[str]:
        """What each launch of ``launches()`` runs, in the same order: ``input N`` (the conversion
        of input tensor N into its device layout), the node names (``persistent A .. B`` for a
        persistent kernel running nodes A to B), then ``output N``."""
        return list(getattr(self, "_plan_labels", None) or self._one_by_one_names())

    def _one_by_one_names(self) -> list[str]:
        return [
            *(f"input {t.tensor_id}" for t in self._inputs),
            *self._node_names,
            *(f"output {t.tensor_id}" for t in self._outputs),
        ]

    def _run(self, inputs: Sequence[np.ndarray], launch_ns: Any) -> list[np.ndarray]:
        if self._closed:
            raise ExecutionError("this Runtime is closed")
        if len(inputs) != len(self._inputs):
            raise ValueError(f"expected {len(self._inputs)} inputs, got {len(inputs)}")
        arrays = []
        for index, (array, t) in enumerate(zip(inputs, self._inputs, strict=True)):
            a = np.ascontiguousarray(array, dtype=np.float32)
            if a.shape != t.host_shape:
                raise ValueError(f"input {index} (tensor {t.tensor_id}) must have shape {t.host_shape}, not {a.shape}")
            arrays.append(a)
        outputs = [np.empty(t.host_shape, dtype=np.float32) for t in self._outputs]
        in_ptrs = [ffi.from_buffer(a) for a in arrays]
        out_ptrs = [ffi.from_buffer(o, require_writable=True) for o in outputs]
        c_in = ffi.new("void *[]", in_ptrs or [ffi.NULL])
        c_out = ffi.new("void *[]", out_ptrs or [ffi.NULL])
        status = ffi.new("dlg_run_status *")
        rc = lib.dlg_run(self._plan, c_in, c_out, launch_ns, status)
        if rc != 0:
            raise ExecutionError(self._describe_failure(status))
        return outputs

    def _describe_failure(self, status: Any) -> str:
        stage = _STAGES.get(status.stage, "running")
        where = ""
        if status.stage == 2 or status.stage == 5:
            i = status.index
            if self.persistent and 0 <= i < len(self._plan_labels):
                where = f" launch {i} ({self._plan_labels[i]})"
            elif i in self._node_launches:
                where = f" node {self._node_names[i - self._node_launches.start]!r}"
            else:
                where = f" launch {i} (input/output conversion)"
        return f"{error_name(status.cl_error)} while {stage}{where} on {self.device_info.name}"

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run once: float32 inputs in ``input_ids`` order, outputs in ``output_ids`` order."""
        return self._run(inputs, ffi.NULL)

    def run_profiled(self, inputs: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[tuple[str, float]]]:
        """Run once and time every node on the device: (outputs, [(node name, seconds)])."""
        if not self._profiling:
            raise ExecutionError("load the context with profiling=True to time nodes")
        ns = ffi.new("uint64_t[]", max(self._launch_count, 1))
        outputs = self._run(inputs, ns)
        times = [(self._node_names[k], ns[i] * 1e-9) for k, i in enumerate(self._node_launches)]
        return outputs, times

    def enqueue_launches_only(self, repeats: int = 1) -> None:
        """Enqueue every launch ``repeats`` times from C, without transfers or waiting (benchmarks)."""
        status = ffi.new("dlg_run_status *")
        if lib.dlg_enqueue_launches(self._plan, repeats, status) != 0:
            raise ExecutionError(self._describe_failure(status))

    def _run_on_zeros(self) -> None:
        self.run([np.zeros(shape, np.float32) for shape in self.input_shapes])

    @property
    def model(self) -> model.InferenceContext:
        """The context this Runtime runs; ``tune`` writes the sizes it picks into it."""
        return self._model

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
        The chosen sizes go into the plan and into ``model``, so a context written afterwards
        starts tuned. Contexts with variable tensors are not tuned (running a node repeatedly
        would change their state).
        """
        mode = Tuning(mode)
        if self._closed:
            raise ExecutionError("this Runtime is closed")
        start = time.perf_counter()
        if mode == Tuning.NONE:
            return TuningReport(mode.value, [], 0.0, "tuning is off")
        if self._model.variable_ids_and_refs:
            return TuningReport(mode.value, [], 0.0, "the context has variable tensors")
        device = self._cl_context.device
        self._ensure_node_kernels()
        queue = driver.Queue(self._cl_context, profiling=True)
        self._run_on_zeros()  # real data in every tensor
        tuned: list[TunedNode] = []
        changed = False

        def timed(kernel: Any, global_size: tuple[int, ...], local_size: tuple[int, ...]) -> float:
            queue.timed_launch(kernel, global_size, local_size)  # the first launch compiles
            return min(queue.timed_launch(kernel, global_size, local_size) for _ in range(repeats))

        step = f"tuning work-group sizes ({mode.value})"
        try:
            for k, index in enumerate(self._node_launches):
                report_progress(step, k, len(self._node_launches), self._node_names[k])
                kernel, _, local_now = self._launches[index]
                grid = self._grids[k]
                limit = driver.kernel_work_group_size(kernel, device)
                current = tuple(int(local_now[a]) if a < len(local_now) else 1 for a in range(3))
                best_wg, best_time = current, timed(kernel, *grid.launch(current, self.device_info, limit))
                before_time = best_time
                tried = 1
                if k in self._required_sizes:  # its source fixes the size: nothing to search
                    tuned.append(TunedNode(self._node_names[k], current, current, before_time, best_time, tried))
                    continue
                for wg in candidates(grid, mode, self.device_info, limit):
                    if wg == current:
                        continue
                    tried += 1
                    try:
                        seconds = timed(kernel, *grid.launch(wg, self.device_info, limit))
                    except OpenCLError:
                        continue  # a size this kernel cannot run with
                    if seconds < best_time * 0.97:
                        best_wg, best_time = wg, seconds
                if best_wg != current:  # confirm against the current size, measured alternately
                    launch_current = grid.launch(current, self.device_info, limit)
                    launch_best = grid.launch(best_wg, self.device_info, limit)
                    for _ in range(2):
                        before_time = min(before_time, timed(kernel, *launch_current))
                        best_time = min(best_time, timed(kernel, *launch_best))
                    if best_time >= before_time * 0.97:
                        best_wg, best_time = current, before_time
                if best_wg != current:
                    self._launches[index] = (kernel, *grid.launch(best_wg, self.device_info, limit))
                    changed = True
                    op = self._model.nodes[k].gpu_op
                    if op is not None:
                        op.work_group_size = model.Int3(*best_wg)
                tuned.append(TunedNode(self._node_names[k], current, best_wg, before_time, best_time, tried))
        finally:
            queue.finish()
            queue.release()
            if changed:
                self._install_plan()  # the new sizes, in persistent kernels too
        report_progress(step, len(tuned), len(self._node_launches))
        report = TuningReport(mode.value, tuned, time.perf_counter() - start)
        log.info(
            "tuned %d nodes (%s) in %.1f s: %d got another work-group size",
            len(tuned),
            mode.value,
            report.seconds,
            sum(t.before != t.after for t in tuned),
        )
        return report

    def launches(self) -> list[tuple[Any, tuple[int, ...], tuple[int, ...]]]:
        """The launches (pyopencl Kernel, global size, local size) the plan enqueues, for tools and
        comparisons (imports pyopencl)."""
        out = []
        for i in range(self._plan.launches_count):
            c = self._plan.launches[i]
            dims = c.work_dim
            out.append((self._kernel_object(c.kernel), tuple(c.global_size[0:dims]), tuple(c.local_size[0:dims])))
        return out

    @property
    def queue(self) -> Any:
        """The plan's queue as a pyopencl CommandQueue, for tools (imports pyopencl; the wrapper holds
        its own reference)."""
        if self._queue is None or self._queue.handle is None:
            raise ExecutionError("this Runtime is closed")
        import pyopencl as cl

        return cl.CommandQueue.from_int_ptr(self._queue.int_ptr, retain=True)

    # --------------------------------------------------------------- release

    def _release_order(self) -> list[Any]:
        """Every object this Runtime holds, each memory object before the one it was made from
        (images made over a buffer, IMAGE_BUFFER tensors, are in ``_images``; their buffers in
        ``_buffers``)."""
        return [
            *getattr(self, "_images", {}).values(),
            *getattr(self, "_buffers", {}).values(),
            *getattr(self, "_keep", []),
        ]

    def _release(self) -> None:
        queue = getattr(self, "_queue", None)
        if queue is not None:
            queue.finish()
        if getattr(self, "_plan", None) is not None:
            lib.dlg_plan_release(self._plan)  # buffers zero-copy transfers made over host memory
        seen: set[int] = set()
        for obj in self._release_order():
            if isinstance(obj, MemObject) and id(obj) not in seen:
                seen.add(id(obj))
                obj.release()
        self._kernel_objects = {}
        handles = getattr(self, "_kernel_handles", [])
        if handles:
            api = cl_api()
            for handle in handles:
                api.release_kernel(handle)
        builder = getattr(self, "_builder", None)
        if builder is not None:
            builder.release()
        if queue is not None:
            queue.release()
        context = getattr(self, "_cl_context", None)
        if context is not None:
            context.release()
        self._kernel_handles = []
        self._keep = []
        self._images = {}
        self._buffers = {}
        self._plan = None
        self._queue = None
        self._cl_context = None
        self._builder = None

    def close(self) -> None:
        """Release every OpenCL object; the Runtime cannot run afterwards."""
        if not self._closed:
            self._closed = True
            self._release()

    def __del__(self) -> None:
        # A Runtime dropped without close(): release its OpenCL objects (not while the interpreter
        # shuts down, when the driver may already be gone).
        if not getattr(self, "_closed", True) and not sys.is_finalizing():
            self.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
