"""A failed Prepare never leaves TFLite in a state that crashes.

Each stage of the delegate's Prepare (reading the graph, compiling, building a kernel, allocating
device memory) is made to fail on real models, in a subprocess (tests/prepare_failure_driver.py),
under the host this suite runs with (scripts/test_tflite_runtime.sh runs it again under tflite-runtime).
With compilation fallback the model runs on TFLite's CPU kernels, with a warning naming the cause;
without it, the user gets an error naming the cause: when the interpreter is created, or, on a
graph whose plan tflite-runtime 2.14 cannot restore after a failed Prepare (MediaPipe's pose
detector: fp16 weights read by DENSIFY), when it allocates its tensors. A signal fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import shared_path

pytestmark = pytest.mark.opencl

ROOT = Path(__file__).resolve().parent.parent
STAGES = ["capture", "compile", "build", "allocate"]
#: model -> where an error surfaces without fallback
MODELS = {
    "mediapipe__hand_recrop": "construct",
    "mediapipe__pose_detection": "allocate",  # TFLite must not undo the delegation (see the docstring)
}


def _drive(model: Path, stage: str, fallback: bool, cache: Path) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache))
    result = subprocess.run(
        [sys.executable, "-m", "tests.prepare_failure_driver", str(model), stage, "1" if fallback else "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert result.returncode == 0, f"exit {result.returncode} (a negative code is a signal):\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("xdg-cache")


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("name", list(MODELS))
def test_with_fallback_the_model_runs_on_cpu_and_says_why(name, stage, cache):
    report = _drive(shared_path("models", "real", f"{name}.tflite"), stage, True, cache)
    assert report["surfaced"] is None, report["error"]
    assert report["rel_error"] <= 1e-4
    assert any("failure injected by the test" in w for w in report["warnings"]), report["warnings"]


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("name", list(MODELS))
def test_without_fallback_the_error_names_the_cause(name, stage, cache):
    report = _drive(shared_path("models", "real", f"{name}.tflite"), stage, False, cache)
    assert report["surfaced"] == MODELS[name], report
    assert f"{stage} failure injected by the test" in report["error"], report["error"]
    # the host joins reported messages with nothing between them: each of ours ends its line
    assert not re.search(r"\S(Restored original|Node number)", report["error"]), report["error"]
