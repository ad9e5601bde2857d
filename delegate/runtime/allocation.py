"""Device memory for a context's tensors: shared arena, shared images, variables, staging.

``TensorAllocator.allocate`` plans lifetimes (memory.py), makes the OpenCL objects and returns a
frozen ``Allocation``: where each tensor lives, and what it cost (``MemoryReport``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..context import model
from ..context.model import DataType, TensorStorageType
from ..errors import DeviceResourceError
from . import driver, host_memory, memory
from .device import DeviceInfo
from .driver import CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, Context, MemObject
from .graph import RuntimeTensor, semantic
from .resources import Resources


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
class Allocation:
    """Where each tensor lives: its buffer and byte offset into it (buffer-backed storage), its
    image (textures, and the image view of an IMAGE_BUFFER); the float32 staging buffers of the
    inputs and outputs; and the bytes it all takes."""

    buffers: Mapping[int, MemObject]
    offsets: Mapping[int, int]
    images: Mapping[int, MemObject]
    input_staging: tuple[MemObject, ...]
    output_staging: tuple[MemObject, ...]
    tensor_bytes: int
    lower_bound_bytes: int
    unshared_bytes: int

    def report(self, constant_bytes: int) -> MemoryReport:
        return MemoryReport(self.tensor_bytes, self.lower_bound_bytes, self.unshared_bytes, constant_bytes)


def image(
    context: Context, flags: int, data_type: Any, dims: tuple[int, ...], channels: int = 4, **kwargs: Any
) -> MemObject:
    """An image of float (or half, for FLOAT16) pixels of 1, 2 or 4 channels (driver.image)."""
    order = {1: driver.CL_R, 2: driver.CL_RG}.get(channels, driver.CL_RGBA)
    half = data_type == DataType.FLOAT16
    kind = driver.CL_HALF_FLOAT if half else driver.CL_FLOAT
    size = int(np.prod(dims)) * {1: 1, 2: 2}.get(channels, 4) * (2 if half else 4)
    return driver.image(context, flags, order, kind, dims, size=size, **kwargs)


def _lifetimes(ctx: model.InferenceContext, tensors: Mapping[int, RuntimeTensor]) -> dict[int, memory.Lifetime]:
    """Graph inputs live from before the first node, outputs until after the last; the others
    from their first to their last use."""
    n = len(ctx.nodes)
    first: dict[int, int] = {i: -1 for i in ctx.input_ids}
    last: dict[int, int] = {i: n for i in ctx.output_ids}
    for index, node in enumerate(ctx.nodes):
        for i in [*node.input_ids, *node.output_ids]:
            first[i] = min(first.get(i, index), index)
            last[i] = max(last.get(i, index), index)
    for i in first:
        last.setdefault(i, first[i])
    return {i: memory.Lifetime(i, first[i], last[i], tensors[i].storage_bytes) for i in first}


class TensorAllocator:
    """Makes the memory of one context's tensors on ``context``; what it makes is owned by
    ``owner`` from the moment it exists."""

    def __init__(
        self, context: Context, info: DeviceInfo, tensors: Mapping[int, RuntimeTensor], owner: Resources
    ) -> None:
        self._context = context
        self._info = info
        self._tensors = tensors
        self._owner = owner
        self._buffers: dict[int, MemObject] = {}
        self._offsets: dict[int, int] = {}
        self._images: dict[int, MemObject] = {}

    def allocate(self, ctx: model.InferenceContext) -> Allocation:
        variables: dict[int, list[int]] = {}
        for pair in ctx.variable_ids_and_refs:
            if pair.first not in self._tensors:
                raise semantic(f"variable_ids_and_refs names tensor {pair.first}, which is not declared")
            variables.setdefault(pair.second, []).append(pair.first)
        lifetimes = _lifetimes(ctx, self._tensors)
        total = self._variables(variables)
        variable_ids = {i for ids in variables.values() for i in ids}
        total += self._shared({i: lt for i, lt in lifetimes.items() if i not in variable_ids})
        return Allocation(
            buffers=self._buffers,
            offsets=self._offsets,
            images=self._images,
            input_staging=tuple(self._staging(self._tensors[i]) for i in ctx.input_ids),
            output_staging=tuple(self._staging(self._tensors[i]) for i in ctx.output_ids),
            tensor_bytes=total,
            lower_bound_bytes=memory.lower_bound(list(lifetimes.values())),
            unshared_bytes=sum(lt.size for lt in lifetimes.values()),
        )

    def _fits(self, nbytes: int, what: str) -> None:
        info = self._info
        if nbytes > info.max_mem_alloc_bytes:
            raise DeviceResourceError(
                f"{what} needs {nbytes} bytes in one allocation; {info.name} allows at most "
                f"{info.max_mem_alloc_bytes} (CL_DEVICE_MAX_MEM_ALLOC_SIZE)"
            )

    def _buffer(self, size: int, host: Any = None) -> MemObject:
        return self._owner.memory(driver.buffer(self._context, CL_MEM_READ_WRITE, size, host=host))

    def _variables(self, variables: dict[int, list[int]]) -> int:
        """One persistent allocation per ref, zero-initialised; its bytes."""
        total = 0
        for ref, ids in variables.items():
            descs = [self._tensors[i].desc for i in ids]
            size = max(self._tensors[i].storage_bytes for i in ids)
            self._fits(size, f"variable tensor {ids[0]} (ref {ref})")
            t0 = self._tensors[ids[0]]
            if t0.desc.storage_type in memory.BUFFER_BACKED:
                buf = self._buffer(size, host=np.zeros(size, np.uint8))
                for i in ids:
                    self._bind_buffer(i, buf)
            else:
                if any(d != t0.desc for d in descs):
                    raise semantic(f"variable tensors {ids} (ref {ref}) are textures with different descriptors")
                texture = self._texture(t0)
                for i in ids:
                    self._images[i] = texture
            total += size
        return total

    def _shared(self, lifetimes: dict[int, memory.Lifetime]) -> int:
        """Plain buffers share one arena, each tensor at its offset (a kernel argument: no OpenCL
        sub-buffers, which NVIDIA's driver crashed releasing); IMAGE_BUFFER tensors share whole
        buffers (a 1D image cannot sit at an offset); textures share whole images. Their bytes."""
        arena_items = []
        image_items: list[tuple[memory.Lifetime, tuple]] = []
        for i, lt in lifetimes.items():
            t = self._tensors[i]
            st = TensorStorageType(t.desc.storage_type)
            if st == TensorStorageType.BUFFER:
                arena_items.append(lt)
            elif st == TensorStorageType.IMAGE_BUFFER:
                self._check_image(t, t.image_dims)
                image_items.append((lt, ("image_buffer",)))
            else:
                self._check_image(t, t.image_dims)
                image_items.append((lt, (st, t.desc.data_type, t.image_dims, t.shape.c)))
        total = self._arena(arena_items)
        for group in memory.greedy_textures(image_items):
            size = max(m.size for m in group.members)
            if group.key == ("image_buffer",):
                self._fits(size, f"IMAGE_BUFFER tensor {group.members[0].tensor_id}")
                buf = self._buffer(size)
                for m in group.members:
                    self._bind_buffer(m.tensor_id, buf)
            else:
                texture = self._texture(self._tensors[group.members[0].tensor_id])
                for m in group.members:
                    self._images[m.tensor_id] = texture
            total += size
        return total

    def _arena(self, items: list[memory.Lifetime]) -> int:
        offsets, arena_size = memory.greedy_offsets(items, self._info.mem_base_addr_align_bytes)
        if not items:
            return 0
        self._fits(arena_size, "the shared tensor arena")
        if max(offsets.values()) > np.iinfo(np.int32).max:
            raise DeviceResourceError(
                f"the shared tensor arena needs {arena_size} bytes; tensors sit at most 2 GiB into it "
                "(their offsets are 32-bit kernel arguments): use a smaller input shape or split the model"
            )
        arena = host_memory.arena(self._info, self._context, CL_MEM_READ_WRITE, max(arena_size, 4), self._owner)
        for lt in items:
            self._bind_buffer(lt.tensor_id, arena, offsets[lt.tensor_id])
        return arena_size

    def _bind_buffer(self, tensor_id: int, buf: MemObject, offset: int = 0) -> None:
        self._buffers[tensor_id] = buf
        self._offsets[tensor_id] = offset
        t = self._tensors[tensor_id]
        if t.desc.storage_type == TensorStorageType.IMAGE_BUFFER:
            dims = t.image_dims
            self._check_image(t, dims)
            view = image(self._context, CL_MEM_READ_ONLY, t.desc.data_type, dims, over=buf)
            self._images[tensor_id] = self._owner.memory(view)

    def _texture(self, t: RuntimeTensor) -> MemObject:
        dims = t.image_dims
        self._check_image(t, dims)
        st = t.desc.storage_type
        channels = t.shape.c if st == TensorStorageType.SINGLE_TEXTURE_2D else 4
        texture = image(
            self._context,
            CL_MEM_READ_WRITE,
            t.desc.data_type,
            dims,
            channels,
            is_array=st == TensorStorageType.TEXTURE_ARRAY,
        )
        return self._owner.memory(texture)

    def _check_image(self, t: RuntimeTensor, dims: tuple[int, ...]) -> None:
        info = self._info
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

    def _staging(self, t: RuntimeTensor) -> MemObject:
        """A float32 BHWDC buffer the conversion kernels read the input from or write the output to."""
        s = t.shape
        return self._buffer(s.b * s.h * s.w * s.d * s.c * 4)
