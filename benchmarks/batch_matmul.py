#!/usr/bin/env python3
"""BATCH_MATMUL alone, at attention's shapes: the delegate against XNNPACK (2 threads and 1).

Each case is a one-op model built here (tests/tflite_builder.py, both operands inputs, random
values), run through ``delegate.Interpreter`` (``cpu_when_faster=false``, foreground compile) and
the host's CPU path, called in alternating blocks in one process (harness/races.py): a block
counts as its fastest call, the figures are the medians of the rounds. The delegate's invoke also
moves both operands in and the product out; "kernel ms" is the kernel alone on the device (OpenCL
profiling, the fastest of ``--runs``, as kernel_profile.py measures), what it costs inside a model
whose tensors stay on the device.

    python benchmarks/batch_matmul.py [--rounds R] [--block N] [--runs N] [--only TEXT] [--option K=V ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import kernel_profile
import numpy as np
from harness import cli, paths, races

paths.importable()  # tests.tflite_builder

import delegate  # noqa: E402
from delegate.api import host_runtime  # noqa: E402
from delegate.compiler.graph import Builtin  # noqa: E402
from tests.tflite_builder import Op, T, build_model  # noqa: E402

#: (name, left operand, right operand, adj_x, adj_y): a 4-head attention over 128 tokens of 64
#: channels, a ViT's 197 tokens, a BERT-like 128 x 256 projection of one head; then the same
#: products with a transposed left operand (^T on the left: adj_x)
CASES = [
    ("scores 4x128x64 . 4x128x64^T", (1, 4, 128, 64), (1, 4, 128, 64), False, True),
    ("weights 4x128x128 . 4x128x64", (1, 4, 128, 128), (1, 4, 128, 64), False, False),
    ("scores 3x197x64 . 3x197x64^T", (1, 3, 197, 64), (1, 3, 197, 64), False, True),
    ("weights 3x197x197 . 3x197x64", (1, 3, 197, 197), (1, 3, 197, 64), False, False),
    ("rows 128x256 . 256x64", (1, 128, 256), (1, 256, 64), False, False),
    ("adj_x scores 4x64x128^T . 4x64x128", (1, 4, 64, 128), (1, 4, 64, 128), True, False),
    ("adj_x scores 4x64x128^T . 4x128x64^T", (1, 4, 64, 128), (1, 4, 128, 64), True, True),
    ("adj_x weights 4x128x128^T . 4x128x64", (1, 4, 128, 128), (1, 4, 128, 64), True, False),
    ("adj_x rows 256x128^T . 256x64", (1, 256, 128), (1, 256, 64), True, False),
]


def _model(lhs: tuple[int, ...], rhs: tuple[int, ...], adj: tuple[bool, bool], folder: Path) -> Path:
    a, b = np.zeros(lhs), np.zeros(rhs)
    out = np.matmul(np.swapaxes(a, -1, -2) if adj[0] else a, np.swapaxes(b, -1, -2) if adj[1] else b).shape
    options = ("BatchMatMulOptions", {"AdjX": adj[0], "AdjY": adj[1]})
    data = build_model([T(lhs), T(rhs), T(out)], [Op(Builtin.BATCH_MATMUL, [0, 1], [2], options)], [0, 1], [2])
    path = folder / f"bmm_{'x'.join(map(str, lhs))}_{'x'.join(map(str, rhs))}_{adj[0]}_{adj[1]}.tflite"
    path.write_bytes(data)
    return path


def _ready(interpreter: object, rng: np.random.Generator) -> object:
    interpreter.allocate_tensors()  # type: ignore[attr-defined]
    for d in interpreter.get_input_details():  # type: ignore[attr-defined]
        interpreter.set_tensor(d["index"], rng.random(d["shape"]).astype(np.float32))  # type: ignore[attr-defined]
    interpreter.invoke()  # type: ignore[attr-defined]
    return interpreter


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block", type=int, default=10)
    parser.add_argument("--runs", type=int, default=30, help="profiled runs of the kernel alone")
    parser.add_argument("--only", default="", help="the cases whose name holds this text")
    cli.add_option(parser)
    args = parser.parse_args(argv)
    options = {"cpu_when_faster": "false", "background_compile": "off", **cli.options(args.option)}
    host = host_runtime()
    print(f"{cli.machine()}; {args.rounds} rounds of blocks of {args.block}, the fastest call of each block")
    print("| case | kernel ms | delegate ms | XNNPACK ms (2 threads / 1) | delegate / faster XNNPACK |")
    print("| --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as folder:
        for name, lhs, rhs, adj_x, adj_y in (case for case in CASES if args.only in case[0]):
            model = str(_model(lhs, rhs, (adj_x, adj_y), Path(folder)))
            rng = np.random.default_rng(0)
            sides = [
                _ready(delegate.Interpreter(model, **options), rng),
                _ready(host.Interpreter(model_path=model, num_threads=2), rng),
                _ready(host.Interpreter(model_path=model, num_threads=1), rng),
            ]
            rows = races.blocks([s.invoke for s in sides], args.rounds, args.block, abba=True)  # type: ignore[attr-defined]
            ms = [statistics.median(races.column(rows, i)) * 1e3 for i in range(3)]
            ratio = statistics.median(row[0] / min(row[1], row[2]) for row in rows)
            profiled = kernel_profile.profile(Path(model), ["cpu_when_faster=false", *args.option], args.runs)
            kernel = 1e3 * sum(seconds for _, seconds in profiled)
            print(f"| {name} | {kernel:.3f} | {ms[0]:.3f} | {ms[1]:.3f} / {ms[2]:.3f} | {ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
