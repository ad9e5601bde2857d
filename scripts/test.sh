#!/usr/bin/env bash
# Sets up .venv (if needed) and runs every check: lint, the test suite and the benchmark targets.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k roundtrip`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest "$@"
.venv/bin/python benchmarks/parse_speed.py --check
.venv/bin/python benchmarks/runtime_speed.py --check
.venv/bin/python benchmarks/init_speed.py --check
