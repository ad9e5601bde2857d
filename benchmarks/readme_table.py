#!/usr/bin/env python3
"""The README's performance table, made from the current comparison in benchmarks/RESULTS.md.

``benchmarks/compare.py --write`` keeps a table of every shared model and path between the
``compare`` markers of RESULTS.md, closed by a line naming its command, date and machine. This
script takes from it, per model whose XNNPACK latency is over ``MIN_XNNPACK_MS`` (smaller models
measure fixed costs, and by default stay on TFLite's kernels), the delegate's median latency, the
faster XNNPACK path's and their ratio, and writes them between the README's ``performance``
markers with that line. ``--check`` exits 1 when the README's table is not what RESULTS.md gives
(tests/test_readme.py runs it), so the README never shows figures RESULTS.md does not have.

    python benchmarks/readme_table.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS, README = ROOT / "benchmarks" / "RESULTS.md", ROOT / "README.md"
COMPARE = ("<!-- compare:begin -->", "<!-- compare:end -->")
PERFORMANCE = ("<!-- performance:begin -->", "<!-- performance:end -->")
#: models whose faster XNNPACK path takes less than this stay out of the table
MIN_XNNPACK_MS = 0.5


def _between(text: str, markers: tuple[str, str], where: str) -> str:
    begin, end = markers
    if begin not in text or end not in text:
        raise SystemExit(f"{where} has no {begin} ... {end} block")
    return text.split(begin, 1)[1].split(end, 1)[0]


def _medians(block: str) -> dict[str, dict[str, float]]:
    """model -> path -> median latency (ms), from the comparison's rows."""
    found: dict[str, dict[str, float]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 9 or cells[0] in ("model", "---"):
            continue
        try:
            found.setdefault(cells[0], {})[cells[1]] = float(cells[6].replace(",", ""))
        except ValueError:  # a path that did not run
            continue
    return found


def table(results_text: str) -> str:
    """The README's block: the table and the line saying where the figures come from."""
    block = _between(results_text, COMPARE, "benchmarks/RESULTS.md")
    source = next((line for line in block.splitlines() if line.startswith("Command:")), None)
    if source is None:
        raise SystemExit("the comparison in benchmarks/RESULTS.md has no 'Command: ...' line")
    rows = [
        "| model | delegate (ms) | XNNPACK, faster of 1 thread and all (ms) | delegate / XNNPACK |",
        "| --- | ---: | ---: | ---: |",
    ]
    for model, paths in sorted(_medians(block).items()):
        xnnpack = min((v for k, v in paths.items() if k.startswith("xnnpack")), default=None)
        if "delegate" not in paths or xnnpack is None or xnnpack < MIN_XNNPACK_MS:
            continue
        rows.append(f"| {model} | {paths['delegate']:.2f} | {xnnpack:.2f} | {paths['delegate'] / xnnpack:.2f} |")
    where = source.removeprefix("Command: ").rstrip(".")
    note = f"Median latency of `invoke()` on PoCL, from benchmarks/RESULTS.md ({where})."
    return "\n".join([note, "", *rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the README's table is stale")
    args = parser.parse_args()
    readme = README.read_text()
    wanted = f"\n{table(RESULTS.read_text())}\n"
    current = _between(readme, PERFORMANCE, "README.md")
    if args.check:
        if current != wanted:
            print("README.md's performance table is not RESULTS.md's: run python benchmarks/readme_table.py")
            return 1
        return 0
    begin, end = PERFORMANCE
    head, rest = readme.split(begin, 1)
    README.write_text(head + begin + wanted + end + rest.split(end, 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
