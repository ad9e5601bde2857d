#!/usr/bin/env python3
"""Race the CPU models PoCL compiles for: the name PoCL's LLVM gives the host against the one the
delegate writes in its place (delegate/runtime/platforms/pocl_cpu.py), model by model.

Each side is a fresh ``python -m delegate run MODEL --json`` process with its own warm PoCL kernel
cache and serialization folder (one untimed start compiles first); the two sides alternate round by
round, so a change in the machine's load hits both alike. The baseline side runs with
``DELEGATE_POCL_CPU=off`` (PoCL's own name: ``znver3`` on a Zen 4), the other with the default
repair (``icelake-client`` there) or ``--name``, and the delegate options of ``--option``. Prints per model
each side's median of its rounds' medians (ms), their ratio, the CPU's (XNNPACK's) median from the
same processes, and the geometric mean of the ratios.

    python benchmarks/experiments/pocl_target_race.py [MODEL ...] [--runs N] [--rounds R] [--name CPU]
                                                      [--option K=V] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the harness

from harness import cli
from harness.paths import MODELS, ROOT, model_name
from harness.timing import geometric_mean

#: float vision models of ../shared (the race's default set) when no model is named
DEFAULT_MODELS = (
    "mobilenet_v2",
    "unet_small",
    "real/mediapipe__face_detection_short_range",
    "real/mediapipe__face_landmark",
    "real/mediapipe__hand_recrop",
    "real/mediapipe__pose_detection",
    "real/mediapipe__selfie_segmentation",
)


def _run(model: Path, runs: int, env: dict[str, str], folder: str, options: list[str]) -> dict:
    command = [sys.executable, "-m", "delegate", "run", str(model), "--json", "--quiet", "--runs", str(runs)]
    command += ["--serialization-dir", folder, "--option", "cpu_when_faster=false"]
    for option in options:
        command += ["--option", option]
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{model.name} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def _compiler_cpu(env: dict[str, str]) -> str:
    """The CPU name the default device compiles for under ``env``."""
    probe = "from delegate.runtime import device; print(device.describe(device.select_device(None)).compiler_cpu)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=ROOT)
    return out.stdout.strip() or f"? ({out.stderr.strip()[-200:]})"


def race(model: Path, runs: int, rounds: int, name: str, options: list[str]) -> dict:
    sides: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = {k: v for k, v in os.environ.items() if k != "DELEGATE_POCL_CPU"}
        base.update(PYTHONPATH=str(ROOT), DELEGATE_BACKGROUND_COMPILE="off")
        side_options = {"llvm": [], "repaired": options}
        for side, setting in (("llvm", "off"), ("repaired", name)):
            env = dict(base, POCL_CACHE_DIR=f"{tmp}/{side}-pocl")
            if setting:
                env["DELEGATE_POCL_CPU"] = setting
            sides[side] = env
            os.makedirs(f"{tmp}/{side}-ctx")
            _run(model, 1, env, f"{tmp}/{side}-ctx", side_options[side])  # compiles: the timed rounds start warm
        medians: dict[str, list[float]] = {side: [] for side in sides}
        cpu: list[float] = []
        targets = {side: _compiler_cpu(env) for side, env in sides.items()}
        for _ in range(rounds):
            for side, env in sides.items():
                result = _run(model, runs, env, f"{tmp}/{side}-ctx", side_options[side])
                medians[side].append(result["latency_ms"]["delegate"])
                cpu.append(result["latency_ms"]["cpu"])
    llvm, repaired = statistics.median(medians["llvm"]), statistics.median(medians["repaired"])
    return {
        "model": model_name(model),
        "llvm_ms": llvm,
        "repaired_ms": repaired,
        "ratio": repaired / llvm,
        "cpu_ms": statistics.median(cpu),
        "rounds": medians,
        "compiles_for": targets,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="model files (default: the float vision models of ../shared)")
    parser.add_argument("--runs", type=int, default=20, help="timed calls per process")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--name", default="", help="the CPU name to race (default: the delegate's repair)")
    cli.add_option(parser, help="a delegate option of the repaired side (repeatable)")
    parser.add_argument("--json", type=Path, help="write every figure here")
    args = parser.parse_args(argv)
    models = [Path(m) for m in args.models] or [MODELS / f"{m}.tflite" for m in DEFAULT_MODELS]
    results = []
    print("| model | compiles for | PoCL's name (ms) | repaired (ms) | repaired / PoCL's | XNNPACK (ms) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for model in models:
        r = race(model, args.runs, args.rounds, args.name, args.option)
        results.append(r)
        names = " / ".join(r["compiles_for"].values())
        figures = f"{r['llvm_ms']:.2f} | {r['repaired_ms']:.2f} | {r['ratio']:.3f} | {r['cpu_ms']:.2f}"
        print(f"| {r['model']} | {names} | {figures} |")
        sys.stdout.flush()
    geomean = geometric_mean(r["ratio"] for r in results)
    print(f"\ngeometric mean of repaired / PoCL's: {geomean:.3f}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
