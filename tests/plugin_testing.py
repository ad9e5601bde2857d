"""Fault injection for tests: real device-side failures in a running delegate, and fake
collaborators for the plugin's Prepare (``inject``).

``break_launches`` makes every later launch of a delegate's compiled partitions fail in the
OpenCL driver itself (an enqueue with work dimension 0 is rejected with
CL_INVALID_WORK_DIMENSION), which is how a device or driver failure reaches the delegate.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from delegate.plugin import live_runtimes
from delegate.plugin.prepare import PreparePlan
from delegate.plugin.registry import REGISTRY


def break_launches() -> int:
    """Make every live partition's launches fail; the number of launches broken."""
    broken = 0
    for runtime in live_runtimes():
        plan = runtime.native_plan  # the plan the plugin's invoke runs
        for i in range(plan.launches_count):
            plan.launches[i].work_dim = 0
            broken += 1
    return broken


def replaced(plan: PreparePlan, **collaborators: Any) -> PreparePlan:
    """``plan`` with ``collaborators`` replaced; names: ``compile``, ``compile_options``,
    ``compiler_version`` (the loader's CompilerEntry), ``target`` (the device and its facts),
    ``capture`` and ``cpu_default`` (the PreparePlan's own)."""
    entry_fields = {"compile": "compile", "compile_options": "options", "compiler_version": "version"}
    entry = {entry_fields[k]: v for k, v in collaborators.items() if k in entry_fields}
    loader = {k: v for k, v in collaborators.items() if k == "target"}
    own = {k: v for k, v in collaborators.items() if k in ("capture", "cpu_default")}
    unknown = set(collaborators) - set(entry_fields) - set(loader) - set(own)
    assert not unknown, f"no such plugin collaborator: {sorted(unknown)}"
    compiler = dataclasses.replace(plan.loader.compiler, **entry)
    return dataclasses.replace(plan, loader=dataclasses.replace(plan.loader, compiler=compiler, **loader), **own)


def inject(monkeypatch: pytest.MonkeyPatch, **collaborators: Any) -> PreparePlan:
    """Delegates created until ``monkeypatch`` is undone follow the plugin's current plan with
    ``collaborators`` replaced (see ``replaced``). Returns that plan."""
    plan = replaced(REGISTRY.plan, **collaborators)
    monkeypatch.setattr(REGISTRY, "plan", plan)
    return plan
