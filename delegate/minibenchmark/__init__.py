"""The mini-benchmark: which acceleration settings are fastest on this machine while still correct."""

from .runner import MinibenchmarkReport, default_settings_to_test, run_minibenchmark
from .storage import append_event, decision_path, read_decision, read_events, write_decision

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
