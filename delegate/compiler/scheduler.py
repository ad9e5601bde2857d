"""The launch order of a partition's kernels, keeping the schedule invariant (context/schedule.py):
every kernel reads only the partition's inputs and tensors written by kernels before it.

A kernel runs at the position (in the partition's node order) of its first op, unless an op linked
into it (fusion.py) reads a runtime operand that a kernel placed after that position writes: then
it moves to the position of that linked op, where the operand is written (the graph's node order
is a topological one). Each linked op is weighed in the order it joined, against the final
positions of the kernels writing its operands, which are known first: a kernel's operands are
written by kernels whose last op comes before its own last op. Kernels at one position (the
per-output kernels of SPLIT) keep the order they were emitted in.
"""

from __future__ import annotations

from ..context import model
from ..context.schedule import schedule_violation
from .kernel import KernelNode


def _last(kernel: KernelNode) -> int:
    return kernel.joins[-1][0] if kernel.joins else kernel.position


def schedule(kernels: list[KernelNode], inputs: list[int]) -> list[KernelNode]:
    """``kernels`` in launch order."""
    writer = {i: k for k in kernels for i in k.output_ids}
    partition_inputs = set(inputs)
    at: dict[int, int] = {}  # id(kernel) -> its position
    for kernel in sorted(kernels, key=_last):
        position = kernel.position
        for joined, operands in kernel.joins:
            late = (
                writer[i] for i in operands if i in writer and i not in partition_inputs and writer[i] is not kernel
            )
            if any(at[id(w)] > position for w in late):
                position = joined
        at[id(kernel)] = position
    return sorted(kernels, key=lambda k: at[id(k)])


def check_schedule(ctx: model.InferenceContext) -> None:
    """Refuse a context whose kernels read a tensor before it is written (a compiler bug)."""
    problem = schedule_violation(ctx)
    if problem is not None:
        raise ValueError(f"the compiled kernels are out of order: {problem}")
