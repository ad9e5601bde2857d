#!/usr/bin/env python3
"""The delegate against TFLite's CPU path (XNNPACK) and LiteRT's GPU accelerator, on every shared model.

The models: every ``*.tflite`` of ../shared/models, real/ and quant/ (named by that path, e.g.
``real/basic-pitch__nmp``), each input fed a seeded value of its own dtype and range (as
``python -m delegate run`` does: int8 models get int8 inputs).

Every measurement is a fresh process, run back to back on this machine, and the rounds alternate
between the paths so that a change in the machine's load hits all of them alike:

- ``delegate``: this package on the default OpenCL device, F32, default options. Cold init is the
  first start with an empty serialization folder and an empty driver kernel cache (its own
  folder: $POCL_CACHE_DIR for PoCL, $CUDA_CACHE_PATH for NVIDIA's driver), so everything is
  compiled; warm init and the warm first call are a later start with both folders kept, as an
  application's second start finds them.
- ``delegate-tuned``: the same with ``tuning=fast`` (the work-group search runs in the cold
  start and is stored in the serialized context; the warm start loads it).
- ``xnnpack``: the TFLite host's default CPU path (XNNPACK) with one thread per core, and
  ``xnnpack-1thread`` with one thread (on 2 cores the 2-thread run of UNet-small is ~15x slower
  than the 1-thread one: TFLite's own thread pool and XNNPACK's contend; ratios use the faster).
- ``litert-gpu``: ai-edge-litert's ``CompiledModel`` on its GPU accelerator (WebGPU over Vulkan),
  through ``benchmarks/litert_gpu.py`` in this Python (ai-edge-litert is the package's default
  host) or $LITERT_PYTHON, when a Vulkan driver is present. Its shader cache
  ($MESA_SHADER_CACHE_DIR) starts empty, so its first call includes the shader compilation, as
  a first start does.

Latency is the wall time of ``invoke()`` after 3 untimed calls: median and 90th percentile.
The "warm start" of the delegate is its warm init plus its warm first call.
Results go to stdout (a table); ``--out DIR`` writes the report (``compare.md``), every sample
(``compare.json``) and the chart (``compare.png``: cold start, warm start and latency per path,
titled with the CPU and the OpenCL device; needs matplotlib) to DIR, leaving the committed files
alone; ``--write`` puts the report into benchmarks/RESULTS.md (between the ``compare`` markers)
and the chart into ``benchmarks/compare.png``; ``--json FILE`` writes the samples alone.

    python benchmarks/compare.py [--models NAME ...] [--runs N] [--rounds R] [--out DIR] [--write]
                                 [--json FILE] [--no-litert] [--check]

``--check`` exits 1 when a target is missed, all on MobileNetV2 and UNet-small: the
delegate at most 1.25x the faster XNNPACK path's median latency; when LiteRT's GPU path ran, the
delegate at least 20x faster per call and its warm start at least 50x faster than LiteRT's first
call. The other models are in the table for information (tiny ones measure fixed costs).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness import cli
from harness.child import invoke_run, python_env
from harness.paths import BENCHMARKS, MODELS, model_name, shared_model, shared_models
from harness.timing import median, percentile

__all__ = ["MODELS", "main", "shared_models"]  # the models' folder and list, for readers and tests

RESULTS = BENCHMARKS / "RESULTS.md"
CHART = BENCHMARKS / "compare.png"
BEGIN, END = "<!-- compare:begin -->", "<!-- compare:end -->"
MAX_RATIO_TO_XNNPACK = 1.25
TARGET_MODELS = ("mobilenet_v2", "unet_small")
MIN_SPEEDUP_OVER_LITERT = 20.0
MIN_WARM_START_OVER_LITERT_FIRST_CALL = 50.0


@dataclass
class PathResult:
    model: str
    path: str
    init_ms: list[float] = field(default_factory=list)
    warm_init_ms: list[float] = field(default_factory=list)
    first_call_ms: list[float] = field(default_factory=list)
    warm_first_call_ms: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    note: str = ""
    #: the OpenCL device the delegate ran on ("" for the CPU paths)
    device: str = ""

    @property
    def median(self) -> float:
        return median(self.latency_ms)

    @property
    def p90(self) -> float:
        return percentile(self.latency_ms, 0.9)


#: the CPU paths: the host's XNNPACK with one thread per core, and with one thread
XNNPACK_THREADS = {"xnnpack": str(os.cpu_count() or 1), "xnnpack-1thread": "1"}


def _child(model: Path, kind: str, runs: int, options: dict[str, str], env: dict[str, str] | None = None) -> dict:
    if kind in XNNPACK_THREADS:
        return invoke_run(model, "xnnpack", runs, {"num_threads": XNNPACK_THREADS[kind]}, env)
    return invoke_run(model, "delegate", runs, options, env)


#: delegate options both delegate paths take on top of their own (``--option KEY=VALUE``, e.g.
#: kernel_family=gpu); the report's command line names them
EXTRA_OPTIONS: dict[str, str] = {}


def _delegate_options(model: Path, kind: str, folder: str) -> dict[str, str]:
    options = {**EXTRA_OPTIONS, "model_token": model.stem, "serialization_dir": folder}
    if kind == "delegate-tuned":
        options["tuning"] = "fast"
    return options


def _delegate_start(model: Path, kind: str, runs: int, folder: str, result: PathResult, *, cold: bool) -> None:
    env = python_env(POCL_CACHE_DIR=str(Path(folder) / "pocl"), CUDA_CACHE_PATH=str(Path(folder) / "nv"))
    env.pop("POCL_KERNEL_CACHE", None)
    sample = _child(model, kind, runs, _delegate_options(model, kind, folder), env)
    expected = "miss" if cold else "hit"
    if sample["cache"] and set(sample["cache"]) != {expected}:
        raise RuntimeError(f"{kind} on {model.name}: expected a cache {expected}, got {sample['cache']}")
    result.device = sample.get("device", "") or result.device
    if cold:
        result.init_ms.append(sample["init_ms"])
        result.first_call_ms.append(sample["first_call_ms"])
    else:
        result.warm_init_ms.append(sample["init_ms"])
        result.warm_first_call_ms.append(sample["first_call_ms"])
        result.latency_ms += sample["latency_ms"]


def _litert_python() -> Path | None:
    candidate = os.environ.get("LITERT_PYTHON") or sys.executable
    return Path(candidate) if Path(candidate).exists() else None


def _litert(model: Path, runs: int, result: PathResult) -> None:
    python = _litert_python()
    if python is None:
        result.note = f"$LITERT_PYTHON ({os.environ.get('LITERT_PYTHON')}) does not exist"
        return
    script = BENCHMARKS / "litert_gpu.py"
    with tempfile.TemporaryDirectory() as shader_cache:
        env = dict(os.environ, MESA_SHADER_CACHE_DIR=shader_cache)
        out = subprocess.run(
            [str(python), str(script), str(model), "--runs", str(runs)], capture_output=True, text=True, env=env
        )
    lines = out.stdout.strip().splitlines()
    data = json.loads(lines[-1]) if lines else {}
    if out.returncode != 0 or "unavailable" in data:
        result.note = data.get("unavailable") or f"litert_gpu.py failed: {out.stderr.strip()[-300:]}"
        return
    result.init_ms.append(data["init_ms"])
    result.first_call_ms.append(data["first_call_ms"])
    result.latency_ms += data["latency_ms"]


def measure(models: list[Path], runs: int, rounds: int, litert: bool) -> list[PathResult]:
    results: list[PathResult] = []
    kinds = ("delegate", "delegate-tuned")
    for model in models:
        by_path = {kind: PathResult(model_name(model), kind) for kind in (*kinds, "xnnpack", "xnnpack-1thread")}
        with tempfile.TemporaryDirectory() as plain, tempfile.TemporaryDirectory() as tuned:
            folders = {"delegate": plain, "delegate-tuned": tuned}
            for kind in kinds:
                _delegate_start(model, kind, runs, folders[kind], by_path[kind], cold=True)
            for _ in range(rounds):  # alternate, so that a change in load hits every path alike
                for cpu in ("xnnpack", "xnnpack-1thread"):
                    sample = _child(model, cpu, runs, {})
                    xnn = by_path[cpu]
                    xnn.init_ms.append(sample["init_ms"])
                    xnn.first_call_ms.append(sample["first_call_ms"])
                    xnn.latency_ms += sample["latency_ms"]
                for kind in kinds:
                    _delegate_start(model, kind, runs, folders[kind], by_path[kind], cold=False)
        results += by_path.values()
        if litert:
            gpu = PathResult(model_name(model), "litert-gpu")
            _litert(model, max(3, runs // 5), gpu)
            results.append(gpu)
    return results


def _fmt(value: float, digits: int = 1) -> str:
    return "-" if value != value else f"{value:,.{digits}f}"  # NaN -> "-"


def best_cpu(results: list[PathResult]) -> dict[str, float]:
    """Per model, the faster median of the two XNNPACK paths."""
    out: dict[str, float] = {}
    for r in results:
        if r.path.startswith("xnnpack") and r.latency_ms:
            out[r.model] = min(out.get(r.model, float("inf")), r.median)
    return out


def table(results: list[PathResult]) -> str:
    xnn = best_cpu(results)
    rows = [
        "| model | path | init, cold (ms) | first call, cold (ms) | init, warm (ms) | first call, warm (ms) "
        "| median (ms) | p90 (ms) | x best XNNPACK |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        if not r.latency_ms:
            rows.append(f"| {r.model} | {r.path} | not run: {r.note} | | | | | | |")
            continue
        ratio = r.median / xnn[r.model] if xnn.get(r.model) else float("nan")
        rows.append(
            f"| {r.model} | {r.path} | {_fmt(median(r.init_ms))} | {_fmt(median(r.first_call_ms))} | "
            f"{_fmt(median(r.warm_init_ms))} | {_fmt(median(r.warm_first_call_ms))} | {_fmt(r.median, 2)} | "
            f"{_fmt(r.p90, 2)} | {_fmt(ratio, 2)} |"
        )
    return "\n".join(rows)


def targets(results: list[PathResult]) -> list[tuple[str, float, str, bool]]:
    """(what, figure, target, met) for every target this run measured."""
    by = {(r.model, r.path): r for r in results}
    cpu = best_cpu(results)
    out = []
    for model in TARGET_MODELS:
        d = by.get((model, "delegate"))
        if d and d.latency_ms and model in cpu:
            ratio = d.median / cpu[model]
            out.append((f"{model}: delegate / best XNNPACK median", ratio, f"<= {MAX_RATIO_TO_XNNPACK}", ratio <= 1.25))
    for (model, path), g in by.items():
        d = by.get((model, "delegate"))
        if path != "litert-gpu" or model not in TARGET_MODELS or not g.latency_ms or not d or not d.latency_ms:
            continue
        speedup = g.median / d.median
        out.append((f"{model}: LiteRT GPU / delegate per call", speedup, ">= 20", speedup >= MIN_SPEEDUP_OVER_LITERT))
        warm = median(d.warm_init_ms) + median(d.warm_first_call_ms)
        start = median(g.first_call_ms) / warm
        out.append(
            (
                f"{model}: LiteRT GPU first call / delegate warm start (init + first call)",
                start,
                ">= 50",
                start >= MIN_WARM_START_OVER_LITERT_FIRST_CALL,
            )
        )
    for model in sorted({r.model for r in results}):
        plain, tuned = by.get((model, "delegate")), by.get((model, "delegate-tuned"))
        if plain and tuned and plain.latency_ms and tuned.latency_ms:
            out.append((f"{model}: tuning gain (untuned / tuned median)", plain.median / tuned.median, "report", True))
    return out


def start_ms(r: PathResult, *, warm: bool) -> float:
    """Init plus first call (ms); the warm start of a path without caches (XNNPACK, LiteRT) is its start."""
    if warm and r.warm_init_ms:
        return median(r.warm_init_ms) + median(r.warm_first_call_ms)
    return median(r.init_ms) + median(r.first_call_ms)


def chart(results: list[PathResult], path: Path) -> str:
    """Cold start, warm start and latency per model and path, log scale, on one figure."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no chart (pip install matplotlib)"
    models = sorted({r.model for r in results})
    order = ("xnnpack", "xnnpack-1thread", "delegate", "delegate-tuned", "litert-gpu")
    paths = [p for p in order if any(r.path == p and r.latency_ms for r in results)]
    by = {(r.model, r.path): r for r in results if r.latency_ms}
    panels = [
        ("cold start: init + first call (ms)", lambda r: start_ms(r, warm=False)),
        ("warm start: init + first call (ms)", lambda r: start_ms(r, warm=True)),
        ("latency per call, median (ms)", lambda r: r.median),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 4.8))
    width = 0.8 / max(1, len(paths))
    for ax, (label, value_of) in zip(axes, panels, strict=True):
        for k, p in enumerate(paths):
            values = [value_of(by[(m, p)]) if (m, p) in by else 0.0 for m in models]
            bars = ax.bar([i + k * width for i in range(len(models))], values, width, label=p)
            labels = [_fmt(v, 2 if v < 10 else 0) if v else "" for v in values]
            ax.bar_label(bars, labels=labels, fontsize=6, rotation=90, padding=2)
        ax.set_xticks([i + width * (len(paths) - 1) / 2 for i in range(len(models))], models, rotation=20, fontsize=8)
        ax.set_title(label, fontsize=10)
        ax.set_yscale("log")
        ax.margins(y=0.2)  # room for the rotated labels above the tallest bar
    axes[0].legend(fontsize=8)
    devices = sorted({r.device for r in results if r.device})
    fig.suptitle(
        f"{cli.cpu_name()}; delegate on {', '.join(devices) or 'no OpenCL device'}; {datetime.date.today()}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"chart: {path}"


def _machine(results: list[PathResult] | None = None) -> str:
    devices = sorted({r.device for r in results or [] if r.device})
    where = f", OpenCL device {', '.join(devices)}" if devices else ""
    return f"{cli.cpu_name()}{where}, Python {platform.python_version()}"


def report(results: list[PathResult], command: str) -> str:
    lines = [
        table(results),
        "",
        "| target | figure | wanted | met |",
        "| --- | ---: | --- | --- |",
    ]
    lines += [
        f"| {what} | {value:.2f}x | {want} | {'yes' if ok else '**no**'} |"
        for what, value, want, ok in targets(results)
    ]
    lines += ["", f"Command: `{command}`, {datetime.date.today()}, {_machine(results)}."]
    return "\n".join(lines)


def write_results(text: str) -> None:
    current = RESULTS.read_text()
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        current = head + block + rest.split(END, 1)[1]
    else:
        current = current.rstrip("\n") + "\n\n## Side by side\n\n" + block + "\n"
    RESULTS.write_text(current)


def write_outputs(results: list[PathResult], text: str, out: Path) -> list[str]:
    """The report, the samples and the chart into folder ``out``; what was written (or why not)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "compare.md").write_text(text + "\n")
    (out / "compare.json").write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return [f"report: {out / 'compare.md'}", f"samples: {out / 'compare.json'}", chart(results, out / "compare.png")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        nargs="*",
        help="models by path under ../shared/models: mobilenet_v2, real/basic-pitch__nmp (default: all)",
    )
    parser.add_argument("--runs", type=int, default=20, help="timed calls per process")
    parser.add_argument("--rounds", type=int, default=3, help="warm processes per path")
    parser.add_argument("--no-litert", action="store_true", help="skip LiteRT's GPU accelerator")
    parser.add_argument("--out", type=Path, help="write the report, samples and chart into this folder")
    parser.add_argument("--write", action="store_true", help="update RESULTS.md and the committed chart")
    parser.add_argument("--json", type=Path, help="write every sample to this file")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE",
        help="a delegate option for both delegate paths (repeatable), e.g. kernel_family=gpu",
    )  # fmt: skip
    args = parser.parse_args(argv)
    EXTRA_OPTIONS.update(cli.options(args.option))
    names = args.models or [model_name(p) for p in shared_models()]
    models = [shared_model(name) for name in names]
    missing = [str(m) for m in models if not m.exists()]
    if missing:
        parser.error(f"no such model(s): {', '.join(missing)}")
    results = measure(models, args.runs, args.rounds, not args.no_litert)
    command = "python benchmarks/compare.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(results, command.strip())
    print(text)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    if args.out:
        print("\n".join(write_outputs(results, text, args.out)))
    if args.write:
        write_results(text)
        print(chart(results, CHART))
    missed = [what for what, _, want, ok in targets(results) if not ok and want != "report"]
    if args.check and missed:
        print("targets missed: " + "; ".join(missed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
