"""PoCL's worker threads pinned one per CPU (``POCL_AFFINITY=1``), asked for before PoCL starts them.

On a CPU device a persistent kernel's work-groups, one per PoCL worker thread, wait for each other
in a loop at the end of every node (persistent.py). Left to the OS, two workers can share one core
for a whole process: each wait then lasts until the other worker gets the core back, and a process
runs the same model up to 1.9x slower than the next (MediaPipe's face landmark, 0.69-0.74 ms against
1.1-1.4 ms per process; pinned, 0.69-0.71 ms in every process: benchmarks/RESULTS.md, "PoCL's
workers pinned"). PoCL 3.0 pins worker ``i`` to CPU ``i`` when ``POCL_AFFINITY`` is set while it
starts its threads, which is when the OpenCL loader first lists the devices (``opencl.loader()``);
the variable is removed again after that, so child processes do not inherit it. The environment
is the process's: ``request`` and ``withdraw`` run once, in the loader's initialisation, under its
lock, so no two threads set and remove the variable at once.

The delegate sets it only where that placement is sound: the caller has not set
``POCL_AFFINITY`` (``POCL_AFFINITY=0`` keeps the OS's placement), the process may run on every
CPU (PoCL starts a worker per online CPU and pins by index, so under ``taskset`` or a cpuset the
pins would land outside the allowed set), and there are at least two CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass

#: PoCL's own setting (read by its pthread device when it starts its workers)
VARIABLE = "POCL_AFFINITY"


@dataclass(frozen=True)
class WorkerAffinity:
    """What the delegate asked of PoCL's worker placement, and why."""

    #: whether this process set ``POCL_AFFINITY=1``
    requested: bool
    reason: str

    def describe(self) -> str:
        return f"{'pinned one per CPU' if self.requested else 'left to the OS'}: {self.reason}"


def choose(environ: Mapping[str, str], allowed: frozenset[int] | None, cpus: int | None) -> WorkerAffinity:
    """The placement for a process with ``environ``, allowed to run on the CPUs ``allowed`` (None:
    unknown) of a machine with ``cpus`` online CPUs (None: unknown)."""
    if VARIABLE in environ:
        return WorkerAffinity(False, f"{VARIABLE}={environ[VARIABLE]!r} is set in the environment, PoCL reads that")
    if allowed is None or cpus is None:
        return WorkerAffinity(False, "this platform does not say which CPUs the process may run on")
    if cpus < 2:
        return WorkerAffinity(False, "one CPU")
    if allowed != frozenset(range(cpus)):
        return WorkerAffinity(
            False,
            f"the process may run on {len(allowed)} of {cpus} CPUs only (taskset, a cpuset); PoCL would "
            "pin its workers by index, outside that set",
        )
    return WorkerAffinity(
        True,
        f"{VARIABLE}=1 set by the delegate while PoCL started ({cpus} CPUs); {VARIABLE}=0 keeps the OS's placement",
    )


def _allowed_cpus() -> frozenset[int] | None:
    getter: Callable[[int], set[int]] | None = getattr(os, "sched_getaffinity", None)
    if getter is None:
        return None
    try:
        return frozenset(getter(0))
    except OSError:
        return None


def request(environ: MutableMapping[str, str] | None = None) -> WorkerAffinity:
    """Set ``POCL_AFFINITY=1`` in ``environ`` (the process's environment) where ``choose`` says so.
    Effective only before PoCL starts its workers: ``opencl.loader()`` calls it first, and
    ``withdraw`` once PoCL has started them."""
    env = os.environ if environ is None else environ
    choice = choose(env, _allowed_cpus(), os.cpu_count())
    if choice.requested:
        env[VARIABLE] = "1"
    return choice


def withdraw(choice: WorkerAffinity, environ: MutableMapping[str, str] | None = None) -> None:
    """Take back what ``request`` set, once PoCL has read it (its workers start while the loader lists
    the devices), so that processes started later inherit the environment the caller gave."""
    env = os.environ if environ is None else environ
    if choice.requested and env.get(VARIABLE) == "1":
        del env[VARIABLE]
