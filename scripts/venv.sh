# Sourced by the other scripts: creates .venv with Python 3.11 (or $PYTHON) and installs the
# package in editable mode with its test extras. The install (which also builds the C extension)
# is redone only when the packaging files or the C sources change.
if [ -z "${PYTHON:-}" ]; then
    PYTHON=$(command -v python3.11 || command -v python3)
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
fi
stamp=$(cat pyproject.toml setup.py delegate/_build_native.py csrc/*.c csrc/*.h | sha256sum | cut -d' ' -f1)
if [ "$(cat .venv/.delegate-install 2>/dev/null)" != "$stamp" ]; then
    echo "installing the package and its test dependencies into .venv ..." >&2
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]' 2>.venv/install.log \
        || { cat .venv/install.log >&2; return 1 2>/dev/null || exit 1; }
    echo "$stamp" > .venv/.delegate-install
fi
