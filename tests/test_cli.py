"""``python -m delegate inspect`` and ``demo``."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from delegate import write_context
from delegate.cli import error_message, main
from delegate.compiler.graph import Builtin
from delegate.context.synthetic import synthetic_mobilenet
from delegate.model_run import compare_output, format_output, input_value, parse_input_shapes

from .helpers import populated_context, shared_path
from .tflite_builder import Op, T, build_model


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


def test_inspect_says_what_a_stored_f16_runs_as(tmp_path, capsys):
    """The file stores F16; on a device without cl_khr_fp16 it runs as F32_F16, which run reports."""
    from delegate.context.model import CalculationsPrecision

    path = write_context(synthetic_mobilenet(image_size=32, precision=CalculationsPrecision.F16), tmp_path / "f16.ctx")
    assert main(["inspect", str(path)]) == 0
    assert "precision F16 (runs as F32_F16 on a device without cl_khr_fp16" in capsys.readouterr().out


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
    result = _run_cli("run", str(mobilenet_file), "--runs", "1", "--profile")
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
    # small_cnn would stay on CPU by default (cpu_when_faster; tests/test_cpu_choice.py)
    off = ("--option", "cpu_when_faster=false")
    result = _run_cli("run", model, "--runs", "2", "--json", "--serialization-dir", str(tmp_path), *off)
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
    (output,) = report["outputs"]
    assert output["name"] and output["dtype"] == "float32" and output["shape"] == [1, 10]
    assert output["max_abs_error"] == report["max_abs_error"]
    assert output["max_abs_reference"] == report["max_abs_reference"]
    assert output["relative_error"] == report["max_relative_error"] <= 1e-4
    assert "quantization" not in output and "exact_matches" not in output
    assert report["reference_constant"] is False
    assert set(report["latency_ms"]) == {"delegate", "cpu"}
    assert "with the OpenCL delegate ..." in result.stderr  # progress goes to stderr
    text = _run_cli("run", model, "--runs", "1", "--serialization-dir", str(tmp_path), *off)
    assert text.returncode == 0 and "cache hit" in text.stdout and "delegated: 10 of 10 nodes" in text.stdout
    assert "CPU choice: partition of 10 node(s) delegated (cpu_when_faster off)" in text.stdout
    default = _run_cli("run", model, "--runs", "1")
    assert default.returncode == 0 and "delegated: 0 of 10 nodes" in default.stdout
    assert "CPU choice: partition of 10 node(s) stays on CPU (faster there)" in default.stdout
    assert "on CPU (10 nodes: " in default.stdout and "faster on TFLite's CPU kernels" in default.stdout
    assert default.stdout.count("faster on TFLite's CPU kernels") == 1  # one line per reason, not per node
    assert "device: none (no node runs on the delegate)" in default.stdout
    bad = _run_cli("run", model, "--option", "precision=F8")
    assert bad.returncode == 2 and "precision must be one of" in bad.stderr
    assert "loading" not in bad.stderr  # the option error comes first, alone
    bad = _run_cli("run", model, "--option", "nonsense")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr
    not_a_model = tmp_path / "broken.tflite"
    not_a_model.write_bytes(b"not a flatbuffer at all")
    bad = _run_cli("run", str(not_a_model))
    assert bad.returncode == 2 and "is not a TFLite model" in bad.stderr and "TFL3" in bad.stderr


def _detail(dtype, shape, scale=0.0, zero_point=0, name="t"):
    return {
        "name": name,
        "dtype": dtype,
        "shape": np.array(shape),
        "quantization": (scale, zero_point),
        "quantization_parameters": {
            "scales": np.array([scale] if scale else [], np.float32),
            "zero_points": np.array([zero_point] if scale else [], np.int32),
            "quantized_dimension": 0,
        },
    }


def test_inputs_per_dtype():
    rng = np.random.default_rng(0)
    x = input_value(_detail(np.float32, (2, 500)), rng)
    assert x.dtype == np.float32 and x.shape == (2, 500) and 0 <= x.min() and x.max() < 1
    q = input_value(_detail(np.int8, (4000,), 0.1, -128), rng)  # quantized: the dtype's full range
    assert q.dtype == np.int8 and q.min() == -128 and q.max() == 127
    u = input_value(_detail(np.uint8, (4000,), 0.02, 3), rng)
    assert u.dtype == np.uint8 and u.min() == 0 and u.max() == 255
    h = input_value(_detail(np.int16, (4000,), 1e-3, 0), rng)
    assert h.dtype == np.int16 and h.min() < -30000 and h.max() > 30000
    for dtype in (np.int32, np.int64, np.int8):  # not quantized: small values
        i = input_value(_detail(dtype, (100,)), rng)
        assert i.dtype == dtype and set(np.unique(i)) <= {0, 1, 2, 3}
    b = input_value(_detail(np.bool_, (100,)), rng)
    assert b.dtype == np.bool_ and b.any() and not b.all()
    first = [input_value(_detail(np.float32, (3,)), np.random.default_rng(5)) for _ in range(2)]
    assert np.array_equal(*first)


def test_quantized_outputs_compare_in_steps_and_real_values():
    want = np.array([[0, 10, 200, 255]], np.uint8)
    got = np.array([[0, 12, 199, 255]], np.uint8)
    record = compare_output(_detail(np.uint8, (1, 4), 0.5, 10, name="score"), got, want)
    assert record["name"] == "score" and record["dtype"] == "uint8" and record["shape"] == [1, 4]
    assert record["quantization"] == {"scale": 0.5, "zero_point": 10}
    assert record["exact_matches"] == 2 and record["elements"] == 4 and record["max_abs_steps"] == 2
    assert record["max_abs_error"] == 1.0  # two steps of 0.5
    assert record["max_abs_reference"] == (255 - 10) * 0.5
    assert record["relative_error"] == 1.0 / 122.5
    text = format_output(record)
    assert "score uint8 1x4 (scale 0.5, zero point 10): 2 of 4 equal, max 2 steps; dequantized max abs error 1" in text
    ints = compare_output(_detail(np.int32, (3,)), np.array([1, 2, 9]), np.array([1, 2, 3]))
    assert ints["max_abs_steps"] == 6 and ints["max_abs_error"] == 6.0 and "quantization" not in ints
    zeros = compare_output(_detail(np.float32, (2,)), np.ones(2, np.float32), np.zeros(2, np.float32))
    assert zeros["relative_error"] is None  # no ratio to an all-zero reference
    with pytest.raises(RuntimeError, match="shape"):
        compare_output(_detail(np.float32, (2,)), np.zeros(3, np.float32), np.zeros(2, np.float32))


@pytest.mark.opencl
def test_run_an_int8_model_with_a_uint8_output():
    # okay_nabu: int8 input, uint8 output, resource variables (compared on each interpreter's first invoke).
    model = str(shared_path("models", "real", "pymicro-wakeword__okay_nabu.tflite"))
    result = _run_cli("run", model, "--runs", "2", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (output,) = report["outputs"]
    assert output["dtype"] == "uint8" and output["shape"] == [1, 1]
    assert output["quantization"]["scale"] == pytest.approx(1 / 256) and output["quantization"]["zero_point"] == 0
    assert output["exact_matches"] == output["elements"] == 1 and output["max_abs_steps"] == 0
    assert report["max_abs_error"] == output["max_abs_error"] == 0.0
    assert report["reference_constant"] is False  # one value is not "every value the same"
    assert "VAR_HANDLE is not supported by the compiler" in " ".join(report["cpu_nodes"].values())
    text = _run_cli("run", model, "--runs", "1")
    assert text.returncode == 0 and "uint8 1x1 (scale 0.00391, zero point 0): 1 of 1 equal, max 0 steps" in text.stdout
    # Two subgraphs (the main graph and CALL_ONCE's initializer), each reported.
    assert [g["index"] for g in report["subgraphs"]] == [0, 1]
    assert sum(g["total_nodes"] for g in report["subgraphs"]) == report["total_nodes"]


def test_input_shapes_parse_by_name_and_in_order():
    assert parse_input_shapes(["1,1760", "audio=1x16000", "2,3"]) == {0: (1, 1760), "audio": (1, 16000), 1: (2, 3)}
    for bad in ["1,a", "x=", "0,4", "-1"]:
        with pytest.raises(ValueError, match="--input-shape"):
            parse_input_shapes([bad])


def test_an_error_without_a_message_is_still_explained():
    assert "no message from the TFLite runtime" in error_message(RuntimeError(""))
    assert error_message(RuntimeError(" what failed ")) == "what failed"


@pytest.mark.opencl
def test_run_resizes_inputs_before_comparing(tmp_path):
    # An input stored as 1x4 run at 3x8 (models with open dims, such as openWakeWord's mel front end,
    # store a placeholder shape that does not run).
    model = build_model([T((1, 4)), T((1, 4))], [Op(Builtin.TANH, [0], [1])], [0], [1])
    path = tmp_path / "tanh.tflite"
    path.write_bytes(model)
    off = ("--option", "cpu_when_faster=false")  # a one-node model, delegated whatever its size
    result = _run_cli("run", str(path), "--runs", "1", "--json", "--input-shape", "t0=3,8", *off)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["outputs"][0]["shape"] == [3, 8] and report["delegated_nodes"] == 1
    assert report["max_relative_error"] <= 1e-6
    missing = _run_cli("run", str(path), "--runs", "1", "--input-shape", "nope=3,8")
    assert missing.returncode == 2 and "has no input 'nope' (inputs: t0)" in missing.stderr


def test_interpreter_explains_an_error_tflite_gives_without_a_message(monkeypatch):
    import types

    import delegate.api as api

    def silent_failure(**kwargs):
        raise RuntimeError("")  # what tflite-runtime raises when ModifyGraphWithDelegate fails silently

    monkeypatch.setattr(api, "host_runtime", lambda: types.SimpleNamespace(Interpreter=silent_failure))
    monkeypatch.setattr(api, "load_delegate", lambda **options: object())
    with pytest.raises(RuntimeError, match="failed to apply the OpenCL delegate without giving a reason"):
        api.Interpreter(str(shared_path("models", "small_cnn.tflite")))  # a file: the host is what fails


def test_a_closed_pipe_ends_quietly(tmp_path):
    # `python -m delegate ... | head`: the reader has gone before the output is written
    read, write = os.pipe()
    os.close(read)
    settings = Path(__file__).resolve().parents[1] / "examples" / "settings" / "f32.textproto"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "delegate", "settings", "show", str(settings)],
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert result.returncode == 141 and result.stderr == "", result.stderr


@pytest.mark.parametrize(
    "args,says",
    [
        (("run", "m.tflite", "--runs", "-5"), "must be 0 or more, not -5"),
        (("minibenchmark", "m.tflite", "--runs", "0"), "must be at least 1, not 0"),
        (("minibenchmark", "m.tflite", "--timeout", "0"), "above 0, not 0"),
        (("minibenchmark", "m.tflite", "--timeout", "nan"), "above 0, not nan"),
    ],
)
def test_counts_and_timeouts_that_leave_nothing_to_do_are_refused(args, says):
    result = _run_cli(*args)
    assert result.returncode == 2 and says in result.stderr and result.stdout == ""


def test_run_on_a_file_of_neither_kind_says_so(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes\n")
    result = _run_cli("run", str(notes))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "neither a TFLite model" in result.stderr and "nor a valid InferenceContext" in result.stderr


@pytest.mark.opencl
def test_run_on_a_serialized_partition_uses_the_program_binaries_beside_it(tmp_path):
    model = str(shared_path("models", "small_cnn.tflite"))
    folder = tmp_path / "serialized"
    made = _run_cli(
        "run", model, "--runs", "1", "--serialization-dir", str(folder), "--option", "cpu_when_faster=false",
        "--option", "precision=F16",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    (context,) = folder.glob("*.ctx")
    env = {"XDG_CACHE_HOME": str(tmp_path / "empty-cache"), "POCL_CACHE_DIR": str(tmp_path / "empty-pocl")}
    result = subprocess.run(
        [sys.executable, "-m", "delegate", "run", str(context), "--runs", "1"],
        capture_output=True, text=True, env={**os.environ, **env}, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "programs built 0, from cache" in result.stdout, result.stdout  # the binaries the plugin stored
    # what the stored F16 ran as: F32_F16 on a device without cl_khr_fp16 (PoCL), saying so
    assert "precision F32_F16 (stored F16)" in result.stdout or "precision F16\n" in result.stdout, result.stdout


@pytest.mark.opencl
def test_run_with_no_timed_runs_compares_only_and_writes_valid_json():
    model = str(shared_path("models", "small_cnn.tflite"))
    result = _run_cli("run", model, "--runs", "0", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} is not JSON"))
    assert report["latency_ms"] == {"delegate": None, "cpu": None} and report["max_abs_error"] is not None
    text = _run_cli("run", model, "--runs", "0")
    assert text.returncode == 0 and "latency (median): not timed (--runs 0)" in text.stdout
