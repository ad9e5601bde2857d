"""Fuzz targets for the Python-facing readers: each takes arbitrary bytes and may only fail with
the error its API documents. Anything else (another exception, a broken invariant) is a finding.

Run by tests/fuzz/fuzz_python.py under atheris (scripts/fuzz.sh) and replayed on the committed
inputs of tests/fuzz/regressions/<target>/ by tests/test_fuzz_regressions.py.

- ``context``: ``ContextFile`` on the bytes; a file it accepts is converted to the model,
  summarized (as ``python -m delegate inspect`` does), held to the semantic rules (refused with a
  ``semantic`` error, or else every value the runtime reads is what the rules promise: shapes and
  work-groups of at least 1, every id declared), checked against the runtime's resource bounds for
  a fake device, and written back with the writer, which the reader must accept.
- ``settings``: the first byte picks format (binary, text, JSON) and message (ComputeSettings,
  TFLiteSettings); what parses is mapped onto the delegate's options, formatted in every format
  and parsed back, and read again through ``load_settings`` as a dict.
- ``events``: the bytes as a mini-benchmark storage file (``read_events``: never raises, a torn
  tail is reported) and as its decision file (``read_decision``: SettingsError when invalid);
  complete events appended again read back the same.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from google.protobuf import json_format

from delegate import ContextFile, ContextFormatError, DeviceResourceError, SettingsError, serialize_context
from delegate._generated import configuration_pb2 as pb
from delegate.context import model as m
from delegate.context.schedule import schedule_violation
from delegate.context.semantics import check_semantics
from delegate.context.summary import format_summary, summarize
from delegate.runtime import memory
from delegate.runtime.device import DeviceInfo
from delegate.runtime.limits import check_context
from delegate.settings.codec import SettingsFormat, format_settings, parse_settings
from delegate.settings.decisions import append_event, read_decision, read_events
from delegate.settings.mapping import DeviceKind, load_settings, resolve

_DEVICE = DeviceInfo("fuzz", "fuzz device", "fuzz", "1", "OpenCL 3.0", True, True, True, True, 256, (256, 256, 64),
                     1 << 30, 1 << 32, 1 << 16, 128, (16384, 16384), (2048, 2048, 2048), 2048, 1 << 27)  # fmt: skip


def _semantic_invariants(ctx: m.InferenceContext) -> None:
    """``check_semantics`` refuses ``ctx`` by name, or the runtime may take its values as they are."""
    try:
        check_semantics(ctx)
    except ContextFormatError as exc:
        assert exc.kind == "semantic" and exc.detail and "byte offset" not in str(exc), exc
        return
    declared = {t.id for t in ctx.tensors}
    assert len(declared) == len(ctx.tensors) and min(declared, default=0) >= 0
    for t in ctx.tensors:
        assert t.desc is not None and t.desc.shape is not None
        s = t.desc.shape
        assert memory.Shape.of(t.desc) == memory.Shape(s.b, s.h, s.w, s.d, s.c)  # nothing clamped
    assert set(ctx.input_ids) <= declared and set(ctx.output_ids) <= declared
    assert len(set(ctx.input_ids)) == len(ctx.input_ids) and len(set(ctx.output_ids)) == len(ctx.output_ids)
    assert {p.first for p in ctx.variable_ids_and_refs} <= declared
    assert not (ctx.flush_periodically and ctx.flush_period < 1) and ctx.flush_period >= 0
    for node in ctx.nodes:
        op = node.gpu_op
        assert op is not None and set(node.input_ids) | set(node.output_ids) <= declared
        assert len(set(node.output_ids)) == len(node.output_ids)
        assert len(op.src_tensors_names) == len(node.input_ids) and len(op.dst_tensors_names) == len(node.output_ids)
        wg = op.work_group_size
        assert wg is None or min(wg.x, wg.y, wg.z) >= 1


def fuzz_context(data: bytes) -> None:
    try:
        f = ContextFile(data)
    except ContextFormatError as exc:
        assert exc.kind in ("format", "limit", "memory") and exc.detail, exc
        return
    with f:
        ctx = f.to_model()
        text = format_summary(summarize(ctx, file_bytes=len(data)), "<fuzz>")
        assert text
        json.dumps(summarize(ctx))
        try:
            check_context(ctx, _DEVICE)
        except (ContextFormatError, DeviceResourceError) as exc:
            assert str(exc)
        _semantic_invariants(ctx)
        problem = schedule_violation(ctx)  # the loader's check: must not raise on any file
        assert problem is None or isinstance(problem, str)
        again = serialize_context(ctx, check_schedule=False)
    with ContextFile(again) as g:
        assert g.root.nodes_count == len(ctx.nodes) and g.root.tensors_count == len(ctx.tensors)


_FORMATS = [SettingsFormat.BINARY, SettingsFormat.TEXT, SettingsFormat.JSON]
_MESSAGES = [pb.ComputeSettings, pb.TFLiteSettings]


def fuzz_settings(data: bytes) -> None:
    if not data:
        return
    fmt = _FORMATS[data[0] % 3]
    kind = _MESSAGES[(data[0] // 3) % 2]
    try:
        message = parse_settings(data[1:], fmt, kind)
    except SettingsError as exc:
        assert str(exc).startswith("<settings>: ")
        return
    try:
        resolve(message, DeviceKind("NVIDIA Corporation", "fuzz", is_gpu=True, fp16=True, images=True))
    except SettingsError as exc:
        assert str(exc)
    message.DiscardUnknownFields()
    for out_fmt in _FORMATS:
        parse_settings(format_settings(message, out_fmt), out_fmt, kind)
    load_settings(json_format.MessageToDict(message, preserving_proto_field_name=True), kind)


_scratch: list[Path] = []


def _folder() -> Path:
    """A scratch folder, in memory where possible (appends fsync), removed at exit."""
    if not _scratch:
        base = "/dev/shm" if os.path.isdir("/dev/shm") else None
        _scratch.append(Path(tempfile.mkdtemp(prefix="delegate-fuzz-", dir=base)))
        atexit.register(shutil.rmtree, _scratch[0], True)
    return _scratch[0]


def fuzz_events(data: bytes) -> None:
    folder = _folder()
    storage = folder / "events"
    storage.write_bytes(data)
    events, torn = read_events(storage)
    assert isinstance(torn, bool)
    copy = folder / "copy"
    copy.unlink(missing_ok=True)
    for event in events:
        append_event(copy, event)
    again, torn_again = read_events(copy)
    assert [e.SerializeToString() for e in again] == [e.SerializeToString() for e in events] and not torn_again
    decision = folder / "events.best.fb"
    decision.write_bytes(data)
    try:
        read_decision(storage)
    except SettingsError as exc:
        assert "not a valid BestAccelerationDecision" in str(exc)


TARGETS: dict[str, Callable[[bytes], None]] = {
    "context": fuzz_context,
    "settings": fuzz_settings,
    "events": fuzz_events,
}
