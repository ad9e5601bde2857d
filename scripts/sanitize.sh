#!/usr/bin/env bash
# Rebuilds the C extension with AddressSanitizer + UndefinedBehaviorSanitizer, runs the test suite
# against it (leak checking is off: CPython itself keeps allocations until exit), then rebuilds
# the normal extension. Needs gcc's libasan and libubsan (they come with gcc).
# Every test runs, those on PoCL (marked `opencl`) and through TFLite's plugin included, so the C
# code (reader, enqueue loop, plugin) runs under the sanitizers with a real driver and interpreter.
# PoCL loads here because the runtime loads the drivers the ICD loader names itself
# (delegate/runtime/opencl.py): ASan's dlopen interceptor hides the RPATH pyopencl relies on.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
rebuild() {
    DELEGATE_SANITIZE=$1 .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . \
        2>.venv/install.log || { cat .venv/install.log >&2; exit 1; }
}
trap 'rebuild 0' EXIT
rebuild 1
runtime="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
# use_sigaltstack=0: with its own alternate signal stack per thread, ASan's runtime fails a CHECK
# unmapping it when threads of the interpreter tests' fresh processes exit ("unable to unmap" in
# sanitizer_posix.cpp, abort); memory errors are found the same without it.
LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:use_sigaltstack=0 UBSAN_OPTIONS=halt_on_error=1 \
    .venv/bin/python -m pytest -n auto -p no:cacheprovider "$@"
