"""Device specifics behind one interface (delegate/runtime/platforms/): each OpenCL platform's rules
are answered by its Platform, chosen by the platform's name, and the core runtime asks it instead
of testing for a driver by name."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from delegate import calibration, write_context
from delegate.cache import default_program_dir
from delegate.calibration import POCL_CPU
from delegate.runtime import opencl
from delegate.runtime.device import DeviceInfo
from delegate.runtime.platforms import (
    PLATFORMS,
    DeviceStart,
    GenericPlatform,
    PoclPlatform,
    for_name,
    pocl_affinity,
    pocl_cache,
)
from delegate.runtime.platforms.pocl import SPECIALIZATION, WORK_GROUP_METHOD
from delegate.runtime.runtime import _cache_folder

from .runtime_helpers import chain
from .test_pocl_cpu import POCL, FakeDevice, needs_x86_64

RUNTIME = Path(__file__).resolve().parent.parent / "delegate" / "runtime"
#: a CPU device of a platform that is not PoCL's, and the same device as PoCL's
OTHER_CPU = DeviceInfo("Some CPU Runtime", "cpu", "v", "1", "OpenCL 3.0", False, False, False, False, 1024,
                       (1024, 1024, 1024), 1 << 30, 4 << 30, 1 << 16, 128, (0, 0), (0, 0, 0), 0, 0)  # fmt: skip
POCL_CPU_DEVICE = dataclasses.replace(OTHER_CPU, platform=POCL, compiler_cpu="skx", worker_affinity="pinned")


def test_the_platform_is_chosen_by_name() -> None:
    for name in (POCL, "portable computing language", "PoCL-CUDA"):
        assert isinstance(for_name(name), PoclPlatform), name
    for name in ("NVIDIA CUDA", "AMD Accelerated Parallel Processing", "Intel(R) OpenCL", ""):
        assert isinstance(for_name(name), GenericPlatform), name
    assert isinstance(PLATFORMS[-1], GenericPlatform)  # it serves every name: last
    assert OTHER_CPU.platform_rules is PLATFORMS[-1] and POCL_CPU_DEVICE.platform_rules is PLATFORMS[0]


def test_what_each_platform_answers() -> None:
    pocl, generic = PoclPlatform(), GenericPlatform()
    assert pocl.chosen_without_gpu and not generic.chosen_without_gpu
    assert pocl.calibration is POCL_CPU and generic.calibration is None
    assert pocl.builds_in_processes and not generic.builds_in_processes
    # PoCL's CPU driver works in the host memory a buffer is made over; another driver may copy
    assert pocl.host_memory_in_place(is_gpu=False) and not pocl.host_memory_in_place(is_gpu=True)
    assert not generic.host_memory_in_place(is_gpu=False) and not generic.host_memory_in_place(is_gpu=True)
    assert calibration.UNMEASURED is POCL_CPU  # what the plugin weighs where a platform measured none
    for rules in (pocl, generic):
        assert rules.persistent_kernels(is_gpu=False) and not rules.persistent_kernels(is_gpu=True)
        assert rules.program_key("p|d", "") == "p|d" and rules.program_key("p|d", "skx") == "p|d|skx"
        assert rules.vector_floats(False, "skx") == 16 and rules.vector_floats(False, "znver3") == 8
        assert rules.vector_floats(True, "skx") == 8
    assert POCL_CPU_DEVICE.key.endswith("|skx") and POCL_CPU_DEVICE.vector_floats == 16
    assert not OTHER_CPU.key.endswith("|") and OTHER_CPU.vector_floats == 8


def test_the_generic_start_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    before = dict(os.environ)
    start = GenericPlatform().start_loader(preloaded=False)
    assert dict(os.environ) == before
    assert start.devices_listed([(1, "NVIDIA CUDA")]) == {}
    start.withdraw()
    assert dict(os.environ) == before


def test_pocls_start_asks_and_takes_back_its_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(pocl_affinity.VARIABLE, raising=False)
    monkeypatch.delenv("POCL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # a writable kernel cache folder: left alone
    monkeypatch.setattr(pocl_affinity, "_allowed_cpus", lambda: frozenset({0, 1}))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    start = PoclPlatform().start_loader(preloaded=True)
    assert os.environ[pocl_affinity.VARIABLE] == "1" and "POCL_CACHE_DIR" not in os.environ
    assert "the OpenCL loader was in the process before" in start.affinity.reason
    start.withdraw()
    assert pocl_affinity.VARIABLE not in os.environ


@needs_x86_64
def test_pocls_start_repairs_and_reads_its_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    from delegate.runtime.platforms import pocl_cpu

    monkeypatch.delenv("DELEGATE_POCL_CPU", raising=False)
    monkeypatch.setattr(pocl_cpu, "host_name", lambda: "znver3")
    monkeypatch.setattr(pocl_affinity, "_allowed_cpus", lambda: None)  # left to the OS: nothing set
    generic = FakeDevice(b"generic\0")
    start = PoclPlatform().start_loader(preloaded=False)
    start.withdraw()
    found = start.devices_listed([(generic.address, POCL)])
    keeps = pocl_cache.keeps_builds(start.kernel_cache)
    assert found == {generic.address: DeviceStart("znver3", start.affinity.describe(), keeps_builds=keeps)}
    assert generic.cpu == b"znver3\0\0"


def test_pocl_keeps_its_builds_unless_its_cache_is_off_or_private() -> None:
    lasting, private = pocl_cache.KernelCache(), pocl_cache.KernelCache("/tmp/tflite-opencl-delegate-pocl-x")
    assert pocl_cache.keeps_builds(lasting, {})
    assert pocl_cache.keeps_builds(lasting, {"POCL_KERNEL_CACHE": "1"})
    assert not pocl_cache.keeps_builds(lasting, {"POCL_KERNEL_CACHE": "0"})
    assert not pocl_cache.keeps_builds(private, {})


def test_the_default_program_cache_stores_no_binaries_where_the_driver_keeps_builds(tmp_path: Path) -> None:
    keeps = dataclasses.replace(POCL_CPU_DEVICE, driver_keeps_builds=True)
    assert _cache_folder(None, keeps) is None and _cache_folder(True, keeps) is None
    assert _cache_folder(None, OTHER_CPU) == default_program_dir() == _cache_folder(True, OTHER_CPU)
    for info in (keeps, OTHER_CPU):  # a folder given is used, False is none
        assert _cache_folder(tmp_path, info) == tmp_path and _cache_folder(False, info) is None


@pytest.mark.opencl
@pytest.mark.parametrize("kernel_cache", ["on", "off"])
def test_on_pocl_the_default_stores_binaries_only_when_its_own_cache_is_off(tmp_path: Path, kernel_cache: str) -> None:
    # a real start in a fresh process: PoCL reads POCL_KERNEL_CACHE when it starts
    path = tmp_path / "chain.ctx"
    write_context(chain(2), path)
    script = textwrap.dedent(f"""
        import json
        import numpy as np
        from delegate import Runtime
        with Runtime.load({str(path)!r}) as rt:
            rt.run([np.ones(rt.input_shapes[0], np.float32)])
            keeps, built = rt.device_info.driver_keeps_builds, rt.build_stats.built_from_source
            print(json.dumps({{"keeps": keeps, "built": built}}))
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("POCL_CACHE_DIR", "POCL_KERNEL_CACHE")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    if kernel_cache == "off":
        env["POCL_KERNEL_CACHE"] = "0"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["built"] >= 1
    binaries = tmp_path / "cache" / "tflite-opencl-delegate" / "programs"
    stored = sorted(binaries.glob("*")) if binaries.is_dir() else []
    if kernel_cache == "on":
        assert result["keeps"] is True and stored == []
        assert any((tmp_path / "cache" / "pocl" / "kcache").iterdir())  # PoCL kept them instead
    else:
        assert result["keeps"] is False and len(stored) == result["built"]


