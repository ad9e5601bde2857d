"""Command-line pieces the tools share: ``--option K=V``, the ``--check`` exit and the machine's name."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path


def add_option(parser: argparse.ArgumentParser, help: str = "delegate option K=V (repeatable)") -> None:
    """``--option K=V``, repeatable, into ``args.option`` (a list of the K=V strings)."""
    parser.add_argument("--option", action="append", default=[], metavar="K=V", help=help)


def options(pairs: list[str]) -> dict[str, str]:
    """``["K=V", ...]`` as a dict; SystemExit on a pair without ``=``."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--option takes K=V, not {pair!r}")
        out[key.strip()] = value.strip()
    return out


def check(ok: bool, enabled: bool, message: str) -> int:
    """The exit status of a tool with ``--check``: 1 (and ``message`` on stderr) when it is on and
    a target was missed, else 0."""
    if enabled and not ok:
        print(f"FAILED: {message}", file=sys.stderr)
        return 1
    return 0


def cpu_name() -> str:
    """The cores and the CPU's model name (/proc/cpuinfo), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{os.cpu_count()} cores of {line.split(':', 1)[1].strip()}"
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}"


def machine() -> str:
    """The machine in one line: cores, CPU, system and Python."""
    return f"{cpu_name()}, {platform.system()} {platform.machine()}, Python {platform.python_version()}"
