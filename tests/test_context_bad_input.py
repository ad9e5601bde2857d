"""Hostile and corrupt InferenceContext buffers: a ContextFormatError or a valid parse, never a crash."""

from __future__ import annotations

import random
import struct

import flatbuffers
import pytest

from delegate import ContextFile, ContextFormatError, ReadLimits, serialize_context
from delegate.context import model

from .helpers import populated_context, shared_path


@pytest.fixture(scope="module")
def small_file() -> bytes:
    ctx = model.InferenceContext(
        need_flush=True,
        precision=model.CalculationsPrecision.F16,
        nodes=[
            model.CLNode(
                name="add",
                input_ids=[0, 1],
                output_ids=[2],
                gpu_op=model.GPUOperation(
                    code="MAIN_FUNCTION($0) { }",
                    arguments=model.Arguments(
                        int_values=[model.IntValue("n", 4, True, 0)],
                        buffer_objects=[
                            model.BufferDescriptorMapValue("w", model.BufferDescriptor(data=b"\x01\x02\x03"))
                        ],
                    ),
                    grid_size=model.Int3(4, 1, 1),
                    src_tensors_names=["a", "b"],
                ),
            )
        ],
        tensors=[model.TensorDescWithId(model.TensorDescriptor(shape=model.BHWDC(1, 2, 2, 1, 3)), i) for i in range(3)],
        input_ids=[0, 1],
        output_ids=[2],
        variable_ids_and_refs=[model.PairOfValueIds(2, 7)],
    )
    return serialize_context(ctx)


def _read(data: bytes) -> model.InferenceContext | None:
    """The model when ``data`` verifies, None when it is rejected with ContextFormatError."""
    try:
        ctx = ContextFile(data)
    except ContextFormatError as exc:
        assert exc.detail and exc.offset <= max(len(data), 1)
        return None
    return ctx.to_model()  # must convert without any other exception


def test_every_truncation_is_rejected_unless_only_padding_is_cut(small_file):
    whole = ContextFile(small_file).to_model()
    rejected = 0
    for cut in range(len(small_file)):
        back = _read(small_file[:cut])
        # FlatBuffers end in alignment padding: cutting only that leaves a valid, identical context.
        assert back is None or back == whole, cut
        rejected += back is None
    assert rejected >= len(small_file) - 4


