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
        if inspect.isclass(cls)
        and issubclass(cls, IntEnum)
        and cls.__module__ == model.__name__
        and cls is not model.SchemaEnum
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


def test_the_runtime_reads_back_what_the_compiler_writes_into_kernel_text():
    from delegate.compiler.kernel import RequiredWorkGroup
    from delegate.context import kernel_text

    serial = RequiredWorkGroup((8, 1, 1), serial=True).entry()
    plain = RequiredWorkGroup((16, 2, 1)).entry()
    assert kernel_text.required_work_group(serial) == (8, 1, 1) and kernel_text.is_serial(serial)
    assert kernel_text.required_work_group(plain) == (16, 2, 1) and not kernel_text.is_serial(plain)
    assert "reqd_work_group_size" not in kernel_text.without_required_work_group(plain)


def test_malformed_work_group_attributes_read_as_absent():
    from delegate.context import kernel_text

    assert kernel_text.required_work_group("__kernel void f() {}") is None
    assert kernel_text.required_work_group("reqd_work_group_size(8, x, 1)") is None
