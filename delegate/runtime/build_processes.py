"""Building a context's programs in several processes, where the driver compiles one at a time.

PoCL compiles under one lock per process: on 2 cores, 8 programs took 3.6 s in one thread, 3.1 s
in two threads of one process and 2.0 s in two processes. On such a platform
(``Platform.builds_in_processes``) the kernels that would make one program are split into a few
programs of similar size (``part_count``, ``split``; runtime/plan.py cuts a persistent kernel's
run of nodes into segments likewise), and the programs missing
from the caches build at once: in this process, and in helper processes
(``python -m delegate.runtime.build_worker``) that build from source on the same device and send
the binary back, which this process loads in milliseconds. A helper that cannot start, finds no
such device, fails a program or dies leaves its programs to this process, which builds them from
source (and reports a kernel's error by node). Helpers exit at the end of their input, when this
process is gone, or are killed when the build stops (Ctrl-C, a cancelled background build).

``$DELEGATE_BUILD_PROCESSES``: the most processes building at once (default: the device's compute
units, at most the cores this process may use, and helpers only on cores nothing else runs on);
1 builds every program here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import cancel
from . import build_worker
from .device import DeviceInfo

ENV = "DELEGATE_BUILD_PROCESSES"
#: where several processes build, the kernels that would make one program (a persistent kernel's
#: run of nodes, or the node kernels of one prelude) are split into a program per this much
#: source, at most MAX_PARTS: each program has a fixed cost (PoCL: about 0.09 s to build, 0.05 s
#: to load on a warm start), which smaller parts would pay more often than the processes save
#: (MobileNetV2's 1.1 MB, 2 cores: cold 9.1 s in one program, 5.8 s in 4, 6.4 s in 8)
PART_SOURCE = 128 << 10
MAX_PARTS = 4
#: and no more parts than the processes building need to keep each part within this much source
#: (runtime/plan.MAX_PERSISTENT_PROGRAM's bound), in whole rounds of one part per process: every
#: part past the first of a persistent run is one more launch per call, whose start wakes PoCL's
#: sleeping workers (2 cores: 4 segments ran 1-7% slower than 2 on models of 0.4-2 ms, whose cold
#: builds took as long in 2 parts; 3 parts of a 2.7 MB context on 2 processes built 20% slower
#: than 4, one process building two of them)
PART_MOST = 1 << 20
#: looks at the running threads, and the time between them (``idle_cores``)
_LOOKS = 5
_LOOK_GAP_S = 0.005
#: how long the build's end waits for a thread that served a (stopped) helper
_JOIN_S = 5.0
#: the package's folder's parent: helpers import this very package, wherever it was found
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def configured() -> int | None:
    """``$DELEGATE_BUILD_PROCESSES`` (at least 1; an unreadable value counts as 1), None where unset."""
    value = os.environ.get(ENV, "").strip()
    if not value:
        return None
    try:
        return max(1, int(value))
    except ValueError:
        return 1


def process_count(info: DeviceInfo) -> int:
    """How many processes may build at once for a device described by ``info`` (see the module
    docstring); 1 where the platform builds as fast in one, or this Python cannot start helpers."""
    asked = configured()
    if asked is not None:
        return asked
    if not info.platform_rules.builds_in_processes or not _python():
        return 1
    return max(1, min(info.compute_units, len(os.sched_getaffinity(0))))


def idle_cores() -> int:
    """Cores that nothing else runs on now (at least 1: this process's): on a busy machine helpers
    would only take turns with this process, for nothing. Counted from the threads the kernel has
    running at this moment (the median of a few looks, this one's own left out), not from the load
    average, which a build that ended seconds ago still holds up for a minute."""
    usable = len(os.sched_getaffinity(0))
    looks = []
    for _ in range(_LOOKS):
        running = _running_threads()
        if running is None:
            return usable
        looks.append(running - 1)
        time.sleep(_LOOK_GAP_S)
    return max(1, usable - sorted(looks)[len(looks) // 2])


def _running_threads() -> int | None:
    """Threads running or ready to run on the machine now (/proc/loadavg), None where unknown."""
    try:
        return int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


def _python() -> str:
    """This Python's executable, or "" where the process is not a Python one (a host program that
    embeds Python to load the plugin: its executable would start the host)."""
    executable = sys.executable or ""
    return executable if Path(executable).name.startswith("python") else ""


def part_count(source: int, processes: int) -> int:
    """Programs that kernels of ``source`` bytes, which would make one, are built as where
    ``processes`` may build at once: a function of the kernels and the number of processes (on
    one machine, its cores), so a later start there asks for the same programs."""
    if processes < 2:
        return 1
    rounds = -(-source // (processes * PART_MOST))  # parts per process keeping each within PART_MOST
    return max(1, min(MAX_PARTS, source // PART_SOURCE, processes * rounds))


def split(costs: Sequence[int], parts: int) -> list[list[int]]:
    """Indices of ``costs`` in ``parts`` groups of similar total cost (costliest first, each to the
    lightest group), each group in index order; empty groups left out."""
    groups: list[list[int]] = [[] for _ in range(parts)]
    totals = [0] * parts
    for index in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        lightest = min(range(parts), key=lambda g: (totals[g], g))
        groups[lightest].append(index)
        totals[lightest] += costs[index]
    return [sorted(group) for group in groups if group]


class Helper:
    """One helper process (build_worker.py) building programs for one device."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process

    @classmethod
    def spawn(cls) -> Helper | None:
        """A helper process started (``ready`` tells whether it can build); None where it cannot start."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        try:
            process = subprocess.Popen(
                [_python() or sys.executable, "-m", "delegate.runtime.build_worker"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        except OSError:
            return None
        return cls(process)

    def ready(self, device_key: str) -> bool:
        """Whether the helper opened the device of ``device_key`` (else it has ended)."""
        reply = self._exchange({"device": device_key})
        if reply is None or not reply[0].get("ready"):
            self.stop()
            return False
        return True

    def build(self, source: str, options: str) -> bytes | None:
        """The binary of ``source`` built with ``options``; None where the helper failed."""
        reply = self._exchange({"options": options, "size": len(source.encode())}, source.encode())
        return reply[1] if reply is not None and "size" in reply[0] else None

    def _exchange(self, header: dict[str, object], payload: bytes = b"") -> tuple[dict, bytes] | None:
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(build_worker.message(header, payload))
            stdin.flush()
            reply = json.loads(stdout.readline() or b"null")
            if not isinstance(reply, dict):
                return None
            size = int(reply.get("size", 0))
            data = stdout.read(size) if size else b""
        except (OSError, ValueError):
            return None
        return (reply, data) if len(data) == size else None

    def stop(self) -> None:
        """End the helper now (its build, if any, is not waited for)."""
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        for stream in (self._process.stdin, self._process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass


def build_in_processes(
    pending: Sequence[int],
    sources: Sequence[str],
    options: str,
    device_key: str,
    helpers: int,
    build_here: Callable[[int], None],
) -> dict[int, bytes]:
    """Builds the programs ``pending`` (indices into ``sources``, costliest first): ``build_here``
    each one this thread takes, up to ``helpers`` helper processes the others, each taking the next
    program none has started. Returns the binaries the helpers made; a program a helper failed is
    not in it (the caller builds it)."""
    queue = deque(pending)
    lock = threading.Lock()
    binaries: dict[int, bytes] = {}
    started: list[Helper] = []
    stopping = threading.Event()

    def take() -> int | None:
        with lock:
            return queue.popleft() if queue and not stopping.is_set() else None

    def serve(done: threading.Event) -> None:
        try:
            helper = Helper.spawn()
            if helper is None:
                return
            with lock:
                started.append(helper)  # from now on the build's end stops it, whatever it is doing
                if stopping.is_set():
                    return
            if not helper.ready(device_key):
                return
            while (index := take()) is not None:
                binary = helper.build(sources[index], options)
                if binary is None:
                    return  # this program (and any other) is left to the caller
                with lock:
                    binaries[index] = binary
        finally:
            done.set()

    # The threads are waited for through events, not Thread.join: a Ctrl-C that lands inside
    # CPython's join (3.11) can release the thread's own lock, and a later join then raises
    # "release unlocked lock" in place of the KeyboardInterrupt.
    finished = [threading.Event() for _ in range(helpers)]
    threads = [
        threading.Thread(target=serve, args=(done,), daemon=True, name="delegate-build-helper") for done in finished
    ]
    try:
        for thread in threads:
            thread.start()
        while (index := take()) is not None:
            build_here(index)
        for done in finished:
            while not done.wait(0.05):
                cancel.checkpoint()
    finally:
        with lock:
            stopping.set()
            helpers_started = list(started)
        for helper in helpers_started:
            helper.stop()
        for thread, done in zip(threads, finished, strict=True):
            if thread.ident is not None:  # started: it ends at once, its helper's pipes closed
                done.wait(_JOIN_S)
    with lock:
        return dict(binaries)
