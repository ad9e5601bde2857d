#!/usr/bin/env bash
# The plugin, CLI and model-file tests again under the older host, tflite-runtime 2.14 (numpy < 2),
# in .venv-tflite-runtime, created if needed with the package's `tflite-runtime` extra (the main
# suite, scripts/test.sh, runs under the default host, ai-edge-litert with numpy 2).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
    PYTHON=$(command -v python3.11 || command -v python3)
fi
venv=.venv-tflite-runtime
if [ ! -x $venv/bin/python ]; then
    "$PYTHON" -m venv $venv
    $venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
fi
stamp=$(cat pyproject.toml setup.py delegate/_build_native.py csrc/*.c csrc/*.h | sha256sum | cut -d' ' -f1)
if [ "$(cat $venv/.delegate-install 2>/dev/null)" != "$stamp" ]; then
    $venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,tflite-runtime]' \
        2>$venv/install.log || { cat $venv/install.log >&2; exit 1; }
    echo "$stamp" > $venv/.delegate-install
fi
DELEGATE_TFLITE_HOST=tflite-runtime $venv/bin/python -m pytest -p no:cacheprovider tests/test_plugin.py tests/test_ops.py \
    tests/test_settings_mapping.py tests/test_minibenchmark.py tests/test_op_names.py tests/test_model_corpus.py \
    tests/test_shapes.py tests/test_prepare_failures.py tests/test_sparsity.py tests/test_cli.py \
    tests/test_host_and_cli.py tests/test_model_verify.py "$@"
