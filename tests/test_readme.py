"""The README as a newcomer meets it: its code runs as written, its commands parse, its
performance table is RESULTS.md's, and no development history is left in docs or code."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from delegate.cli import build_parser

from .helpers import shared_path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: the pytest plugin's example runs under pytest (tests/test_pytest_plugin.py)
PYTEST_EXAMPLE = "<!-- readme-example: pytest-plugin -->"
#: numbered rounds of work and issue numbers: history, which belongs in the tracker
HISTORY = re.compile(r"\b(issue|session)s? ?#?[0-9]+", re.IGNORECASE)
#: where the product is described: docs, code, scripts, tests, and the benchmarks with their dated log
CHECKED = ["README.md", "docs/*.md", "tests/RELIABILITY.md", "delegate/**/*.py", "csrc/*.[ch]", "scripts/*",
           "tests/*.py", "benchmarks/**/*.py", "benchmarks/*.md", "examples/**/*", ".ci/run", "pyproject.toml",
           "setup.py"]  # fmt: skip


def _blocks(language: str) -> list[str]:
    text = README.split(PYTEST_EXAMPLE)[0] + README.split(PYTEST_EXAMPLE)[1].split("```", 2)[2]
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def _python_blocks(host: str) -> list[str]:
    """The README's Python blocks for a host: those that import TensorFlow run in its environment."""
    return [b for b in _blocks("python") if ("import tensorflow" in b) == (host == "tensorflow")]


def _run_block(python: str, code: str, tmp_path: Path) -> None:
    # "model.tflite" is the reader's own model: a shared one stands in for it; caches go to tmp_path
    code = code.replace('"model.tflite"', repr(str(shared_path("models", "small_cnn.tflite"))))
    import delegate

    code = code.replace('"/path/from/delegate.plugin_path()"', repr(delegate.plugin_path()))
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), HOME=str(tmp_path))
    result = subprocess.run([python, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"README block:\n{code}\n{result.stderr[-3000:]}"


@pytest.mark.opencl
@pytest.mark.parametrize("index", range(len(_python_blocks("litert"))))
def test_every_python_block_runs_as_written(index, tmp_path):
    block = _python_blocks("litert")[index]
    if "CompiledModel" in block and "libasan" in os.environ.get("LD_PRELOAD", ""):
        # scripts/sanitize.sh; tests/test_litert_accelerator.py runs the same path in the main suite
        pytest.skip("LiteRT's CompiledModel loads its vendor plugins with RTLD_DEEPBIND, which ASan's runtime refuses")
    _run_block(sys.executable, block, tmp_path)


@pytest.mark.opencl
@pytest.mark.parametrize("index", range(len(_python_blocks("tensorflow"))))
def test_every_tensorflow_block_runs_as_written(index, tmp_path):
    python = os.environ.get("DELEGATE_TENSORFLOW_PYTHON")
    if not python:
        pytest.skip("no TensorFlow environment given (scripts/test_tensorflow.sh makes one and runs this test)")
    _run_block(python, _python_blocks("tensorflow")[index], tmp_path)


def _delegate_commands() -> list[list[str]]:
    commands = []
    for block in _blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("python -m delegate ") and "|" not in line and "[" not in line:
                commands.append(shlex.split(line)[3:])
    return commands


def test_the_readmes_commands_parse_and_its_scripts_exist():
    commands = _delegate_commands()
    assert len(commands) >= 3
    parser = build_parser()
    for args in commands:
        parser.parse_args(args)  # SystemExit on an unknown command or option
    for script in re.findall(r"^(scripts/\S+\.sh)", "\n".join(_blocks("sh")), flags=re.M):
        assert os.access(ROOT / script, os.X_OK), script


def test_the_performance_table_is_results_mds():
    result = subprocess.run(
        [sys.executable, "benchmarks/readme_table.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_quick_start_is_two_commands():
    section = README[README.index("## Quick start") :]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block and [line.split()[0] for line in block.group(1).strip().splitlines()] == [
        "scripts/demo.sh",
        "scripts/test.sh",
    ]


def test_no_development_history_in_docs_or_code():
    found = []
    for pattern in CHECKED:
        for path in sorted(ROOT.glob(pattern)):
            if path.is_file() and ".venv" not in path.parts and path.name != "test_readme.py":
                for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                    if HISTORY.search(line):
                        found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, "development history belongs in the tracker, not here:\n" + "\n".join(found)
