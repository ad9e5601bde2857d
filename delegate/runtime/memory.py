"""Memory planning: which runtime tensors share device memory.

Buffer-backed tensors (BUFFER, IMAGE_BUFFER) get offsets in one arena: greedy by size, each
tensor placed in the lowest gap left by the tensors whose lifetimes overlap its own (upstream's
greedy-by-size offset assignment). Textures share whole images between tensors of identical
descriptors whose lifetimes do not overlap. Variable tensors persist and share nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..context import model
from ..context.model import DataType, TensorDescriptor, TensorStorageType

BUFFER_BACKED = (TensorStorageType.BUFFER, TensorStorageType.IMAGE_BUFFER)


@dataclass(frozen=True)
class Shape:
    """A tensor's shape (b, h, w, d, c) and the slices of 4 channels it is stored in."""

    b: int
    h: int
    w: int
    d: int
    c: int

    @property
    def slices(self) -> int:
        return (self.c + 3) // 4

    @classmethod
    def of(cls, desc: TensorDescriptor) -> Shape:
        s = desc.shape
        if s is None:
            raise ValueError("tensor has no shape")
        for dim in ("b", "h", "w", "d", "c"):  # never taken as 1: context/semantics.py refuses them first
            if getattr(s, dim) < 1:
                raise ValueError(f"shape.{dim} is {getattr(s, dim)}, not a size")
        return cls(s.b, s.h, s.w, s.d, s.c)


def element_bytes(desc: TensorDescriptor) -> int:
    """Bytes per channel (model.element_bytes), refusing a type no runtime tensor has."""
    size = model.element_bytes(desc)
    if size is None:
        raise ValueError(f"data type {DataType(desc.data_type).name} is not FLOAT32 or FLOAT16")
    return size


def image_dims(desc: TensorDescriptor, padded: bool = False) -> tuple[int, ...]:
    """Image size in pixels for texture storage (see docs/runtime.md for the layouts)."""
    s = Shape.of(desc)
    st = desc.storage_type
    if st == TensorStorageType.TEXTURE_2D:
        return (s.w * s.b * s.d, s.h * s.slices)
    if st == TensorStorageType.SINGLE_TEXTURE_2D:
        return (s.w * s.b * s.d, s.h)
    if st in (TensorStorageType.TEXTURE_ARRAY, TensorStorageType.TEXTURE_3D):
        return (s.w * s.b, s.h, s.slices * s.d)
    if st == TensorStorageType.IMAGE_BUFFER:
        return (slice_pitch(desc, padded) * s.slices,)
    raise ValueError(f"{TensorStorageType(st).name} is not an image storage")


#: Cache lines a slice plane of a buffer-backed tensor is padded by on a CPU device when the plane
#: is a whole number of 4 KiB (64x64 pixels, 96x96, 128x128 ...: most image layers): unpadded,
#: a pixel's slices all fall in one set of the L1 cache (64 sets of 64 bytes) and a kernel reading
#: many of them evicts its own lines. Three lines measured better than one (UNet-small 0.949 of the
#: unpadded time against 0.962, face detection 0.942 against 0.988; benchmarks/RESULTS.md, "Slice
#: planes off the 4 KiB grid").
PLANE_PAD_LINES = 3


def slice_pitch(desc: TensorDescriptor, padded: bool = False) -> int:
    """FLT4 elements from a buffer-backed tensor's slice plane to the next (its ``int8`` shape
    argument's s7): the plane's pixels, plus PLANE_PAD_LINES cache lines when ``padded`` and the
    plane is a whole number of 4 KiB."""
    s = Shape.of(desc)
    plane = s.b * s.h * s.w * s.d
    vector = 4 * element_bytes(desc)
    if padded and plane * vector % 4096 == 0:
        return plane + PLANE_PAD_LINES * 64 // vector
    return plane


def storage_bytes(desc: TensorDescriptor, padded: bool = False) -> int:
    """Device bytes a tensor occupies in its storage (channels padded to 4 but for SINGLE_TEXTURE_2D;
    ``padded``: slice planes as ``slice_pitch`` places them, for buffer-backed storage)."""
    s = Shape.of(desc)
    if desc.storage_type in BUFFER_BACKED:
        return slice_pitch(desc, padded) * s.slices * 4 * element_bytes(desc)
    pixels = s.b * s.h * s.w * s.d
    channels = s.c if desc.storage_type == TensorStorageType.SINGLE_TEXTURE_2D else s.slices * 4
    if desc.storage_type == TensorStorageType.SINGLE_TEXTURE_2D and s.c == 3:
        channels = 4  # no 3-channel float images: RGBA
    return pixels * channels * element_bytes(desc)


@dataclass(frozen=True)
class Lifetime:
    """The nodes between which a tensor must keep its memory, and its size."""

    tensor_id: int
    first: int  # index of the first node touching it (-1: before the first node)
    last: int  # index of the last node touching it (len(nodes): after the last node)
    size: int

    def overlaps(self, other: Lifetime) -> bool:
        return self.first <= other.last and other.first <= self.last


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


def greedy_offsets(lifetimes: list[Lifetime], alignment: int) -> tuple[dict[int, int], int]:
    """Offsets in one arena so that tensors alive at the same time never overlap; and the arena size."""
    placed: list[tuple[Lifetime, int]] = []
    offsets: dict[int, int] = {}
    total = 0
    for item in sorted(lifetimes, key=lambda lt: (-lt.size, lt.first, lt.tensor_id)):
        busy = sorted((off, off + other.size) for other, off in placed if other.overlaps(item))
        best, best_gap, cursor = None, None, 0
        for start, end in busy:
            gap = start - cursor
            if gap >= item.size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, _align(end, alignment))
        offset = best if best is not None else cursor
        offsets[item.tensor_id] = offset
        placed.append((item, offset))
        total = max(total, offset + item.size)
    return offsets, total


def lower_bound(lifetimes: list[Lifetime]) -> int:
    """The largest sum of sizes of tensors alive at the same time: no assignment can do better."""
    if not lifetimes:
        return 0
    points = sorted({lt.first for lt in lifetimes} | {lt.last for lt in lifetimes})
    return max(sum(lt.size for lt in lifetimes if lt.first <= t <= lt.last) for t in points)


@dataclass
class TextureGroup:
    """Tensors sharing one image: identical descriptors, lifetimes pairwise disjoint."""

    key: tuple
    size: int
    members: list[Lifetime] = field(default_factory=list)


def greedy_textures(items: list[tuple[Lifetime, tuple]]) -> list[TextureGroup]:
    groups: list[TextureGroup] = []
    for lifetime, key in sorted(items, key=lambda x: (x[0].first, x[0].tensor_id)):
        for group in groups:
            if group.key == key and not any(m.overlaps(lifetime) for m in group.members):
                group.members.append(lifetime)
                break
        else:
            groups.append(TextureGroup(key, lifetime.size, [lifetime]))
    return groups
