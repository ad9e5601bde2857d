# Sourced by the other scripts: creates .venv with Python 3.11 (or $PYTHON) and installs the
# package in editable mode with its test extras. Re-running only re-checks the install.
if [ -z "${PYTHON:-}" ]; then
    PYTHON=$(command -v python3.11 || command -v python3)
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
