#!/usr/bin/env bash
# Sets up .venv (if needed) and runs the main job: a .tflite model (MobileNetV2 from ../shared by
# default) through the OpenCL delegate on the default device (a GPU if present, else PoCL), compared
# with TFLite's CPU path. Extra arguments go to `python -m delegate run`, e.g. `--json`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
model=../shared/models/mobilenet_v2.tflite
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
    model=$1
    shift
fi
exec .venv/bin/python -m delegate run "$model" "$@"
