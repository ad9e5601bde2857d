"""The mini-benchmark: which acceleration settings are fastest on this machine while still correct."""

from .runner import MinibenchmarkReport, run_minibenchmark
from .storage import append_event, decision_path, read_decision, read_events, write_decision

__all__ = [
    "MinibenchmarkReport",
    "append_event",
    "decision_path",
    "read_decision",
    "read_events",
    "run_minibenchmark",
    "write_decision",
]
