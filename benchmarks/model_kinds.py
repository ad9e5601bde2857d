#!/usr/bin/env python3
"""Where the delegate stands on the models people bring: coverage, partitions, error, speed.

For every ``*.tflite`` in tests/models/ (and in each FOLDER or FILE given), in a fresh process
per model (a crash is that model's row, not the end of the run):

- coverage, twice: with default options and with ``cpu_when_faster=false`` (what the delegate
  can run, where the default may leave a partition on CPU because TFLite's kernels are faster):
  the model's nodes (every subgraph's: WHILE bodies count), the delegated ones, the partitions,
  and the ops left on CPU grouped by op and reason (``interpreter.opencl.unsupported``).
- error: each output of the first invoke against TFLite's CPU path (the host interpreter with its
  default delegates, XNNPACK) on the same seeded inputs (``delegate.model_run.input_value``), max
  abs error over max(1, max |CPU output|); quantized outputs dequantized. Over 1e-4 on a float
  output (F32 options) is marked WRONG.
- latency: the delegate (both option sets) and XNNPACK (``os.cpu_count()`` threads and 1 thread),
  all four interpreters in this one process, called in turn in blocks of ``--block`` invokes,
  ``--rounds`` rounds, a block counting as its fastest call (as benchmarks/xnnpack_race.py), so
  load from other processes hits every path alike. Medians of the blocks; the ratio is the
  median of each round's delegate over the faster XNNPACK of that round (below 1: faster).

The default options run as an application gets them (``background_compile`` auto, waited for with
``wait_for_delegate``): where the delegate measured slower than TFLite's CPU kernels after its
build, the default interpreter runs on them (delegate/measured_choice.py), and the row says so.
The forced set is built with ``background_compile="off"``, so each timed call runs the delegate.

``--check RATIO`` exits 1 when a model's default ratio is over RATIO (the target is 1.05: never
slower than TFLite's CPU path by default).

    python benchmarks/model_kinds.py [FOLDER_OR_FILE ...] [--rounds R] [--block N] [--timeout S]
                                     [--json [FILE]] [--check RATIO]

``--json`` prints the records as JSON instead of the Markdown; ``--json FILE`` writes them there
and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models"
#: a float output further than this from TFLite's CPU (relative to max(1, |out|)) is WRONG
F32_LIMIT = 1e-4
#: the delegate's two option sets: its defaults, and everything it can run delegated
CONFIGS: dict[str, dict[str, str]] = {"default": {}, "forced": {"cpu_when_faster": "false"}}


#: the reason of every node the rule cpu_when_faster leaves on CPU (its figures differ by partition)
_FASTER = "faster on TFLite's CPU kernels (the rule cpu_when_faster)"


# --- one model, in a child process ------------------------------------------------------------


def _op(node: str) -> str:
    """``sub1/fully_connected_12`` -> ``FULLY_CONNECTED`` (node names are the op's, lowercase, and its index)."""
    base = node.rsplit("/", 1)[-1]
    op = base.rsplit("_", 1)[0] if base.rsplit("_", 1)[-1].isdigit() else base
    return op.upper() if op.islower() else op  # custom ops keep their spelling


def _reason(why: str) -> str:
    """A reason with what differs from node to node taken out, so that one reason groups its nodes:
    tensor numbers, and the per-partition figures of the rule cpu_when_faster."""
    why = re.sub(r"\btensor \d+", "tensor #", why)
    if why.startswith("faster on TFLite's CPU kernels"):
        return _FASTER
    return why


def _feed(interpreter: Any, inputs: list[tuple[int, Any]]) -> None:
    for index, value in inputs:
        interpreter.set_tensor(index, value)


def _outputs(interpreter: Any) -> list[Any]:
    return [interpreter.get_tensor(d["index"]).copy() for d in interpreter.get_output_details()]


def _error(details: list[dict[str, Any]], got: list[Any], want: list[Any]) -> dict[str, Any]:
    """The worst output: max abs error over max(1, max |CPU output|), real values; and whether any
    float output is past F32_LIMIT."""
    from delegate.model_run import compare_output

    worst: dict[str, Any] = {"error": 0.0, "output": "", "wrong": False, "max_steps": None}
    for detail, g, w in zip(details, got, want, strict=True):
        record = compare_output(detail, g, w)
        error = record["max_abs_error"] / max(1.0, record["max_abs_reference"])
        if record["dtype"].startswith("float") and error > F32_LIMIT:
            worst["wrong"] = True
        if "max_abs_steps" in record:
            worst["max_steps"] = max(worst["max_steps"] or 0, record["max_abs_steps"])
        if error >= worst["error"]:
            worst.update(error=error, output=record["name"])
    return worst


def _coverage(state: Any) -> dict[str, Any]:
    on_cpu: dict[str, dict[str, int]] = {}
    for node, why in state.unsupported.items():
        reasons = on_cpu.setdefault(_op(node), {})
        reasons[_reason(why)] = reasons.get(_reason(why), 0) + 1
    return {
        "total_nodes": state.total_nodes,
        "delegated_nodes": len(state.delegated_nodes),
        "partitions": len(state.partitions),
        "kernels": sum(p.kernels for p in state.partitions),
        "on_cpu": on_cpu,
        "fallbacks": [f["cause"] for f in state.fallbacks],
    }


def _fastest(invoke: Any, calls: int) -> float:
    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        invoke()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def measure_one(model: Path, rounds: int, block: int) -> dict[str, Any]:
    """Everything about one model (run in the child); a failing delegate configuration is noted
    and left out of the timing."""
    import numpy as np

    import delegate
    from delegate.api import host_runtime
    from delegate.model_run import input_value

    host = host_runtime()
    record: dict[str, Any] = {"model": model.stem, "size_kib": round(model.stat().st_size / 1024, 1), "notes": []}
    reference = host.Interpreter(model_path=str(model), num_threads=os.cpu_count())
    reference.allocate_tensors()
    rng = np.random.default_rng(0)
    inputs = [(d["index"], input_value(d, rng)) for d in reference.get_input_details()]
    _feed(reference, inputs)
    reference.invoke()
    want = _outputs(reference)
    details = reference.get_output_details()
    single = host.Interpreter(model_path=str(model), num_threads=1)
    single.allocate_tensors()
    _feed(single, inputs)
    timed: dict[str, Any] = {"xnnpack": reference, "xnnpack_1t": single}
    for config, options in CONFIGS.items():
        try:
            mode = "auto" if config == "default" else "off"
            interpreter = delegate.Interpreter(str(model), background_compile=mode, **options)
            interpreter.allocate_tensors()
            interpreter.wait_for_delegate()  # the switch: to the delegate, or to the CPU measured faster
            _feed(interpreter, inputs)
            interpreter.invoke()
            record[config] = {**_coverage(interpreter.opencl), **_error(details, _outputs(interpreter), want)}
            measured = interpreter.opencl.measured if interpreter.opencl else None
            record[config]["path"] = interpreter.path.value
            record[config]["path_cause"] = interpreter.cpu_faster_cause
            record[config]["measured"] = measured.as_dict() if measured else None
            timed[config] = interpreter
        except Exception as exc:  # a model the delegate cannot take is a finding, not the end
            message = " ".join(f"{type(exc).__name__}: {exc}".split())
            record["notes"].append(f"{config}: {message[:300]}")
    for interpreter in timed.values():
        _fastest(interpreter.invoke, 2)  # warm up
    blocks: dict[str, list[float]] = {name: [] for name in timed}
    for _ in range(rounds):
        for name, interpreter in timed.items():
            blocks[name].append(_fastest(interpreter.invoke, block))
    record["latency_ms"] = {name: statistics.median(values) for name, values in blocks.items()}
    fastest_cpu = [min(a, b) for a, b in zip(blocks["xnnpack"], blocks["xnnpack_1t"], strict=True)]
    record["ratio"] = {
        config: statistics.median(d / x for d, x in zip(blocks[config], fastest_cpu, strict=True))
        for config in CONFIGS
        if config in blocks
    }
    return record


# --- the parent ----------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    # Python's bytecode cache as an installed application has it (some sandboxes turn it off)
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(model: Path, rounds: int, block: int, timeout: float) -> dict[str, Any]:
    """``measure_one`` in a fresh process; a crash or a hang becomes the row's note."""
    command = [sys.executable, __file__, "--child", str(model), "--rounds", str(rounds), "--block", str(block)]
    notes: list[str] = []
    failed: dict[str, Any] = {"model": model.stem, "size_kib": round(model.stat().st_size / 1024, 1), "notes": notes}
    try:
        out = subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        notes.append(f"no result within {timeout:.0f} s")
        return failed
    if out.returncode == 0:
        return json.loads(out.stdout.strip().splitlines()[-1])
    if out.returncode < 0:
        try:
            name = signal.Signals(-out.returncode).name
        except ValueError:
            name = f"signal {-out.returncode}"
        notes.append(f"crashed ({name})")
    else:
        tail = " ".join(out.stderr.strip().splitlines()[-1:])
        notes.append(f"failed: {tail[:300] or f'exit status {out.returncode}'}")
    return failed


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _share(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    share = c["delegated_nodes"] / c["total_nodes"] if c["total_nodes"] else 0.0
    return f"{c['delegated_nodes']}/{c['total_nodes']} ({share:.0%}), {c['partitions']} p"


def _error_cell(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    steps = f" ({c['max_steps']} steps)" if c.get("max_steps") else ""
    return f"**WRONG {c['error']:.1e}**" if c["wrong"] else f"{c['error']:.1e}{steps}"


def _cpu_ops(c: dict[str, Any] | None) -> list[str]:
    """``OP xN: reason`` per op and reason."""
    if not c:
        return []
    rows = []
    for op, reasons in sorted(c["on_cpu"].items()):
        for why, count in reasons.items():
            rows.append(f"{op} x{count}: {why}")
    return rows


def _op_counts(c: dict[str, Any] | None) -> str:
    if not c:
        return "-"
    counts = {op: sum(reasons.values()) for op, reasons in c["on_cpu"].items()}
    return ", ".join(f"{op} x{n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "none"


def markdown(records: list[dict[str, Any]]) -> str:
    """The table (one row per model) and, under it, each model's ops on CPU with their whole reasons."""
    rows = [
        "| model | KiB | delegated, partitions (default) | delegated, partitions (cpu_when_faster=false) "
        "| max error (default / forced) | delegate ms (default / forced) | XNNPACK ms (all cores / 1) "
        "| delegate / faster XNNPACK (default / forced) | ops on CPU (cpu_when_faster=false) | notes |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    details = []
    for r in records:
        d, f = r.get("default"), r.get("forced")
        latency, ratio = r.get("latency_ms", {}), r.get("ratio", {})
        notes = list(r["notes"]) + [f"fell back: {c}" for c in (f or {}).get("fallbacks", [])]
        if (d or {}).get("path") == "cpu faster":
            notes.append(f"default on TFLite's CPU kernels: {d['path_cause']}")
        rows.append(
            f"| {r['model']} | {r['size_kib']:.0f} | {_share(d)} | {_share(f)} "
            f"| {_error_cell(d)} / {_error_cell(f)} "
            f"| {_fmt(latency.get('default'), '.2f')} / {_fmt(latency.get('forced'), '.2f')} "
            f"| {_fmt(latency.get('xnnpack'), '.2f')} / {_fmt(latency.get('xnnpack_1t'), '.2f')} "
            f"| {_fmt(ratio.get('default'), '.2f')} / {_fmt(ratio.get('forced'), '.2f')} "
            f"| {_op_counts(f)} | {'; '.join(notes).replace('|', '/')} |"
        )
        forced_ops = _cpu_ops(f)
        default_only = [op for op in _cpu_ops(d) if op not in forced_ops and _FASTER not in op]
        # the rule's choices are many nodes with one reason: one line, with the ops it keeps
        by_rule = {
            op: n for op, reasons in (d or {}).get("on_cpu", {}).items() for why, n in reasons.items() if why == _FASTER
        }
        if forced_ops or default_only or by_rule:
            details.append(f"- **{r['model']}**")
            details += [f"  - {op}" for op in forced_ops]
            details += [f"  - (default options only) {op}" for op in default_only]
            if by_rule:
                ops = ", ".join(f"{op} x{n}" for op, n in sorted(by_rule.items(), key=lambda kv: (-kv[1], kv[0])))
                count = sum(by_rule.values())
                details.append(
                    f"  - (default options only) {count} nodes the rule cpu_when_faster leaves on CPU: {ops}"
                )
    wrong = [r["model"] for r in records if any((r.get(c) or {}).get("wrong") for c in CONFIGS)]
    text = "\n".join(rows)
    if wrong:
        text += f"\n\n**WRONG float outputs (error > {F32_LIMIT:g}):** {', '.join(wrong)}"
    if details:
        text += "\n\nOps left on CPU with cpu_when_faster=false, and why (xN: nodes):\n\n" + "\n".join(details)
    return text


def models(paths: list[Path]) -> list[Path]:
    found: list[Path] = []
    for path in paths or [MODELS]:
        found += sorted(path.glob("*.tflite")) if path.is_dir() else [path]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="folders or .tflite files (default: tests/models)")
    parser.add_argument("--rounds", type=int, default=7, help="blocks per path (default 7)")
    parser.add_argument("--block", type=int, default=10, help="invokes per block (default 10)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model (default 900)")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE", help="the records as JSON (to FILE)")
    parser.add_argument("--check", type=float, metavar="RATIO", help="exit 1 when a default ratio is over RATIO")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.block < 1:
        parser.error("--rounds and --block must be at least 1")
    if args.child:
        print(json.dumps(measure_one(args.child, args.rounds, args.block)))
        return 0
    chosen = models(args.paths)
    if not chosen:
        parser.error("no .tflite models found")
    records = []
    for model in chosen:
        print(f"{model.name} ...", file=sys.stderr, flush=True)
        records.append(measure(model, args.rounds, args.block, args.timeout))
    text = json.dumps(records, indent=1)
    if args.json == "-":
        print(text)
    else:
        if args.json:
            Path(args.json).write_text(text + "\n")
        print(markdown(records))
    return _check(records, args.check)


def _check(records: list[dict[str, Any]], limit: float | None) -> int:
    """1 when a model's default ratio is over ``limit`` (or has none), with the models named."""
    if limit is None:
        return 0
    over = [f"{r['model']} ({_fmt(r.get('ratio', {}).get('default'), '.2f')})" for r in records
            if not r.get("ratio", {}).get("default", float("inf")) <= limit]  # fmt: skip
    if over:
        print(f"default slower than {limit:g}x TFLite's CPU path: {', '.join(over)}", file=sys.stderr)
        return 1
    print(f"every default ratio is at most {limit:g}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
