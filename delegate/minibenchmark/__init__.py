"""The mini-benchmark: which acceleration settings are fastest on this machine while still correct."""

from ..settings.decisions import append_event, decision_path, read_decision, read_events, write_decision
from .runner import MinibenchmarkReport, default_settings_to_test, run_minibenchmark

__all__ = [
    "MinibenchmarkReport",
    "append_event",
    "decision_path",
    "default_settings_to_test",
    "read_decision",
    "read_events",
    "run_minibenchmark",
    "write_decision",
]
