# Sourced by the other scripts: creates a venv with Python 3.11 (or $PYTHON) and installs the
# package in editable mode with its test extras. The install (which also builds the C extension)
# is redone only when the packaging files or the C sources change.
#   VENV    the venv's folder (default .venv)
#   EXTRAS  the extras installed (default test; scripts/test_tflite_runtime.sh adds tflite-runtime)
if [ -z "${PYTHON:-}" ]; then
    PYTHON=$(command -v python3.11 || command -v python3)
fi
VENV=${VENV:-.venv}
EXTRAS=${EXTRAS:-test}
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
fi
stamp=$( (echo "$EXTRAS"; cat pyproject.toml setup.py delegate/_build_native.py delegate/_build_c_host.py csrc/*.c csrc/*.h) | sha256sum | cut -d' ' -f1)
if [ "$(cat "$VENV/.delegate-install" 2>/dev/null)" != "$stamp" ]; then
    echo "installing the package and its test dependencies into $VENV ..." >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e ".[$EXTRAS]" 2>"$VENV/install.log" \
        || { cat "$VENV/install.log" >&2; return 1 2>/dev/null || exit 1; }
    echo "$stamp" > "$VENV/.delegate-install"
fi
