#!/usr/bin/env python3
"""The delegate on the real models: delegated fraction, error against TFLite's CPU, latency against XNNPACK.

For every model under ../shared/models/real (``--all``: also ../shared/models and its quant/),
measured side by side in one run:

- delegated: nodes the delegate runs over the model's nodes (the rest stay on TFLite's CPU
  kernels), and the largest relative error of any output against TFLite's CPU path, from
  ``python -m delegate run MODEL --json`` (the same seeded inputs for both, each interpreter's
  first invoke; per output, max abs error over max |CPU output|, dequantized when quantized).
- latency: the median wall time of ``invoke()`` of the delegate (default options, F32) and of
  XNNPACK (the host runtime's Interpreter with its default delegates and ``num_threads`` =
  ``os.cpu_count()``, or ``--threads``), and their ratio (delegate / XNNPACK; below 1 the
  delegate is faster). As in compare.py every sample is a fresh process after 3 untimed calls,
  and the rounds alternate the two paths so a change in the machine's load hits both alike; the
  delegate's processes share a serialization folder, so only the first one compiles. On 2
  cores, TFLite's thread pool and XNNPACK's can contend with 2 threads (compare.py: UNet-small
  ~15x slower than with 1): ``--single-thread`` adds XNNPACK with 1 thread, and the ratio of
  the delegate to the faster of the two, as compare.py's ratios have it.

A model a path cannot run gets its row with the reason (an unresolved custom op, a crash).

    python benchmarks/real_models.py [--models NAME ...] [--all] [--runs N] [--rounds R]
                                     [--threads T] [--single-thread] [--json [FILE]]

``--json`` prints the records as JSON instead of the table; ``--json FILE`` writes them there
and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.child import ChildFailed, failure, invoke_run, python_env
from harness.paths import MODELS, model_name

REAL = MODELS / "real"


@dataclass
class ModelResult:
    model: str
    delegated_nodes: int | None = None
    total_nodes: int | None = None
    #: the worst output's max abs error over its max |CPU output| (None: not measured)
    max_relative_error: float | None = None
    delegate_ms: list[float] = field(default_factory=list)
    xnnpack_ms: list[float] = field(default_factory=list)
    #: XNNPACK with one thread (``--single-thread``; empty otherwise)
    xnnpack_1thread_ms: list[float] = field(default_factory=list)
    #: why a path did not run (empty when both did)
    notes: list[str] = field(default_factory=list)

    @property
    def delegate_median(self) -> float | None:
        return statistics.median(self.delegate_ms) if self.delegate_ms else None

    @property
    def xnnpack_median(self) -> float | None:
        return statistics.median(self.xnnpack_ms) if self.xnnpack_ms else None

    @property
    def xnnpack_1thread_median(self) -> float | None:
        return statistics.median(self.xnnpack_1thread_ms) if self.xnnpack_1thread_ms else None

    @property
    def ratio(self) -> float | None:
        """Delegate / XNNPACK with ``--threads`` threads."""
        d, x = self.delegate_median, self.xnnpack_median
        return d / x if d is not None and x else None

    @property
    def ratio_to_faster(self) -> float | None:
        """Delegate / the faster XNNPACK median (with ``--single-thread``)."""
        xs = [x for x in (self.xnnpack_median, self.xnnpack_1thread_median) if x]
        d = self.delegate_median
        return d / min(xs) if d is not None and xs else None

    def record(self) -> dict:
        return {
            **asdict(self),
            "delegate_median_ms": self.delegate_median,
            "xnnpack_median_ms": self.xnnpack_median,
            "xnnpack_1thread_median_ms": self.xnnpack_1thread_median,
            "ratio": self.ratio,
            "ratio_to_faster_xnnpack": self.ratio_to_faster,
        }


def _accuracy(model: Path, folder: str, result: ModelResult) -> bool:
    """Fills the delegated fraction and the error from ``python -m delegate run``; False when it failed."""
    options = [
        "--option",
        f"model_token={model.stem}",
        "--option",
        "cpu_when_faster=false",
        "--serialization-dir",
        folder,
    ]
    command = [sys.executable, "-m", "delegate", "run", str(model), "--json", "--runs", "0", *options]
    out = subprocess.run(command, capture_output=True, text=True, env=python_env())
    if out.returncode != 0:
        result.notes.append(failure("delegate", out))
        return False
    report = json.loads(out.stdout.strip().splitlines()[-1])
    result.delegated_nodes, result.total_nodes = report["delegated_nodes"], report["total_nodes"]
    result.max_relative_error = report["max_relative_error"]
    return True


def _latency(
    model: Path, kind: str, runs: int, options: dict[str, str], result: ModelResult, one_thread: bool = False
) -> bool:
    """Adds ``runs`` latency samples of one fresh process (``one_thread``: the 1-thread XNNPACK column)."""
    try:
        samples = invoke_run(model, kind, runs, options, what=kind)["latency_ms"]
    except ChildFailed as failed:
        result.notes.append(failed.reason)
        return False
    if kind == "delegate":
        result.delegate_ms += samples
    elif options["num_threads"] == "1" and one_thread:
        result.xnnpack_1thread_ms += samples
    else:
        result.xnnpack_ms += samples
    return True


def measure(model: Path, runs: int, rounds: int, threads: int, single_thread: bool = False) -> ModelResult:
    result = ModelResult(model_name(model))
    with tempfile.TemporaryDirectory() as folder:
        delegate_ok = _accuracy(model, folder, result)  # also the cold start: compiles into the folder
        xnnpack_ok = single_ok = True
        delegate_options = {"model_token": model.stem, "serialization_dir": folder}
        for _ in range(rounds):  # alternate, so that a change in load hits every path alike
            if xnnpack_ok:
                xnnpack_ok = _latency(model, "xnnpack", runs, {"num_threads": str(threads)}, result)
            if single_thread and single_ok and xnnpack_ok:
                single_ok = _latency(model, "xnnpack", runs, {"num_threads": "1"}, result, one_thread=True)
            if delegate_ok:
                delegate_ok = _latency(model, "delegate", runs, delegate_options, result)
    return result


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(results: list[ModelResult], threads: int, single_thread: bool = False) -> str:
    plural = "thread" if threads == 1 else "threads"
    extra = " XNNPACK median, 1 thread (ms) | delegate / faster XNNPACK |" if single_thread else ""
    rows = [
        f"| model | delegated nodes | max relative error | delegate median (ms) "
        f"| XNNPACK median, {threads} {plural} (ms) | delegate / XNNPACK |{extra} notes |",
        "| --- | ---: | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if single_thread else "") + " --- |",
    ]
    for r in results:
        if r.total_nodes is None:
            delegated = "-"
        else:
            share = r.delegated_nodes / r.total_nodes if r.total_nodes else 0.0
            delegated = f"{r.delegated_nodes}/{r.total_nodes} ({share:.0%})"
        single = f" {_fmt(r.xnnpack_1thread_median, '.2f')} | {_fmt(r.ratio_to_faster, '.2f')} |"
        rows.append(
            f"| {r.model} | {delegated} | {_fmt(r.max_relative_error, '.1e')} | {_fmt(r.delegate_median, '.2f')} "
            f"| {_fmt(r.xnnpack_median, '.2f')} | {_fmt(r.ratio, '.2f')} |"
            + (single if single_thread else "")
            + f" {'; '.join(r.notes)} |"
        )
    return "\n".join(rows)


def models(names: list[str] | None, everything: bool) -> list[Path]:
    """The models to measure: ``names`` (stems, looked for in real/, then ../shared/models and quant/), or all."""
    folders = [REAL, MODELS, MODELS / "quant"]
    if names:
        found = []
        for name in names:
            candidates = [f / f"{name}.tflite" for f in folders if (f / f"{name}.tflite").exists()]
            if not candidates:
                raise SystemExit(f"error: no model {name}.tflite in {', '.join(str(f) for f in folders)}")
            found.append(candidates[0])
        return found
    return [p for f in (folders if everything else [REAL]) for p in sorted(f.glob("*.tflite"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="*", help="model names (file stems; default: every model in real/)")
    parser.add_argument("--all", action="store_true", help="also ../shared/models and ../shared/models/quant")
    parser.add_argument("--runs", type=int, default=20, help="timed calls per process (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="processes per path (default 3)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="XNNPACK threads (default: cores)")
    parser.add_argument(
        "--single-thread", action="store_true", help="also XNNPACK with 1 thread, and the ratio to the faster"
    )
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE", help="the records as JSON (to FILE)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.rounds < 1:
        parser.error("--runs and --rounds must be at least 1")
    chosen = models(args.models, args.all)
    if not chosen:
        parser.error(f"no models found under {REAL}")
    results = []
    for model in chosen:
        print(f"{model.name} ...", file=sys.stderr, flush=True)
        results.append(measure(model, args.runs, args.rounds, args.threads, args.single_thread))
    records = json.dumps([r.record() for r in results], indent=1)
    if args.json == "-":
        print(records)
        return 0
    if args.json:
        Path(args.json).write_text(records + "\n")
    print(table(results, args.threads, args.single_thread))
    return 0


if __name__ == "__main__":
    sys.exit(main())
