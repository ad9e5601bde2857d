"""PoCL's worker threads pinned one per CPU (delegate/runtime/platforms/pocl_affinity.py): asked for only where
the process may run on every CPU and the caller has not said otherwise, done before PoCL starts
its workers, and reported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import delegate
from delegate.compiler.graph import Builtin
from delegate.model_run import format_result, run_model
from delegate.runtime.device import describe, select_device
from delegate.runtime.opencl import loader
from delegate.runtime.platforms import pocl_affinity
from delegate.runtime.platforms.pocl_affinity import VARIABLE, choose, request

from .tflite_builder import Op, T, build_model

ROOT = Path(__file__).resolve().parent.parent


def test_the_callers_setting_is_left_as_it_is() -> None:
    for value in ("0", "1", ""):
        env = {VARIABLE: value}
        choice = choose(env, frozenset({0, 1}), 2)
        assert not choice.requested and env == {VARIABLE: value}
        assert "set in the environment" in choice.reason


def test_pinned_only_where_the_process_may_run_on_every_cpu() -> None:
    assert choose({}, frozenset(range(8)), 8).requested
    restricted = choose({}, frozenset({1}), 2)  # taskset -c 1: PoCL would pin a worker to CPU 0
    assert not restricted.requested and "1 of 2 CPUs" in restricted.reason
    assert not choose({}, frozenset({0, 1, 2}), 4).requested  # a prefix: PoCL still starts 4 workers
    assert not choose({}, frozenset({0}), 1).requested  # one CPU: nothing to place
    assert not choose({}, None, 4).requested and not choose({}, frozenset({0, 1}), None).requested


def test_request_writes_the_variable_only_when_it_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pocl_affinity, "_allowed_cpus", lambda: frozenset({0, 1, 2, 3}))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    env: dict[str, str] = {}
    assert request(env).requested and env == {VARIABLE: "1"}
    monkeypatch.setattr(pocl_affinity, "_allowed_cpus", lambda: frozenset({2, 3}))
    env = {}
    assert not request(env).requested and env == {}


def test_withdraw_removes_only_what_request_set() -> None:
    asked = choose({}, frozenset({0, 1}), 2)
    env = {VARIABLE: "1"}
    pocl_affinity.withdraw(asked, env)
    assert env == {}
    callers = {VARIABLE: "1"}
    pocl_affinity.withdraw(choose(callers, frozenset({0, 1}), 2), callers)  # the caller's own: kept
    assert callers == {VARIABLE: "1"}


# In a fresh process (PoCL starts its workers once per process): the decision, the report, and the
# CPUs each thread of the process may run on afterwards.
_PROBE = """
import json, os, sys
from pathlib import Path
from delegate.runtime.device import describe, select_device
info = describe(select_device())
threads = []
for task in Path("/proc/self/task").iterdir():
    for line in (task / "status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            threads.append(line.split(":", 1)[1].strip())
print(json.dumps({"affinity": info.worker_affinity, "compiler_cpu": info.compiler_cpu,
                  "variable": os.environ.get("POCL_AFFINITY"), "threads": threads,
                  "allowed": sorted(os.sched_getaffinity(0)), "cpus": os.cpu_count()}))
"""


def _probe(env_value: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != VARIABLE}
    if env_value is not None:
        env[VARIABLE] = env_value
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pinned(found: dict) -> list[int]:
    """The CPUs of the threads pinned to a single CPU (none where the process may use only one)."""
    if len(found["allowed"]) < 2:
        return []
    return sorted(int(t) for t in found["threads"] if t.isdigit())


@pytest.mark.opencl
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task (Linux)")
def test_pocl_workers_run_where_the_delegate_asked() -> None:
    found = _probe(None)
    if not found["compiler_cpu"]:
        pytest.skip("the default device is not PoCL's CPU device")
    if found["allowed"] == list(range(found["cpus"])) and found["cpus"] >= 2:
        # pinned, and the variable withdrawn once PoCL read it: child processes get the caller's environment
        assert found["variable"] is None and found["affinity"].startswith("pinned one per CPU"), found
        assert _pinned(found) == list(range(found["cpus"])), found  # a worker on each CPU, nothing else pinned
    else:
        assert found["variable"] is None and found["affinity"].startswith("left to the OS"), found
        assert _pinned(found) == [], found
    kept = _probe("0")  # the caller's word: PoCL's workers stay where the OS puts them
    assert kept["variable"] == "0" and kept["affinity"].startswith("left to the OS"), kept
    assert _pinned(kept) == [], kept


@pytest.mark.opencl
def test_the_interpreter_and_the_run_report_say_where_the_workers_run(tmp_path: Path) -> None:
    info = describe(select_device())
    if not info.compiler_cpu:
        pytest.skip("the default device is not PoCL's CPU device")
    model = tmp_path / "adds.tflite"
    model.write_bytes(build_model([T((1, 8, 8, 4)), T((1, 8, 8, 4))], [Op(Builtin.ADD, [0, 0], [1])], [0], [1]))
    interpreter = delegate.Interpreter(str(model), background_compile="off", cpu_when_faster="false")
    start = loader().device_start(select_device().handle)
    assert interpreter.opencl.worker_affinity == info.worker_affinity == start.worker_placement
    report = run_model(str(model), {"cpu_when_faster": "false"}, 1, progress=False)
    assert report["worker_affinity"] == info.worker_affinity
    assert f"PoCL's worker threads: {info.worker_affinity}" in format_result(report)
