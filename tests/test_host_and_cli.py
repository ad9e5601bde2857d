"""Host selection (ai-edge-litert / tflite-runtime), the CLI's version, names, progress and quiet
modes, the ``delegate`` logger, and the types a user's script sees."""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import pty
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import delegate
from delegate import cli
from delegate.host import DEFAULT_ORDER, LITERT, TFLITE_RUNTIME, host_module, installed_hosts, requested_host

from .helpers import shared_path

ROOT = Path(__file__).resolve().parent.parent
SMALL_CNN = "small_cnn.tflite"


@pytest.mark.parametrize(
    ("name", "host"),
    [
        ("litert", LITERT),
        ("ai-edge-litert", LITERT),
        ("ai_edge_litert", LITERT),
        ("AI-EDGE-LITERT", LITERT),
        ("tflite-runtime", TFLITE_RUNTIME),
        ("tflite_runtime", TFLITE_RUNTIME),
    ],
)
def test_host_names_people_type(monkeypatch, name, host):
    monkeypatch.setenv("DELEGATE_TFLITE_HOST", name)
    assert requested_host() == host


def test_an_unknown_host_is_named_as_such(monkeypatch):
    monkeypatch.setenv("DELEGATE_TFLITE_HOST", "tensorflow")
    with pytest.raises(delegate.DelegateError, match=r"'tensorflow' is not a TFLite host this package knows"):
        host_module()


def test_a_host_that_is_not_installed_says_how_to_install_it(monkeypatch):
    missing = next((h for h in DEFAULT_ORDER if h.distribution not in {i.name for i in installed_hosts()}), None)
    if missing is None:
        pytest.skip("both hosts are installed in this environment")
    monkeypatch.setenv("DELEGATE_TFLITE_HOST", missing.distribution)
    with pytest.raises(delegate.DelegateError, match=rf"{missing.distribution} is not installed \(pip install"):
        host_module()


def test_litert_is_the_default_host(monkeypatch):
    monkeypatch.delenv("DELEGATE_TFLITE_HOST", raising=False)
    host, _ = host_module()
    installed = {h.name for h in installed_hosts()}
    assert host == (LITERT if LITERT.distribution in installed else TFLITE_RUNTIME)


