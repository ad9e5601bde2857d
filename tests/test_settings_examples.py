"""Every file in examples/settings/ and every settings example in the README runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import delegate
from delegate.plugin.upstream_options import device_kind
from delegate.settings import ANY_SETTINGS, SettingsFormat, configuration_pb2, load_settings_file, parse_settings
from delegate.settings.mapping import resolve

from .helpers import shared_path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples" / "settings").iterdir())
README = (ROOT / "README.md").read_text()
#: the README sections whose code blocks are settings examples
SECTIONS = ("## Acceleration settings", "## Mini-benchmark")


def _sections() -> str:
    parts = []
    for heading in SECTIONS:
        start = README.index(heading)
        end = README.find("\n## ", start + len(heading))
        parts.append(README[start : end if end >= 0 else None])
    return "\n".join(parts)


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", _sections(), flags=re.S | re.M)


def test_the_examples_are_there_and_say_what_they_do():
    names = {p.stem for p in EXAMPLES}
    assert {"f32", "precision_loss_allowed", "min_latency", "xnnpack", "fallbacks", "minibenchmark"} <= names
    for path in EXAMPLES:
        first = path.read_text().splitlines()[0]
        assert first.startswith("# ") and len(first) > 20, f"{path.name}: its first line says what it does"


RUNNABLE_EXAMPLES = [p for p in EXAMPLES if p.stem != "minibenchmark"]


def _outputs(interpreter, x: np.ndarray) -> np.ndarray:
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy()


@pytest.mark.opencl
@pytest.mark.parametrize("path", RUNNABLE_EXAMPLES, ids=lambda p: p.name)
def test_every_settings_example_runs(path):
    model = str(shared_path("models", "small_cnn.tflite"))
    message = load_settings_file(path)
    expected = resolve(message, device_kind(""))
    interpreter = delegate.Interpreter(model, settings=path, program_cache="none")
    assert interpreter.effective.engine == expected.engine
    reference = delegate.api.host_runtime().Interpreter(model_path=model)
    detail = reference.get_input_details()[0]
    x = np.random.default_rng(0).random(detail["shape"], dtype=np.float32)
    want = _outputs(reference, x)
    got = _outputs(interpreter, x)
    assert np.abs(got - want).max() <= 2e-2 * max(np.abs(want).max(), 1e-6)
    if expected.engine == "gpu":
        assert len(interpreter.opencl.delegated_nodes) > 0
        assert interpreter.opencl.options.precision.name == expected.options["precision"]


@pytest.mark.opencl
def test_the_minibenchmark_example_runs(tmp_path):
    model = str(shared_path("models", "small_cnn.tflite"))
    path = ROOT / "examples" / "settings" / "minibenchmark.textproto"
    command = [sys.executable, "-m", "delegate", "minibenchmark", model, "--minibenchmark-settings", str(path)]
    result = subprocess.run([*command, "--runs", "2", "--json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    wanted = load_settings_file(path, configuration_pb2.MinibenchmarkSettings)
    assert len(report["rows"]) == len(wanted.settings_to_test) and all(r["ok"] for r in report["rows"])


def test_readme_textprotos_parse_and_map():
    blocks = _blocks("textproto")
    assert blocks, "the README's settings sections show a textproto"
    for text in blocks:
        message = parse_settings(text, SettingsFormat.TEXT, candidates=ANY_SETTINGS)
        resolve(message)  # valid priorities, an available delegate


def test_readme_settings_files_exist():
    for name in re.findall(r"examples/settings/[\w.]+", _sections()):
        assert (ROOT / name).is_file(), name


@pytest.mark.opencl
def test_readme_python_settings_examples_run(tmp_path, capsys):
    blocks = _blocks("python")
    assert blocks
    (tmp_path / "model.tflite").symlink_to(shared_path("models", "small_cnn.tflite"))
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for code in blocks:
            exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    finally:
        os.chdir(cwd)
    assert "engine='gpu'" in capsys.readouterr().out
