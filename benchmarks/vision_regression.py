#!/usr/bin/env python3
"""The vision set's latency against XNNPACK, checked against a committed baseline.

Measures every ``*.tflite`` of the vision set (benchmarks/vision_models.py writes it) as
benchmarks/model_kinds.py does, a fresh process per model: the delegate with its default options
and with ``cpu_when_faster=false`` ("forced"), each against the faster XNNPACK (all cores or one)
of the same rounds in one process. Then compares each model's two ratios with
benchmarks/baselines/vision_set.json (harness/regression.py):

- a default ratio over 1.05 fails (by default never slower than TFLite's CPU path);
- a ratio over ``--factor`` (1.3) times its baseline fails, default or forced: the forced ratio
  is where a slower kernel shows, since the default then runs on TFLite's CPU kernels;
- a baseline model that was not measured fails.

A model that fails is measured once more and keeps the lower of each ratio (another process's load
rarely hits both runs; a slower kernel does).

It prints the table, the findings and the forced set's targets (float geometric mean <= 1.0 and
none over 1.5, int8 none over 1.5; reported, not checked), and XNNPACK's speedup from 1 thread to
all cores: under 1.4 another process held a core, the ratios are not a quiet machine's, and
``--check`` fails the run. ``--check`` exits 1 on a failed finding; ``--update-baseline`` rewrites
the baseline from this run; ``--records FILE ...`` takes the records of earlier ``--json FILE``
runs instead of measuring, each model's ratios the median over them (the committed baseline is
such a median: one run carries its noise into every later check).

    python benchmarks/vision_regression.py [--set DIR] [--rounds R] [--block N] [--check]
        [--factor F] [--baseline FILE] [--update-baseline] [--json FILE] [--records FILE ...]
        [--only NAME ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import model_kinds
from harness import regression
from harness.cli import cpu_name
from harness.paths import BENCHMARKS

DEFAULT_SET = Path.home() / ".cache" / "tflite-opencl-delegate" / "vision-set"
BASELINE = BENCHMARKS / "baselines" / "vision_set.json"


def table(records: list[dict[str, Any]], baseline: regression.Baseline | None) -> str:
    rows = [
        "| model | default path | delegated nodes, partitions (forced) | XNNPACK ms (all cores / 1) "
        "| delegate ms (forced) | default / XNNPACK (baseline) | forced / XNNPACK (baseline) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in records:
        latency, ratio = r.get("latency_ms", {}), r.get("ratio", {})
        base = (baseline.models if baseline else {}).get(r["model"], {})

        def cell(config: str, ratio: dict[str, float] = ratio, base: dict[str, Any] = base) -> str:
            now = model_kinds._fmt(ratio.get(config), ".2f")
            return f"{now} ({base[config]:.2f})" if base.get(config) else now

        xnnpack = " / ".join(model_kinds._fmt(latency.get(path), ".2f") for path in ("xnnpack", "xnnpack_1t"))
        rows.append(
            f"| {r['model']} | {(r.get('default') or {}).get('path', '-')} | {model_kinds._share(r.get('forced'))} "
            f"| {xnnpack} | {model_kinds._fmt(latency.get('forced'), '.2f')} | {cell('default')} | {cell('forced')} |"
        )
    return "\n".join(rows)


def report(records: list[dict[str, Any]], baseline: regression.Baseline | None, factor: float) -> int:
    """Prints the table, the findings and the targets; the number of failed findings (a busy
    machine counts as one: its ratios can pass a regression or fail a sound tree)."""
    print(table(records, baseline))
    busy = 0
    print()
    for text, met in regression.targets(records):
        print(f"- {text}: {'met' if met else 'NOT met'}")
    speedup = regression.thread_speedup(records)
    if speedup is not None:
        quiet = speedup >= regression.QUIET_SPEEDUP
        verdict = "quiet" if quiet else "BUSY: another process held a core; ratios not comparable with a quiet run"
        print(f"- XNNPACK all cores / 1 thread speedup, median {speedup:.2f} ({verdict})")
        if not quiet:
            print(f"the machine was busy (XNNPACK's thread speedup {speedup:.2f}): run again", file=sys.stderr)
            busy = 1
    if baseline is None:
        print("- no baseline to compare with")
        return busy
    print(f"- baseline of {baseline.date}, {baseline.machine}; regression: a ratio over {factor:g} times it")
    findings = regression.compare(records, baseline, factor)
    for f in findings:
        print(f"- {'REGRESSION' if f.failed else 'note'}: {f.model}: {f.message}", file=sys.stderr)
    return busy + sum(f.failed for f in findings)


def confirm(records: list[dict[str, Any]], baseline: regression.Baseline, args: argparse.Namespace) -> list[dict]:
    """The records with every model that failed measured once more, its lower ratios kept: one
    run can catch another process's load, a slower kernel shows in both."""
    failing = {f.model for f in regression.compare(records, baseline, args.factor) if f.failed}
    confirmed = []
    for record in records:
        model = args.set / f"{record['model']}.tflite"
        if record["model"] in failing and model.is_file():
            print(f"{model.name}: failed, measuring it again", file=sys.stderr, flush=True)
            again = model_kinds.measure(model, args.rounds, args.block, args.timeout)
            record = regression.lower(record, again)
        confirmed.append(record)
    return confirmed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, default=DEFAULT_SET, help=f"the set's folder (default {DEFAULT_SET})")
    parser.add_argument("--only", nargs="*", help="these models (file stems) only")
    parser.add_argument("--rounds", type=int, default=15, help="blocks per path (default 15)")
    parser.add_argument("--block", type=int, default=10, help="invokes per block (default 10)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model (default 900)")
    parser.add_argument("--baseline", type=Path, default=BASELINE, help="baseline JSON (default: the committed one)")
    parser.add_argument("--factor", type=float, default=regression.FACTOR, help="ratio / baseline that fails")
    parser.add_argument("--check", action="store_true", help="exit 1 on a regression or a default ratio over 1.05")
    parser.add_argument("--update-baseline", action="store_true", help="write this run's ratios as the baseline")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the records here")
    parser.add_argument(
        "--records", type=Path, nargs="+", metavar="FILE", help="records of earlier runs instead of measuring (medians)"
    )
    args = parser.parse_args(argv)
    if args.update_baseline and args.only:
        parser.error("--update-baseline writes the whole set's baseline: leave out --only")
    if args.records:
        records = regression.median_records([json.loads(path.read_text()) for path in args.records])
    else:
        chosen = [p for p in sorted(args.set.glob("*.tflite")) if not args.only or p.stem in args.only]
        if not chosen:
            parser.error(f"no .tflite models in {args.set} (write them with benchmarks/vision_models.py)")
        records = []
        for model in chosen:
            start = time.perf_counter()
            records.append(model_kinds.measure(model, args.rounds, args.block, args.timeout))
            print(f"{model.name}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    if args.json:  # the runs as measured, before failing models are measured again: a baseline's medians
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    baseline = regression.load(args.baseline) if args.baseline.is_file() else None
    if baseline and args.only:  # the models left out are not missing
        baseline.models = {name: v for name, v in baseline.models.items() if name in args.only}
    if baseline and not args.records and not args.update_baseline:
        records = confirm(records, baseline, args)
    failed = report(records, baseline, args.factor)
    if args.update_baseline:
        speedup = regression.thread_speedup(records)
        if speedup is not None and speedup < regression.QUIET_SPEEDUP:
            print("baseline not written: the machine was busy", file=sys.stderr)
            return 1
        command = f"python benchmarks/vision_regression.py --rounds {args.rounds} --block {args.block}"
        if args.records:
            command = f"median of {len(args.records)} runs of {command} --json FILE"
        today = datetime.date.today().isoformat()
        args.baseline.parent.mkdir(parents=True, exist_ok=True)
        args.baseline.write_text(regression.dump(records, today, f"{cpu_name()}, PoCL", command))
        print(f"baseline written: {args.baseline}", file=sys.stderr)
        return 0
    if args.check and failed:
        print(f"FAILED: {failed} finding(s) above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
