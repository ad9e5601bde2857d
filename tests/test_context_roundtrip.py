"""InferenceContext files: written by the Python writer, read back by the native reader, field by field."""

from __future__ import annotations

import dataclasses
import math
import os
from enum import IntEnum

import flatbuffers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate import ContextFile, read_context, serialize_context, write_context
from delegate._generated import serialization_generated as fbgen
from delegate.context import model
from delegate.context.fields import Kind, field_specs
from delegate.context.synthetic import synthetic_mobilenet
from delegate.context.walk import iter_tables

from .helpers import from_flatc, populated_context, to_flatc


def _read_back(ctx: model.InferenceContext) -> model.InferenceContext:
    return ContextFile(serialize_context(ctx, check_schedule=False)).to_model()


def test_populated_context_uses_every_table_field_and_enum_value():
    ctx = populated_context()
    tables = list(iter_tables(ctx))
    seen_types = {type(t) for t in tables}
    # Int4 is declared by the schema but no table refers to it.
    assert seen_types == set(model.TABLES.values()) - {model.Int4}
    defaults = {cls: cls() for cls in seen_types}
    for cls in seen_types:
        for spec in field_specs(cls):
            values = [getattr(t, spec.name) for t in tables if type(t) is cls]
            assert any(v != getattr(defaults[cls], spec.name) for v in values), (cls.__name__, spec.name)
    used = {
        (type(getattr(t, s.name)), getattr(t, s.name))
        for t in tables
        for s in field_specs(type(t))
        if s.kind is Kind.ENUM
    }
    for enum in {s.target for t in tables for s in field_specs(type(t)) if s.kind is Kind.ENUM}:
        assert {m for (e, m) in used if e is enum} == set(enum), enum.__name__


def test_populated_context_round_trips_field_by_field(tmp_path):
    ctx = populated_context()
    path = write_context(ctx, tmp_path / "full.ctx", check_schedule=False)
    back = read_context(path)
    assert back == ctx
    # Spell it out per table too, so a failure names the field.
    for a, b in zip(iter_tables(ctx), iter_tables(back), strict=True):
        assert type(a) is type(b)
        for spec in field_specs(type(a)):
            va, vb = getattr(a, spec.name), getattr(b, spec.name)
            if spec.kind is Kind.ENUM:
                assert isinstance(vb, IntEnum) and vb == va, spec.name
            elif spec.kind is Kind.BYTES:
                assert bytes(vb) == bytes(va), spec.name
            elif spec.kind not in (Kind.TABLE, Kind.TABLE_LIST):
                assert vb == va, spec.name


def test_defaults_and_absent_fields_round_trip():
    assert _read_back(model.InferenceContext()) == model.InferenceContext()
    sparse = model.InferenceContext(nodes=[model.CLNode(), model.CLNode(gpu_op=model.GPUOperation(code=""))])
    back = _read_back(sparse)
    assert back == sparse
    assert back.nodes[0].name is None and back.nodes[1].gpu_op.code == ""


def test_native_reader_agrees_with_flatc_object_api_both_ways():
    ctx = populated_context(seed=7)
    # ours -> flatc's reader
    data = serialize_context(ctx, check_schedule=False)
    assert from_flatc(model.InferenceContext, fbgen.InferenceContextT.InitFromPackedBuf(data, 0)) == ctx
    # flatc's writer -> our native reader
    builder = flatbuffers.Builder(1024)
    builder.Finish(to_flatc(ctx).Pack(builder))
    assert ContextFile(bytes(builder.Output())).to_model() == ctx


def test_data_is_a_zero_copy_view_of_the_mapped_file(tmp_path):
    path = write_context(synthetic_mobilenet(image_size=64), tmp_path / "m.ctx")
    with ContextFile.open(path) as ctx:
        model_ = ctx.to_model()
        weights = model_.nodes[0].gpu_op.arguments.buffer_objects[0].value.data
        assert isinstance(weights, memoryview) and weights.obj is ctx._mmap
        raw = path.read_bytes()
        start = raw.find(bytes(weights))
        assert start > 0 and len(weights) > 100


def test_native_tree_memory_does_not_grow_with_weight_bytes():
    small = ContextFile(serialize_context(synthetic_mobilenet(image_size=64, weight_scale=0.0)))
    big = ContextFile(serialize_context(synthetic_mobilenet(image_size=64, weight_scale=4.0)))
    assert big.size > 20 * small.size
    assert big.memory_bytes == small.memory_bytes
    assert big.tables == small.tables


def test_write_context_is_atomic_and_replaces(tmp_path):
    target = tmp_path / "c.ctx"
    target.write_bytes(b"old")
    write_context(model.InferenceContext(flush_period=3), target)
    assert read_context(target).flush_period == 3
    assert sorted(os.listdir(tmp_path)) == ["c.ctx"]


def test_close_releases_the_tree_and_views_keep_the_mapping(tmp_path):
    path = write_context(synthetic_mobilenet(image_size=32), tmp_path / "m.ctx")
    ctx = ContextFile.open(path)
    model_ = ctx.to_model()
    ctx.close()
    ctx.close()  # idempotent
    assert bytes(model_.nodes[0].gpu_op.arguments.buffer_objects[0].value.data[:4])


# ------------------------------------------------------------- hypothesis

_INT32 = st.integers(-(2**31), 2**31 - 1)
_FLOAT32 = st.floats(width=32, allow_nan=False)


def _strategy(cls: type) -> st.SearchStrategy:
    fields = {}
    for spec in field_specs(cls):
        k = spec.kind
        if k is Kind.BOOL:
            s = st.booleans()
        elif k is Kind.INT32:
            s = _INT32
        elif k is Kind.UINT32:
            s = st.integers(0, 2**32 - 1)
        elif k is Kind.FLOAT32:
            s = _FLOAT32
        elif k is Kind.ENUM:
            s = st.sampled_from(list(spec.target))
        elif k is Kind.STRING:
            s = st.none() | st.text(max_size=12)
        elif k is Kind.BYTES:
            s = st.binary(max_size=24)
        elif k is Kind.TABLE:
            s = st.none() | st.deferred(lambda t=spec.target: _strategy(t))
        elif k is Kind.TABLE_LIST:
            s = st.lists(st.deferred(lambda t=spec.target: _strategy(t)), max_size=2)
        elif k is Kind.STRING_LIST:
            s = st.lists(st.text(max_size=8), max_size=3)
        elif k is Kind.INT32_LIST:
            s = st.lists(_INT32, max_size=4)
        else:
            s = st.lists(_FLOAT32, max_size=4)
        fields[spec.name] = s
    return st.builds(cls, **fields)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_strategy(model.InferenceContext))
def test_random_contexts_round_trip(ctx):
    back = _read_back(ctx)
    assert back == ctx
    # -0.0 == 0.0 in Python: check float bits survive too.
    for a, b in zip(iter_tables(ctx), iter_tables(back), strict=True):
        for f in dataclasses.fields(a):
            va, vb = getattr(a, f.name), getattr(b, f.name)
            if isinstance(va, float):
                assert math.copysign(1, va) == math.copysign(1, vb)
