"""Every input the fuzzers ever failed on, replayed in each test run, plus the bugs they found.

tests/fuzz/regressions/TARGET/ holds the committed inputs (scripts/fuzz.sh says how to add one).
The Python targets run in this process; the C targets (tests/fuzz/ctx_fuzz.c, model_fuzz.c) are
linked with a plain replay driver under gcc's ASan + UBSan, so no clang or libFuzzer is needed
here. The seed corpus goes through the same harnesses, so a harness that rots fails here, not in
the fuzz job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from delegate._native import ffi, lib

from delegate import ContextFile, ContextFormatError, SettingsError
from delegate._generated import configuration_pb2 as pb
from delegate.context.semantics import check_semantics
from delegate.settings.codec import SettingsFormat, parse_settings
from delegate.settings.decisions import read_decision

from .fuzz.make_corpus import write_corpus
from .fuzz.targets import TARGETS

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = ROOT / "tests" / "fuzz" / "regressions"
FLAGS = "-std=c11 -Wall -Wextra -Werror -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all".split()


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("seeds")
    write_corpus(out)
    return out


def _inputs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_python_targets_pass_their_regressions_and_seeds(target, seeds):
    inputs = _inputs(REGRESSIONS / target) + _inputs(seeds / target)
    assert inputs
    for path in inputs:
        TARGETS[target](path.read_bytes())


#: the C targets and the sources each links
C_TARGETS = {
    "ctx": ["tests/fuzz/ctx_fuzz.c", "csrc/ctxfile.c"],
    "model": ["tests/fuzz/model_fuzz.c", "csrc/tflmodel.c", "csrc/fbverify.c", "csrc/tflmodel_verify.c"],
}


@pytest.mark.parametrize("target", sorted(C_TARGETS))
def test_c_target_passes_its_regressions_and_seeds_under_asan_and_ubsan(target, seeds, tmp_path):
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    assert cc is not None, "a C compiler is required (the package itself needs one to build)"
    replay = tmp_path / "replay"
    sources = [ROOT / "tests/fuzz/replay_main.c", *(ROOT / s for s in C_TARGETS[target])]
    subprocess.run([cc, *FLAGS, f"-I{ROOT / 'csrc'}", *map(str, sources), "-o", str(replay)], check=True)
    inputs = _inputs(REGRESSIONS / target) + _inputs(seeds / target)
    assert inputs
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=1")
    result = subprocess.run([str(replay), *map(str, inputs)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert f"replayed {len(inputs)} inputs" in result.stdout


# ------------------------------------------------------- the bugs found


def test_semantic_regressions_are_well_formed_and_refused():
    # The context target's inputs named semantic-*: files the reader takes (they are valid
    # FlatBuffers) whose values a runtime could take as something else (a height of -5 or 0 as 1, a
    # work-group of -8 or 0 as 1); the semantic rules refuse each, and the target checks that they do.
    inputs = [p for p in _inputs(REGRESSIONS / "context") if p.name.startswith("semantic-")]
    assert len(inputs) >= 7
    for path in inputs:
        with ContextFile(path.read_bytes()) as f:
            ctx = f.to_model()
        with pytest.raises(ContextFormatError) as info:
            check_semantics(ctx)
        assert info.value.kind == "semantic", path.name


def test_reader_returns_the_error_code_for_inputs_rejected_up_front():
    # Found by ctx_fuzz: empty, short and TFLite inputs returned -1 instead of DLG_ERR_FORMAT.
    out = ffi.new("dlg_context **")
    err = ffi.new("dlg_error *")
    for data in (b"", b"\x00" * 8, b"\x1c\x00\x00\x00TFL3" + b"\x00" * 24):
        buf = ffi.from_buffer(data) if data else ffi.NULL
        assert lib.dlg_context_read(buf, len(data), ffi.NULL, out, err) == lib.DLG_ERR_FORMAT
        assert err.code == lib.DLG_ERR_FORMAT and out[0] == ffi.NULL


def test_binary_settings_with_a_non_utf8_string_are_refused():
    # Found by the settings target: such a string came back as bytes, and the message's text and
    # JSON forms could not be parsed back.
    data = (REGRESSIONS / "settings" / "binary-string-not-utf8").read_bytes()[1:]
    with pytest.raises(SettingsError, match=r"ComputeSettings\.model_namespace_for_statistics is not valid UTF-8"):
        parse_settings(data, SettingsFormat.BINARY)
    nested = pb.ComputeSettings()
    nested.tflite_settings.nnapi_settings.cache_directory = "ok"
    raw = bytearray(nested.SerializeToString())
    raw[raw.index(b"ok")] = 0xFF
    with pytest.raises(SettingsError, match=r"tflite_settings\.nnapi_settings\.cache_directory is not valid UTF-8"):
        parse_settings(bytes(raw), SettingsFormat.BINARY)


def test_corrupt_decision_file_is_a_settings_error(tmp_path):
    # Found while writing the events target (its first input would have crashed it): read_decision
    # let protobuf's DecodeError escape instead of saying which file is bad and what to do.
    storage = tmp_path / "model.events"
    Path(f"{storage}.best.fb").write_bytes(b"\xff\xff\xff")
    with pytest.raises(SettingsError, match=r"not a valid BestAccelerationDecision.*run the mini-benchmark again"):
        read_decision(storage)
