#!/usr/bin/env bash
# Sets up .venv (if needed) and runs the main job: today, a MobileNetV2-sized InferenceContext written,
# verified and read back by the native reader, then summarized.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
.venv/bin/python -m delegate demo "$@"
