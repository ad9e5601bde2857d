"""The arithmetic exp, tanh, logistic and erf of kernels/common/math_code.py, run as OpenCL on the
default device over the whole float range, against float64 references: exp within 2.5 ulp
(relative 1.5e-7) where e^x is a normal float, tanh, logistic and erf within 5e-7 (absolute),
with infinities and NaN as the builtins give them."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from delegate.compiler.kernels.common import math_code

pytestmark = pytest.mark.opencl

_FUNCTIONS: dict[str, Callable[[str, str, int], str]] = {
    "exp": math_code.exp_code,
    "tanh": math_code.tanh_code,
    "logistic": math_code.logistic_code,
    "erf": math_code.erf_code,
}


def _run(name: str, x: np.ndarray, width: int) -> np.ndarray:
    """``name``'s statements applied to ``x`` (float32) by a kernel of float``width`` values."""
    import pyopencl as cl

    import delegate  # noqa: F401  (the embedded PoCL's ICD, for pyopencl too)

    suffix = "" if width == 1 else str(width)
    code = _FUNCTIONS[name]("v", "x[i]", width)
    source = (
        f"__kernel void k(__global const float{suffix}* x, __global float{suffix}* y) {{\n"
        f"  int i = get_global_id(0);\n  float{suffix} v;\n  {code}\n  y[i] = v;\n}}\n"
    )
    device = next(d for p in cl.get_platforms() for d in p.get_devices())
    context = cl.Context([device])
    queue = cl.CommandQueue(context)
    program = cl.Program(context, source).build()
    padded = np.zeros(-(-x.size // width) * width, np.float32)
    padded[: x.size] = x
    flags = cl.mem_flags
    src = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=padded)
    dst = cl.Buffer(context, flags.WRITE_ONLY, padded.nbytes)
    program.k(queue, (padded.size // width,), None, src, dst)
    out = np.empty_like(padded)
    cl.enqueue_copy(queue, out, dst)
    return out[: x.size]


def _inputs(low: float, high: float) -> np.ndarray:
    dense = np.linspace(low, high, 200_001, dtype=np.float32)
    small = np.float32(10.0) ** np.linspace(-30, 0, 301, dtype=np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45], np.float32)
    return np.concatenate([dense, small, -small, special])


@pytest.mark.parametrize("width", [1, 4, 8])
def test_exp_is_within_2_5_ulp_and_overflows_as_the_builtin(width):
    x = _inputs(-110.0, 100.0)
    got = _run("exp", x, width).astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64))
    normal = (want >= 2.0**-126) & (want <= np.finfo(np.float32).max)
    rel = np.abs(got[normal] / want[normal] - 1.0)
    assert rel.max() <= 1.5e-7, f"largest relative error {rel.max():.3g} at x = {x[normal][rel.argmax()]}"
    tiny = want < 2.0**-126  # denormal or zero results: anything that small
    assert np.all((got[tiny] >= 0) & (got[tiny] < 2.0**-125))
    assert np.all(got[want > np.finfo(np.float32).max] == np.inf)
    assert np.isnan(got[np.isnan(x)]).all()


@pytest.mark.parametrize("name", ["tanh", "logistic", "erf"])
@pytest.mark.parametrize("width", [1, 4])
def test_bounded_functions_are_within_5e_7(name, width):
    x = _inputs(-60.0, 60.0)
    got = _run(name, x, width).astype(np.float64)
    reference = {"tanh": math.tanh, "logistic": lambda v: 1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0,
                 "erf": math.erf}[name]  # fmt: skip
    finite = ~np.isnan(x)
    want = np.array([reference(float(v)) for v in x[finite]])
    err = np.abs(got[finite] - want)
    assert err.max() <= 5e-7, f"largest error {err.max():.3g} at x = {x[finite][err.argmax()]}"
    assert np.isnan(got[~finite]).all()
    if name != "logistic":  # odd functions keep their sign, and near 0 their relative accuracy
        near = finite & (np.abs(x) >= 2.0**-126) & (np.abs(x) < 0.5)
        rel = np.abs(got[near] / want[near[finite]] - 1.0)
        assert rel.max() <= 1e-6, f"largest relative error {rel.max():.3g} at x = {x[near][rel.argmax()]}"
