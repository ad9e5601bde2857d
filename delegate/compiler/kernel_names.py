"""How compiled kernels are named (CLNode.name, kept in the context file).

A kernel is named by the TFLite node it runs. One that runs several (elementwise ops linked into
their producer, fusion.py; a depthwise + 1x1 pair, ops/conv_pair.py; concatenations read in place
by their reader) is named by all of them joined by ``SEPARATOR``, so that the plugin's reports
count fused ops from a context read back from the serialization cache as from a fresh one. A node
with several outputs gets one kernel per output, ``name:output``.
"""

from __future__ import annotations

SEPARATOR = "+"


def joined(names: list[str]) -> str:
    """The name of a kernel running the nodes ``names`` (the kernel's own node first)."""
    return SEPARATOR.join(names)


def fused_ops(kernel_name: str) -> int:
    """How many nodes besides its own a kernel runs."""
    return kernel_name.count(SEPARATOR)
