"""Writes the seed corpus of every fuzz target: small valid inputs the fuzzers mutate.

    python -m tests.fuzz.make_corpus OUT_DIR

OUT_DIR/ctx and OUT_DIR/context: small InferenceContext files (every table and enum populated, a
MobileNetV2-shaped context without weights, the runtime tests' chains, an empty context, and
sealed cache entries); OUT_DIR/settings: a selector byte (format, message) followed by settings in
binary, text and JSON; OUT_DIR/events: mini-benchmark storage files (START, END with results,
ERROR, and a torn tail) and decisions; OUT_DIR/model: TFLite models (built ones and the small shared
models). Nothing here is committed: it is regenerated on each run.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

import numpy as np

from delegate import serialize_context
from delegate._generated import configuration_pb2 as pb
from delegate._integrity import seal
from delegate.context import model as m
from delegate.context.synthetic import synthetic_mobilenet
from delegate.settings.codec import SettingsFormat, format_settings
from delegate.settings.decisions import append_event

from ..helpers import SHARED, populated_context
from ..runtime_helpers import chain
from ..tflite_builder import Op, T, build_model


def _contexts() -> list[bytes]:
    populated = populated_context()
    populated.nodes = populated.nodes[:2]
    mobilenet = synthetic_mobilenet(image_size=8, weight_scale=0)
    mobilenet.nodes = mobilenet.nodes[:4]
    out = [serialize_context(c, check_schedule=False) for c in (populated, mobilenet, chain(2), m.InferenceContext())]
    out.append(seal(out[2]))  # a serialization-cache entry
    return out


def _settings() -> list[bytes]:
    compute = pb.ComputeSettings()
    compute.preference = pb.LOW_LATENCY
    gpu = compute.tflite_settings.gpu_settings
    gpu.inference_priority1 = pb.GPU_PRIORITY_MIN_LATENCY
    gpu.inference_priority2 = pb.GPU_PRIORITY_MAX_PRECISION
    gpu.force_backend = pb.OPENCL
    compute.tflite_settings.fallback_settings.allow_automatic_fallback_on_compilation_error = True
    tflite = pb.TFLiteSettings()
    tflite.delegate = pb.XNNPACK
    tflite.xnnpack_settings.num_threads = 2
    tflite.cpu_settings.num_threads = 4
    out = []
    for selector_base, message in ((0, compute), (3, tflite)):
        for index, fmt in enumerate((SettingsFormat.BINARY, SettingsFormat.TEXT, SettingsFormat.JSON)):
            body = format_settings(message, fmt)
            out.append(bytes([selector_base + index]) + (body if isinstance(body, bytes) else body.encode()))
    return out


def _events(folder: Path) -> list[bytes]:
    settings = pb.TFLiteSettings()
    settings.gpu_settings.is_precision_loss_allowed = True
    start = pb.BenchmarkEvent(tflite_settings=settings, event_type=pb.START)
    end = pb.BenchmarkEvent(tflite_settings=settings, event_type=pb.END)
    end.result.initialization_time_us.append(1200)
    end.result.inference_time_us.extend([300, 280, 290])
    end.result.max_memory_kb = 4096
    end.result.ok = True
    error = pb.BenchmarkEvent(tflite_settings=settings, event_type=pb.ERROR)
    error.error.stage = pb.INFERENCE
    error.error.exit_code = 139
    path = folder / "events"
    for event in (start, end, start, error):
        append_event(path, event)
    full = path.read_bytes()
    decision = pb.BestAccelerationDecision(number_of_source_events=4, min_latency_event=end, min_inference_time_us=280)
    return [full, full[:-3], decision.SerializeToString()]


#: shared models up to this size seed the model target (larger ones slow every execution)
MAX_MODEL_SEED = 256 * 1024


def _models() -> list[bytes]:
    """TFLite models: built ones (ADD; a CONV_2D with options; an IF calling its other branch
    subgraphs is beyond the builder) and the shared models of up to MAX_MODEL_SEED bytes."""
    conv_weights = T((1, 1, 1, 1), np.ones((1, 1, 1, 1), np.float32))
    built = [
        build_model([T((2,)), T((2,)), T((2,))], [Op(0, [0, 1], [2])], [0, 1], [2]),
        build_model(
            [T((1, 2, 2, 1)), conv_weights, T((1, 2, 2, 1))],
            [Op(3, [0, 1, -1], [2], options=("Conv2DOptions", {"StrideW": 1, "StrideH": 1}))],
            [0],
            [2],
        ),
    ]
    shared = sorted((SHARED / "models").rglob("*.tflite")) if (SHARED / "models").is_dir() else []
    return built + [p.read_bytes() for p in shared if p.stat().st_size <= MAX_MODEL_SEED]


def write_corpus(out: Path) -> dict[str, int]:
    with tempfile.TemporaryDirectory() as tmp:
        seeds = {"ctx": _contexts(), "settings": _settings(), "events": _events(Path(tmp)), "model": _models()}
    seeds["context"] = seeds["ctx"]
    counts = {}
    for target, items in seeds.items():
        folder = out / target
        folder.mkdir(parents=True, exist_ok=True)
        for data in items:
            (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
        counts[target] = len(items)
    return counts


if __name__ == "__main__":
    print(write_corpus(Path(sys.argv[1])))
