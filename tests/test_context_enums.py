"""The context model's enums are the schema's: every IntEnum of delegate/context/model.py has the
members and values of flatc's class of that name (delegate/_generated), and no schema enum is
left out. The runtime's marker of serial work-groups is the one the compiler writes."""

from __future__ import annotations

import inspect
from enum import IntEnum

from delegate._generated import serialization_generated as generated
from delegate.context import model


def _model_enums() -> dict[str, type[IntEnum]]:
    return {
        name: cls
        for name, cls in vars(model).items()
        if inspect.isclass(cls) and issubclass(cls, IntEnum) and cls.__module__ == model.__name__
    }


def _generated_members(cls: type) -> dict[str, int]:
    return {k: v for k, v in vars(cls).items() if not k.startswith("_") and isinstance(v, int)}


def _generated_enums() -> set[str]:
    """flatc's enum classes: plain classes holding only int constants (tables have methods)."""
    return {
        name
        for name, cls in vars(generated).items()
        if inspect.isclass(cls)
        and cls.__module__ == generated.__name__
        and _generated_members(cls)
        and not any(callable(v) for k, v in vars(cls).items() if not k.startswith("__"))
    }


def test_model_enums_match_the_generated_ones():
    enums = _model_enums()
    assert enums, "no enums found in delegate/context/model.py"
    for name, cls in enums.items():
        flatc = getattr(generated, name, None)
        assert flatc is not None, f"{name} is not an enum of the schema"
        assert {m.name: m.value for m in cls} == _generated_members(flatc), name


def test_every_schema_enum_is_in_the_model():
    assert _generated_enums() == set(_model_enums())


def test_the_compiler_writes_the_runtimes_serial_marker():
    from delegate.compiler.kernel import RequiredWorkGroup
    from delegate.context.kernel_text import SERIAL_MARKER
    from delegate.runtime import persistent

    assert persistent.SERIAL_MARKER == SERIAL_MARKER
    assert SERIAL_MARKER in RequiredWorkGroup((8, 1, 1), serial=True).entry()
    assert SERIAL_MARKER not in RequiredWorkGroup((8, 1, 1)).entry()
