"""SOFTMAX / LOG_SOFTMAX linked into the matrix-product kernel producing its input (fusion.py),
run on the accumulators of a work-item that holds every channel of its pixels (kernel.PixelOps)."""

from __future__ import annotations

from ..kernel import PixelOps
from ..kernels.common.math_code import exp_code


def accepts_pixel_softmax(ops: PixelOps, channels: int, log: bool) -> bool:
    """Can a softmax over ``channels`` run at ``ops``? When the work-item holds them all, and a
    log-softmax meets no activation (the epilogue applies the kernel's activation again, which
    leaves softmax values, in [0, 1], unchanged but not log-softmax ones, negative)."""
    return channels <= ops.width * ops.groups and not (log and ops.activation != 0)


def pixel_softmax_code(ops: PixelOps, channels: int, beta: float, log: bool) -> str:
    """SOFTMAX (or LOG_SOFTMAX) over each pixel's ``channels`` applied to the accumulators at
    ``ops`` (which ``accepts_pixel_softmax``), after the kernel's own activation."""
    if not accepts_pixel_softmax(ops, channels, log):
        raise ValueError("the kernel cannot run a softmax over its pixels' channels")
    pixels, groups, act, width = ops.pixels, ops.groups, ops.activation, ops.width
    lo, hi = {1: ("0.0f", None), 2: ("-1.0f", "1.0f"), 3: ("0.0f", "6.0f")}.get(act, (None, None))
    parts = [f"  // softmax over {channels} channels, beta {beta!r}\n"]
    for p in range(pixels):
        parts.append("  {\n")
        for g in range(groups):
            parts.append(f"    float{width} x{g} = convert_float{width}(a{g}{p});\n")
            if lo is not None:
                parts.append(f"    x{g} = x{g} < (float{width})({lo}) ? (float{width})({lo}) : x{g};\n")
            if hi is not None:
                parts.append(f"    x{g} = x{g} > (float{width})({hi}) ? (float{width})({hi}) : x{g};\n")
        parts.append("    float m = x0.s0;\n")
        for c in range(1, channels):
            g, lane = divmod(c, width)
            parts.append(f"    m = x{g}.s{lane:x} > m ? x{g}.s{lane:x} : m;\n")
        for g in range(groups):
            parts.append(f"    float{width} z{g} = (x{g} - m) * {float(beta)!r}f, e{g};\n")
            parts.append(f"    {exp_code(f'e{g}', f'z{g}', width)}\n")
        terms = [f"e{c // width}.s{c % width:x}" for c in range(channels)]
        parts.append(f"    float sum = {' + '.join(terms)};\n")
        parts.append("    float inv = 1.0f / sum;\n    float log_sum = log(sum);\n")
        for g in range(groups):
            value = f"z{g} - log_sum" if log else f"e{g} * inv"
            mask = ", ".join("1.0f" if g * width + lane < channels else "0.0f" for lane in range(width))
            parts.append(f"    a{g}{p} = TO_ACCUM_FLT{width}(({value}) * (float{width})({mask}));\n")
        parts.append("  }\n")
    return "".join(parts)