def test_the_loader_answers_for_devices_it_learned_nothing_of() -> None:
    loader = opencl.loader()
    assert loader.device_start(0) == DeviceStart() and loader.compiler_cpu(0) == ""
    if platform.machine() == "x86_64":
        assert any(s.compiler_cpu for s in loader.starts.values()), "PoCL's CPU device names its CPU model"


def _core_modules() -> list[Path]:
    return [p for p in RUNTIME.rglob("*.py") if "platforms" not in p.relative_to(RUNTIME).parts]


def test_the_core_runtime_does_not_test_for_a_driver_by_name() -> None:
    """Outside platforms/, no comparison or containment test names PoCL, and nothing imports a
    platform's own modules (only the interface the package platforms/ exports)."""
    found = []
    for path in _core_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                texts = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)]
                if any("pocl" in t.lower() or "portable computing" in t.lower() for t in texts):
                    found.append(f"{path.name}:{node.lineno} tests for PoCL by name")
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("platforms."):
                found.append(f"{path.name}:{node.lineno} imports {node.module}")
            elif isinstance(node, ast.ImportFrom) and node.module == "platforms":
                own = [a.name for a in node.names if a.name.startswith("pocl")]
                found += [f"{path.name}:{node.lineno} imports {name}" for name in own]
    assert found == []


@pytest.mark.parametrize(
    ("variable", "default", "asked"),
    [
        # kept after the start: PoCL reads it at every launch (a binary made in a helper process
        # then holds the code its kernels run)
        (SPECIALIZATION, "0", "1"),
        # kept after the start: PoCL's kernel compiler reads it once per process, at its first kernel
        (WORK_GROUP_METHOD, "loops", "loopvec"),
    ],
    ids=["work-group-specialisation-off", "work-groups-as-plain-loops"],
)
def test_pocls_start_sets_its_settings_unless_asked(
    monkeypatch: pytest.MonkeyPatch, variable: str, default: str, asked: str
) -> None:
    monkeypatch.delenv(variable, raising=False)
    PoclPlatform().start_loader(preloaded=False).withdraw()
    assert os.environ[variable] == default
    monkeypatch.setenv(variable, asked)
    PoclPlatform().start_loader(preloaded=False).withdraw()
    assert os.environ[variable] == asked  # the caller's choice stands
