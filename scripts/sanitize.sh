#!/usr/bin/env bash
# Rebuilds the C extension with AddressSanitizer + UndefinedBehaviorSanitizer, runs the test suite
# against it (leak checking is off: CPython itself keeps allocations until exit), then rebuilds
# the normal extension. Needs gcc's libasan and libubsan (they come with gcc).
# Tests marked `opencl` are left out: PoCL's loader cannot run beside the ASan runtime (no OpenCL
# platform is found). The enqueue loop is covered under the sanitizers by tests/native/runtime_mock.c.
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
LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1 \
    .venv/bin/python -m pytest -p no:cacheprovider -m "not opencl" "$@"
