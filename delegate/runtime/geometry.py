"""Launch geometry: a node's grid, the work-group sizes worth trying, and the fit to a device.

``grid_of`` reads a node's grid from its operation (``tensor_to_grid`` applied to its first
output, or the stored CUSTOM size); ``launch_of`` launches it with the work-group size it stores.

``Grid.launch`` turns a work-group size into the (global, local) pair OpenCL takes: the size is
clamped to the device's limits, groups per axis are ceil(grid / work group), and the global size
of axis i is groups[launch_order[i]] x work_group[i].

``candidates`` lists the work-group sizes a tuning pass tries: FAST a handful of shapes of 8 to
64 work-items spread over the axes the grid uses, EXHAUSTIVE every power-of-two shape up to the
device's limit that does not overshoot the grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from ..context import kernel_text, model
from ..context.model import TensorToGrid
from . import driver
from .device import DeviceInfo
from .graph import RuntimeTensor, semantic
from .source import KernelSource

_DEFAULT_WORK_GROUP = (8, 4, 1)


class Tuning(str, Enum):
    NONE = "none"
    FAST = "fast"
    EXHAUSTIVE = "exhaustive"


@dataclass(frozen=True)
class Grid:
    """A kernel's grid: its size in work-items, dimensions, and the order of its axes."""

    size: tuple[int, int, int]
    dims: int
    order: tuple[int, int, int]

    def fit(self, work_group: tuple[int, int, int], info: DeviceInfo, kernel_limit: int | None = None) -> list[int]:
        """``work_group`` clamped to the device's (and the kernel's) limits."""
        wg = [max(1, int(v)) for v in work_group]
        for axis in range(3):
            wg[axis] = min(wg[axis], info.max_work_item_sizes[axis] if axis < len(info.max_work_item_sizes) else 1)
        limit = min(info.max_work_group_size, kernel_limit or info.max_work_group_size)
        while wg[0] * wg[1] * wg[2] > limit:  # shrink the largest axis to fit
            axis = wg.index(max(wg))
            wg[axis] = max(1, wg[axis] // 2)
        return wg

    def launch(
        self, work_group: tuple[int, int, int], info: DeviceInfo, kernel_limit: int | None = None
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        wg = self.fit(work_group, info, kernel_limit)
        groups = [-(-max(self.size[a], 1) // wg[a]) for a in range(3)]
        global_size = tuple(groups[self.order[a]] * wg[a] for a in range(self.dims))
        return global_size, tuple(wg[: self.dims])


def _pow2_up_to(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def candidates(grid: Grid, mode: Tuning, info: DeviceInfo, kernel_limit: int) -> list[tuple[int, int, int]]:
    """Work-group sizes to try for ``grid`` (the axes beyond ``grid.dims`` stay 1), deduplicated
    after fitting to the device, in a fixed order."""
    limit = min(info.max_work_group_size, kernel_limit)
    # an axis never gets more work-items than the next power of two above its grid extent
    caps = [1, 1, 1]
    for axis in range(grid.dims):
        extent = max(grid.size[axis], 1)
        caps[axis] = 1 << (extent - 1).bit_length()
    shapes: list[tuple[int, int, int]] = []
    if mode == Tuning.EXHAUSTIVE:
        for x in _pow2_up_to(caps[0]):
            for y in _pow2_up_to(caps[1]):
                for z in _pow2_up_to(caps[2]):
                    if x * y * z <= limit:
                        shapes.append((x, y, z))
    elif mode == Tuning.FAST:
        for total in (8, 16, 32, 64):
            # all on x; x-major split over x and y; a square split; one with z when the grid has depth
            splits = [(total, 1, 1), (total // 2, 2, 1), (total // 4, 4, 1), (2, total // 2, 1)]
            if caps[2] > 1:
                splits.append((total // 4, 2, 2))
            for x, y, z in splits:
                shapes.append((max(1, min(x, caps[0])), max(1, min(y, caps[1])), max(1, min(z, caps[2]))))
    seen: set[tuple[int, int, int]] = set()
    out: list[tuple[int, int, int]] = []
    for shape in shapes:
        wg = grid.fit(shape, info, kernel_limit)
        key = (wg[0], wg[1], wg[2])
        if key not in seen and key[0] * key[1] * key[2] <= limit:
            seen.add(key)
            out.append(key)
    return out


def grid_of(op: model.GPUOperation, dst: RuntimeTensor | None, node: str) -> Grid:
    """The grid of ``op`` whose first output is ``dst`` (None: it has none)."""
    ttg = TensorToGrid(op.tensor_to_grid)
    if ttg != TensorToGrid.CUSTOM and dst is None:
        raise semantic(f"node {node!r}: tensor_to_grid {ttg.name} but the node has no output tensor")
    if ttg == TensorToGrid.CUSTOM:
        if op.grid_size is None:
            raise semantic(f"node {node!r}: tensor_to_grid CUSTOM needs grid_size")
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
        raise semantic(f"node {node!r}: grid_dimension {dims} is not 1, 2 or 3")
    order = (
        (0, 1, 2)
        if op.work_group_launch_order is None
        else (op.work_group_launch_order.x, op.work_group_launch_order.y, op.work_group_launch_order.z)
    )
    if sorted(order[:dims]) != list(range(dims)):
        raise semantic(f"node {node!r}: work_group_launch_order {order} is not a permutation")
    return Grid(size, dims, order)


def launch_of(op: model.GPUOperation, grid: Grid, info: DeviceInfo) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(global, local) sizes of ``grid`` with the work-group size ``op`` stores (default 8x4x1)."""
    wg = (
        _DEFAULT_WORK_GROUP
        if op.work_group_size is None
        else (op.work_group_size.x, op.work_group_size.y, op.work_group_size.z)
    )
    return grid.launch(wg, info)


def required_work_group(src: KernelSource, kernel: Any, device: driver.Device) -> tuple[int, ...] | None:
    """The ``reqd_work_group_size`` of a node's kernel: from the built ``kernel``, or, when it is
    not built (None: a persistent load builds node kernels only on demand), from its source."""
    if kernel is not None:
        return driver.kernel_required_work_group_size(kernel, device)
    return kernel_text.required_work_group(src.body)
