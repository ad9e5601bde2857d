#!/usr/bin/env bash
# Rebuilds the C extension with AddressSanitizer + UndefinedBehaviorSanitizer, runs the test suite
# against it (leak checking is off: CPython itself keeps allocations until exit), then rebuilds
# the normal extension. Needs gcc's libasan and libubsan (they come with gcc).
# The tests on PoCL (marked `opencl`) and through TFLite's plugin run too, so the C code (reader,
# enqueue loop, plugin, hosts) runs under the sanitizers with a real driver and interpreter. The
# files that only multiply kernel variants and op numerics over the same C paths (the op,
# logic-op, MediaPipe-op, quantized-op, precision, GELU, layer-norm, swish, attention, gated-read,
# transposed-product, pad-merge, sparsity, differential and model-kind tests), and those of
# Python-side rules that run models only as examples (settings mapping, the CLI's output,
# cpu_when_faster, the benchmark tools), run in the main suite; here a slice stands for them: the
# unary and binary op tests and every shared model at F32. That keeps CI in time; SANITIZE_ALL=1
# runs every test.
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
variants=(tests/test_ops.py tests/test_logic_ops.py tests/test_mediapipe_ops.py tests/test_quant.py
          tests/test_precision.py tests/test_gelu.py tests/test_layer_norm.py tests/test_pad_merge.py
          tests/test_sparsity.py tests/test_differential.py tests/test_model_kinds.py tests/test_model_corpus.py
          tests/test_benchmark_tools.py tests/test_settings_mapping.py tests/test_settings_examples.py
          tests/test_cli.py tests/test_cpu_choice.py tests/test_attention_fusion.py
          tests/test_gated_read.py tests/test_transposed_products.py tests/test_swish.py)
sanitized() {
    LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:use_sigaltstack=0 UBSAN_OPTIONS=halt_on_error=1 \
        .venv/bin/python -m pytest -n auto -p no:cacheprovider "$@"
}
if [ "${SANITIZE_ALL:-0}" = 1 ]; then
    sanitized "$@"
else
    sanitized "${variants[@]/#/--ignore=}" "$@"
    sanitized tests/test_ops.py tests/test_model_corpus.py -k "test_unary or test_binary or test_f32_matches" "$@"
fi
