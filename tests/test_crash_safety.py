"""Crash safety of the caches: writers SIGKILLed at random moments, hundreds of times.

tests/crash_driver.py does the killing in a fresh process; here we check its counts and then
that the next start uses what the kills left: the plugin's serialization cache (a hit) and the
program-binary cache (a binary loaded, no build).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import delegate
from delegate._atomic import remove_stale_temps
from delegate.context import ContextFile, serialize_context

from .helpers import shared_path

ROOT = Path(__file__).resolve().parent.parent
KILLS = int(os.environ.get("DELEGATE_KILLS", "300"))


def _kill_writers(mode: str, entry: Path, a: bytes, b: bytes, tmp_path: Path, seed: int) -> dict:
    (tmp_path / "a").write_bytes(a)
    (tmp_path / "b").write_bytes(b)
    args = [mode, str(entry), str(tmp_path / "a"), str(tmp_path / "b"), str(KILLS), str(seed)]
    result = subprocess.run(
        [sys.executable, "-m", "tests.crash_driver", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    print(f"{mode}: {stats}")  # the figures of tests/RELIABILITY.md (pytest -rP shows them)
    assert stats["kills"] == KILLS
    assert stats["bad"] == [], f"entries torn by a kill: {stats['bad'][:5]}"
    assert stats["a"] + stats["b"] == KILLS
    # Both versions were there after some kill, and some kills landed inside a write (they left a
    # temporary file): the test exercised what it claims to.
    assert stats["a"] > 0 and stats["b"] > 0, stats
    assert stats["kills_leaving_temps"] > 0, stats
    assert stats["temps_removed"] >= stats["kills_leaving_temps"]
    assert stats["leftover"] == []
    return stats


def _feed(interpreter) -> None:
    d = interpreter.get_input_details()[0]
    interpreter.set_tensor(d["index"], np.random.default_rng(0).random(tuple(d["shape"]), dtype=np.float32))


@pytest.mark.opencl
def test_killed_serialization_cache_writer_leaves_old_or_new_and_the_next_start_hits(tmp_path):
    model = str(shared_path("models", "small_cnn.tflite"))
    folder = tmp_path / "cache"
    options = {"serialization_dir": str(folder), "model_token": "small_cnn", "program_cache": "none"}
    cold = delegate.Interpreter(model, **options)
    cold.allocate_tensors()
    _feed(cold)
    cold.invoke()
    expected = cold.get_tensor(cold.get_output_details()[0]["index"])
    (entry,) = folder.glob("*.ctx")
    (record,) = folder.glob("*.json")  # the partition's cpu_when_faster decision (plugin/choice_record.py)
    with ContextFile.open(entry) as f:
        version = f.to_model()
    a = serialize_context(version)
    for node in version.nodes:
        node.name = f"{node.name} (v2)"  # a second complete, valid version of the same entry
    b = serialize_context(version)
    stats = _kill_writers("context", entry, a, b, tmp_path, seed=1)
    # What the last kill left, plus a stray temporary file of a writer that died long ago.
    stray = folder / f".{entry.name}.999999999.abc.tmp"
    stray.write_bytes(b"partial")
    os.utime(stray, (time.time() - 7200, time.time() - 7200))
    warm = delegate.Interpreter(model, **options)
    warm.allocate_tensors()
    _feed(warm)
    warm.invoke()
    assert [p.cache for p in warm.opencl.partitions] == ["hit"], stats
    np.testing.assert_array_equal(warm.get_tensor(warm.get_output_details()[0]["index"]), expected)
    assert sorted(p.name for p in folder.iterdir()) == sorted([entry.name, record.name, "programs"])


@pytest.mark.opencl
def test_killed_program_cache_writer_leaves_old_or_new_and_the_next_start_loads(tmp_path):
    import pyopencl as cl

    from delegate.runtime import driver
    from delegate.runtime.device import describe, select_device
    from delegate.runtime.programs import ProgramBuilder

    device = select_device()
    context = driver.Context(device)
    source = "__kernel void main_function(__global float* x) { x[get_global_id(0)] *= 2.0f; }"
    other = source + "\n__kernel void spare(__global float* x) { x[0] = 1.0f; }"
    builder = ProgramBuilder(context, describe(device), None)
    a, b = (builder.build(s, "", "n").binary() for s in (source, other))
    folder = tmp_path / "programs"
    key = builder._key(source, "")
    _kill_writers("program", folder / f"{key}.bin", a, b, tmp_path, seed=2)
    stray = folder / f".{key}.bin.999999999.abc.tmp"
    stray.write_bytes(b"partial")
    fresh = ProgramBuilder(context, describe(device), folder)
    assert sorted(p.name for p in folder.iterdir()) == [f"{key}.bin"]
    program = fresh.build(source, "", "n")
    assert fresh.stats.loaded_from_cache == 1 and fresh.stats.built_from_source == 0
    # Run the loaded program through pyopencl (over the same handles): an independent launcher.
    cl_context = cl.Context.from_int_ptr(context.int_ptr, retain=True)
    queue = cl.CommandQueue(cl_context)
    x = np.arange(8, dtype=np.float32)
    buf = cl.Buffer(cl_context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    kernel = cl.Kernel(cl.Program.from_int_ptr(program.int_ptr, retain=True), "main_function")
    kernel(queue, (8,), None, buf)  # pyopencl's call binds args and enqueues
    out = np.empty_like(x)
    cl.enqueue_copy(queue, out, buf)
    np.testing.assert_array_equal(out, x * 2)
    for held in (builder, fresh, context):
        held.release()


def test_stale_temps_of_live_writers_are_kept(tmp_path):
    mine = tmp_path / f".entry.ctx.{os.getpid()}.x1.tmp"  # this process is alive: a write in progress
    dead = tmp_path / ".entry.ctx.999999999.x2.tmp"
    old = tmp_path / f".entry.ctx.{os.getpid()}.x3.tmp"
    other = tmp_path / "notes.tmp"  # not ours: never touched
    for p in (mine, dead, old, other):
        p.write_bytes(b"x")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    assert remove_stale_temps(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name])
