"""Launch geometry: a node's grid, the work-group sizes worth trying, and the fit to a device.

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

from .device import DeviceInfo


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
