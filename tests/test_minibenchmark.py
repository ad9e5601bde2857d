"""The mini-benchmark: subprocess runs, crash-proof storage, the decision and its use."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import delegate
from delegate.minibenchmark import append_event, read_decision, read_events, run_minibenchmark, runner
from delegate.settings import configuration_pb2 as pb

from .helpers import shared_path

pytestmark = pytest.mark.opencl

FAULT_WORKER = str(Path(__file__).resolve().parent / "minibenchmark_fault_worker.py")


def _gpu(**kw) -> pb.TFLiteSettings:
    return pb.TFLiteSettings(delegate=pb.GPU, gpu_settings=pb.GPUSettings(**kw))


def _settings(model: str, storage, *tests: pb.TFLiteSettings) -> pb.MinibenchmarkSettings:
    s = pb.MinibenchmarkSettings()
    s.model_file.filename = model
    if storage is not None:
        s.storage_paths.storage_file_path = str(storage)
    for t in tests:
        s.settings_to_test.add().CopyFrom(t)
    return s


def test_storage_survives_a_torn_last_record(tmp_path):
    path = tmp_path / "events"
    events = [pb.BenchmarkEvent(event_type=pb.START, boottime_us=i, tflite_settings=_gpu()) for i in range(3)]
    for e in events:
        append_event(path, e)
    whole = path.read_bytes()
    last = len(events[-1].SerializeToString()) + 1
    assert read_events(path) == (events, False)
    for cut in range(len(whole) - last, len(whole)):
        path.write_bytes(whole[:cut])
        got, torn = read_events(path)
        assert got == events[:2] and torn == (cut > len(whole) - last), cut
    path.write_bytes(whole[: len(whole) - last] + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
    assert read_events(path) == (events[:2], True)


def test_mobilenet_four_settings_and_the_decision(tmp_path):
    model = str(shared_path("models", "mobilenet_v2.tflite"))
    storage = tmp_path / "mobilenet.events"
    invalid = _gpu(inference_priority1=pb.GPU_PRIORITY_AUTO, inference_priority2=pb.GPU_PRIORITY_MIN_LATENCY)
    report = run_minibenchmark(
        _settings(
            model,
            storage,
            _gpu(inference_priority1=pb.GPU_PRIORITY_MAX_PRECISION),
            _gpu(is_precision_loss_allowed=True),
            _gpu(inference_priority1=pb.GPU_PRIORITY_MIN_MEMORY_USAGE),
            invalid,
        ),
        runs=3,
        init_runs=1,
    )
    events, torn = read_events(storage)
    assert not torn and len(events) == 8
    assert [pb.BenchmarkEventType.Name(e.event_type) for e in events] == ["START", "END"] * 3 + ["START", "ERROR"]
    for e in events:  # bytes written by this package parse with the schema's message
        assert pb.BenchmarkEvent.FromString(e.SerializeToString()) == e
    ends = [e for e in events if e.event_type == pb.END]
    assert all(e.result.ok and len(e.result.inference_time_us) == 3 and e.result.max_memory_kb > 0 for e in ends)
    assert {m.name for m in ends[0].result.metrics} == {"max_abs_error", "relative_error", "kl_divergence"}
    error = events[-1].error
    assert error.stage == pb.INITIALIZATION and error.mini_benchmark_error_code == 3 and error.exit_code == 3
    decision = read_decision(storage)
    assert decision == report.decision and decision.number_of_source_events == 8
    fastest = min(ends, key=lambda e: statistics.median(e.result.inference_time_us))
    assert decision.min_latency_event == fastest
    assert decision.min_inference_time_us == int(statistics.median(fastest.result.inference_time_us))
    # The decision is usable: the interpreter takes the recorded best settings.
    interpreter = delegate.Interpreter(model, settings=storage, program_cache="none")
    assert interpreter.effective.engine == "gpu"
    expected = delegate.api.effective_settings(fastest.tflite_settings, settings_type=pb.TFLiteSettings)
    assert interpreter.effective.options == expected.options


def test_a_killed_run_is_an_error_with_its_signal(tmp_path, monkeypatch):
    model = str(shared_path("models", "small_cnn.tflite"))
    storage = tmp_path / "events"
    monkeypatch.setattr(runner, "WORKER", (FAULT_WORKER, "crash", "INFERENCE"))
    report = run_minibenchmark(_settings(model, storage, _gpu()), runs=2, init_runs=1)
    events, _ = read_events(storage)
    assert [e.event_type for e in events] == [pb.START, pb.ERROR]
    error = events[1].error
    assert error.signal == signal.SIGKILL and error.stage == pb.INFERENCE and error.mini_benchmark_error_code == 1
    assert "crashed (SIGKILL) during inference" in report.rows[0].status
    # No correct configuration: the decision sends the model to CPU and says why.
    interpreter = delegate.Interpreter(model, settings=storage)
    assert interpreter.effective.engine == "builtin" and "no correct configuration" in interpreter.effective.reason


def test_a_hanging_run_is_stopped_at_the_deadline(tmp_path, monkeypatch):
    model = str(shared_path("models", "small_cnn.tflite"))
    monkeypatch.setattr(runner, "WORKER", (FAULT_WORKER, "hang", "INITIALIZATION"))
    report = run_minibenchmark(_settings(model, tmp_path / "events", _gpu()), runs=2, init_runs=1, timeout_s=8)
    error = report.events[1].error
    assert error.mini_benchmark_error_code == 2 and error.stage == pb.INITIALIZATION
    assert "timed out" in report.rows[0].status


def test_model_by_file_descriptor_and_wrong_results_flagged(tmp_path):
    model = shared_path("models", "small_cnn.tflite")
    data = model.read_bytes()
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\0" * 100 + data + b"\0" * 7)
    fd = os.open(blob, os.O_RDONLY)
    try:
        s = _settings("", None, pb.TFLiteSettings(delegate=pb.XNNPACK))
        s.model_file.ClearField("filename")
        s.model_file.fd, s.model_file.offset, s.model_file.length = fd, 100, len(data)
        report = run_minibenchmark(s, runs=2, init_runs=1)
    finally:
        os.close(fd)
    assert report.rows[0].ok and report.rows[0].max_abs_error == 0.0
    assert report.decision.min_latency_event.tflite_settings.delegate == pb.XNNPACK


def test_cli_table_and_json(tmp_path):
    model = str(shared_path("models", "small_cnn.tflite"))
    a, b = tmp_path / "f32.textproto", tmp_path / "xnn.textproto"
    a.write_text("delegate: GPU gpu_settings { inference_priority1: GPU_PRIORITY_MAX_PRECISION }")
    b.write_text("delegate: XNNPACK")
    command = [
        sys.executable,
        "-m",
        "delegate",
        "minibenchmark",
        model,
        "--settings",
        str(a),
        "--settings",
        str(b),
        "--storage",
        str(tmp_path / "ev"),
        "--runs",
        "2",
    ]
    text = subprocess.run(command, capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    assert "median ms" in text.stdout and "best:" in text.stdout and "ev.best.fb" in text.stdout
    assert "mini-benchmark: settings" not in text.stderr  # progress is drawn only on a terminal
    result = subprocess.run([*command, "--json"], capture_output=True, text=True)
    report = json.loads(result.stdout)
    assert [r["settings"] for r in report["rows"]] == ["GPU MAX_PRECISION/AUTO/AUTO", "XNNPACK"]
    assert report["best"] in ("GPU MAX_PRECISION/AUTO/AUTO", "XNNPACK")
    assert all(r["ok"] for r in report["rows"])
    events, _ = read_events(tmp_path / "ev")
    assert len(events) == 8  # two runs of the command, four events each
    assert np.isfinite([r["median_ms"] for r in report["rows"]]).all()


def test_a_start_left_by_a_dead_benchmark_is_closed_as_an_error(tmp_path):
    from delegate.minibenchmark.runner import close_dangling_starts

    path = tmp_path / "events"
    append_event(path, pb.BenchmarkEvent(event_type=pb.START, tflite_settings=_gpu()))
    append_event(path, pb.BenchmarkEvent(event_type=pb.START, tflite_settings=_gpu(is_precision_loss_allowed=True)))
    assert close_dangling_starts(path) == 2
    events, _ = read_events(path)
    assert [e.event_type for e in events] == [pb.START, pb.START, pb.ERROR, pb.ERROR]
    assert events[3].tflite_settings.gpu_settings.is_precision_loss_allowed
    assert close_dangling_starts(path) == 0  # already closed


def test_cli_without_settings_tries_the_defaults(tmp_path):
    model = str(shared_path("models", "small_cnn.tflite"))
    command = [sys.executable, "-m", "delegate", "minibenchmark", model, "--storage", str(tmp_path / "ev")]
    result = subprocess.run([*command, "--runs", "2", "--json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "no --settings given: trying" in result.stderr
    report = json.loads(result.stdout)
    assert [r["settings"] for r in report["rows"]] == ["GPU MAX_PRECISION/AUTO/AUTO", "GPU precision loss", "XNNPACK"]
    assert all(r["ok"] for r in report["rows"])
    assert (tmp_path / "ev.best.fb").exists()


def test_empty_settings_to_test_says_what_to_do():
    from delegate.errors import SettingsError

    with pytest.raises(SettingsError, match="default_settings_to_test"):
        run_minibenchmark(pb.MinibenchmarkSettings())


@pytest.mark.parametrize(
    "settings,label",
    [
        (pb.TFLiteSettings(delegate=pb.NNAPI), "NNAPI"),
        (pb.TFLiteSettings(delegate=pb.EDGETPU), "EDGETPU"),
        (pb.TFLiteSettings(delegate=pb.XNNPACK), "XNNPACK"),
        (pb.TFLiteSettings(delegate=pb.GPU), "GPU"),
        (pb.TFLiteSettings(), "GPU"),  # unset: the GPU delegate
    ],
)
def test_rows_are_labelled_with_their_delegate(settings, label):
    assert runner.describe(settings) == label


def test_without_a_model_it_says_how_to_give_one():
    result = subprocess.run(
        [sys.executable, "-m", "delegate", "minibenchmark", "--settings", "/dev/null"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (
        result.returncode == 2 and "no model to benchmark" in result.stderr and "model_file needs" not in result.stderr
    )
