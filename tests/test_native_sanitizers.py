"""The C reader under AddressSanitizer + UndefinedBehaviorSanitizer (and LeakSanitizer).

tests/native/ctx_mutate.c feeds csrc/ctxfile.c every truncation, seeded bit
flips and forged words of valid files, each in an exactly-sized heap copy so
any read past the end trips ASan; the driver aborts on any sanitizer report.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from delegate import serialize_context
from delegate.context.synthetic import synthetic_mobilenet

from .helpers import populated_context

ROOT = Path(__file__).resolve().parent.parent
FLAGS = "-std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all".split()


@pytest.fixture(scope="module")
def driver(tmp_path_factory) -> Path:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("a C compiler is required (the package itself needs one to build)")
    out = tmp_path_factory.mktemp("asan") / "ctx_mutate"
    sources = [str(ROOT / "tests/native/ctx_mutate.c"), str(ROOT / "csrc/ctxfile.c")]
    subprocess.run([cc, *FLAGS, f"-I{ROOT / 'csrc'}", *sources, "-o", str(out)], check=True)
    return out


def test_reader_is_clean_under_asan_and_ubsan(driver, tmp_path):
    # Every truncation is a full read, so the work grows with the square of the size: keep files small.
    files = []
    samples = {
        "populated": populated_context(),
        "mobilenet8": synthetic_mobilenet(image_size=8, weight_scale=0),
    }
    for name, ctx in samples.items():
        ctx.nodes = ctx.nodes[:6]
        path = tmp_path / f"{name}.ctx"
        path.write_bytes(serialize_context(ctx, check_schedule=False))  # format samples
        files.append(str(path))
    env = dict(
        os.environ,
        ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:quarantine_size_mb=16",
        UBSAN_OPTIONS="print_stacktrace=1",
    )
    result = subprocess.run([str(driver), "4000", "42", *files], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "runtime error" not in result.stderr and "Sanitizer" not in result.stderr
    counts = dict(item.split("=") for item in result.stdout.split())
    assert int(counts["reads"]) > 100_000
    assert int(counts["errors"]) > 0 and int(counts["ok"]) > 0


def test_enqueue_loop_against_a_mock_opencl_under_asan_and_ubsan(tmp_path):
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    assert cc is not None, "a C compiler is required (the package itself needs one to build)"
    out = tmp_path / "runtime_mock"
    sources = [str(ROOT / "tests/native/runtime_mock.c"), str(ROOT / "csrc/runtime.c")]
    subprocess.run([cc, *FLAGS, f"-I{ROOT / 'csrc'}", *sources, "-o", str(out), "-ldl"], check=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1")
    result = subprocess.run([str(out)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "runtime loop checks passed" in result.stdout
