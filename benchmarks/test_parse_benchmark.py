"""pytest-benchmark figures for context parsing: ``pytest benchmarks/``.

The targets themselves (ratios, side by side) are checked by parse_speed.py.
"""

from __future__ import annotations

import pytest

from delegate import ContextFile, serialize_context
from delegate._generated.serialization_generated import InferenceContextT
from delegate.context.synthetic import synthetic_mobilenet


@pytest.fixture(scope="module")
def mobilenet_bytes() -> bytes:
    return serialize_context(synthetic_mobilenet())


def test_native_reader(benchmark, mobilenet_bytes):
    benchmark.group = "parse MobileNetV2-sized context"
    benchmark(lambda: ContextFile(mobilenet_bytes).close())


def test_native_reader_to_model(benchmark, mobilenet_bytes):
    benchmark.group = "parse MobileNetV2-sized context"
    benchmark(lambda: ContextFile(mobilenet_bytes).to_model())


def test_flatbuffers_object_api(benchmark, mobilenet_bytes):
    benchmark.group = "parse MobileNetV2-sized context"
    benchmark.pedantic(lambda: InferenceContextT.InitFromPackedBuf(mobilenet_bytes, 0), rounds=10)


def test_python_writer(benchmark):
    ctx = synthetic_mobilenet()
    benchmark.group = "write MobileNetV2-sized context"
    benchmark.pedantic(lambda: serialize_context(ctx), rounds=5)
