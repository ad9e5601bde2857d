"""``python -m delegate inspect`` and ``demo``."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from delegate import write_context
from delegate.cli import main
from delegate.context.synthetic import synthetic_mobilenet

from .helpers import populated_context, shared_path


@pytest.fixture(scope="module")
def mobilenet_file(tmp_path_factory):
    return write_context(synthetic_mobilenet(), tmp_path_factory.mktemp("ctx") / "mobilenet.ctx")


def test_inspect_text(mobilenet_file, capsys):
    assert main(["inspect", str(mobilenet_file)]) == 0
    out = capsys.readouterr().out
    assert "precision F32, storage BUFFER" in out
    assert "nodes (64):" in out and "tensors (65):" in out
    assert "conv_stem" in out and "main_function" in out and "112x112x8" in out
    assert "weights 13." in out  # MiB, MobileNetV2-sized


def test_inspect_json(mobilenet_file, capsys):
    assert main(["inspect", str(mobilenet_file), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["file_bytes"] == mobilenet_file.stat().st_size
    assert 13_000_000 < summary["weight_bytes"] < 15_000_000
    node = summary["nodes"][0]
    assert node["name"] == "conv_stem" and node["kernel"] == "main_function"
    assert node["grid_size"] == [112, 112, 8] and node["work_group_size"] == [8, 4, 1]
    assert node["work_groups_count"] == [14, 28, 8] and node["grid_dimension"] == 3
    tensor = summary["tensors"][1]
    assert tensor["shape"] == {"b": 1, "h": 112, "w": 112, "d": 1, "c": 32}
    assert tensor["storage_type"] == "BUFFER" and tensor["bytes"] == 112 * 112 * 32 * 4


def test_inspect_every_storage_type(tmp_path, capsys):
    path = write_context(populated_context(), tmp_path / "full.ctx", check_schedule=False)
    assert main(["inspect", str(path), "--json"]) == 0
    storages = {t["storage_type"] for t in json.loads(capsys.readouterr().out)["tensors"]}
    assert len(storages) == 7


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delegate", *args], capture_output=True, text=True)


@pytest.mark.parametrize("content", [b"", b"\x01" * 3, b"\x10\x00\x00\x00" + b"\xff" * 60])
def test_inspect_bad_file_exits_2_with_one_line(tmp_path, content):
    path = tmp_path / "bad.ctx"
    path.write_bytes(content)
    result = _run_cli("inspect", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0]


def test_inspect_tflite_and_missing_files(tmp_path):
    result = _run_cli("inspect", str(shared_path("models", "small_cnn.tflite")))
    assert result.returncode == 2 and "TensorFlow Lite model" in result.stderr
    result = _run_cli("inspect", str(tmp_path / "absent.ctx"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "No such file" in result.stderr


@pytest.mark.opencl
def test_demo_round_trips_and_runs(tmp_path):
    result = _run_cli("demo", "--output", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "read back equal, field by field" in result.stdout
    assert "outputs [(1, 1, 1, 1000)]" in result.stdout
    assert (tmp_path / "mobilenet_v2_synthetic.ctx").stat().st_size > 13_000_000


@pytest.mark.opencl
def test_run_and_devices_commands(mobilenet_file):
    result = _run_cli("run", str(mobilenet_file), "--runs", "1")
    assert result.returncode == 0, result.stderr
    assert "memory: tensors" in result.stdout and "slowest nodes:" in result.stdout
    result = _run_cli("devices")
    assert result.returncode == 0 and result.stdout.startswith("* 0:0")
    if "Portable Computing Language" in result.stdout and platform.machine() == "x86_64":
        assert "compiles for " in result.stdout and "compiles for generic" not in result.stdout
    result = _run_cli("run", str(mobilenet_file), "--device", "no-such-device")
    assert result.returncode == 2 and "available devices" in result.stderr


@pytest.mark.opencl
def test_run_says_when_the_cpu_output_is_constant(tmp_path):
    # The shared MobileNetV2 has random weights: its softmax is one value everywhere, and a zero
    # error against it proves little. The report says so.
    model = str(shared_path("models", "mobilenet_v2.tflite"))
    result = _run_cli("run", model, "--runs", "1", "--json", "--serialization-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["reference_constant"] is True
    text = _run_cli("run", model, "--runs", "1", "--serialization-dir", str(tmp_path))
    assert text.returncode == 0 and "note: every CPU output value is the same" in text.stdout


@pytest.mark.opencl
def test_run_model_json_and_errors(tmp_path):
    model = str(shared_path("models", "small_cnn.tflite"))
    result = _run_cli("run", model, "--runs", "2", "--json", "--serialization-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # exactly one JSON object on stdout
    for key in (
        "delegated_nodes",
        "total_nodes",
        "partitions",
        "max_abs_error",
        "max_abs_reference",
        "init_ms",
        "latency_ms",
        "device",
        "precision",
        "storage_type",
    ):
        assert key in report, key
    assert report["delegated_nodes"] == report["total_nodes"] == 10
    assert report["max_abs_error"] <= 1e-4 * report["max_abs_reference"]
    assert report["reference_constant"] is False
    assert set(report["latency_ms"]) == {"delegate", "cpu"}
    assert "compiles kernels" in result.stderr  # progress goes to stderr
    text = _run_cli("run", model, "--runs", "1", "--serialization-dir", str(tmp_path))
    assert text.returncode == 0 and "cache hit" in text.stdout and "delegated: 10 of 10 nodes" in text.stdout
    bad = _run_cli("run", model, "--option", "precision=F8")
    assert bad.returncode == 2 and "precision must be one of" in bad.stderr
    bad = _run_cli("run", model, "--option", "nonsense")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr
    not_a_model = tmp_path / "broken.tflite"
    not_a_model.write_bytes(b"not a flatbuffer at all")
    bad = _run_cli("run", str(not_a_model))
    assert bad.returncode == 2 and "is not a TFLite model" in bad.stderr and "TFL3" in bad.stderr
