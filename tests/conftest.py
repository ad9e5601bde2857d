"""Test configuration: hypothesis runs derandomized (reproducible) under CI."""

from __future__ import annotations

import os

from hypothesis import settings

# The suite tests the delegate: no invokes on TFLite's CPU kernels while it compiles (background
# compile has its own tests, tests/test_warm_start.py, which ask for it by name).
os.environ.setdefault("DELEGATE_BACKGROUND_COMPILE", "off")

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
