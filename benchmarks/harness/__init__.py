"""The benchmarks' shared harness: where the models are, child processes, timing and races.

Modules:

- ``paths``: the checkout, the shared models and their report names.
- ``child``: fresh Python processes that print one JSON line, and why one failed.
- ``invoke_child``: the child that times one interpreter's ``invoke()`` (delegate or XNNPACK).
- ``timing``: medians, fastest calls, percentiles and geometric means.
- ``races``: configurations called in alternating blocks in one process, and their ratios.
- ``contexts``: a model compiled as the delegate compiles it, and seeded inputs for a Runtime.
- ``perf``: Linux ``perf record`` around a child process.
- ``cli``: the command-line pieces the tools share (``--option K=V``, ``--check``, the machine).
- ``regression``: latency ratios against a committed baseline, and what counts as a regression.

Importing the package sets ``DELEGATE_BACKGROUND_COMPILE=off`` (unless set): the benchmarks
measure the delegate itself, never TFLite's CPU kernels standing in while it compiles, and the
child processes they start inherit it.
"""

from __future__ import annotations

import os

os.environ.setdefault("DELEGATE_BACKGROUND_COMPILE", "off")
