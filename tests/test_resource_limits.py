"""Hostile but structurally valid contexts are refused before any large allocation.

Each context is built with the project's writer and is a valid file (the native reader accepts
it). ``Runtime.load`` must refuse it with an error saying what is wrong, while no OpenCL context
exists yet (so no device memory and no program can have been made: creating one fails the test)
and while Python has allocated little (tracemalloc, which sees numpy's buffers too).
"""

from __future__ import annotations

import dataclasses
import tracemalloc

import flatbuffers
import pytest

from delegate import ContextFile, ContextFormatError, DeviceResourceError, serialize_context
from delegate.context import model as m
from delegate.context.writer import _offset_vector, _write_table
from delegate.runtime import Runtime, driver
from delegate.runtime import runtime as runtime_module
from delegate.runtime.device import DeviceInfo
from delegate.runtime.limits import LIMITS, RuntimeLimits, check_context

from .runtime_helpers import chain, desc, scale_bias_op, single_node

GIB = 1 << 30
#: a large but finite device: 1 GiB per allocation, 16k x 16k images
DEVICE = DeviceInfo("fake platform", "fake device", "v", "1", "OpenCL 3.0", True, True, True, True, 1024,
                    (1024, 1024, 64), GIB, 4 * GIB, 1 << 16, 128, (16384, 16384), (2048, 2048, 2048), 2048,
                    1 << 27)  # fmt: skip
#: what "no large allocation" means here
MAX_PYTHON_BYTES = 16 << 20


