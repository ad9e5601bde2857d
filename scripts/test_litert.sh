#!/usr/bin/env bash
# The plugin tests again in a second environment with ai-edge-litert (numpy 2) instead of
# tflite-runtime (numpy < 2): .venv-litert, created if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    PYTHON=$(command -v python3.11 || command -v python3)
fi
if [ ! -x .venv-litert/bin/python ]; then
    "$PYTHON" -m venv .venv-litert
    .venv-litert/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
fi
.venv-litert/bin/python -m pip install --quiet --disable-pip-version-check "numpy>=2" ai-edge-litert cffi \
    pyopencl pocl-binary-distribution flatbuffers "protobuf>=7.35.1,<8" pytest hypothesis tflite
# --no-deps: the package's own dependency on tflite-runtime would pull numpy < 2 back in.
.venv-litert/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . 2>.venv-litert/install.log \
    || { cat .venv-litert/install.log >&2; exit 1; }
DELEGATE_TFLITE_HOST=ai_edge_litert .venv-litert/bin/python -m pytest -p no:cacheprovider tests/test_plugin.py tests/test_ops.py \
    tests/test_settings_mapping.py tests/test_minibenchmark.py tests/test_op_names.py tests/test_model_corpus.py \
    tests/test_shapes.py tests/test_prepare_failures.py tests/test_sparsity.py "$@"
