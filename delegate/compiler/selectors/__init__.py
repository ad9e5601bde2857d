"""Kernel choices, made explicit: which kernel a node gets (its ``Variant``) and that kernel's
parameters, as a ``KernelSpec``, from the node's shapes and the CompileOptions. Pure decisions,
testable without generating kernel text (tests/test_selectors.py); an op's ``emit`` asks its
selector and renders what it returns.

- ``conv``: CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV (``select_conv``,
  ``select_depthwise``, ``select_fully_connected``, ``select_transpose_conv``), and whether a
  CONV_2D reads a concatenation in place;
- ``gemm``: the matrix products' blocks, widths, orders, grids and work-groups (``select_gemm``);
- ``gpu``: the gpu family's kernels and tiles (``select_gpu_conv``, ``select_gpu_depthwise``);
- ``pair``: which depthwise + 1x1 pairs run as one kernel (``select_pair``);
- ``batch_matmul``: BATCH_MATMUL's row kernels, by transposition (``select_batch_matmul``);
- ``pointwise``: elementwise ops in runs of a row, pooling's unrolled row kernel (``select_elementwise``,
  ``select_pool``);
- ``spec``: ``Variant`` and ``KernelSpec``.

Selectors sit between kernels/ (the templates, whose parameter types they fill in) and ops/.
"""
