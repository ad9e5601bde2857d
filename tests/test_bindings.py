"""The generated bindings are current, and the model matches the schema they come from."""

from __future__ import annotations

import subprocess
import sys
from enum import IntEnum
from pathlib import Path

import pytest

from delegate._generated import serialization_generated as fbgen
from delegate.context import model
from delegate.context.fields import Kind, field_specs

from .helpers import flatc_slots, shared_path

ROOT = Path(__file__).resolve().parent.parent
SEED_FBS = ROOT.parent / "shared" / "seeds" / "000_d74fffbbd1697ee8.txt"

_PREPEND_FOR_KIND = {
    Kind.BOOL: "Bool",
    Kind.INT32: "Int32",
    Kind.UINT32: "Uint32",
    Kind.FLOAT32: "Float32",
    Kind.ENUM: "Int8",
}


def test_committed_bindings_match_a_fresh_generation():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_bindings.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_schema_is_the_seed_text_verbatim():
    seed_lines = shared_path("seeds", SEED_FBS.name).read_text().splitlines()
    # The seed's first line names the upstream path and is followed by a blank line; the rest is the schema.
    assert seed_lines[0].endswith("serialization.fbs") and seed_lines[1] == ""
    schema = (ROOT / "schemas" / "serialization.fbs").read_text()
    assert schema == "\n".join(seed_lines[2:]) + "\n"


def _pascal(name: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


@pytest.mark.parametrize("table", sorted(model.TABLES))
def test_model_fields_match_generated_slots_and_types(table):
    generated = flatc_slots()[table]
    specs = field_specs(model.TABLES[table])
    assert {_pascal(s.name) for s in specs} == set(generated)
    for spec in specs:
        slot, prepend = generated[_pascal(spec.name)]
        assert spec.slot == slot, spec.name
        assert prepend == _PREPEND_FOR_KIND.get(spec.kind, "UOffsetTRelative"), spec.name


def test_model_enums_match_generated_enums():
    enums = [
        v
        for v in vars(model).values()
        if isinstance(v, type) and issubclass(v, IntEnum) and v not in (IntEnum, model.SchemaEnum)
    ]
    assert len(enums) == 9
    for enum in enums:
        generated = getattr(fbgen, enum.__name__)
        names = {k: v for k, v in vars(generated).items() if k.isupper()}
        assert names == {m.name: m.value for m in enum}, enum.__name__
