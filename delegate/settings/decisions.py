"""Crash-proof event storage: BenchmarkEvents appended in protobuf's delimited format.

Each record is a varint byte count followed by a serialized ``BenchmarkEvent``; every append is
fsynced. A crash mid-append leaves a torn last record, which ``read_events`` detects and skips
(the records before it are untouched: appends never rewrite them). The decision lives beside
the events at ``storage_file_path + ".best.fb"`` (the name upstream uses), written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

from google.protobuf.message import DecodeError

from .._atomic import atomic_write
from .._generated import configuration_pb2 as pb
from ..errors import SettingsError


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def append_event(path: str | os.PathLike[str], event: pb.BenchmarkEvent) -> None:
    """Append one event durably (one write of the whole record, then fsync)."""
    data = event.SerializeToString()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, _varint(len(data)) + data)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_events(path: str | os.PathLike[str]) -> tuple[list[pb.BenchmarkEvent], bool]:
    """Every complete event in order, and whether a torn (incomplete or corrupt) tail was skipped."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return [], False
    events, pos = [], 0
    while pos < len(data):
        size, shift = 0, 0
        while True:
            if pos >= len(data) or shift > 63:
                return events, True
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if size > len(data) - pos:
            return events, True
        event = pb.BenchmarkEvent()
        try:
            event.ParseFromString(data[pos : pos + size])
        except DecodeError:
            return events, True
        events.append(event)
        pos += size
    return events, False


def decision_path(storage_file_path: str | os.PathLike[str]) -> Path:
    return Path(f"{os.fspath(storage_file_path)}.best.fb")


def write_decision(storage_file_path: str | os.PathLike[str], decision: pb.BestAccelerationDecision) -> Path:
    """Write the decision atomically (temporary file, fsync, rename) beside the events."""
    return atomic_write(decision_path(storage_file_path), decision.SerializeToString())


def read_decision(storage_file_path: str | os.PathLike[str]) -> pb.BestAccelerationDecision | None:
    path = Path(storage_file_path)
    if not path.name.endswith(".best.fb"):
        path = decision_path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    decision = pb.BestAccelerationDecision()
    try:
        decision.ParseFromString(data)
    except DecodeError as exc:
        raise SettingsError(
            f"{path}: not a valid BestAccelerationDecision ({exc}); delete it and run the mini-benchmark again"
        ) from None
    return decision
