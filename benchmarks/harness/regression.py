"""Latency ratios against a committed baseline: what counts as a regression, and the baseline file.

A record is ``benchmarks/model_kinds.py``'s (``model``, ``ratio`` with ``default`` and ``forced``:
the delegate over the faster XNNPACK of each round, with the default options and with
``cpu_when_faster=false``). A baseline is a JSON file::

    {"date": "YYYY-MM-DD", "machine": "...", "command": "...",
     "models": {"name": {"default": 1.01, "forced": 1.15, "path": "delegated"}, ...}}

Ratios rather than milliseconds are kept, since both sides of a ratio are timed in the same
rounds of one process and the machine's drift cancels out of them.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the two option sets a record holds ratios for
CONFIGS = ("default", "forced")
#: a default ratio over this fails: by default the delegate is never slower than TFLite's CPU path
DEFAULT_LIMIT = 1.05
#: a ratio this many times its baseline's is a regression: quiet runs of the set spread by up to 1.11x
#: (max / min of 3), a kernel twice as slow moves a ratio by 1.5 to 2x
FACTOR = 1.3
#: XNNPACK on every core over one, median over the set: below this another process held a core, and
#: the ratios are not those of a quiet machine (the delegate and XNNPACK share the loss unevenly)
QUIET_SPEEDUP = 1.4
#: calls shorter than this on one thread are left out of that speedup
THREADED_MS = 1.0
#: targets of the forced option set (cpu_when_faster=false), reported beside the check
FLOAT_GEOMEAN_TARGET, FLOAT_MAX_TARGET, INT8_MAX_TARGET = 1.0, 1.5, 1.5


@dataclass
class Baseline:
    date: str
    machine: str
    command: str
    models: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Finding:
    """One line of the comparison; ``failed`` ones make ``--check`` exit 1."""

    model: str
    message: str
    failed: bool


def load(path: Path) -> Baseline:
    """The baseline at ``path``; ValueError naming what is missing or not a ratio."""
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ValueError(f"{path}: no 'models' object")
    for key in ("date", "machine", "command"):
        if not isinstance(data.get(key), str):
            raise ValueError(f"{path}: no '{key}' string")
    for name, entry in data["models"].items():
        for config in CONFIGS:
            value = entry.get(config) if isinstance(entry, dict) else None
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ValueError(f"{path}: {name}: '{config}' is not a positive ratio: {value!r}")
    return Baseline(data["date"], data["machine"], data["command"], data["models"])


def entry(record: dict[str, Any]) -> dict[str, Any]:
    """What the baseline keeps of one record: its two ratios and the default's path."""
    ratio = record.get("ratio", {})
    kept: dict[str, Any] = {config: round(ratio[config], 3) for config in CONFIGS if config in ratio}
    kept["path"] = (record.get("default") or {}).get("path")
    return kept


def dump(records: list[dict[str, Any]], date: str, machine: str, command: str) -> str:
    models = {r["model"]: entry(r) for r in sorted(records, key=lambda r: r["model"])}
    return json.dumps({"date": date, "machine": machine, "command": command, "models": models}, indent=1) + "\n"


def compare(
    records: list[dict[str, Any]], baseline: Baseline, factor: float = FACTOR, limit: float = DEFAULT_LIMIT
) -> list[Finding]:
    """Every model's findings: a default ratio over ``limit``, a ratio over ``factor`` times its
    baseline, a model of the baseline without a ratio (failed or missing); new models and ratios
    that fell below baseline / ``factor`` are reported without failing."""
    found: list[Finding] = []
    measured = {r["model"]: r for r in records}
    for name in sorted(set(baseline.models) - set(measured)):
        found.append(Finding(name, "in the baseline but not measured (is the set complete?)", True))
    for name, record in sorted(measured.items()):
        ratio = record.get("ratio", {})
        notes = "; ".join(record.get("notes", []))
        if "default" not in ratio:
            found.append(Finding(name, f"no default ratio measured{f': {notes}' if notes else ''}", True))
        elif ratio["default"] > limit:
            found.append(Finding(name, f"default {ratio['default']:.2f}x TFLite's CPU path, over {limit:g}x", True))
        base = baseline.models.get(name)
        if base is None:
            found.append(Finding(name, "not in the baseline (run --update-baseline to add it)", False))
            continue
        for config in CONFIGS:
            was, now = base.get(config), ratio.get(config)
            if was is None:
                continue
            if now is None:
                found.append(Finding(name, f"{config}: no ratio measured (baseline {was:.2f}x)", True))
            elif now > was * factor:
                message = f"{config}: {now:.2f}x XNNPACK, baseline {was:.2f}x ({now / was:.2f} times, over {factor:g})"
                found.append(Finding(name, message, True))
            elif now * factor < was:
                message = f"{config}: {now:.2f}x XNNPACK, baseline {was:.2f}x: faster, update the baseline"
                found.append(Finding(name, message, False))
    return found


def lower(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two measurements of one model as one record: each ratio the lower of the two (a slower
    kernel is slower in every run; load from other processes rarely hits both), the rest from the
    second run."""
    ratios = [r.get("ratio", {}) for r in (first, second)]
    merged = {c: min(r[c] for r in ratios if c in r) for c in CONFIGS if any(c in r for r in ratios)}
    notes = [*second.get("notes", []), "measured twice, the lower ratios kept"]
    return {**second, "ratio": merged, "notes": notes}


def median_records(runs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several runs of the set as one: each model's ratios the median over the runs that measured
    them (a baseline from one run would carry that run's noise into every later check); the
    rest of each record from the last run."""
    merged = []
    for name in sorted({r["model"] for run in runs for r in run}):
        records = [r for run in runs for r in run if r["model"] == name]
        ratio = {}
        for config in CONFIGS:
            values = [r["ratio"][config] for r in records if config in r.get("ratio", {})]
            if values:
                ratio[config] = statistics.median(values)
        merged.append({**records[-1], "ratio": ratio, "runs": len(records)})
    return merged


def thread_speedup(records: list[dict[str, Any]]) -> float | None:
    """XNNPACK's 1-thread latency over its all-cores latency, median over the records of at least
    ``THREADED_MS`` on one thread (smaller calls gain little from threads): about 1.7 to 1.9 on a
    quiet 2-core machine, about 1 when another process holds a core."""
    values = [
        r["latency_ms"]["xnnpack_1t"] / r["latency_ms"]["xnnpack"]
        for r in records
        if r.get("latency_ms", {}).get("xnnpack") and r["latency_ms"].get("xnnpack_1t", 0) >= THREADED_MS
    ]
    return statistics.median(values) if values else None


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def targets(records: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """The forced option set's targets, each with whether it is met: float geometric mean and
    maximum, int8 maximum (int8 models: names ending in ``_int8``)."""
    forced = {r["model"]: r["ratio"]["forced"] for r in records if "forced" in r.get("ratio", {})}
    floats = [v for name, v in forced.items() if not name.endswith("_int8")]
    ints = [v for name, v in forced.items() if name.endswith("_int8")]
    found = []
    if floats:
        mean, worst = geomean(floats), max(floats)
        found.append(_target("float, forced: geometric mean", mean, FLOAT_GEOMEAN_TARGET))
        found.append(_target("float, forced: largest", worst, FLOAT_MAX_TARGET))
    if ints:
        found.append(_target("int8, forced: largest", max(ints), INT8_MAX_TARGET))
    return found


def _target(what: str, value: float, target: float) -> tuple[str, bool]:
    return f"{what} {value:.2f} (target <= {target:g})", value <= target
