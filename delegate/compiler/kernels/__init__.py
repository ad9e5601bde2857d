"""Kernel templates: the OpenCL text of the convolution kernels and how their tensors are packed,
apart from the ops' semantics (ops/) and from the choice of a kernel (selectors/).

- ``common/``: what either family uses: the pieces of every kernel (``pieces``), the generic
  convolutions (``conv_plain``, ``conv_blocked``), row blocks (``row_blocks``);
- ``cpu/``: the cpu family's matrix products (``gemm_conv``, its parts ``gemm_blocks``), the
  depthwise row kernel (``depthwise_rows``) and the depthwise + 1x1 pair (``conv_pair``);
- ``gpu/``: the gpu family (``gpu_conv``).

A template takes its parameters (a spec a selector filled in) and data, never the graph: it
imports neither ops/ nor selectors/.
"""
