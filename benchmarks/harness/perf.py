"""Linux ``perf record`` around a child process, for the tools that sample persistent kernels."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any


def perf_binary() -> str:
    """The ``perf`` on PATH; SystemExit naming the package when there is none."""
    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("perf is not installed (Debian/Ubuntu: apt-get install linux-perf)")
    return perf


def record(child: list[str], data: Path, frequency: int, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``child`` under ``perf record`` (samples into ``data``); the JSON of its last stdout line."""
    run = subprocess.run(
        [perf_binary(), "record", "-F", str(frequency), "-o", str(data), "--", *child],
        capture_output=True,
        text=True,
        cwd=cwd,
    )
    if run.returncode != 0:
        raise SystemExit(f"perf record failed ({run.returncode}): {run.stderr.strip()[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def output(*args: str) -> str:
    """What ``perf ARGS`` prints (``report``, ``script``)."""
    return subprocess.run([perf_binary(), *args], capture_output=True, text=True, check=True).stdout
