"""Test configuration: hypothesis runs derandomized (reproducible) under CI; small partitions are
delegated unless a test is marked ``cpu_choice_default``."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
from hypothesis import settings

# The suite tests the delegate: no invokes on TFLite's CPU kernels while it compiles (background
# compile has its own tests, tests/test_warm_start.py, which ask for it by name).
os.environ.setdefault("DELEGATE_BACKGROUND_COMPILE", "off")

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(autouse=True)
def _small_partitions_delegated(request: pytest.FixtureRequest) -> Iterator[None]:
    """Most tests check kernels on models of a few small nodes, which the rule cpu_when_faster
    (compiler/cpu_choice.py) leaves on TFLite's CPU kernels by default on PoCL: in this process its
    default (auto) is off, as on a GPU, unless the test is marked ``cpu_choice_default``; an
    explicit true or false is kept. Subprocesses run the real default."""
    if request.node.get_closest_marker("cpu_choice_default") is not None:
        yield
        return
    from tests.plugin_testing import inject

    with pytest.MonkeyPatch.context() as patch:  # its own: a test's monkeypatch.undo() keeps it
        inject(patch, cpu_default=lambda device, requested: bool(requested))
        yield


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Holds background builds (``warm_start.build_gate``) until ``gate.set()``; released at the
    end in any case."""
    from delegate import warm_start

    event = threading.Event()
    monkeypatch.setattr(warm_start, "build_gate", event)
    yield event
    event.set()