def test_seeded_bit_flips_never_crash(small_file):
    rng = random.Random(1234)
    rejected = 0
    for _ in range(5000):
        data = bytearray(small_file)
        for _ in range(rng.randint(1, 4)):
            bit = rng.randrange(len(data) * 8)
            data[bit // 8] ^= 1 << (bit % 8)
        rejected += _read(bytes(data)) is None
    assert rejected > 500  # flips are caught, not silently accepted in bulk


@pytest.mark.parametrize("word", [0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFC, 0xFFFFFFFF, "len", "len-4"])
def test_forged_offsets_and_lengths_at_every_word(small_file, word):
    for pos in range(0, len(small_file) - 3, 4):
        value = {"len": len(small_file), "len-4": len(small_file) - 4}.get(word, word)
        data = small_file[:pos] + struct.pack("<I", value) + small_file[pos + 4 :]
        _read(data)


def test_empty_and_tiny_buffers():
    with pytest.raises(ContextFormatError, match="empty"):
        ContextFile(b"")
    with pytest.raises(ContextFormatError, match="too short"):
        ContextFile(b"\x0c\x00\x00\x00\x00\x00")


def test_a_tflite_model_is_named_as_such():
    data = shared_path("models", "small_cnn.tflite").read_bytes()
    with pytest.raises(ContextFormatError, match="TensorFlow Lite model") as info:
        ContextFile(data)
    assert info.value.offset == 4


def test_other_flatbuffers_schemas_are_rejected_or_parse():
    # A TFLite model with its identifier blanked out: another schema, nothing to recognise it by.
    data = bytearray(shared_path("models", "small_cnn.tflite").read_bytes())
    data[4:8] = b"\0\0\0\0"
    assert _read(bytes(data)) is None
    # A table of some other schema: one string field and one int field.
    b = flatbuffers.Builder(64)
    s = b.CreateString("not a context")
    b.StartObject(8)
    b.PrependUOffsetTRelativeSlot(6, s, 0)  # where InferenceContext keeps its nodes vector
    b.PrependInt32Slot(2, 99, 0)
    b.Finish(b.EndObject())
    with pytest.raises(ContextFormatError, match=r"nodes\[\d+\]|nodes"):
        ContextFile(bytes(b.Output()))


def test_error_names_field_path_and_offset(small_file):
    # Forge the element count of the `input_ids` vector of the root table.
    ctx_root = struct.unpack_from("<I", small_file, 0)[0]
    vt = ctx_root - struct.unpack_from("<i", small_file, ctx_root)[0]
    field_off = struct.unpack_from("<H", small_file, vt + 4 + 2 * 8)[0]  # slot 8: input_ids
    at = ctx_root + field_off
    vec = at + struct.unpack_from("<I", small_file, at)[0]
    data = bytearray(small_file)
    struct.pack_into("<I", data, vec, 0x40000000)
    with pytest.raises(ContextFormatError) as info:
        ContextFile(bytes(data))
    err = info.value
    assert "InferenceContext.input_ids" in str(err)
    assert "runs past" in str(err)
    assert err.offset == vec


def test_bad_enum_bool_and_utf8_are_reported():
    def table(add) -> bytes:
        b = flatbuffers.Builder(64)
        b.StartObject(11)
        add(b)
        b.Finish(b.EndObject())
        return bytes(b.Output())

    with pytest.raises(ContextFormatError, match=r"InferenceContext\.precision: enum value 9"):
        ContextFile(table(lambda b: b.PrependInt8Slot(4, 9, 0)))
    with pytest.raises(ContextFormatError, match=r"InferenceContext\.need_flush: bool field holds 2"):
        ContextFile(table(lambda b: b.PrependUint8Slot(0, 2, 0)))

    b = flatbuffers.Builder(64)
    name = b.CreateByteVector(b"\xff\xfe")  # same layout as a string, but not UTF-8 (and no NUL)
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(3, name, 0)
    node = b.EndObject()
    b.StartVector(4, 1, 4)
    b.PrependUOffsetTRelative(node)
    nodes = b.EndVector()
    b.StartObject(11)
    b.PrependUOffsetTRelativeSlot(6, nodes, 0)
    b.Finish(b.EndObject())
    with pytest.raises(ContextFormatError, match=r"nodes\[0\]\.name: string at byte \d+ is not"):
        ContextFile(bytes(b.Output()))


def _dag_context(nodes: int, refs: int) -> bytes:
    """``nodes`` entries all pointing at one node, whose arguments hold ``refs`` entries all pointing
    at one tensor ref: a small file that expands to nodes * refs tables."""
    b = flatbuffers.Builder(1024)
    key = b.CreateString("t")
    b.StartObject(2)
    b.PrependUOffsetTRelativeSlot(0, key, 0)
    entry = b.EndObject()
    b.StartVector(4, refs, 4)
    for _ in range(refs):
        b.PrependUOffsetTRelative(entry)
    ref_vec = b.EndVector()
    b.StartObject(14)
    b.PrependUOffsetTRelativeSlot(9, ref_vec, 0)
    args = b.EndObject()
    b.StartObject(17)
    b.PrependUOffsetTRelativeSlot(0, args, 0)
    op = b.EndObject()
    b.StartObject(4)
    b.PrependUOffsetTRelativeSlot(0, op, 0)
    node = b.EndObject()
    b.StartVector(4, nodes, 4)
    for _ in range(nodes):
        b.PrependUOffsetTRelative(node)
    node_vec = b.EndVector()
    b.StartObject(11)
    b.PrependUOffsetTRelativeSlot(6, node_vec, 0)
    b.Finish(b.EndObject())
    return bytes(b.Output())


def test_shared_offsets_cannot_blow_up_work_or_memory():
    small = _dag_context(3, 3)
    assert len(ContextFile(small).to_model().nodes[2].gpu_op.arguments.tensor_refs) == 3
    # 80 KB of offsets that expand to 10 million tables.
    hostile = _dag_context(10_000, 1_000)
    assert len(hostile) < 100_000
    with pytest.raises(ContextFormatError, match=r"tables|memory") as info:
        ContextFile(hostile)
    assert info.value.kind == "limit"
    with pytest.raises(ContextFormatError, match="more than 1000000 tables") as info:
        ContextFile(hostile, limits=ReadLimits(max_memory=1 << 40))
    assert info.value.kind == "limit"
    with pytest.raises(ContextFormatError, match="memory") as info:
        ContextFile(hostile, limits=ReadLimits(max_tables=10**9, max_memory=1 << 20))
    assert info.value.kind == "limit"


def test_limits_are_enforced_and_can_be_raised():
    data = serialize_context(populated_context(), check_schedule=False)
    with pytest.raises(ContextFormatError, match="nesting deeper than 3"):
        ContextFile(data, limits=ReadLimits(max_depth=3))
    with pytest.raises(ContextFormatError, match="more than 10 tables"):
        ContextFile(data, limits=ReadLimits(max_tables=10))
    assert ContextFile(data, limits=ReadLimits(max_depth=64, max_tables=10**7)).tables > 10


def test_context_file_open_reports_the_path(tmp_path):
    bad = tmp_path / "bad.ctx"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(ContextFormatError) as info:
        ContextFile.open(bad)
    assert str(bad) in str(info.value)
    empty = tmp_path / "empty.ctx"
    empty.write_bytes(b"")
    with pytest.raises(ContextFormatError, match="empty"):
        ContextFile.open(empty)
