"""Densify TFLite sparse tensors (schema ``SparsityParameters``, C ``TfLiteSparsity``) with numpy.

The stored values of a sparse tensor are its leaves in traversal order. The traversal runs over
the tensor's original dimensions (in ``traversal_order``'s first entries) and then, for a
block-sparse tensor, over one extra dimension per blocked dimension (``block_map[k]`` is the
original dimension that block dimension ``k`` splits; the original dimension then counts blocks,
and the block dimension counts elements inside a block). Each traversal level is either DENSE,
iterating ``0 .. dense_size - 1``, or SPARSE_CSR, iterating the coordinates
``indices[segments[p] : segments[p + 1]]``, where ``p`` is the position reached in the level
above (for a DENSE level above: its parent's position times ``dense_size`` plus the coordinate;
for a CSR level: the position in its ``indices``). These are the semantics of TFLite's
``FormatConverter`` (tensorflow/lite/kernels/internal/utils/sparsity_format_converter.cc).

Everything is checked before use: metadata that does not describe the tensor raises ValueError
saying what is wrong, rather than indexing out of bounds or producing a wrong array.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np


class DimensionType(IntEnum):
    """TfLiteDimensionType (schema DimensionType)."""

    DENSE = 0
    SPARSE_CSR = 1


@dataclass(frozen=True)
class DimensionMetadata:
    """One traversal level: DENSE with ``dense_size``, or SPARSE_CSR with ``segments`` and ``indices``."""

    format: int
    dense_size: int = 0
    segments: Sequence[int] | np.ndarray = ()
    indices: Sequence[int] | np.ndarray = ()


def _int_vector(values: Sequence[int] | np.ndarray, what: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{what} is not a vector (shape {array.shape})")
    if array.size == 0:
        return np.zeros(0, np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{what} holds {array.dtype} values, not integers")
    return array.astype(np.int64)


def _permutation(order: np.ndarray, start: int, stop: int) -> bool:
    return sorted(order.tolist()) == list(range(start, stop))


def densify(
    shape: Sequence[int],
    traversal_order: Sequence[int] | np.ndarray,
    block_map: Sequence[int] | np.ndarray,
    dim_metadata: Sequence[DimensionMetadata],
    values: np.ndarray,
) -> np.ndarray:
    """The dense array of ``shape`` whose stored (non-implicit) values are ``values`` (1-D, in
    traversal order) and whose structure the sparsity parameters give; elements not stored are 0."""
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"dense shape {shape} has a negative dimension")
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"the stored values are not a flat vector (shape {values.shape})")
    rank = len(shape)
    order = _int_vector(traversal_order, "traversal_order")
    blocks = _int_vector(block_map, "block_map")
    levels = rank + len(blocks)
    _check_levels(rank, order, blocks, len(dim_metadata))

    level_of = {int(d): level for level, d in enumerate(order)}
    # Extent of each expanded dimension: original ones count blocks, block ones elements in a block.
    extent = list(shape) + [0] * len(blocks)
    for k, dim in enumerate(blocks):
        size = int(dim_metadata[level_of[rank + k]].dense_size)
        if dim_metadata[level_of[rank + k]].format != DimensionType.DENSE or size <= 0:
            raise ValueError(f"block dimension {k} must be DENSE with a positive dense_size (the block size)")
        if shape[dim] % size:
            raise ValueError(f"dimension {dim} of size {shape[dim]} does not split into blocks of {size}")
        extent[rank + k] = size
        extent[dim] = shape[dim] // size

    # Walk the levels breadth-first, keeping each leaf's position and its coordinate per level;
    # repeating parents in order keeps the leaves in traversal (depth-first) order.
    positions = np.zeros(1, np.int64)  # the one root
    parents = 1  # how many positions the level above can reach
    coords: list[np.ndarray] = []
    for level, meta in enumerate(dim_metadata):
        n = extent[int(order[level])]
        if meta.format == DimensionType.DENSE:
            if int(meta.dense_size) != n:
                raise ValueError(f"level {level} is DENSE of size {meta.dense_size}, but its dimension has {n}")
            step = np.arange(n, dtype=np.int64)
            coords = [np.repeat(c, n) for c in coords]
            coords.append(np.tile(step, len(positions)))
            positions = np.repeat(positions, n) * n + coords[-1]
            parents *= n
        elif meta.format == DimensionType.SPARSE_CSR:
            segments = _int_vector(meta.segments, f"level {level}'s array_segments")
            indices = _int_vector(meta.indices, f"level {level}'s array_indices")
            if len(segments) != parents + 1:
                raise ValueError(
                    f"level {level} is SPARSE_CSR with {len(segments)} segment offsets; "
                    f"the levels above reach {parents} positions, so it needs {parents + 1}"
                )
            if segments[0] != 0 or np.any(np.diff(segments) < 0) or segments[-1] != len(indices):
                raise ValueError(
                    f"level {level}'s array_segments do not rise from 0 to the {len(indices)} array_indices"
                )
            if len(indices) and (indices.min() < 0 or indices.max() >= n):
                raise ValueError(f"level {level}'s array_indices are not all in 0..{n - 1}")
            starts, counts = segments[positions], segments[positions + 1] - segments[positions]
            total = int(counts.sum())
            # positions[j] expands to starts[j] .. starts[j] + counts[j] - 1
            offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
            positions = np.repeat(starts, counts) + offsets
            coords = [np.repeat(c, counts) for c in coords]
            coords.append(indices[positions])
            parents = len(indices)
        else:
            raise ValueError(f"level {level} has dimension type {meta.format}, neither DENSE (0) nor SPARSE_CSR (1)")

    leaves = len(positions)
    if leaves != len(values):
        raise ValueError(f"the sparsity parameters describe {leaves} stored values, the tensor holds {len(values)}")
    index = [np.zeros(leaves, np.int64) for _ in range(rank)]
    for level in range(rank):
        index[int(order[level])] = coords[level]
    for level in range(rank, levels):
        k = int(order[level]) - rank
        dim = int(blocks[k])
        index[dim] = index[dim] * extent[rank + k] + coords[level]
    dense = np.zeros(shape, values.dtype)
    if leaves:
        flat = np.ravel_multi_index(tuple(index), shape) if rank else np.zeros(leaves, np.int64)
        if len(np.unique(flat)) != leaves:
            raise ValueError("two stored values land on the same dense element (repeated array_indices)")
        dense.reshape(-1)[flat] = values
    return dense


def _check_levels(rank: int, order: np.ndarray, blocks: np.ndarray, metadata: int) -> None:
    """The traversal order names the ``rank`` original dimensions then the block dimensions, and
    there is one of the ``metadata`` entries per level."""
    levels = rank + len(blocks)
    if len(order) != levels:
        raise ValueError(
            f"traversal_order has {len(order)} entries; a rank-{rank} tensor with {len(blocks)} block "
            f"dimensions needs {levels}"
        )
    if metadata != levels:
        raise ValueError(f"{metadata} dimension metadata entries for {levels} traversal levels")
    if not _permutation(order[:rank], 0, rank) or not _permutation(order[rank:], rank, levels):
        raise ValueError(
            f"traversal_order {order.tolist()} is not the original dimensions 0..{rank - 1} "
            f"followed by the block dimensions {rank}..{levels - 1}"
        )
    if any(b < 0 or b >= rank for b in blocks) or len(set(blocks.tolist())) != len(blocks):
        raise ValueError(f"block_map {blocks.tolist()} does not name distinct dimensions of a rank-{rank} tensor")
