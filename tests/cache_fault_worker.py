"""Runs one model through the delegate and TFLite's builtin CPU kernels, for tests/test_cache_faults.py.

``python -m tests.cache_fault_worker MODEL OPTIONS_JSON`` prints one JSON line: the serialization
cache state of each partition, every Python warning raised while the model was loaded and run (as
"Category: message"), and the largest difference from the CPU's output relative to its largest
magnitude. Run in a subprocess with a timeout: the faults it meets (FIFOs, devices) could hang it.
"""

from __future__ import annotations

import json
import sys
import warnings

import numpy as np

import delegate
from delegate.api import host_runtime


def main(model: str, options_json: str) -> int:
    options = json.loads(options_json)
    host = host_runtime()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gpu = delegate.Interpreter(model, background_compile="off", cpu_when_faster="false", **options)
        gpu.allocate_tensors()
    cpu = host.Interpreter(
        model_path=model, experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    cpu.allocate_tensors()
    rng = np.random.default_rng(0)
    outputs = []
    for interpreter in (gpu, cpu):
        for detail in interpreter.get_input_details():
            interpreter.set_tensor(detail["index"], rng.random(tuple(detail["shape"]), dtype=np.float32))
        rng = np.random.default_rng(0)  # the same inputs for both
        with warnings.catch_warnings(record=True) as during:
            warnings.simplefilter("always")
            interpreter.invoke()
        caught += during
        outputs.append([interpreter.get_tensor(o["index"]) for o in interpreter.get_output_details()])
    error = max(float(np.abs(g - c).max()) / max(float(np.abs(c).max()), 1e-6) for g, c in zip(*outputs, strict=True))
    report = {
        "caches": [p.cache for p in gpu.opencl.partitions],
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "relative_error": error,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
