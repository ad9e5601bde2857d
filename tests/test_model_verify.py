"""The TFLite model verifier (csrc/tflmodel.c): valid models pass, broken ones are refused with
the field and byte offset, and no corruption reaches the host as a signal."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import delegate
from delegate import ModelFormatError
from delegate.model_check import verify_model

from .helpers import SHARED, shared_path
from .tflite_builder import Op, T, build_model

ROOT = Path(__file__).resolve().parent.parent
CONV_2D, IF, ADD = 3, 118, 0


def _shared_models() -> list[Path]:
    models = sorted(shared_path("models").rglob("*.tflite"))
    assert models, "no .tflite under ../shared/models"
    return models


def _add_model(**changes: object) -> bytes:
    """ADD of two [2] inputs, with ``changes`` to its operator or tensors applied."""
    tensors = [T((2,)), T((2,)), T((2,))]
    op = Op(ADD, [0, 1], [2])
    for key, value in changes.items():
        setattr(op, key, value)
    return build_model(tensors, [op], [0, 1], [2])


def test_generated_verifier_is_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_model_verifier.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_every_shared_model_verifies():
    for path in _shared_models():
        verify_model(path)
        verify_model(path.read_bytes())


def test_a_built_model_verifies():
    verify_model(_add_model())


def test_every_truncation_of_a_shared_model_is_refused():
    small = shared_path("models", "elementwise_mix.tflite").read_bytes()
    cnn = shared_path("models", "small_cnn.tflite").read_bytes()
    cases = [small[:n] for n in range(len(small))]
    cases += [cnn[:n] for n in [*range(4096), *range(4096, len(cnn), 7)]]
    for data in cases:
        with pytest.raises(ModelFormatError) as info:
            verify_model(data)
        assert 0 <= info.value.offset <= len(data)
        assert info.value.field.startswith("Model") and info.value.detail


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"inputs": [0, 7]}, r"Model\.subgraphs\[0\]\.operators\[0\]\.inputs\[1\]", r"tensor index 7 is not in 0\.\.2"),
        ({"outputs": [-1]}, r"operators\[0\]\.outputs\[0\]", r"tensor index -1 is not in 0\.\.2 \(byte offset"),
        (
            {"code": CONV_2D, "options": ("Conv2DOptions", {"StrideW": 0, "StrideH": 1})},
            r"operators\[0\]\.builtin_options$",
            r"Conv2DOptions\.stride_w is 0; TFLite needs it positive",
        ),
        ({"code": CONV_2D}, r"operators\[0\]$", r"stride_w is 0 \(the operator has no options of that type\)"),
        (
            {"code": IF, "options": ("IfOptions", {"ThenSubgraphIndex": 0, "ElseSubgraphIndex": 0})},
            r"subgraphs\[0\]\.operators\[0\]$",
            r"calls subgraph 0, which leads back to subgraph 0",
        ),
        (
            {"code": IF, "options": ("IfOptions", {"ThenSubgraphIndex": 3, "ElseSubgraphIndex": 0})},
            r"operators\[0\]\.then_subgraph_index",
            r"subgraph 3 is not in 0\.\.0",
        ),
    ],
)
def test_bad_references_name_the_field(changes, field, message):
    with pytest.raises(ModelFormatError, match=message) as info:
        verify_model(_add_model(**changes), source="built")
    assert re.search(field, info.value.field), info.value.field
    assert str(info.value).startswith("built: not a valid TFLite model: Model.")


def test_constant_of_the_wrong_size_is_refused():
    weights = T((2, 2), np.ones(4, np.float32))  # 16 bytes of data for a [2, 2] shape: fine
    good = build_model([T((2, 2)), weights, T((2, 2))], [Op(ADD, [0, 1], [2])], [0], [2])
    verify_model(good)
    weights.shape = (2, 3)  # now the data is 8 bytes short
    bad = build_model([T((2, 2)), weights, T((2, 2))], [Op(ADD, [0, 1], [2])], [0], [2])
    with pytest.raises(ModelFormatError, match=r"buffer 1 holds 16 bytes; .* 6 elements of 4 bytes needs 24") as info:
        verify_model(bad)
    assert info.value.field == "Model.subgraphs[0].tensors[1]"


def test_structural_damage_names_where():
    data = bytearray(_add_model())
    data[4:8] = b"TFL2"
    with pytest.raises(ModelFormatError, match=r'file identifier is not "TFL3"') as info:
        verify_model(bytes(data))
    assert info.value.offset == 4
    data = bytearray(_add_model())
    data[0:4] = struct.pack("<I", len(data) + 100)
    with pytest.raises(ModelFormatError, match=r"points outside the \d+-byte buffer") as info:
        verify_model(bytes(data))
    assert info.value.field == "Model" and info.value.offset == 0
    with pytest.raises(ModelFormatError, match="too short"):
        verify_model(b"")


def test_interpreter_refuses_a_bad_model_before_the_host(tmp_path):
    bad = _add_model(inputs=[0, 9])
    with pytest.raises(ModelFormatError, match=r"operators\[0\]\.inputs\[1\]"):
        delegate.Interpreter(model_content=bad)
    path = tmp_path / "bad.tflite"
    path.write_bytes(shared_path("models", "small_cnn.tflite").read_bytes()[:1000])
    with pytest.raises(ModelFormatError, match=str(path)) as info:
        delegate.Interpreter(str(path))
    assert isinstance(info.value, ValueError) and isinstance(info.value, delegate.DelegateError)


def test_cli_run_exits_2_naming_the_field(tmp_path):
    path = tmp_path / "truncated.tflite"
    path.write_bytes(shared_path("models", "small_cnn.tflite").read_bytes()[:1000])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    result = subprocess.run(
        [sys.executable, "-m", "delegate", "run", str(path), "--runs", "1"], capture_output=True, text=True, env=env
    )
    assert result.returncode == 2, result.stderr
    assert "not a valid TFLite model: Model.operator_codes: offset" in result.stderr
    assert "(byte offset 52)" in result.stderr


def test_minibenchmark_refuses_a_bad_model(tmp_path):
    from delegate._generated import configuration_pb2 as pb
    from delegate.minibenchmark.runner import run_minibenchmark

    path = tmp_path / "bad.tflite"
    path.write_bytes(_add_model(outputs=[5]))
    settings = pb.MinibenchmarkSettings()
    settings.settings_to_test.add().delegate = pb.XNNPACK
    settings.model_file.filename = str(path)
    with pytest.raises(ModelFormatError, match=r"operators\[0\]\.outputs\[0\]"):
        run_minibenchmark(settings)


def test_seeded_bit_flips_through_the_cli_never_end_in_a_signal():
    """A few hundred of scripts/model_mutations.py's cases (the full run: tests/RELIABILITY.md)."""
    model = SHARED / "models" / "elementwise_mix.tflite"
    shared_path("models", "elementwise_mix.tflite")
    command = [sys.executable, str(ROOT / "scripts" / "model_mutations.py"), "--model", str(model)]
    command += ["--flips", "150", "--seed", "7", "--no-truncations", "--json", "--timeout", "60"]
    result = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["failures"] == [], result.stderr[-2000:]
    assert sum(summary["flips"].values()) == 150
    assert summary["flips"].get("exit:2", 0) > 0  # some flips are refused: the run checks something
    assert result.returncode == 0


def test_run_reports_a_failed_allocation_as_exit_2(monkeypatch, capsys):
    # Found by scripts/model_mutations.py: a flipped dim of elementwise_mix made TFLite's
    # AllocateTensors throw std::bad_alloc, which escaped `run` as MemoryError (exit 1).
    from delegate import cli, model_run

    def bad_alloc(*args: object, **kwargs: object) -> None:
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(model_run, "run_model", bad_alloc)
    model = shared_path("models", "elementwise_mix.tflite")
    assert cli.main(["run", str(model), "--runs", "1"]) == 2
    assert "out of memory running" in capsys.readouterr().err
