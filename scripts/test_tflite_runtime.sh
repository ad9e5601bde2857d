#!/usr/bin/env bash
# The plugin, CLI and model-file tests again under the older host, tflite-runtime 2.14 (numpy < 2),
# in .venv-tflite-runtime, created if needed with the package's `tflite-runtime` extra (the main
# suite, scripts/test.sh, runs under the default host, ai-edge-litert with numpy 2). The op tests
# (tests/test_ops.py: kernel variants, the same whatever the host) run there only; the model
# corpus, shapes and plugin tests here compare with tflite-runtime's own CPU kernels.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-tflite-runtime EXTRAS=test,tflite-runtime source scripts/venv.sh
DELEGATE_TFLITE_HOST=tflite-runtime .venv-tflite-runtime/bin/python -m pytest -n auto -p no:cacheprovider tests/test_plugin.py \
    tests/test_settings_mapping.py tests/test_minibenchmark.py tests/test_op_names.py tests/test_model_corpus.py \
    tests/test_shapes.py tests/test_prepare_failures.py tests/test_sparsity.py tests/test_cli.py \
    tests/test_host_and_cli.py tests/test_model_verify.py tests/test_variables.py tests/test_cpu_threads.py "$@"
