#!/usr/bin/env python3
"""How far F16 outputs are from TFLite's F32 CPU kernels, with and without float32 storage for the
tensors whose rounding a consumer magnifies (compiler/precision.py), side by side in one process.

For each MODEL and each input kind (``uniform``: uniform [0, 1) noise; ``smooth``: coarse noise
upsampled bilinearly, blobs and gradients as in a photo), the delegate runs the model at F16 twice,
``CompileOptions.widen_sensitive`` off then on, and TFLite's builtin kernels once. Per output: the
largest error as a fraction of the output's largest magnitude, and the share of values off by more
than 1% of it; per run, the share of the partition's output elements stored in float32.

    python benchmarks/experiments/f16_storage.py MODEL [MODEL ...] [--precision F16|F32_F16]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

import harness  # noqa: F401  (the delegate alone: no CPU stand-in while it compiles)

import delegate
from delegate.api import host_runtime
from delegate.compiler import partition as compiler_partition
from delegate.plugin.registry import REGISTRY


def smooth_image(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """A (1, H, W, C) image of coarse uniform noise (9 x 9) upsampled bilinearly."""
    b, h, w, c = shape
    coarse = rng.uniform(0, 1, size=(b, 9, 9, c))
    ys, xs = np.linspace(0, 8, h), np.linspace(0, 8, w)
    y0, x0 = np.floor(ys).astype(int).clip(0, 7), np.floor(xs).astype(int).clip(0, 7)
    fy, fx = (ys - y0)[None, :, None, None], (xs - x0)[None, None, :, None]
    rows0, rows1 = coarse[:, y0], coarse[:, y0 + 1]
    top = rows0[:, :, x0] * (1 - fx) + rows0[:, :, x0 + 1] * fx
    bottom = rows1[:, :, x0] * (1 - fx) + rows1[:, :, x0 + 1] * fx
    return (top * (1 - fy) + bottom * fy).astype(np.float32)


def feeds_for(details: list[dict[str, Any]], kind: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for detail in details:
        shape = tuple(int(d) for d in detail["shape"])
        if kind == "smooth" and len(shape) == 4:
            out.append(smooth_image(shape, rng))
        else:
            out.append(rng.uniform(0, 1, size=shape).astype(np.float32))
    return out


def run(model: bytes, feeds: list[np.ndarray], options: dict[str, str] | None) -> list[np.ndarray]:
    host = host_runtime()
    if options is None:
        interpreter = host.Interpreter(
            model_content=model, experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
        )
    else:
        interpreter = host.Interpreter(model_content=model, experimental_delegates=[delegate.load_delegate(**options)])
    interpreter.allocate_tensors()
    for detail, value in zip(interpreter.get_input_details(), feeds, strict=True):
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    return [interpreter.get_tensor(o["index"]).copy() for o in interpreter.get_output_details()]


def delegate_run(model: bytes, feeds: list[np.ndarray], precision: str, widen: bool, cache: str) -> tuple:
    """The delegate's outputs with ``widen_sensitive`` set, and the share of elements stored wide."""
    shares: list[tuple[int, int]] = []
    plan = REGISTRY.plan
    real_options, real_wide = plan.loader.compiler.options, compiler_partition.wide_tensors

    def options(*args: Any) -> Any:
        return dataclasses.replace(real_options(*args), widen_sensitive=widen)

    def wide(graph: Any, nodes: list[int], precision: Any) -> frozenset[int]:
        chosen = real_wide(graph, nodes, precision)
        size = {t: int(np.prod(graph.tensor(t).shape)) for n in nodes for t in graph.nodes[n].outputs if t >= 0}
        shares.append((sum(size.get(t, 0) for t in chosen), sum(size.values())))
        return chosen

    compiler = dataclasses.replace(plan.loader.compiler, options=options)
    compiler_partition.wide_tensors = wide
    try:
        with REGISTRY.using(dataclasses.replace(plan, loader=dataclasses.replace(plan.loader, compiler=compiler))):
            outputs = run(model, feeds, {"precision": precision, "program_cache": cache})
    finally:
        compiler_partition.wide_tensors = real_wide
    wide_elements, all_elements = (sum(column) for column in zip(*shares, strict=True)) if shares else (0, 0)
    return outputs, (wide_elements / all_elements if widen and all_elements else 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--precision", default="F16", choices=["F16", "F32_F16"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        for path in args.models:
            model = path.read_bytes()
            host = host_runtime()
            details = host.Interpreter(model_content=model).get_input_details()
            for kind in ("uniform", "smooth"):
                feeds = feeds_for(details, kind)
                reference = run(model, feeds, None)
                for widen in (False, True):
                    outputs, share = delegate_run(model, feeds, args.precision, widen, cache)
                    cells = []
                    for got, want in zip(outputs, reference, strict=True):
                        scale = float(np.abs(want).max()) or 1.0
                        error = np.abs(got.astype(np.float64) - want)
                        cells.append(f"{error.max() / scale:.2e} ({(error > 0.01 * scale).mean():.2%})")
                    label = f"wide {share:.0%}" if widen else "half"
                    print(f"{path.stem} {kind:7s} {label:9s} " + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
