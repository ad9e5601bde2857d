"""Programs built at once in helper processes (delegate/runtime/build_processes.py): the split, the
helpers' binaries taken over, a helper that fails or cannot start, a kernel that does not build,
a stopped build, and helpers that outlive no one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from delegate import cancel
from delegate.errors import CompileCancelled, ProgramBuildError
from delegate.runtime import build_processes, build_worker, driver, plan
from delegate.runtime.binding import set_kernel_args
from delegate.runtime.device import describe, select_device
from delegate.runtime.opencl import cl_api
from delegate.runtime.plan import persistent_runs
from delegate.runtime.programs import ProgramBuilder

from .helpers import shared_path

pytestmark = pytest.mark.opencl


def _kernel(step: float) -> str:
    # each source differs in its constant, so each is a program of its own
    return f"__kernel void add(__global float* x) {{ x[get_global_id(0)] += {step:.1f}f; }}"


def _builder(tmp_path: Path | None = None, processes: int = 2) -> ProgramBuilder:
    """A builder with ``processes``, as $DELEGATE_BUILD_PROCESSES asks (whatever the machine's load)."""
    device = select_device()
    builder = ProgramBuilder(driver.Context(device), describe(device), tmp_path)
    builder.processes, builder.load_aware = processes, False
    return builder


def _run(builder: ProgramBuilder, program: driver.Program) -> np.ndarray:
    """The result of program's kernel ``add`` on four zeros."""
    from delegate._native import ffi

    err = ffi.new("int32_t *")
    kernel = cl_api().create_kernel(program.handle, b"add", err)
    assert err[0] == 0
    data = np.zeros(4, np.float32)
    buffer = driver.buffer(builder.context, driver.CL_MEM_READ_WRITE, data.nbytes, host=data)
    set_kernel_args(kernel, [buffer], "add")
    queue = driver.Queue(builder.context, profiling=True)
    queue.timed_launch(kernel, (4,), (1,))
    queue.finish()
    out = np.empty(4, np.float32)
    api = cl_api()
    assert (
        api.enqueue_read_buffer(
            queue.handle, buffer.handle, 1, 0, out.nbytes, ffi.from_buffer(out), 0, ffi.NULL, ffi.NULL
        )
        == 0
    )
    api.release_kernel(kernel)
    return out


def _children() -> set[int]:
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        try:
            listed = (task / "children").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended after the listing; its children went to the process
        found |= {int(pid) for pid in listed.split()}
    return found


def test_the_split_is_balanced_ordered_and_a_function_of_the_kernels() -> None:
    costs = [50, 10, 40, 30, 20, 60]
    parts = build_processes.split(costs, 3)
    assert sorted(i for part in parts for i in part) == list(range(6))
    assert all(part == sorted(part) for part in parts)
    assert sorted(sum(costs[i] for i in part) for part in parts) == [70, 70, 70]
    assert build_processes.split(costs, 3) == parts
    assert build_processes.split([5], 4) == [[0]]  # no empty programs
    size = build_processes.PART_SOURCE
    assert build_processes.part_count(10 * size, 1) == 1  # one process: one program, as ever
    assert build_processes.part_count(size - 1, 16) == 1  # small contexts: one program
    assert build_processes.part_count(2 * size, 2) == build_processes.part_count(2 * size, 16) == 2
    assert build_processes.part_count(100 * size, 2) == build_processes.MAX_PARTS


def test_parts_come_in_rounds_of_one_per_process_each_within_the_bound() -> None:
    most, count = build_processes.PART_MOST, build_processes.part_count
    # two processes: two parts while each holds at most PART_MOST (every part is one more launch
    # per call of a persistent run), four past that, never three (one process would build two)
    assert count(most, 2) == count(2 * most, 2) == 2
    assert count(2 * most + 1, 2) == count(3 * most, 2) == count(40 * most, 2) == build_processes.MAX_PARTS
    assert count(3 * most, 3) == 3
    # as many processes as parts or more: MAX_PARTS as before, where the source gives that many
    assert count(2 * most, 4) == count(2 * most, 16) == build_processes.MAX_PARTS
    assert all(count(size, 2) in (1, 2, 4) for size in range(0, 9 * most, most // 7))


def test_persistent_runs_are_cut_into_segments_of_similar_source() -> None:
    eligible, preludes = [True] * 8, ["p"] * 8
    assert persistent_runs(eligible, preludes) == [range(0, 8)]
    runs = persistent_runs(eligible, preludes, [10] * 8, 2)
    assert runs == [range(0, 4), range(4, 8)]
    # cut where the source passes half of it, not half of the nodes
    assert persistent_runs(eligible, preludes, [100, 1, 1, 1, 1, 1, 1, 100], 2) == [range(0, 4), range(4, 8)]
    assert persistent_runs(eligible, preludes, [300, 1, 1, 1, 1, 1, 1, 100], 2) == [range(0, 2), range(2, 8)]
    # a node that cannot run inside stays a launch of its own; pieces keep two nodes or more
    runs = persistent_runs([True, True, False, True, True, True], ["p"] * 6, [1] * 6, 4)
    assert runs == [range(0, 2), range(2, 3), range(3, 6)]


def test_persistent_runs_hold_at_most_max_persistent_steps_nodes() -> None:
    most = plan.MAX_PERSISTENT_STEPS
    n = 2 * most + 1  # three even pieces, however small their source
    runs = persistent_runs([True] * n, ["p"] * n, [1] * n)
    assert runs == [range(n * i // 3, n * (i + 1) // 3) for i in range(3)]
    assert persistent_runs([True] * most, ["p"] * most) == [range(0, most)]
    # within segments cut by source too
    runs = persistent_runs([True] * (most + 4), ["p"] * (most + 4), [1000, 1000] + [1] * (most + 2), 2)
    assert max(len(run) for run in runs) <= most and sum(len(run) for run in runs) == most + 4


def test_helpers_build_programs_that_run_as_this_process_builds_them(tmp_path: Path) -> None:
    builder = _builder(tmp_path, processes=2)
    real_compile = builder._compile

    def slow_compile(*args: object, **kwargs: object) -> driver.Program:
        time.sleep(1.0)  # as long programs take: the helper has started before this one is built
        return real_compile(*args, **kwargs)  # type: ignore[arg-type]

    builder._compile = slow_compile  # type: ignore[method-assign]
    parts = [(_kernel(step), f"node {step}") for step in (1.0, 2.0, 3.0, 4.0)]
    programs = builder.build_parts(parts, "-cl-std=CL1.2")
    assert builder.stats.built_from_source == 4
    assert 1 <= builder.stats.built_in_helpers <= 3  # this process builds its share too
    for step, program in zip((1.0, 2.0, 3.0, 4.0), programs, strict=True):
        assert isinstance(program, driver.Program)
        np.testing.assert_array_equal(_run(builder, program), np.full(4, step, np.float32))
    again = _builder(tmp_path, processes=2)  # the helpers' binaries went to the cache as well
    again.build_parts(parts, "-cl-std=CL1.2")
    assert again.stats.loaded_from_cache == 4 and again.stats.built_from_source == 0
    assert not _children()  # helpers end with the build


def test_no_helper_starts_where_no_core_is_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_processes, "_running_threads", lambda: 65)  # this one and 64 others
    assert build_processes.idle_cores() == 1
    builder = _builder(processes=2)
    builder.load_aware = True  # the default, where $DELEGATE_BUILD_PROCESSES is not set
    spawned = []
    monkeypatch.setattr(build_processes.Helper, "spawn", classmethod(lambda cls: spawned.append(1)))
    builder.build_parts([(_kernel(step), f"node {step}") for step in (11.0, 12.0)], "")
    assert not spawned and builder.stats.built_from_source == 2
    monkeypatch.setattr(build_processes, "_running_threads", lambda: 1)  # only the one looking
    assert build_processes.idle_cores() == len(os.sched_getaffinity(0))
    assert build_processes._running_threads() is not None  # the real count is readable here


def test_a_helper_that_cannot_start_or_dies_leaves_its_programs_here(monkeypatch: pytest.MonkeyPatch) -> None:
    for executable in ("/nonexistent/python3", "/bin/true"):  # no process at all; one that exits at once
        monkeypatch.setattr(build_processes, "_python", lambda e=executable: e)
        builder = _builder(processes=3)
        parts = [(_kernel(step), f"node {step}") for step in (5.0, 6.0, 7.0)]
        programs = builder.build_parts(parts, "")
        assert builder.stats.built_in_helpers == 0 and builder.stats.built_from_source == 3
        assert [float(_run(builder, p)[0]) for p in programs] == [5.0, 6.0, 7.0]


def test_a_kernel_that_does_not_build_is_reported_by_its_part() -> None:
    builder = _builder(processes=2)
    bad = "__kernel void add(__global float* x) { x[get_global_id(0)] += undefined_name; }"
    parts = [(_kernel(8.0), "good"), (bad, "bad node"), (_kernel(9.0), "also good")]
    programs = builder.build_parts(parts, "")
    assert isinstance(programs[1], ProgramBuildError) and "bad node" in str(programs[1])
    assert isinstance(programs[0], driver.Program) and isinstance(programs[2], driver.Program)


def test_a_cancelled_build_stops_its_helpers() -> None:
    builder = _builder(processes=2)
    token = cancel.Token()
    parts = [(_kernel(10.0 + i), f"node {i}") for i in range(4)]
    real_compile = builder._compile

    def compile_then_cancel(*args: object, **kwargs: object) -> driver.Program:
        program = real_compile(*args, **kwargs)  # type: ignore[arg-type]
        token.cancel()  # the interpreter was dropped while this process built its first program
        return program

    builder._compile = compile_then_cancel  # type: ignore[method-assign]
    with cancel.running(token), pytest.raises(CompileCancelled):
        builder.build_parts(parts, "")
    assert not _children()


def test_the_helper_answers_for_its_device_only() -> None:
    helper = subprocess.run(
        [sys.executable, "-m", "delegate.runtime.build_worker"],
        input=json.dumps({"device": "no such device"}).encode() + b"\n",
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert helper.returncode == 1
    assert "no device with program key" in json.loads(helper.stdout.splitlines()[0])["error"]


def test_a_helper_outlives_its_requester_by_a_moment_only() -> None:
    script = (
        "import os, sys\n"
        "from delegate.runtime import build_processes\n"
        "from delegate.runtime.device import describe, select_device\n"
        "helper = build_processes.Helper.spawn()\n"
        "assert helper.ready(describe(select_device()).key)\n"
        "print(helper._process.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120, check=True)
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + build_worker.WATCH_S + 2.0
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the helper kept running after its requester was gone"


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (an exited one may stay a zombie until init reaps it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except (OSError, IndexError):
        return False


def test_a_split_model_answers_as_one_program(tmp_path: Path) -> None:
    """MobileNetV2, compiled cold in fresh processes with helpers (its persistent kernel in
    segments) and without: the same outputs."""
    model = shared_path("models", "mobilenet_v2.tflite")
    child = (
        "import json, sys\n"
        "import numpy as np, delegate\n"
        "from delegate.runtime import build_processes\n"
        "made = []\n"
        "real = build_processes.build_in_processes\n"
        "def counted(*args):\n"
        "    binaries = real(*args)\n"
        "    made.extend(binaries)\n"
        "    return binaries\n"
        "build_processes.build_in_processes = counted\n"
        "it = delegate.Interpreter(sys.argv[1], cpu_when_faster='false', background_compile='off')\n"
        "it.allocate_tensors()\n"
        "d = it.get_input_details()[0]\n"
        "it.set_tensor(d['index'], np.random.default_rng(0).random(d['shape'], dtype=np.float32))\n"
        "it.invoke()\n"
        "out = it.get_tensor(it.get_output_details()[0]['index'])\n"
        "print(json.dumps({'out': out.ravel().tolist(), 'helpers_built': len(made)}))\n"
    )
    outputs, helpers_built = {}, {}
    for processes in ("1", "2"):
        env = dict(os.environ, DELEGATE_BUILD_PROCESSES=processes, XDG_CACHE_HOME=str(tmp_path / processes))
        env["POCL_CACHE_DIR"] = str(tmp_path / f"pocl{processes}")
        os.makedirs(env["POCL_CACHE_DIR"])
        done = subprocess.run(
            [sys.executable, "-c", child, str(model)], capture_output=True, timeout=600, check=True, env=env
        )
        found = json.loads(done.stdout.splitlines()[-1])
        outputs[processes], helpers_built[processes] = np.array(found["out"]), found["helpers_built"]
    # 5 programs (its persistent kernel's 4 segments and the conversions), taken in turn: the loading
    # process takes the costliest first, the helper some of the others (how many depends on timing)
    assert helpers_built["1"] == 0 and 1 <= helpers_built["2"] <= 4, helpers_built
    np.testing.assert_allclose(outputs["2"], outputs["1"], rtol=0, atol=1e-5)
