"""The acceptance size of tests/test_concurrency.py: 2 to 8 threads creating, invoking and deleting
``delegate.Interpreter``s, in 20 fresh processes per thread count and background-compile mode.

    python -m tests.stress_threads [--model M] [--threads 2-8] [--processes 20] [--modes off,auto]
                                   [--invokes 2] [--no-cache]

Each process runs tests/thread_driver.py (door ``own``): every output is compared with TFLite's CPU
kernels. By default a serialization cache is filled first by one process, so that the processes
spend the CPU on threads, not on the compiler (``--no-cache``: every process compiles, with the
program cache off). Prints one line per thread count and mode, then the totals as JSON; exits 1 when
any process died of a signal, failed, or saw an output differ from TFLite's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from .helpers import MODELS

ROOT = Path(__file__).resolve().parent.parent
MODEL = MODELS / "unet_small.tflite"


def _process(model: Path, threads: int, options: list[str]) -> tuple[str, Counter[str], str]:
    """One fresh process: its outcome (``ok``, ``signal N``, ``failed``), its counts, its stderr tail."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.thread_driver", str(model), str(threads), "own", *options],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
    except subprocess.TimeoutExpired:
        return "timed out", Counter(), ""
    counts: Counter[str] = Counter()
    try:
        counts.update(json.loads(done.stdout.strip().splitlines()[-1])["counts"])
    except (IndexError, ValueError, KeyError):
        pass  # a process that died before printing
    if done.returncode < 0:
        return f"signal {-done.returncode}", counts, done.stderr[-3000:]
    return ("ok" if done.returncode == 0 else "failed"), counts, done.stderr[-3000:]


def _thread_counts(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--threads", default="2-8", help="a count or a range, such as 2-8")
    parser.add_argument("--processes", type=int, default=20, help="fresh processes per thread count and mode")
    parser.add_argument("--modes", default="off,auto", help="background_compile modes, comma-separated")
    parser.add_argument("--invokes", type=int, default=2, help="invokes per interpreter")
    parser.add_argument("--no-cache", action="store_true", help="every process compiles (no serialization cache)")
    args = parser.parse_args(argv)
    totals: Counter[str] = Counter()
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        cache = [] if args.no_cache else ["--cache", folder]
        if cache:
            _process(args.model, 1, [*cache, "--invokes", "1"])  # fills the cache
        for mode in args.modes.split(","):
            for threads in _thread_counts(args.threads):
                start, outcomes, counts = time.perf_counter(), Counter[str](), Counter[str]()
                for seed in range(args.processes):
                    options = [*cache, "--mode", mode, "--invokes", str(args.invokes), "--seed", str(seed)]
                    outcome, got, stderr = _process(args.model, threads, options)
                    outcomes[outcome] += 1
                    counts.update(got)
                    if outcome != "ok":
                        failures.append(f"{mode}, {threads} threads, seed {seed}: {outcome}\n{stderr}")
                print(
                    f"mode {mode}, {threads} threads: {dict(outcomes)}; outputs {dict(counts)}; "
                    f"{time.perf_counter() - start:.0f} s",
                    flush=True,
                )
                totals.update({f"process {k}": v for k, v in outcomes.items()})
                totals.update(counts)
    for failure in failures[:5]:
        print(failure, file=sys.stderr)
    print(json.dumps(dict(totals)))
    return 0 if not failures and not totals.get("mismatch") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
