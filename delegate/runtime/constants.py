"""The constant objects of a context's nodes (weights, biases, lookup textures), uploaded once.

Without an arena every object is a buffer or image of its own. With one (the load may run a
persistent kernel, which reads every constant through one buffer), buffer objects first get a
place in the arena (``ArenaSlice``) and ``seal`` uploads the arena and turns each place into a
sub-buffer of it for the node kernels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..context import model
from ..context.model import DataType
from . import driver, host_memory, memory
from .allocation import image
from .device import DeviceInfo
from .driver import CL_MEM_READ_ONLY, CL_MEM_READ_WRITE, Context, MemObject
from .graph import semantic
from .persistent import ArenaSlice
from .resources import Resources


class ConstantStore:
    """Uploads constant objects on ``context``; ``arena``: gather buffer objects into one buffer
    (see the module docstring). What it makes is owned by ``owner``."""

    def __init__(self, context: Context, info: DeviceInfo, owner: Resources, *, arena: bool) -> None:
        self._context = context
        self._info = info
        self._owner = owner
        self._arena: list[tuple[int, bytes]] | None = [] if arena else None
        self._arena_size = 0
        self._arena_buffer: MemObject | None = None
        #: bytes of every constant object uploaded (the memory report's constant_bytes)
        self.bytes = 0

    @property
    def has_arena(self) -> bool:
        """Whether buffer objects live in one arena (a persistent kernel may read them)."""
        return self._arena is not None

    @property
    def arena_buffer(self) -> MemObject:
        """The uploaded arena (after ``seal``)."""
        if self._arena_buffer is None:
            raise RuntimeError("the constant arena is not sealed")
        return self._arena_buffer

    def objects(self, op: model.GPUOperation, node: str) -> dict[str, Any]:
        """Upload the constant objects of ``op``; name -> OpenCL memory object or ArenaSlice."""
        args = op.arguments or model.Arguments()
        objects: dict[str, Any] = {}
        for b in args.buffer_objects:
            if b.key and b.value:
                objects[b.key] = self._buffer(b.value.data, b.value.size)
        for lin in args.tensor_linear_objects:
            if lin.key and lin.value:
                objects[lin.key] = self._linear(lin.value)
        for tex in args.texture2d_objects:
            if tex.key and tex.value:
                objects[tex.key] = self._texture(tex.value, tex.key, node)
        for t in args.tensor_objects:
            if not (t.key and t.value):
                continue
            if t.value.storage_type not in memory.BUFFER_BACKED:
                raise semantic(f"node {node!r}: constant tensor {t.key!r} must use BUFFER storage here")
            objects[t.key] = self._buffer(t.value.data, memory.storage_bytes(t.value))
        return objects

    def _buffer(self, data: Any, fallback_size: int) -> MemObject | ArenaSlice:
        """``data`` in a buffer; no data: a zeroed scratch buffer of ``fallback_size`` bytes."""
        if self._arena is not None:  # a place in the arena; the sub-buffer comes in seal
            size = len(data) if len(data) else max(fallback_size, 4)
            align = max(self._info.mem_base_addr_align_bytes, 64)
            place = ArenaSlice(self._arena_size, size)
            self._arena.append((place.offset, bytes(data)))
            self._arena_size += -(-size // align) * align
            self.bytes += size
            return place
        if not len(data):
            self.bytes += max(fallback_size, 4)
            return self._owner.memory(driver.buffer(self._context, CL_MEM_READ_WRITE, max(fallback_size, 4)))
        self.bytes += len(data)
        return self._owner.memory(driver.buffer(self._context, CL_MEM_READ_ONLY, len(data), host=data))

    def _linear(self, d: model.TensorLinearDescriptor) -> MemObject | ArenaSlice:
        if d.storage_type != model.LinearStorageType.TEXTURE_2D:
            return self._buffer(d.data, d.size * 16)
        elem = 2 if d.element_type == DataType.FLOAT16 else 4
        width = max(len(d.data) // (4 * elem), 1)
        host = np.frombuffer(d.data, np.uint8) if len(d.data) else np.zeros(width * 4 * elem, np.uint8)
        if host.nbytes < width * 4 * elem:
            host = np.concatenate([host, np.zeros(width * 4 * elem - host.nbytes, np.uint8)])
        self.bytes += host.nbytes
        return self._owner.memory(image(self._context, CL_MEM_READ_ONLY, d.element_type, (width, 1), host=host))

    def _texture(self, d: model.Texture2DDescriptor, key: str, node: str) -> MemObject:
        size = d.size or model.Int2(1, 1)
        elem = 2 if d.element_type == DataType.FLOAT16 else 4
        need = size.x * size.y * 4 * elem
        if len(d.data) not in (0, need):
            raise semantic(f"node {node!r}: texture {key!r} holds {len(d.data)} bytes, {need} expected")
        host = np.frombuffer(d.data, np.uint8) if len(d.data) else np.zeros(need, np.uint8)
        data_type = d.element_type or DataType.FLOAT32
        self.bytes += need
        return self._owner.memory(image(self._context, CL_MEM_READ_ONLY, data_type, (size.x, size.y), host=host))

    def seal(self, kernel_values: Iterable[list[Any]]) -> None:
        """Upload the arena and give every kernel a sub-buffer of it where its argument values
        hold an ArenaSlice (replaced in place). Nothing to do without an arena."""
        if self._arena is None:
            return
        size = max(self._arena_size, 64)
        arena = host_memory.arena(self._info, self._context, CL_MEM_READ_WRITE, size, self._owner, self._arena)
        self._arena_buffer = arena
        views: dict[ArenaSlice, MemObject] = {}
        for values in kernel_values:
            for i, value in enumerate(values):
                if isinstance(value, ArenaSlice):
                    if value not in views:
                        view = driver.sub_buffer(arena, CL_MEM_READ_WRITE, value.offset, value.size)
                        views[value] = self._owner.memory(view)
                    values[i] = views[value]
        self._arena = []  # the bytes are on the device now
