"""The plugin library in hosts that never imported the package: a fresh Python process loading it
by path, a copy of it beside another package (refused, not crashed), and a C program with no Python
in it (tests/native/c_host.c) through the C-host library. TensorFlow's interpreter as a host is
tests/test_tensorflow_host.py. Every case runs in a fresh process: what is tested is a process's
first load of the library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import delegate

from .helpers import shared_path

ROOT = Path(__file__).resolve().parent.parent
RUN_BY_PATH = ROOT / "tests" / "hosts" / "run_by_path.py"
#: float32 on the device against TFLite's CPU kernels, of the output's largest magnitude (at least 1)
F32_TOLERANCE = 1e-4
TIMEOUT_S = 300


def run_by_path(python: str, host: str, library: str, models: list[Path], cwd: Path) -> list[dict[str, object]]:
    """tests/hosts/run_by_path.py in a fresh process (outside the checkout, so nothing imports the
    package by accident); its per-model results. Fails on a signal or an error exit."""
    done = subprocess.run(
        [python, str(RUN_BY_PATH), host, library, *map(str, models), "--option", "cpu_when_faster=false"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.opencl
def test_a_fresh_process_loads_the_plugin_by_path_and_runs_unet(tmp_path):
    (result,) = run_by_path(
        sys.executable, "litert", delegate.plugin_path(), [shared_path("models", "unet_small.tflite")], tmp_path
    )
    assert result["delegated_nodes"] > 0
    assert result["difference"] <= F32_TOLERANCE


@pytest.mark.opencl
def test_a_host_loading_the_plugin_by_path_runs_a_keras3_loop_unrolled(tmp_path):
    """No model_file in a plugin-only host: the loop's subgraphs are read from the file TFLite mapped."""
    model = ROOT / "tests" / "models" / "gru_keras3.tflite"
    (result,) = run_by_path(sys.executable, "litert", delegate.plugin_path(), [model], tmp_path)
    assert result["delegated_nodes"] == result["total_nodes"] and result["inlined_subgraphs"] == 2, result
    assert result["difference"] <= F32_TOLERANCE


@pytest.mark.opencl
def test_the_c_host_library_forwards_in_a_python_host(tmp_path):
    (result,) = run_by_path(
        sys.executable, "litert", delegate.c_plugin_path(), [shared_path("models", "small_cnn.tflite")], tmp_path
    )
    assert result["delegated_nodes"] > 0
    assert result["difference"] <= F32_TOLERANCE


def test_a_copy_of_the_library_beside_another_package_is_refused_with_a_message(tmp_path):
    """A process running the package from one place, given the plugin library of another copy: the
    copy's callbacks were never attached, so calling them would crash; it refuses instead."""
    copy = tmp_path / "delegate"
    copy.mkdir()
    native = Path(delegate.plugin_path())
    shutil.copy(native, copy / native.name)
    shutil.copy(native.parent / "_plugin_bootstrap.py", copy / "_plugin_bootstrap.py")
    script = (
        "import sys\n"
        "from ai_edge_litert.interpreter import load_delegate\n"
        "import delegate\n"
        "try:\n"
        "    load_delegate(sys.argv[1])\n"
        "except ValueError as error:\n"
        "    print('refused:', error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(copy / native.name)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused:" in done.stdout
    assert f"already runs the package from {native.parent}" in done.stderr + done.stdout


@pytest.fixture(scope="module")
def c_host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    assert cc is not None, "a C compiler is required (the package itself needs one to build)"
    out = tmp_path_factory.mktemp("c_host") / "c_host"
    source = ROOT / "tests" / "native" / "c_host.c"
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", str(source), "-o", str(out), "-ldl"], check=True)
    return out


def _c_host_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "VIRTUAL_ENV"}
    return {**env, **extra}


def test_a_c_program_without_python_creates_a_delegate(c_host, tmp_path):
    done = subprocess.run(
        [str(c_host), delegate.c_plugin_path(), "precision=F32"],
        cwd=tmp_path,
        env=_c_host_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "created"


@pytest.mark.parametrize(
    ("option", "env", "message"),
    [
        ("precison=F32", {}, "unknown option(s) precison"),
        ("precision=F32", {"DELEGATE_LIBPYTHON": "/nonexistent/libpython3.so"}, "loading its library failed"),
    ],
)
def test_a_c_program_is_told_why_no_delegate_was_made(c_host, tmp_path, option, env, message):
    done = subprocess.run(
        [str(c_host), delegate.c_plugin_path(), option],
        cwd=tmp_path,
        env=_c_host_env(**env),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]  # not a signal, not a load failure
    assert message in done.stdout


def test_the_python_module_itself_refuses_to_load_into_a_c_program(c_host, tmp_path):
    """The native module needs Python's symbols: a C program's loader refuses it (no crash), and the
    documented library for C hosts is c_plugin_path()."""
    done = subprocess.run(
        [str(c_host), delegate.plugin_path()], cwd=tmp_path, env=_c_host_env(), capture_output=True, text=True
    )
    assert done.returncode == 1 and "undefined symbol" in done.stdout
