#!/usr/bin/env bash
# TensorFlow's interpreter as a host of the plugin: makes .venv-tensorflow (tensorflow-cpu, kept
# apart from the package's own environment, reused when present) and runs
# tests/test_tensorflow_host.py and the README's TensorFlow example against it. Extra arguments go
# to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
TF_VENV=.venv-tensorflow
if [ ! -x "$TF_VENV/bin/python" ] || ! "$TF_VENV/bin/python" -c "import tensorflow" 2>/dev/null; then
    echo "installing tensorflow-cpu into $TF_VENV ..." >&2
    "$PYTHON" -m venv "$TF_VENV"
    "$TF_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "tensorflow-cpu==2.21.*" \
        2>"$TF_VENV/install.log" || { cat "$TF_VENV/install.log" >&2; exit 1; }
fi
DELEGATE_TENSORFLOW_PYTHON="$PWD/$TF_VENV/bin/python" .venv/bin/python -m pytest -p no:cacheprovider \
    tests/test_tensorflow_host.py tests/test_readme.py -k "tensorflow" "$@"
