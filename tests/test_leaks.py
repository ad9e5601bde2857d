"""Leak checks of the C code under LeakSanitizer (with ASan + UBSan), no device needed.

The plugin's C half (csrc/plugin.c) runs create / Prepare / kernel init / invokes / free /
destroy cycles against a fake TFLite context and stub callbacks (tests/native/plugin_mock.c),
through its failure paths too; the enqueue loop's own leak check is
tests/test_native_sanitizers.py (mock OpenCL), the reader's is the fuzz regressions' replay. The
Python side's create/destroy cycles are tests/test_plugin.py::test_create_destroy_cycles_do_not_grow;
tests/RELIABILITY.md has the valgrind run of the whole plugin and runtime on PoCL.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = "-std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all".split()
CYCLES = int(os.environ.get("DELEGATE_LEAK_CYCLES", "18000"))


def test_plugin_c_cycles_leak_nothing_under_lsan(tmp_path):
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    assert cc is not None, "a C compiler is required (the package itself needs one to build)"
    out = tmp_path / "plugin_mock"
    sources = [str(ROOT / "tests/native/plugin_mock.c"), str(ROOT / "csrc/plugin.c")]
    subprocess.run([cc, *FLAGS, "-pthread", f"-I{ROOT / 'csrc'}", *sources, "-o", str(out)], check=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1", UBSAN_OPTIONS="print_stacktrace=1")
    env.pop("LD_PRELOAD", None)  # scripts/sanitize.sh preloads the runtime for Python; the driver links its own
    result = subprocess.run([str(out), str(CYCLES)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "LeakSanitizer" not in result.stderr and "runtime error" not in result.stderr
    counts = dict(item.split("=") for item in result.stdout.split())
    assert CYCLES % 6 == 0, "DELEGATE_LEAK_CYCLES must be a multiple of 6 (one cycle per path)"
    per_mode = CYCLES // 6
    assert int(counts["cycles"]) == CYCLES
    assert int(counts["creates"]) == int(counts["destroys"]) == CYCLES - per_mode
    assert int(counts["inits"]) == int(counts["frees"]) == 4 * per_mode
    assert int(counts["invokes_ok"]) == 3 * per_mode and int(counts["invokes_failed"]) == 9 * per_mode
    # a second thread's invoke while the first is inside the run: refused with a report, never run
    assert counts["overlap_refused"] == "1"


def test_litert_accelerator_reads_options_files_safely_under_sanitizers(tmp_path):
    """The LiteRT accelerator's C (csrc/litert_accelerator.c) against a fake LiteRT context and a
    stub plugin (tests/native/litert_mock.c): a delegate made and deleted, every damaged options
    file and other context ABI refused, nothing leaked. LiteRT itself cannot run under ASan here
    (it loads its vendor plugins with RTLD_DEEPBIND, which ASan's runtime refuses)."""
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    assert cc is not None, "a C compiler is required (the package itself needs one to build)"
    stub = tmp_path / "stub_plugin.so"
    driver = tmp_path / "litert_mock"
    include = f"-I{ROOT / 'csrc'}"
    subprocess.run([cc, *FLAGS, "-shared", "-fPIC", include, str(ROOT / "tests/native/stub_plugin.c"), "-o", str(stub)],
                   check=True)  # fmt: skip
    sources = [str(ROOT / "tests/native/litert_mock.c"), str(ROOT / "csrc/litert_accelerator.c")]
    subprocess.run([cc, *FLAGS, include, *sources, "-o", str(driver), "-ldl"], check=True)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1", UBSAN_OPTIONS="print_stacktrace=1")
    env.pop("LD_PRELOAD", None)
    folder = tmp_path / "runtime"
    folder.mkdir()
    result = subprocess.run([str(driver), str(folder), str(stub)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "LeakSanitizer" not in result.stderr and "runtime error" not in result.stderr
    assert result.stdout.split() == ["made=1", "refused=10"]
    for reason in ("not an options file", "a key without a value", "unterminated string", "an empty key",
                   "no absolute litert.plugin path", "larger than 64 KiB", "cannot load the plugin",
                   "the accelerator was built for 1.2"):  # fmt: skip
        assert reason in result.stderr, reason
