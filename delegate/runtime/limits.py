"""Resource bounds of a context, checked before the runtime allocates or builds anything.

A structurally valid context can still ask for absurd resources: millions of nodes, gigabytes of
kernel source, tensors or objects larger than the device can allocate, launches of 2^60 work
items. ``check_native`` runs on the verified native tree (before any Python object is made of
it) and ``check_context`` on the model with the device's facts (before the OpenCL context
exists); each raises with what is wrong and what to do. The limits are documented in
docs/runtime.md ("Resource limits").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..context import bounds, model
from ..context.model import DataType, LinearStorageType, TensorToGrid
from ..errors import ContextFormatError, DeviceResourceError
from . import memory
from .device import DeviceInfo


@dataclass(frozen=True)
class RuntimeLimits:
    """Bounds a context must keep before the runtime allocates or builds anything."""

    #: nodes (kernels) in one context
    max_nodes: int = bounds.MAX_NODES
    #: tensors declared in one context (memory planning is quadratic in them)
    max_tensors: int = bounds.MAX_TENSORS
    #: kernel source of one node (code plus elementwise_code), in bytes
    max_node_source_bytes: int = bounds.MAX_NODE_SOURCE_BYTES
    #: kernel source of all nodes together, in bytes
    max_total_source_bytes: int = bounds.MAX_TOTAL_SOURCE_BYTES
    #: work items of one launch (the product of its grid)
    max_work_items: int = 1 << 30
    #: any axis of a stored work_group_size (devices allow at most a few thousand)
    max_work_group_axis: int = 1 << 16


LIMITS = RuntimeLimits()

_HINT = "the context is corrupt or hostile; recompile it from the model (or delete the cache entry)"


def _limit(message: str) -> ContextFormatError:
    return ContextFormatError(f"{message}: {_HINT}", kind="limit", source="context")


def _check_counts(nodes: int, tensors: int, limits: RuntimeLimits) -> None:
    if nodes > limits.max_nodes:
        raise _limit(f"{nodes} nodes, over the limit of {limits.max_nodes}")
    if tensors > limits.max_tensors:
        raise _limit(f"{tensors} tensors, over the limit of {limits.max_tensors}")


def _check_source(index: int, size: int, total: int, limits: RuntimeLimits) -> None:
    if size > limits.max_node_source_bytes:
        raise _limit(
            f"node {index} has {size} bytes of kernel source, over the limit of {limits.max_node_source_bytes}"
        )
    if total > limits.max_total_source_bytes:
        raise _limit(f"the kernels have more than {limits.max_total_source_bytes} bytes of source together (limit)")


def check_native(root: Any, limits: RuntimeLimits = LIMITS) -> None:
    """Counts and source sizes on the native tree (a ``dlg_inference_context``), before conversion."""
    _check_counts(root.nodes_count, root.tensors_count, limits)
    total = 0
    for index in range(root.nodes_count):
        op = root.nodes[index].gpu_op
        if op:
            size = op.code.len + op.elementwise_code.len
            total += size
            _check_source(index, size, total, limits)


def _too_big(what: str, nbytes: int, info: DeviceInfo) -> DeviceResourceError:
    return DeviceResourceError(
        f"{what} needs {nbytes} bytes in one allocation; {info.name} allows at most {info.max_mem_alloc_bytes} "
        f"(CL_DEVICE_MAX_MEM_ALLOC_SIZE): {_HINT}, or made for a larger device"
    )


def _check_tensor(what: str, desc: model.TensorDescriptor, info: DeviceInfo) -> None:
    s = memory.Shape.of(desc)
    nbytes = memory.storage_bytes(desc)
    staging = s.b * s.h * s.w * s.d * s.c * 4  # float32 host/staging copy of an input or output
    if max(nbytes, staging) > info.max_mem_alloc_bytes:
        raise _too_big(f"{what} (shape BHWDC {s.b}x{s.h}x{s.w}x{s.d}x{s.c})", max(nbytes, staging), info)


def _check_objects(index: int, args: model.Arguments, info: DeviceInfo) -> None:
    where = f"node {index}"
    for e in args.buffer_objects:
        if e.value is not None and not len(e.value.data) and e.value.size > info.max_mem_alloc_bytes:
            raise _too_big(f"{where}: buffer object {e.key!r}", e.value.size, info)
    for e in args.tensor_linear_objects:
        d = e.value
        if d is not None and d.storage_type == LinearStorageType.BUFFER and not len(d.data):
            if d.size * 16 > info.max_mem_alloc_bytes:
                raise _too_big(f"{where}: linear object {e.key!r}", d.size * 16, info)
    for e in args.texture2d_objects:
        d = e.value
        if d is None or d.size is None:
            continue
        need = max(d.size.x, 0) * max(d.size.y, 0) * 4 * (2 if d.element_type == DataType.FLOAT16 else 4)
        if d.size.x > info.image2d_max[0] or d.size.y > info.image2d_max[1] or need > info.max_mem_alloc_bytes:
            raise DeviceResourceError(
                f"{where}: texture object {e.key!r} of {d.size.x}x{d.size.y} texels ({need} bytes) is over "
                f"{info.name}'s limits ({info.image2d_max[0]}x{info.image2d_max[1]} texels, "
                f"{info.max_mem_alloc_bytes} bytes): {_HINT}"
            )
    for e in args.tensor_objects:
        if e.value is not None and e.value.shape is not None and not len(e.value.data):
            try:
                _check_tensor(f"{where}: constant tensor {e.key!r}", e.value, info)
            except ValueError:
                continue  # no shape or data type: the runtime reports it as it binds the object


def _check_launch(index: int, op: model.GPUOperation, limits: RuntimeLimits) -> None:
    wg = op.work_group_size
    if wg is not None and max(wg.x, wg.y, wg.z) > limits.max_work_group_axis:
        raise _limit(
            f"node {index}: work_group_size {wg.x}x{wg.y}x{wg.z} has an axis over {limits.max_work_group_axis}"
        )
    if op.tensor_to_grid == TensorToGrid.CUSTOM and op.grid_size is not None:
        g = op.grid_size
        items = max(g.x, 1) * max(g.y, 1) * max(g.z, 1)
        if items > limits.max_work_items:
            raise _limit(
                f"node {index}: grid_size {g.x}x{g.y}x{g.z} is {items} work items, over the limit of "
                f"{limits.max_work_items}"
            )


def check_context(ctx: model.InferenceContext, info: DeviceInfo, limits: RuntimeLimits = LIMITS) -> None:
    """Every bound on ``ctx`` for the device ``info``; raises before anything is allocated."""
    _check_counts(len(ctx.nodes), len(ctx.tensors), limits)
    total = 0
    for index, node in enumerate(ctx.nodes):
        op = node.gpu_op
        if op is None:
            continue
        size = len((op.code or "").encode()) + len((op.elementwise_code or "").encode())
        total += size
        _check_source(index, size, total, limits)
        _check_launch(index, op, limits)
        if op.arguments is not None:
            _check_objects(index, op.arguments, info)
    for t in ctx.tensors:
        if t.desc is None or t.desc.shape is None:
            continue  # reported by the runtime's graph check
        try:
            _check_tensor(f"tensor {t.id}", t.desc, info)
        except ValueError:
            continue  # bad channels or data type: reported by the runtime's graph check
