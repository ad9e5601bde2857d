"""The resource bounds of one context, in one place both sides see.

The runtime refuses a context over any of them before it allocates or builds anything
(runtime/limits.py, docs/runtime.md "Resource limits"); the compiler keeps every context it
emits within them (compiler/bounds.py): it splits long fused chains and leaves the nodes past a
bound on TFLite's CPU, so a context it made is never refused.
"""

from __future__ import annotations

#: nodes (kernels) in one context
MAX_NODES = 4096
#: tensors declared in one context (memory planning is quadratic in them)
MAX_TENSORS = 8192
#: kernel source of one node (code plus elementwise_code), in bytes
MAX_NODE_SOURCE_BYTES = 1 << 20
#: kernel source of all nodes together, in bytes
MAX_TOTAL_SOURCE_BYTES = 32 << 20
