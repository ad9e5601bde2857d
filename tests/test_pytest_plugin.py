"""The pytest plugin (delegate/pytest_plugin.py): its entry point, its fixtures, the README's example
and benchmarks/test_models.py, each run by pytest in a child process, as a user runs them.

The children get this checkout on PYTHONPATH and ``-p delegate.pytest_plugin``, the plugin's
entry-point name, so they load this checkout's plugin whether or not the package is installed
(with the entry point installed the two are one plugin, not two).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from delegate.compiler.graph import CUSTOM, Builtin
from delegate.pytest_plugin import make_cpu_interpreter, make_delegate_interpreter

from .helpers import benchmark_module, shared_path
from .tflite_builder import Op, T, build_model

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "delegate.pytest_plugin"
#: the README's example: the first ```python block after this marker
README_MARKER = "<!-- readme-example: pytest-plugin -->"


def _pytest(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    # run as a user would, not as an xdist worker (whose variables turn pytest-benchmark off)
    for name in [n for n in env if n.startswith("PYTEST_XDIST") or n == "PYTEST_CURRENT_TEST"]:
        del env[name]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def _tanh_model(tmp_path: Path) -> Path:
    path = tmp_path / "tanh.tflite"
    path.write_bytes(build_model([T((1, 4)), T((1, 4))], [Op(Builtin.TANH, [0], [1])], [0], [1]))
    return path


def test_the_entry_point_is_the_plugin_module():
    import tomllib  # Python 3.11+, as in test_packaging

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {PLUGIN: PLUGIN}
    plugin = __import__(PLUGIN, fromlist=["_"])
    assert callable(plugin.delegate_interpreter) and callable(plugin.cpu_interpreter)


@pytest.mark.opencl
def test_the_factories_give_both_paths_the_same_seeded_resized_inputs(tmp_path):
    model = _tanh_model(tmp_path)
    on_delegate = make_delegate_interpreter(model, input_shapes={"t0": (3, 8)}, seed=7)
    on_cpu = make_cpu_interpreter(model, input_shapes={0: [3, 8]}, seed=7, num_threads=1)
    assert on_delegate.opencl is not None and len(on_delegate.opencl.delegated_nodes) == 1
    (d_in,), (c_in,) = on_delegate.get_input_details(), on_cpu.get_input_details()
    x = on_delegate.get_tensor(d_in["index"])
    assert x.shape == (3, 8) and np.array_equal(x, on_cpu.get_tensor(c_in["index"]))
    other_seed = make_cpu_interpreter(model, input_shapes={0: (3, 8)}, seed=8)
    assert not np.array_equal(x, other_seed.get_tensor(other_seed.get_input_details()[0]["index"]))
    for interpreter in (on_delegate, on_cpu):
        interpreter.invoke()
    out = [i.get_tensor(i.get_output_details()[0]["index"]) for i in (on_delegate, on_cpu)]
    np.testing.assert_allclose(out[0], np.tanh(x), atol=1e-6)
    np.testing.assert_allclose(out[0], out[1], atol=1e-6)
    with pytest.raises(ValueError, match="has no input 'nope'"):
        make_cpu_interpreter(model, input_shapes={"nope": (3, 8)})


def _readme_example() -> str:
    text = (ROOT / "README.md").read_text()
    assert README_MARKER in text, f"README.md lost its example marker {README_MARKER}"
    block = re.search(r"```python\n(.*?)```", text.split(README_MARKER, 1)[1], re.DOTALL)
    assert block, "no ```python block after the README's example marker"
    return block.group(1)


@pytest.mark.opencl
def test_the_readme_example_benchmarks_both_paths_in_one_group(tmp_path):
    example = _readme_example()
    model = re.search(r'^MODEL = "(.+)"$', example, re.MULTILINE)
    assert model, "the README's example names its model in a double-quoted MODEL line"
    shutil.copy(shared_path("models", "small_cnn.tflite"), tmp_path / model.group(1))
    (tmp_path / "test_my_model.py").write_text(example)
    quick = ("--benchmark-min-rounds=2", "--benchmark-max-time=0.01", "--benchmark-columns=median,rounds")
    run = _pytest("test_my_model.py", "--benchmark-only", *quick, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "2 passed" in run.stdout, run.stdout[-3000:]
    group = re.search(rf"benchmark '{re.escape(model.group(1))}': 2 tests(.*?)\n-{{5,}}\n\n", run.stdout, re.DOTALL)
    assert group, run.stdout[-3000:]
    assert "test_invoke[delegate]" in group.group(1) and "test_invoke[cpu]" in group.group(1)


@pytest.mark.opencl
def test_the_model_benchmarks_run_on_one_small_model(tmp_path):
    # The whole corpus is `pytest benchmarks/` (minutes); CI checks the file on the smallest model.
    shared_path("models", "small_cnn.tflite")
    benchmarks = str(ROOT / "benchmarks" / "test_models.py")
    run = _pytest(benchmarks, "-v", "-k", "small_cnn-", "--benchmark-disable", cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    names = {f"test_{what}[small_cnn-{side}]" for what in ("invoke", "start") for side in ("delegate", "cpu")}
    assert set(re.findall(r"::(test_\w+\[[^\]]+\]) PASSED", run.stdout)) == names, run.stdout[-3000:]


def test_a_model_the_cpu_path_cannot_run_skips_that_side_with_the_reason(tmp_path):
    path = tmp_path / "custom.tflite"
    path.write_bytes(build_model([T((1, 4)), T((1, 4))], [Op(CUSTOM, [0], [1], custom_code="NoSuchOp")], [0], [1]))
    models = benchmark_module("test_models")
    with pytest.raises(pytest.skip.Exception, match=r"TFLite's CPU path \(.+\) cannot run this model: .*NoSuchOp"):
        models._model(path, "cpu")
    assert models._model(path, "delegate") == path  # the delegate's side does not skip: it must run or fail
