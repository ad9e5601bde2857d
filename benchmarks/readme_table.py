#!/usr/bin/env python3
"""The README's performance table, made from the current comparison in benchmarks/RESULTS.md.

``benchmarks/compare.py --write`` keeps a table of every shared model and path between the
``compare`` markers of RESULTS.md, closed by a line naming its command, date and machine. This
script takes from it, per model whose XNNPACK latency is over ``MIN_XNNPACK_MS`` (smaller models
measure fixed costs, and by default stay on TFLite's kernels), the delegate's median latency, the
faster XNNPACK path's and their ratio, and writes them between the README's ``performance``
markers with that line. ``--check`` exits 1 when the README's table is not what RESULTS.md gives
(tests/test_readme.py runs it), so the README never shows figures RESULTS.md does not have.
``--check`` also checks RESULTS.md's table of current figures (``current`` markers): every row
names a maintained tool of benchmarks/ in its command, a date and a machine, and each row of
``compare.py`` has the figure the comparison's target table gives.

    python benchmarks/readme_table.py [--check]
"""

from __future__ import annotations

import argparse
import re
import sys

from harness.paths import BENCHMARKS, ROOT

RESULTS, README = BENCHMARKS / "RESULTS.md", ROOT / "README.md"
COMPARE = ("<!-- compare:begin -->", "<!-- compare:end -->")
CURRENT = ("<!-- current:begin -->", "<!-- current:end -->")
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


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def current_problems(results_text: str) -> list[str]:
    """What is wrong with the table of current figures (nothing: an empty list)."""
    compare = _between(results_text, COMPARE, "benchmarks/RESULTS.md")
    found = []
    block = _between(results_text, CURRENT, "benchmarks/RESULTS.md")
    rows = [_cells(line) for line in block.splitlines() if line.strip()]
    for cells in rows[2:]:  # past the header and its rule
        if len(cells) != 5:
            found.append(f"not 5 cells: {cells}")
            continue
        figure, value, command, date, machine = cells
        script = re.search(r"benchmarks/(\w+\.py)", command)
        if script is None or not (BENCHMARKS / script.group(1)).is_file():
            found.append(f"{figure}: the command names no maintained tool of benchmarks/: {command}")
        if not re.fullmatch(r"\d{4}-\d\d-\d\d", date) or not machine:
            found.append(f"{figure}: no date (YYYY-MM-DD) or machine")
        if "compare.py --" in command and f"| {figure} | {value} |" not in compare:
            found.append(f"{figure}: {value} is not the comparison's figure")
    if len(rows) < 3:
        found.append("the table of current figures has no rows")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the README's table is stale")
    args = parser.parse_args()
    readme = README.read_text()
    wanted = f"\n{table(RESULTS.read_text())}\n"
    current = _between(readme, PERFORMANCE, "README.md")
    if args.check:
        problems = current_problems(RESULTS.read_text())
        for problem in problems:
            print(f"benchmarks/RESULTS.md, current figures: {problem}")
        if current != wanted:
            print("README.md's performance table is not RESULTS.md's: run python benchmarks/readme_table.py")
            return 1
        return 1 if problems else 0
    begin, end = PERFORMANCE
    head, rest = readme.split(begin, 1)
    README.write_text(head + begin + wanted + end + rest.split(end, 1)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
