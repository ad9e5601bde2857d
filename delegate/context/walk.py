"""Generic walks over model objects, driven by the field specs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .fields import Kind, field_specs


def iter_tables(obj: Any) -> Iterator[Any]:
    """``obj`` and every table nested in it, depth first."""
    yield obj
    for spec in field_specs(type(obj)):
        value = getattr(obj, spec.name)
        if spec.kind is Kind.TABLE and value is not None:
            yield from iter_tables(value)
        elif spec.kind is Kind.TABLE_LIST:
            for item in value:
                yield from iter_tables(item)


def data_bytes(obj: Any) -> int:
    """Total length of every ``data`` byte vector in ``obj``'s tree (weights, constants)."""
    total = 0
    for table in iter_tables(obj):
        for spec in field_specs(type(table)):
            if spec.kind is Kind.BYTES:
                total += len(getattr(table, spec.name))
    return total
