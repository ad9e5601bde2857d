"""Kills cache writers at random moments and checks what they leave behind.

Run as ``python -m tests.crash_driver MODE ENTRY A B KILLS SEED`` (tests/test_crash_safety.py does):
a fresh process with no OpenCL loaded, so that forked children hold no driver threads. Each
round forks a child that rewrites one cache entry in a loop, alternating version A and B, the
way the delegate writes it (MODE ``context``: the plugin's serialization cache, A and B are
InferenceContext files; MODE ``program``: ProgramBuilder's binary cache, A and B are program
binaries), and SIGKILLs it after a random delay. After every kill it checks that the entry is
byte-for-byte the complete A or the complete B, that the next start's cleanup removes every
temporary file the kill left, and prints the counts as JSON.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from delegate._atomic import remove_stale_temps
from delegate._integrity import entry_key, seal


class _Binary:
    """Stands in for a built ``driver.Program``: ``_store`` only asks it for its binary."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def binary(self) -> bytes:
        return self.data


def _context_writer(path: Path, a: bytes, b: bytes) -> tuple[Callable[[int], None], list[bytes]]:
    from delegate.cache import write_cache_entry
    from delegate.context import ContextFile, serialize_context

    models = []
    for raw in (a, b):
        with ContextFile(raw) as f:
            models.append(f.to_model())
    key = entry_key(path.read_bytes()) if path.exists() else {}  # what the delegate sealed it for
    expected = [seal(serialize_context(m), key) for m in models]
    return lambda i: write_cache_entry(models[i % 2], path, key), expected


def _program_writer(path: Path, a: bytes, b: bytes) -> tuple[Callable[[int], None], list[bytes]]:
    from delegate.cache import entry_seal
    from delegate.runtime.device import DeviceInfo
    from delegate.runtime.programs import ProgramBuilder

    info = DeviceInfo("p", "d", "v", "1", "OpenCL 3.0", False, False, False, False, 1, (1, 1, 1), 1, 1, 1, 4,
                      (0, 0), (0, 0, 0), 0, 0)  # fmt: skip
    key = path.stem
    programs = [_Binary(a), _Binary(b)]
    builder = ProgramBuilder(None, info, path.parent)  # type: ignore[arg-type]

    def write(i: int) -> None:
        builder._store(key, programs[i % 2])  # type: ignore[arg-type]

    return write, [seal(a, entry_seal("program", key)), seal(b, entry_seal("program", key))]


def _temps(path: Path) -> list[str]:
    return [p.name for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]


def main(argv: list[str]) -> int:
    mode, entry, a_path, b_path, kills_arg, seed_arg = argv
    path = Path(entry)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    a, b = Path(a_path).read_bytes(), Path(b_path).read_bytes()
    make = _context_writer if mode == "context" else _program_writer
    write, expected = make(path, a, b)
    assert expected[0] != expected[1], "A and B must differ for the byte comparison to mean something"
    write(0)
    start = time.perf_counter()
    for i in range(1, 9):
        write(i)
    one_write = (time.perf_counter() - start) / 8
    rng = random.Random(int(seed_arg))
    stats = {"kills": 0, "a": 0, "b": 0, "bad": [], "kills_leaving_temps": 0, "temps_removed": 0, "leftover": []}
    stats["write_ms"] = one_write * 1e3
    for k in range(int(kills_arg)):
        pid = os.fork()
        if pid == 0:  # the writer: rewrite the entry until killed
            try:
                i = rng.randrange(2)
                while True:
                    write(i)
                    i += 1
            finally:
                os._exit(3)
        time.sleep(rng.uniform(0.0, 3.0 * one_write + 0.002))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status), f"the writer exited on its own (status {status}): it failed"
        stats["kills"] += 1
        data = path.read_bytes()
        if data == expected[0]:
            stats["a"] += 1
        elif data == expected[1]:
            stats["b"] += 1
        else:
            stats["bad"].append({"kill": k, "size": len(data)})
        stats["kills_leaving_temps"] += bool(_temps(path))
        # The next start (plugin Prepare, ProgramBuilder) begins with this cleanup.
        stats["temps_removed"] += remove_stale_temps(folder)
        stats["leftover"].extend(_temps(path))
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
