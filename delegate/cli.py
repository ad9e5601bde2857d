"""Command line: ``python -m delegate`` (or ``tflite-opencl-delegate``) with run, inspect, settings,
minibenchmark, devices and demo."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from ._generated import configuration_pb2
from .cli_progress import progress_line
from .context import ContextFile, write_context
from .context.summary import format_summary, summarize
from .context.synthetic import synthetic_mobilenet
from .errors import ContextFormatError, DelegateError
from .model_check import has_tflite_identifier
from .progress import report_progress

#: the exit status after Ctrl-C (the shell's for SIGINT)
INTERRUPTED = 130


def _inspect(args: argparse.Namespace) -> int:
    with ContextFile.open(args.file) as ctx:
        summary = summarize(ctx.to_model(), file_bytes=ctx.size)
    if args.json:
        json.dump(summary, sys.stdout, indent=2)
        print()
    else:
        print(format_summary(summary, str(args.file)))
    return 0


def _median_seconds(fn: object, repeats: int) -> float | None:
    if repeats == 0:
        return None
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def _run_on_device(path: Path, device: str | None, repeats: int, profile: bool) -> None:
    import numpy as np

    from .runtime import Runtime

    # A partition of a serialization folder has its program binaries in programs/ beside it. A
    # profiled load launches node by node (no persistent kernel): another program, so it is opt-in.
    beside = path.parent / "programs"
    cache_dir = beside if beside.is_dir() else None
    start = time.perf_counter()
    with Runtime.load(path, device=device, profiling=profile, cache_dir=cache_dir) as rt:
        load_s = time.perf_counter() - start
        stats = rt.build_stats
        rng = np.random.default_rng(0)
        inputs = [rng.random(shape, dtype=np.float32) for shape in rt.input_shapes]
        outputs = rt.run(inputs)  # first run: the driver specialises kernels
        run_s = _median_seconds(lambda: rt.run(inputs), repeats)
        mem = rt.memory
        print(f"device: {rt.device_info.platform} / {rt.device_info.name} (driver {rt.device_info.driver_version})")
        print(
            f"load: {load_s * 1e3:.0f} ms, programs built {stats.built_from_source}, from cache"
            f" {stats.loaded_from_cache}, shared {stats.reused_in_context}; precision {rt.precision.name}"
            + (f" (stored {rt.stored_precision.name})" if rt.stored_precision != rt.precision else "")
        )
        print(
            f"memory: tensors {mem.tensor_bytes / 2**20:.1f} MiB (lower bound {mem.lower_bound_bytes / 2**20:.1f},"
            f" unshared {mem.unshared_bytes / 2**20:.1f}), constants {mem.constant_bytes / 2**20:.1f} MiB"
        )
        timed = f"{run_s * 1e3:.1f} ms (median of {repeats})" if run_s is not None else "not timed (--runs 0)"
        print(f"run: {timed}; outputs {[o.shape for o in outputs]}")
        if profile:
            _, times = rt.run_profiled(inputs)
            slowest = sorted(times, key=lambda t: -t[1])[:3]
            print("slowest nodes: " + ", ".join(f"{name} {sec * 1e3:.2f} ms" for name, sec in slowest))


def error_message(exc: BaseException) -> str:
    """What to print for ``exc``: never an empty line (TFLite raises RuntimeError('') when it failed
    without reporting why)."""
    text = str(exc).strip()
    if text:
        return text
    return (
        f"{type(exc).__name__} with no message from the TFLite runtime (it failed without reporting why); "
        "run without the delegate to see whether TFLite itself runs this model"
    )


def _run(args: argparse.Namespace) -> int:
    if not has_tflite_identifier(args.file):
        if args.file.suffix.lower() == ".tflite":
            print(
                f"error: {args.file} is not a TFLite model: it lacks the TFL3 file identifier (bytes 4-8); "
                "convert the model with TensorFlow's TFLiteConverter",
                file=sys.stderr,
            )
            return 2
        try:
            _run_on_device(args.file, args.device, args.runs, args.profile)  # an InferenceContext file
        except ContextFormatError as exc:
            if exc.kind != "format":  # a context, over a bound
                raise
            raise ContextFormatError(  # by its content the file is neither kind: say both
                "neither a TFLite model (it lacks the TFL3 identifier at bytes 4-8) nor a valid InferenceContext "
                f"file ({exc.detail})",
                offset=exc.offset,
                kind=exc.kind,
                source=str(args.file),
            ) from exc
        return 0
    from .model_run import format_result, parse_input_shapes, run_model

    options: dict[str, str] = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --option {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        options[key.strip()] = value.strip()
    if args.serialization_dir:
        options["serialization_dir"] = str(args.serialization_dir)
    if args.device:
        options["device"] = args.device
    try:
        shapes = parse_input_shapes(args.input_shape)
        with progress_line(not args.quiet):
            result = run_model(
                str(args.file),
                options,
                args.runs,
                progress=not args.quiet,
                settings=args.settings,
                settings_type=args.settings_type,
                input_shapes=shapes,
            )
    except (ValueError, RuntimeError) as exc:  # the host runtime's errors carry the delegate's message
        print(f"error: {error_message(exc)}", file=sys.stderr)
        return 2
    except MemoryError as exc:  # TFLite's allocation failed (std::bad_alloc): tensors too large for this machine
        print(f"error: out of memory running {args.file}: {error_message(exc)}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result))
    else:
        print(format_result(result))
    return 0


def _settings(args: argparse.Namespace) -> int:
    from .settings import ANY_SETTINGS, SettingsFormat, format_settings, load_settings_file

    message = load_settings_file(args.file, args.settings_type, candidates=ANY_SETTINGS)
    if args.action == "show":
        fmt = SettingsFormat.JSON if args.format == "json" else SettingsFormat.TEXT
        print(format_settings(message, fmt), end="" if fmt is SettingsFormat.TEXT else "\n")
    elif args.action == "convert":
        if args.out is None:
            print("error: convert needs an output file", file=sys.stderr)
            return 2
        fmt = SettingsFormat.for_path(args.out)
        data = format_settings(message, fmt)
        args.out.write_bytes(data if isinstance(data, bytes) else data.encode())
        print(f"wrote {args.out} ({fmt.value} {message.DESCRIPTOR.name})")
    else:
        print(f"{args.file}: valid {message.DESCRIPTOR.name}")
        if isinstance(message, configuration_pb2.MinibenchmarkSettings):
            for number, tfl in enumerate(message.settings_to_test, 1):
                print(f"settings_to_test {number}:")
                _print_effective(tfl)
        else:
            _print_effective(message)
    return 0


def _print_effective(message: object) -> None:
    from .api import effective_settings

    effective = effective_settings(message)
    print(f"engine: {effective.engine}" + (f" ({effective.reason})" if effective.reason else ""))
    if effective.engine == "gpu":
        print(f"priorities: {', '.join(effective.priorities)}")
        print("options: " + ", ".join(f"{k}={v}" for k, v in effective.options.items()))
    print(f"fallback: compilation {effective.compile_fallback}, execution {effective.execution_fallback}")


def _minibenchmark(args: argparse.Namespace) -> int:
    from .minibenchmark import run_minibenchmark
    from .settings import load_settings_file

    if args.minibenchmark_settings:
        settings = load_settings_file(args.minibenchmark_settings, configuration_pb2.MinibenchmarkSettings)
    else:
        settings = configuration_pb2.MinibenchmarkSettings()
    if args.model:
        settings.model_file.filename = str(args.model)
    if args.storage:
        settings.storage_paths.storage_file_path = str(args.storage)
    for path in args.settings:
        message = load_settings_file(path, args.settings_type)
        tfl = message.tflite_settings if isinstance(message, configuration_pb2.ComputeSettings) else message
        settings.settings_to_test.add().CopyFrom(tfl)

    if not settings.settings_to_test:
        from .minibenchmark.runner import default_settings_to_test, describe

        defaults = default_settings_to_test()
        settings.settings_to_test.extend(defaults)
        names = ", ".join(describe(d) for d in defaults)
        print(f"no --settings given: trying {names}", file=sys.stderr)

    def progress(done: int, total: int, label: str) -> None:
        report_progress("mini-benchmark: settings", done, total, label)

    with progress_line(not args.quiet):
        report = run_minibenchmark(settings, runs=args.runs, timeout_s=args.timeout, progress=progress)
    best = (
        report.decision.min_latency_event if report.decision and report.decision.HasField("min_latency_event") else None
    )
    best_row = next(
        (r for r, e in zip(report.rows, report.events[1::2], strict=True) if best is not None and e == best), None
    )
    if args.json:
        print(
            json.dumps(
                {
                    "rows": [vars(r) for r in report.rows],
                    "best": best_row.settings if best_row else None,
                    "decision_file": str(report.decision_path) if report.decision_path else None,
                }
            )
        )
        return 0
    headers = ["settings", "init ms", "median ms", "p90 ms", "memory MiB", "max error", "ok"]
    rows = [
        [
            r.settings,
            _num(r.init_ms),
            _num(r.median_ms),
            _num(r.p90_ms),
            _num(r.memory_kb / 1024 if r.memory_kb else None),
            _num(r.max_abs_error, "{:.2g}"),
            "yes" if r.ok else f"no: {r.status}",
        ]
        for r in report.rows
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    if best_row is not None:
        print(f"best: {best_row.settings} ({best_row.median_ms:.2f} ms median)")
    else:
        print("best: none of the settings gave correct results; the model runs on CPU")
    if report.decision_path:
        print(f"decision: {report.decision_path} (use it with delegate.Interpreter(model, settings=...))")
    return 0


def _num(value: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def _devices(args: argparse.Namespace) -> int:
    from .runtime import describe, list_devices, select_device

    default = select_device()
    for p, d, dev in list_devices():
        info = describe(dev)
        mark = "*" if dev == default else " "
        print(
            f"{mark} {p}:{d}  {info.platform} / {info.name}  driver {info.driver_version}, fp16 {info.fp16},"
            f" images {info.images}, {info.global_mem_bytes // 2**20} MiB"
            + (f", compiles for {info.compiler_cpu}" if info.compiler_cpu else "")
            + (f"; worker threads {info.worker_affinity}" if info.worker_affinity else "")
        )
    return 0


def _demo(args: argparse.Namespace) -> int:
    if args.output:
        out_dir = Path(args.output)
        out_dir.mkdir(parents=True, exist_ok=True)
        return _demo_in(out_dir, args.device)
    with tempfile.TemporaryDirectory(prefix="delegate-demo-") as tmp:
        return _demo_in(Path(tmp), args.device)


def _demo_in(out_dir: Path, device: str | None) -> int:
    """The file format and runtime by themselves, on a synthetic context (``run`` is the delegate on a model)."""
    from ._generated.serialization_generated import InferenceContextT

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
    _run_on_device(path, device, 5, profile=True)
    print(
        "note: this context is a synthetic MobileNetV2-shaped program with plain kernels and random weights,"
        " which shows the file format and the runtime by themselves; `run MODEL.tflite` compiles a real model"
        " and runs it through TFLite with the delegate"
    )
    return 0


def program_name(argv0: str | None = None) -> str:
    """How the user started us: ``python -m delegate`` or the console script's name."""
    name = Path(argv0 if argv0 is not None else sys.argv[0]).name
    return "python -m delegate" if name in ("__main__.py", "") or name.startswith("python") else name


