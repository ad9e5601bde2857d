"""The compiler's side of a context's resource bounds (context/bounds.py, which the runtime
enforces): a context the compiler emits is never one the runtime refuses, and its kernels stay
quick to build.

- A kernel takes at most ``MAX_LINKS`` linked ops (fusion.py). The OpenCL compiler's time grows
  faster than a kernel's length (PoCL, measured on a 2-core machine: one kernel of 32 linked
  MUL / ADD ops built in about 1 s, 100 in 3 s, 400 in over a minute), and each linked operand is
  one more kernel argument (a device may take as little as 1 KiB of them,
  CL_DEVICE_MAX_PARAMETER_SIZE). A longer chain goes on in a new kernel; the pieces of a regular
  chain have the same text, which the runtime builds once.
- A link is also refused when it could take the kernel's source past ``NODE_SOURCE_BUDGET``, a
  quarter of the runtime's bound per node (linked code runs in front of every write, so it
  counts once per write hook).
- A partition whose kernels, tensors or source would pass the runtime's bounds per context raises
  ``PartitionTooLargeError`` naming the node from which on it does not fit: the plugin leaves that
  node on TFLite's CPU, which splits the partition there, and compiles the parts.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..context import bounds, model
from ..errors import PartitionTooLargeError
from .graph import Graph
from .kernel import Kernel, WriteHook
from .kernel_names import SEPARATOR

#: ops linked into one kernel at most
MAX_LINKS = 32
#: the source a kernel may grow to by taking links, in bytes
NODE_SOURCE_BUDGET = bounds.MAX_NODE_SOURCE_BYTES // 4
#: the most source one linked op adds in front of one write (a per-channel scale and shift with an
#: activation, fusion.py, is under 1 KiB)
LINK_SOURCE_BOUND = 2048


def takes_another_link(kernel: Kernel) -> bool:
    """Whether one more op may be linked into ``kernel`` (which accepts links)."""
    if kernel.links >= MAX_LINKS:
        return False
    hooks = sum(isinstance(piece, WriteHook) for piece in kernel.body)
    return kernel.source_size() + hooks * LINK_SOURCE_BOUND <= NODE_SOURCE_BUDGET


def _source_bytes(node: model.CLNode) -> int:
    op = node.gpu_op
    if op is None:
        return 0
    return len((op.code or "").encode()) + len((op.elementwise_code or "").encode())


def _over(index: int, size: int, total: int, tensors: int) -> str | None:
    """Why the context's nodes up to ``index`` (its source ``size``, with the ones before it
    ``total`` bytes and ``tensors`` tensors) do not fit, or None."""
    if size > bounds.MAX_NODE_SOURCE_BYTES:
        return f"its kernel has {size} bytes of source, over the runtime's bound of {bounds.MAX_NODE_SOURCE_BYTES}"
    if index >= bounds.MAX_NODES:
        return f"the partition needs more than the runtime's {bounds.MAX_NODES} kernels per partition"
    if total > bounds.MAX_TOTAL_SOURCE_BYTES:
        return f"the partition's kernels pass the runtime's bound of {bounds.MAX_TOTAL_SOURCE_BYTES} bytes of source"
    if tensors > bounds.MAX_TENSORS:
        return f"the partition needs more than the runtime's {bounds.MAX_TENSORS} tensors per partition"
    return None


def check_bounds(ctx: model.InferenceContext, graph: Graph, nodes: Sequence[int]) -> None:
    """Raise ``PartitionTooLargeError`` when ``ctx`` (compiled from ``nodes`` of ``graph``, in
    execution order) is over a bound of context/bounds.py, with the earliest of ``nodes`` run by
    the first kernel that does not fit or any after it."""
    total = 0
    seen: set[int] = set()
    for index, node in enumerate(ctx.nodes):
        size = _source_bytes(node)
        total += size
        seen.update(node.input_ids, node.output_ids)
        reason = _over(index, size, total, len(seen))
        if reason is not None:
            _raise_at(ctx.nodes[index:], graph, nodes, reason)


def _raise_at(rest: Sequence[model.CLNode], graph: Graph, nodes: Sequence[int], reason: str) -> None:
    position = {graph.nodes[i].name: k for k, i in enumerate(nodes)}
    run = [
        position[name]
        for node in rest
        for part in (node.name or "").split(SEPARATOR)
        for name in (part, part.rpartition(":")[0])  # a node with several outputs: name:output
        if name in position
    ]
    if not run:
        raise ValueError(f"the partition does not fit ({reason}) and no node of it can be left out")
    first = nodes[min(run)]
    reason = f"{reason}: the partition is split here, this node on CPU"
    raise PartitionTooLargeError(f"{graph.nodes[first].name}: {reason}", node=first, reason=reason)