def test_version_names_the_package_and_hosts(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(f"tflite-opencl-delegate {delegate.__version__} (TFLite hosts: ")
    for host in installed_hosts():
        assert f"{host.name} {host.version}" in out


def test_usage_name_is_how_the_program_was_started():
    assert cli.program_name("/venv/lib/python3.11/site-packages/delegate/__main__.py") == "python -m delegate"
    assert cli.program_name("/venv/bin/tflite-opencl-delegate") == "tflite-opencl-delegate"


def test_console_script_usage_is_its_own_name():
    script = Path(sys.executable).parent / "tflite-opencl-delegate"
    if not script.exists():
        pytest.skip("the package is not installed with its console script in this environment")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("usage: tflite-opencl-delegate ")


def test_run_json_names_the_host(capsys):
    path = shared_path("models", SMALL_CNN)
    assert cli.main(["run", str(path), "--runs", "1", "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    host, _ = host_module()
    assert result["host"]["name"] == host.distribution
    assert result["host"]["version"] == next(h.version for h in installed_hosts() if h.name == host.distribution)
    assert "loading" not in captured.err  # --quiet


def test_interpreter_state_names_the_host():
    interpreter = delegate.Interpreter(str(shared_path("models", SMALL_CNN)))
    assert interpreter.opencl is not None and interpreter.opencl.host is not None
    assert interpreter.opencl.host.name == host_module()[0].distribution
    # the version is read when asked (importlib.metadata is not imported on a start), and shown
    host = interpreter.opencl.host
    assert host.version == importlib.metadata.version(host.name)
    assert host.version in str(host) and f"version={host.version!r}" in repr(host)


def test_an_unknown_device_is_one_clear_error_without_the_hosts_message():
    code = (
        "import delegate\n"
        "try:\n"
        "    delegate.load_delegate(device='no-such-gpu')\n"
        "except delegate.DeviceNotFoundError as exc:\n"
        "    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "refused:" in done.stdout and "no-such-gpu" in done.stdout
    assert "Failed to load delegate" not in done.stderr + done.stdout


def test_demo_leaves_no_temporary_files(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "delegate", "demo"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    assert done.returncode == 0, done.stderr
    assert "not built yet" not in done.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("delegate-demo-")] == []


def _run_on_a_terminal(args: list[str], tmp_path: Path) -> tuple[int, str]:
    """``python -m delegate ARGS`` with stderr on a pseudo-terminal, its caches (the delegate's and
    PoCL's kernel cache) in ``tmp_path``: a cold start whatever earlier runs left; its exit code and
    what stderr showed."""
    controller, terminal = pty.openpty()
    caches = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "POCL_CACHE_DIR": str(tmp_path / "pocl")}
    env = {**os.environ, "COLUMNS": "200", **caches}
    process = subprocess.Popen(
        [sys.executable, "-m", "delegate", *args], stdout=subprocess.DEVNULL, stderr=terminal, cwd=ROOT, env=env
    )
    os.close(terminal)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(controller)
    return process.wait(timeout=600), shown.decode(errors="replace")


def test_a_cold_start_shows_progress_on_a_terminal(tmp_path):
    model = str(shared_path("models", SMALL_CNN))
    cold = ["run", model, "--runs", "1", "--option", "program_cache=none", "--option", "tuning=fast"]
    cold += ["--option", "cpu_when_faster=false"]  # small_cnn is compiled whatever its size
    code, shown = _run_on_a_terminal(cold, tmp_path)
    assert code == 0, shown
    lines = shown.split("\r")
    assert any("compiling partitions 1/1" in line for line in lines), shown
    assert any("building OpenCL programs" in line for line in lines), shown
    assert any("tuning work-group sizes (fast)" in line for line in lines), shown
    assert any(line.startswith("[") and " s] " in line for line in lines), shown  # elapsed time
    # the elapsed time ticks while one step runs: the same step shown at two different seconds
    frames = [re.match(r"\[ *(\d+) s\] (.*\S)", line) for line in lines]
    seconds_by_step: dict[str, set[str]] = {}
    for frame in filter(None, frames):
        seconds_by_step.setdefault(frame.group(2), set()).add(frame.group(1))
    assert max(len(seconds) for seconds in seconds_by_step.values()) >= 2, shown
    # whatever else reached stderr (TFLite's C++ INFO line, the CLI's notes) starts a line of its own
    for text in ("INFO: Created TensorFlow Lite XNNPACK delegate", "first output on CPU"):
        if text in shown:
            assert all(line.startswith(text) for line in lines if text in line), shown
    code, quiet = _run_on_a_terminal([*cold, "--quiet"], tmp_path)
    assert code == 0 and "compiling partitions" not in quiet and "loading" not in quiet


def test_no_progress_line_when_stderr_is_not_a_terminal():
    done = subprocess.run(
        [sys.executable, "-m", "delegate", "run", str(shared_path("models", SMALL_CNN)), "--runs", "1"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr and "compiling partitions" not in done.stderr


def test_the_delegate_logger_records_the_compile_and_cache(tmp_path, caplog):
    model = str(shared_path("models", SMALL_CNN))
    caplog.set_level(logging.INFO, logger="delegate")
    interpreter = delegate.Interpreter(model, serialization_dir=str(tmp_path), program_cache="none")
    interpreter.allocate_tensors()
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("delegate.")]
    assert any(m.startswith("serialization cache miss") for m in messages), messages
    assert any("built from source" in m for m in messages), messages
    assert any(m.startswith("partition 1 of 1: 10 nodes") and "cache: miss" in m for m in messages), messages
    assert any(m.startswith("subgraph 0: 10 of 10 nodes delegated in 1 partition(s)") for m in messages), messages
    caplog.clear()
    delegate.Interpreter(model, serialization_dir=str(tmp_path), program_cache="none").allocate_tensors()
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("delegate.")]
    assert any(m.startswith("serialization cache hit") for m in messages), messages


def test_mypy_types_the_interpreter_in_a_user_script(tmp_path):
    if shutil.which("mypy", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("mypy is not installed (it comes with the test extra)")
    script = tmp_path / "user_script.py"
    script.write_text(
        "import delegate\n"
        "interpreter = delegate.Interpreter('model.tflite', precision='F16')\n"
        "reveal_type(interpreter)\n"
        "reveal_type(interpreter.opencl)\n"
        "interpreter.invoke(1)\n"
        "details: list[int] = interpreter.get_input_details()\n"
    )
    env = dict(os.environ)
    if Path(delegate.__file__).resolve().is_relative_to(ROOT):  # an editable install: mypy does not follow its hook
        env["MYPYPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    out = done.stdout
    assert 'Revealed type is "delegate.interpreter.DelegatedInterpreter"' in out, out
    assert 'Revealed type is "Union[delegate.plugin.report.DelegateState, None]"' in out or (
        'Revealed type is "delegate.plugin.report.DelegateState | None"' in out
    ), out
    assert 'Too many arguments for "invoke"' in out, out
    assert "Incompatible types in assignment" in out, out


@pytest.mark.opencl
def test_an_interpreter_made_from_options_reports_what_it_runs_with():
    model = str(shared_path("models", SMALL_CNN))
    interpreter = delegate.Interpreter(model, precision="F32", compile_fallback=True, background_compile="off")
    assert interpreter.effective is not None
    assert interpreter.effective.engine == "gpu"
    assert interpreter.effective.options == {"precision": "F32", "compile_fallback": "True"}
    assert interpreter.effective.compile_fallback and not interpreter.effective.execution_fallback


def test_a_start_without_upstream_priorities_leaves_the_settings_messages_unimported():
    """protobuf's settings module costs a tenth of a warm start: a start whose options name no
    upstream priorities (the usual one) does not import it."""
    code = (
        "import sys, delegate\n"
        f"it = delegate.Interpreter({str(shared_path('models', SMALL_CNN))!r}, cpu_when_faster='false')\n"
        "it.allocate_tensors(); it.invoke()\n"
        "print('delegate._generated.configuration_pb2' in sys.modules, "
        "'delegate.plugin.upstream_options' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.split()[-2:] == ["False", "True"]  # the options module read, its messages not