def version_text() -> str:
    """The package's version and the TFLite hosts installed (read from metadata: nothing imported)."""
    from ._version import __version__
    from .host import installed_hosts

    found = installed_hosts()
    hosts = ", ".join(f"{h.name} {h.version}" for h in found) or "none installed"
    numpy_version = found[0].numpy_version if found else "?"
    return f"tflite-opencl-delegate {__version__} (TFLite hosts: {hosts}; numpy {numpy_version})"


_RUNNABLE_TYPES = ["ComputeSettings", "TFLiteSettings"]
_SETTINGS_TYPE_HELP = (
    "the message a binary settings file holds (default ComputeSettings); text and JSON files are typed by their fields"
)


#: what running a context file means (docs/runtime.md, "Trust model")
_CONTEXT_TRUST = (
    "An InferenceContext file holds OpenCL kernels that run on the device as written: run only files "
    "you trust as you would a program (a serialization_dir is such a folder). The reader refuses malformed "
    "files and meaningless values, but no reader can tell a kernel that writes out of bounds or never "
    "ends; see docs/runtime.md, Trust model."
)


def _runs(text: str) -> int:
    """argparse type: a count of timed runs, 0 or more (0: compare only, no latency)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _positive_runs(text: str) -> int:
    """argparse type: a count of timed runs, 1 or more (a benchmark of none has nothing to rank)."""
    value = _runs(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program_name(),
        description="OpenCL GPU delegate for TFLite.",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # --version's line unwrapped
    )
    parser.add_argument("--version", action="version", version=version_text())
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser("inspect", help="summarize an InferenceContext file")
    inspect.add_argument("file", type=Path)
    inspect.add_argument("--json", action="store_true", help="print the summary as JSON")
    inspect.set_defaults(run=_inspect)
    demo = commands.add_parser("demo", help="write a MobileNetV2-sized context, read it back natively and inspect it")
    demo.add_argument(
        "--output", help="directory to keep the context file in (default: a temporary one, removed afterwards)"
    )
    demo.add_argument(
        "--device", help="OpenCL device: 'P:D', an index, or part of its name (default: a GPU, else PoCL)"
    )
    demo.set_defaults(run=_demo)
    run = commands.add_parser(
        "run",
        help="run a .tflite model with the delegate and on CPU and compare (or time an InferenceContext file)",
        epilog=_CONTEXT_TRUST,
    )
    run.add_argument("file", type=Path, help="a .tflite model, or an InferenceContext file")
    run.add_argument("--device", help="OpenCL device: 'P:D', an index, or part of its name")
    run.add_argument("--runs", type=_runs, default=10, help="timed runs after a warm-up (default 10)")
    run.add_argument("--serialization-dir", type=Path, help="cache compiled partitions here (fast second start)")
    run.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a delegate option (precision, storage_type, model_token, ...); repeatable",
    )
    run.add_argument("--settings", type=Path, help="acceleration settings: .textproto/.pbtxt/.json or binary")
    run.add_argument("--settings-type", choices=_RUNNABLE_TYPES, help=_SETTINGS_TYPE_HELP)
    run.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="[NAME=]D,D,...",
        help="resize an input before allocating (repeatable; without NAME: the next input in order), for"
        " models whose stored input shape is a placeholder (shape_signature -1)",
    )
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument(
        "--profile", action="store_true", help="a context: time every node (launched one by one) and name the slowest"
    )
    run.add_argument("--quiet", action="store_true", help="no progress on stderr (it is shown only on a terminal)")
    run.set_defaults(run=_run)
    settings = commands.add_parser("settings", help="show, convert or validate an acceleration settings file")
    settings.add_argument("action", choices=["show", "convert", "validate"])
    settings.add_argument("file", type=Path)
    settings.add_argument(
        "out", type=Path, nargs="?", help="convert: the output file (format by extension: .textproto, .json, .pb/.bin)"
    )
    settings.add_argument(
        "--settings-type", choices=[*_RUNNABLE_TYPES, "MinibenchmarkSettings"], help=_SETTINGS_TYPE_HELP
    )
    settings.add_argument("--format", choices=["text", "json"], default="text", help="show: the form printed")
    settings.set_defaults(run=_settings)
    mb = commands.add_parser("minibenchmark", help="find the fastest correct acceleration settings for a model")
    mb.add_argument("model", type=Path, nargs="?", help="the .tflite model (or model_file in --minibenchmark-settings)")
    mb.add_argument("--settings", type=Path, action="append", default=[], help="a settings file to try; repeatable")
    mb.add_argument("--settings-type", choices=_RUNNABLE_TYPES, help=_SETTINGS_TYPE_HELP)
    mb.add_argument("--minibenchmark-settings", type=Path, help="a MinibenchmarkSettings file")
    mb.add_argument("--storage", type=Path, help="events file (the decision goes to STORAGE.best.fb)")
    mb.add_argument("--runs", type=_positive_runs, default=10, help="timed invokes per settings (default 10)")
    mb.add_argument(
        "--timeout", type=_positive_seconds, default=600.0, help="seconds each settings may take (default 600)"
    )
    mb.add_argument("--json", action="store_true")
    mb.add_argument("--quiet", action="store_true", help="no progress on stderr (it is shown only on a terminal)")
    mb.set_defaults(run=_minibenchmark)
    devices = commands.add_parser("devices", help="list OpenCL devices (* marks the default)")
    devices.set_defaults(run=_devices)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return code
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except DelegateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly, as a tool killed by SIGPIPE does, and keep
        # the interpreter's exit flush from failing on the closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
