"""Runs truncated and bit-flipped copies of a model through ``python -m delegate run``, each in a
forked child, and counts the exit codes: 0 (ran) or 2 (refused) pass; a signal, a timeout or any
other code fails and is listed with its mutation.

    python scripts/model_mutations.py [--model M] [--flips N] [--seed S] [--step K] [--engine cpu|gpu]

Truncations: every length below 4 KiB byte by byte, then every ``--step`` bytes up to the whole
file less one. Bit flips: ``--flips`` seeded (byte, bit) pairs over the whole file. The children
run the CLI's entry (delegate.cli.main) with ``--runs 1``; ``--engine cpu`` gives them settings
with ``preference: FORCE_CPU`` (TFLite's builtin kernels, fast), ``gpu`` the OpenCL delegate. The
host is the one delegate.api picks (DELEGATE_TFLITE_HOST). Each child's address space is capped
(``--memory-gb``; under ASan, which needs terabytes of address space, its max_allocation_size_mb
instead) so that a flipped dimension makes TFLite's allocation fail (exit 2) instead of
the OOM killer's SIGKILL. Failing inputs are written to ``--keep`` (default .fuzz/mutations/). Exit
status: 0 when every case passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import resource
import select
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The children inherit everything imported here: the CLI's run imports these lazily, which would
# cost every case the imports again.
from delegate import cli, model_run, settings  # noqa: E402, F401
from delegate.api import host_runtime  # noqa: E402
from delegate.settings import mapping  # noqa: E402, F401

DEFAULT_MODEL = ROOT.parent / "shared" / "models" / "small_cnn.tflite"
BYTE_BY_BYTE = 4096


def mutations(data: bytes, flips: int, seed: int, step: int) -> list[tuple[str, bytes]]:
    """(label, bytes) of every truncation, then of the seeded bit flips."""
    lengths = list(range(min(BYTE_BY_BYTE, len(data))))
    lengths += range(BYTE_BY_BYTE, len(data), step)
    out = [(f"truncate:{n}", data[:n]) for n in lengths]
    rng = random.Random(seed)
    for _ in range(flips):
        at, bit = rng.randrange(len(data)), rng.randrange(8)
        flipped = bytearray(data)
        flipped[at] ^= 1 << bit
        out.append((f"flip:{at}:{bit}", bytes(flipped)))
    return out


def under_asan() -> bool:
    """Whether AddressSanitizer's runtime is in this process (scripts/sanitize.sh preloads it)."""
    return "libasan" in os.environ.get("LD_PRELOAD", "")


def asan_options(memory: int) -> str | None:
    """ASAN_OPTIONS that bound allocations as the address-space cap does, or None when set already.

    ASan maps terabytes of shadow memory, so an RLIMIT_AS cap makes every later mmap fail and ASan
    abort; its own limit makes an oversized allocation fail instead (TFLite: std::bad_alloc, exit 2).
    """
    current = os.environ.get("ASAN_OPTIONS", "")
    if "max_allocation_size_mb" in current:
        return None
    extra = f"allocator_may_return_null=1:max_allocation_size_mb={memory // 2**20}"
    return f"{current}:{extra}" if current else extra


def run_case(path: Path, extra: list[str], timeout: float, memory: int) -> str:
    """The child's outcome: ``exit:N``, ``signal:NAME`` or ``timeout``."""
    pid = os.fork()
    if pid == 0:  # the child: the CLI's run, nothing printed
        try:
            if not under_asan():  # under ASan its max_allocation_size_mb bounds memory (main)
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            code = cli.main(["run", str(path), "--runs", "1", *extra])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:  # an escaped exception is a failure, counted as exit 1
            code = 1
        os._exit(code)
    pidfd = os.pidfd_open(pid)  # readable when the child ends: a wait with a timeout, no polling
    try:
        ended, _, _ = select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)
    if not ended:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return "timeout"
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal:{signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit:{os.WEXITSTATUS(status)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--flips", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step", type=int, default=64, help="truncation step past the first 4 KiB")
    parser.add_argument("--no-truncations", action="store_true")
    parser.add_argument("--engine", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--memory-gb", type=float, default=4.0, help="address-space cap of each child")
    parser.add_argument("--keep", type=Path, default=ROOT / ".fuzz" / "mutations")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    args = parser.parse_args()
    if under_asan():
        options = asan_options(int(args.memory_gb * 2**30))
        if options is not None:  # ASan reads its options at start: run again with them
            os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "ASAN_OPTIONS": options})

    data = args.model.read_bytes()
    cases = mutations(data, args.flips, args.seed, args.step)
    if args.no_truncations:
        cases = [c for c in cases if not c[0].startswith("truncate:")]
    host = host_runtime().__name__  # imported before the forks, like the rest
    counts: dict[str, collections.Counter[str]] = {"truncate": collections.Counter(), "flip": collections.Counter()}
    failures = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="model-mutations-") as tmp:
        extra = []
        if args.engine == "cpu":
            settings = Path(tmp) / "cpu.textproto"
            settings.write_text("preference: FORCE_CPU\n")
            extra = ["--settings", str(settings)]
        path = Path(tmp) / "case.tflite"
        for number, (label, blob) in enumerate(cases):
            path.write_bytes(blob)
            outcome = run_case(path, extra, args.timeout, int(args.memory_gb * 2**30))
            counts[label.split(":")[0]][outcome] += 1
            if outcome not in ("exit:0", "exit:2"):
                failures.append((label, outcome))
                args.keep.mkdir(parents=True, exist_ok=True)
                (args.keep / f"{label.replace(':', '-')}.tflite").write_bytes(blob)
                print(f"FAIL {label}: {outcome}", file=sys.stderr, flush=True)
            if number % 500 == 499:
                print(f"... {number + 1} of {len(cases)} cases", file=sys.stderr, flush=True)
    summary = {
        "model": str(args.model),
        "bytes": len(data),
        "host": host,
        "engine": args.engine,
        "seed": args.seed,
        "truncations": dict(counts["truncate"]),
        "flips": dict(counts["flip"]),
        "failures": failures,
        "seconds": round(time.monotonic() - start, 1),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        for key, value in summary.items():
            print(f"{key}: {value}")
    with contextlib.suppress(OSError):
        if args.keep.exists() and not any(args.keep.iterdir()):
            args.keep.rmdir()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
