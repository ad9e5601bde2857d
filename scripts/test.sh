#!/usr/bin/env bash
# Sets up .venv (if needed) and runs every check: lint, the test suite and the benchmark targets.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k roundtrip`. The tests run in a worker per
# core (pytest-xdist; most of their time is PoCL compiling kernels, one build at a time); give
# `-n 0` to run them in this process.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -n auto "$@"
.venv/bin/python benchmarks/parse_speed.py --check
.venv/bin/python benchmarks/runtime_speed.py --check
.venv/bin/python benchmarks/init_speed.py --check
