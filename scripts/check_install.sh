#!/usr/bin/env bash
# What `pip install` of this checkout does to the environments users have , each in a new
# venv under .install-check/ (Python 3.11, or $PYTHON):
#   fresh:          nothing installed        -> ai-edge-litert, numpy 2
#   litert:         ai-edge-litert + numpy 2 -> both unchanged, tflite-runtime not pulled in
#   tflite-runtime: tflite-runtime + numpy 1 -> with the [tflite-runtime] extra numpy stays 1.x and
#                                               tflite-runtime keeps working
# and in each, `python -m delegate run` on a quantized model from a current converter (TensorFlow
# 2.21, which tflite-runtime 2.14 cannot load: it runs a float model there), naming its host; in the
# fresh one, a C program (tests/native/c_host.c) also makes a delegate through delegate.c_plugin_path().
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
if [ -z "${PYTHON:-}" ]; then
    PYTHON=$(command -v python3.11 || command -v python3)
fi
models=$(cd ../shared/models && pwd)
work=$root/.install-check
rm -rf "$work"
mkdir -p "$work"
failed=0
pip_q() { "$1/bin/python" -m pip install --quiet --disable-pip-version-check "${@:2}" >>"$1.log" 2>&1 \
    || { tail -5 "$1.log" >&2; return 1; }; }
version() { "$1/bin/python" -c "import importlib.metadata as m, sys
try: print(m.version(sys.argv[1]))
except m.PackageNotFoundError: print('absent')" "$2"; }
check() {  # venv, what, expected, actual
    if [ "$3" = "$4" ]; then echo "  ok: $2 $4"; else echo "  FAIL: $2 is $4, expected $3"; failed=1; fi
}
run_named() {  # venv, host expected, model, DELEGATE_TFLITE_HOST
    local host
    host=$(cd "$work" && DELEGATE_TFLITE_HOST=${4:-} "$1/bin/python" -m delegate run "$3" --runs 1 --json --quiet \
        2>>"$1.log" | "$1/bin/python" -c "import json, sys; print(json.load(sys.stdin)['host']['name'])" 2>>"$1.log") \
        || host="failed (see $1.log)"
    check "$1" "run's host" "$2" "$host"
}
major() { echo "${1%%.*}"; }

echo "fresh venv"
"$PYTHON" -m venv "$work/fresh"
pip_q "$work/fresh" "$root"
check fresh "numpy major" 2 "$(major "$(version "$work/fresh" numpy)")"
check fresh tflite-runtime absent "$(version "$work/fresh" tflite-runtime)"
run_named "$work/fresh" ai-edge-litert "$models/quant/small_cnn_dynamic.tflite"
# a C program with no Python loads the installed package's C-host plugin library
cc -std=c11 -Wall -Wextra -Werror tests/native/c_host.c -o "$work/c_host" -ldl
made=$(cd "$work" && env -u VIRTUAL_ENV -u PYTHONPATH -u PYTHONHOME ./c_host \
    "$("$work/fresh/bin/python" -c 'import delegate; print(delegate.c_plugin_path())')" precision=F32 2>>"$work/fresh.log" \
    | tail -1) || true
check fresh "a C host's delegate" created "$made"

echo "beside ai-edge-litert and numpy 2"
"$PYTHON" -m venv "$work/litert"
pip_q "$work/litert" ai-edge-litert "numpy>=2"
before=$(version "$work/litert" numpy)
pip_q "$work/litert" "$root"
check litert numpy "$before" "$(version "$work/litert" numpy)"
check litert tflite-runtime absent "$(version "$work/litert" tflite-runtime)"
run_named "$work/litert" ai-edge-litert "$models/quant/small_cnn_dynamic.tflite"

echo "beside tflite-runtime and numpy 1.x, with the [tflite-runtime] extra"
"$PYTHON" -m venv "$work/tflite-runtime"
pip_q "$work/tflite-runtime" tflite-runtime "numpy<2"
before=$(version "$work/tflite-runtime" numpy)
pip_q "$work/tflite-runtime" "$root[tflite-runtime]"
check tflite-runtime numpy "$before" "$(version "$work/tflite-runtime" numpy)"
run_named "$work/tflite-runtime" tflite-runtime "$models/small_cnn.tflite" tflite-runtime
run_named "$work/tflite-runtime" ai-edge-litert "$models/quant/small_cnn_dynamic.tflite"

[ $failed = 0 ] && rm -rf "$work"
exit $failed