@pytest.fixture
def no_device(monkeypatch):
    """The runtime sees DEVICE; making an OpenCL context (the first allocation) fails the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the runtime created an OpenCL context for a context it should have refused")

    monkeypatch.setattr(runtime_module, "select_device", lambda request=None: object())
    monkeypatch.setattr(runtime_module, "describe", lambda device: DEVICE)
    monkeypatch.setattr(runtime_module.driver, "Context", forbidden)


def _refused(data: bytes, error: type[Exception], match: str) -> Exception:
    ContextFile(data).close()  # structurally valid: the reader accepts it
    tracemalloc.start()
    try:
        with pytest.raises(error, match=match) as info:
            Runtime.load(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < MAX_PYTHON_BYTES, f"{peak} bytes allocated before refusing"
    return info.value


def _shared_nodes(count: int) -> bytes:
    """A context of ``count`` nodes that all point at one node table (a few bytes per node)."""
    builder = flatbuffers.Builder(1024)
    node = _write_table(builder, m.CLNode(gpu_op=m.GPUOperation(code="x"), name="n"))
    nodes = _offset_vector(builder, [node] * count)
    builder.StartObject(11)
    builder.PrependUOffsetTRelativeSlot(6, nodes, 0)
    builder.Finish(builder.EndObject())
    return bytes(builder.Output())


def test_a_million_shared_nodes_are_refused_by_the_reader(no_device):
    data = _shared_nodes(1_000_000)
    assert len(data) < 5 << 20
    tracemalloc.start()
    try:
        with pytest.raises(ContextFormatError, match=r"more than 1000000 tables \(limit\)") as info:
            Runtime.load(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.kind == "limit" and peak < MAX_PYTHON_BYTES


def test_a_hundred_thousand_shared_nodes_are_refused_before_conversion(no_device, monkeypatch):
    data = _shared_nodes(100_000)
    monkeypatch.setattr(ContextFile, "to_model", lambda self: pytest.fail("converted before the node count check"))
    exc = _refused(data, ContextFormatError, "100000 nodes, over the limit of 4096")
    assert exc.kind == "limit" and "recompile it from the model" in str(exc)


def test_node_count_just_over_the_limit_is_refused(no_device):
    _refused(_shared_nodes(LIMITS.max_nodes + 1), ContextFormatError, f"{LIMITS.max_nodes + 1} nodes")


def test_huge_declared_tensor_is_refused(no_device):
    ctx = single_node(scale_bias_op(1.0, bytes(16)), desc(4), desc(4, h=65536, w=65536, b=1024))
    exc = _refused(serialize_context(ctx), DeviceResourceError, r"tensor 1 \(shape BHWDC 1024x65536x65536x1x4\) needs")
    assert "CL_DEVICE_MAX_MEM_ALLOC_SIZE" in str(exc) and "the context is corrupt or hostile" in str(exc)


def test_megabytes_of_kernel_source_are_refused(no_device, monkeypatch):
    code = "MAIN_FUNCTION($0) {}\n" + "// padding\n" * (LIMITS.max_node_source_bytes // 11 + 1)
    ctx = single_node(scale_bias_op(1.0, bytes(16), code=code), desc(4), desc(4))
    monkeypatch.setattr(ContextFile, "to_model", lambda self: pytest.fail("converted before the source check"))
    tracemalloc.start()
    try:
        data = serialize_context(ctx)
    finally:
        tracemalloc.stop()
    _refused(data, ContextFormatError, "node 0 has 1[0-9]{6} bytes of kernel source, over the limit of 1048576")


def test_declared_string_length_of_gigabytes_is_a_format_error():
    ctx = single_node(scale_bias_op(1.0, bytes(16), code="MAIN_FUNCTION($0) {}"), desc(4), desc(4))
    data = bytearray(serialize_context(ctx))
    at = bytes(data).find(b"MAIN_FUNCTION") - 4
    data[at : at + 4] = (0x7FFF_FFF0).to_bytes(4, "little")
    with pytest.raises(ContextFormatError, match=r"string of length 2147483632 .* runs past"):
        ContextFile(bytes(data))


@pytest.mark.parametrize(
    "change,error,match",
    [
        ({"work_group_size": m.Int3(2**31 - 1, 1, 1)}, ContextFormatError, "work_group_size 2147483647x1x1"),
        (
            {"tensor_to_grid": m.TensorToGrid.CUSTOM, "grid_size": m.Int3(2**20, 2**20, 2**20)},
            ContextFormatError,
            "grid_size 1048576x1048576x1048576 is 1152921504606846976 work items",
        ),
    ],
)
def test_huge_launch_geometry_is_refused(no_device, change, error, match):
    op = dataclasses.replace(scale_bias_op(1.0, bytes(16)), **change)
    _refused(serialize_context(single_node(op, desc(4), desc(4))), error, match)


def _with_object(**arguments) -> bytes:
    op = m.GPUOperation(code="MAIN_FUNCTION($0) {}", arguments=m.Arguments(**arguments),
                        src_tensors_names=["src_tensor"], dst_tensors_names=["dst_tensor"])  # fmt: skip
    return serialize_context(single_node(op, desc(4), desc(4)))


@pytest.mark.parametrize(
    "arguments,match",
    [
        ({"buffer_objects": [m.BufferDescriptorMapValue("w", m.BufferDescriptor(size=2**31 - 1))]}, "buffer object"),
        (
            {"tensor_linear_objects": [m.TensorLinearDescriptorMapValue("w", m.TensorLinearDescriptor(size=2**30))]},
            "linear object 'w' needs 17179869184 bytes",
        ),
        (
            {
                "texture2d_objects": [
                    m.Texture2DDescriptorMapValue("w", m.Texture2DDescriptor(size=m.Int2(2**30, 2**30)))
                ]
            },
            "texture object 'w' of 1073741824x1073741824 texels",
        ),
        (
            {"tensor_objects": [m.TensorDescriptorMapValue("w", desc(4, h=2**20, w=2**20))]},
            "constant tensor 'w'",
        ),
    ],
)
def test_huge_objects_without_data_are_refused(no_device, arguments, match):
    _refused(_with_object(**arguments), DeviceResourceError, match)


def test_limits_can_be_tightened_and_a_normal_context_passes():
    ctx = chain(3)
    check_context(ctx, DEVICE)
    with pytest.raises(ContextFormatError, match="more than 100 bytes of source together"):
        check_context(ctx, DEVICE, RuntimeLimits(max_total_source_bytes=100))
    with pytest.raises(ContextFormatError, match="5 tensors, over the limit of 4"):
        check_context(ctx, DEVICE, RuntimeLimits(max_tensors=4))


@pytest.mark.opencl
def test_huge_tensor_on_the_real_device_is_refused_before_allocation(monkeypatch):
    from delegate.runtime.device import describe, select_device

    info = describe(select_device())
    side = 1 << 16
    ctx = single_node(scale_bias_op(1.0, bytes(16)), desc(4), desc(4, h=side, w=side, b=1 << 10))
    assert 16 * side * side * (1 << 10) > info.max_mem_alloc_bytes
    created = []
    real_buffer = driver.buffer
    monkeypatch.setattr(driver, "buffer", lambda *a, **k: created.append(a) or real_buffer(*a, **k))
    tracemalloc.start()
    try:
        with pytest.raises(DeviceResourceError, match=f"tensor 1 .* allows at most {info.max_mem_alloc_bytes}"):
            Runtime.load(ctx)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert created == [] and peak < MAX_PYTHON_BYTES
