"""Makes one stage of the delegate's Prepare fail on a model, in a process of its own, and reports
what the user saw (tests/test_prepare_failures.py runs it: a crash must fail the test, not the run).

``python -m tests.prepare_failure_driver MODEL STAGE FALLBACK``: STAGE is ``capture`` (reading the
graph), ``compile`` (the compiler), ``build`` (the driver rejects a kernel: a real build failure)
or ``allocate`` (device memory); FALLBACK ``1`` allows compilation fallback. The stage is broken
by injecting a failing collaborator into the plugin's Prepare plan (the allocation: by patching
the runtime's allocator); the host is DELEGATE_TFLITE_HOST's. Prints one JSON line:
where an error surfaced (``construct``, ``allocate``, ``invoke`` or null), its message, the
warnings, the nodes delegated and the largest error against TFLite's CPU kernels.
"""

from __future__ import annotations

import json
import sys
import warnings
from typing import Any

import numpy as np

import delegate
from delegate.api import host_runtime
from delegate.compiler.kernel import WRITE
from delegate.errors import DeviceResourceError
from delegate.plugin.registry import REGISTRY
from delegate.runtime.allocation import TensorAllocator

from .plugin_testing import replaced

MESSAGE = "failure injected by the test"


def _break(stage: str) -> None:
    if stage == "capture":

        def capture(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError(f"capture {MESSAGE}")

        REGISTRY.plan = replaced(REGISTRY.plan, capture=capture)
    elif stage == "compile":

        def compile_partition(*args: Any, **kwargs: Any) -> Any:
            raise ValueError(f"compile {MESSAGE}")

        REGISTRY.plan = replaced(REGISTRY.plan, compile=compile_partition)
    elif stage == "build":
        real = REGISTRY.plan.loader.compiler.compile

        def rejected(*args: Any, **kwargs: Any) -> Any:
            ctx = real(*args, **kwargs)
            for node in ctx.nodes:
                if node.gpu_op is not None and node.gpu_op.code and WRITE.text in node.gpu_op.code:
                    node.gpu_op.code += f"\n#error build {MESSAGE}\n"
            return ctx

        REGISTRY.plan = replaced(REGISTRY.plan, compile=rejected)
    elif stage == "allocate":

        def allocate(self: Any, ctx: Any) -> None:
            raise DeviceResourceError(f"allocate {MESSAGE}")

        TensorAllocator.allocate = allocate  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown stage {stage}")


def _feeds(interpreter: Any) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.random(tuple(d["shape"]), dtype=np.float32) for d in interpreter.get_input_details()]


def _outputs(interpreter: Any, feeds: list[np.ndarray]) -> list[np.ndarray]:
    for d, x in zip(interpreter.get_input_details(), feeds, strict=True):
        interpreter.set_tensor(d["index"], x)
    interpreter.invoke()
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def main(model: str, stage: str, fallback: bool) -> dict[str, Any]:
    _break(stage)
    result: dict[str, Any] = {"surfaced": None, "error": None, "delegated": None, "rel_error": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        phase = "construct"
        try:
            interpreter = delegate.Interpreter(model, compile_fallback=fallback)
            phase = "allocate"
            interpreter.allocate_tensors()
            phase = "invoke"
            feeds = _feeds(interpreter)
            got = _outputs(interpreter, feeds)
        except Exception as exc:
            result.update(surfaced=phase, error=f"{type(exc).__name__}: {exc}")
            got = None
        result["warnings"] = [str(w.message) for w in caught]
    if got is not None:
        result["delegated"] = len(interpreter.opencl.delegated_nodes)
        host = host_runtime()
        cpu = host.Interpreter(model_path=model)
        cpu.allocate_tensors()
        want = _outputs(cpu, feeds)
        result["rel_error"] = max(
            float(np.abs(g - w).max()) / max(float(np.abs(w).max()), 1e-12) for g, w in zip(got, want, strict=True)
        )
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3] == "1")))
