"""Command line: ``python -m delegate {inspect,demo}``."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from .context import ContextFile, write_context
from .context.summary import format_summary, summarize
from .context.synthetic import synthetic_mobilenet
from .errors import DelegateError


def _inspect(args: argparse.Namespace) -> int:
    with ContextFile.open(args.file) as ctx:
        summary = summarize(ctx.to_model(), file_bytes=ctx.size)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print(format_summary(summary, str(args.file)))
    return 0


def _median_seconds(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def _demo(args: argparse.Namespace) -> int:
    from ._generated.serialization_generated import InferenceContextT

    out_dir = Path(args.output) if args.output else Path(tempfile.mkdtemp(prefix="delegate-demo-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "mobilenet_v2_synthetic.ctx"
    context = synthetic_mobilenet()
    write_context(context, path)
    with ContextFile.open(path) as ctx:
        if ctx.to_model() != context:
            print(f"error: {path}: the context read back differs from the one written", file=sys.stderr)
            return 1
        summary = summarize(ctx.to_model(), file_bytes=ctx.size)
    data = path.read_bytes()
    native_s = _median_seconds(lambda: ContextFile(data).close(), 50)
    python_s = _median_seconds(lambda: InferenceContextT.InitFromPackedBuf(data, 0), 3)
    print(format_summary(summary, str(path)))
    print()
    print(f"round trip: written, verified natively and read back equal, field by field ({path})")
    print(
        f"parse: native reader {native_s * 1e6:.0f} us, Python flatbuffers object API {python_s * 1e3:.1f} ms"
        f" ({python_s / native_s:.0f}x)"
    )
    print("note: the compiler, runtime and TFLite plugin are not built yet; this demo exercises the context file path.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m delegate", description="OpenCL GPU delegate for TFLite.")
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser("inspect", help="summarize an InferenceContext file")
    inspect.add_argument("file", type=Path)
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.set_defaults(run=_inspect)
    demo = commands.add_parser("demo", help="write a MobileNetV2-sized context, read it back natively and inspect it")
    demo.add_argument("--output", help="directory for the context file (default: a new temporary one)")
    demo.set_defaults(run=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args))
    except DelegateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
