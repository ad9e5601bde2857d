"""The benchmarks' pytest setup: the package's plugin, and the checkout importable.

The plugin (delegate/pytest_plugin.py) comes with an installed package through its ``pytest11``
entry point; a checkout on PYTHONPATH has no entry point, so it is loaded here (a no-op when the
entry point loaded it). The checkout's root goes on sys.path (last) for ``tests``, whose model
corpus the benchmarks share.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The benchmarks measure the delegate itself, never TFLite's CPU kernels standing in while it compiles.
os.environ.setdefault("DELEGATE_BACKGROUND_COMPILE", "off")

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.append(ROOT)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.import_plugin("delegate.pytest_plugin")
