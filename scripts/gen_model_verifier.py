"""Generates the TFLite model verifier's schema tables from schemas/tflite_schema.fbs.

    python scripts/gen_model_verifier.py          write csrc/tflmodel_verify.{c,h}
    python scripts/gen_model_verifier.py --check  exit 1 when the committed files are stale

The .c file describes every table (its fields in vtable-slot order, with their kinds, sizes and
referenced tables) and union of the schema for the schema-driven walker csrc/fbverify.c; the .h
file names the slot of every field, the value of every enum and union member, for the hand-written
semantic checks (csrc/tflmodel.c). The parser covers the subset of the FlatBuffers IDL that the
schema uses: namespace, attribute, file_identifier/file_extension, enums with an underlying type,
unions, structs, tables (scalars, enums, strings, vectors, tables, structs, unions; defaults;
`deprecated`), and root_type; anything else stops it with an error.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "tflite_schema.fbs"
OUT_C = ROOT / "csrc" / "tflmodel_verify.c"
OUT_H = ROOT / "csrc" / "tflmodel_verify.h"
PREFIX = "TFL"

SCALARS = {
    **dict.fromkeys(("bool", "byte", "ubyte", "int8", "uint8"), 1),
    **dict.fromkeys(("short", "ushort", "int16", "uint16"), 2),
    **dict.fromkeys(("int", "uint", "int32", "uint32", "float", "float32"), 4),
    **dict.fromkeys(("long", "ulong", "int64", "uint64", "double", "float64"), 8),
}

#: one token: a comment, a string, a name, a number or a punctuation character
TOKEN = re.compile(
    r'\s*(?:(//[^\n]*)|("(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_.]*)|(-?[0-9][0-9.eExXa-fA-F+-]*)|(.))', re.S
)


@dataclass
class Field:
    name: str
    type: str
    vector: bool
    deprecated: bool


@dataclass
class Enum:
    name: str
    base: str
    values: list[tuple[str, int]] = field(default_factory=list)


@dataclass
class Union:
    name: str
    members: list[tuple[str, str, bool]] = field(default_factory=list)  # (value name, table, deprecated)


@dataclass
class Table:
    name: str
    fields: list[Field] = field(default_factory=list)
    struct: bool = False


@dataclass
class Schema:
    enums: dict[str, Enum] = field(default_factory=dict)
    unions: dict[str, Union] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    root: str = ""
    identifier: str = ""


class Parser:
    def __init__(self, text: str) -> None:
        self.tokens = [t for t in self._lex(text) if t is not None]
        self.pos = 0

    @staticmethod
    def _lex(text: str) -> list[str | None]:
        out: list[str | None] = []
        for m in TOKEN.finditer(text):
            comment, string, ident, number, other = m.groups()
            if comment is not None:
                continue
            out.append(string or ident or number or (other if other and not other.isspace() else None))
        return out

    def peek(self) -> str:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ""

    def next(self) -> str:
        token = self.peek()
        if not token:
            raise SystemExit("gen_model_verifier: unexpected end of the schema")
        self.pos += 1
        return token

    def expect(self, token: str) -> None:
        got = self.next()
        if got != token:
            raise SystemExit(f"gen_model_verifier: expected {token!r}, got {got!r} (token {self.pos})")

    def attributes(self) -> dict[str, str]:
        attrs: dict[str, str] = {}
        if self.peek() != "(":
            return attrs
        self.next()
        while self.peek() != ")":
            key = self.next()
            value = ""
            if self.peek() == ":":
                self.next()
                value = self.next()
            attrs[key] = value
            if self.peek() == ",":
                self.next()
        self.next()
        return attrs

    def parse(self) -> Schema:
        schema = Schema()
        while self.peek():
            word = self.next()
            if word in ("namespace", "file_extension", "attribute", "include"):
                while self.next() != ";":
                    pass
            elif word == "file_identifier":
                schema.identifier = self.next().strip('"')
                self.expect(";")
            elif word == "root_type":
                schema.root = self.next()
                self.expect(";")
            elif word == "enum":
                self.enum(schema)
            elif word == "union":
                self.union(schema)
            elif word in ("table", "struct"):
                self.table(schema, struct=word == "struct")
            else:
                raise SystemExit(f"gen_model_verifier: unsupported declaration {word!r}")
        return schema

    def enum(self, schema: Schema) -> None:
        enum = Enum(self.next(), "")
        self.expect(":")
        enum.base = self.next()
        self.attributes()
        self.expect("{")
        value = 0
        while self.peek() != "}":
            name = self.next()
            if self.peek() == "=":
                self.next()
                value = int(self.next(), 0)
            self.attributes()
            enum.values.append((name, value))
            value += 1
            if self.peek() == ",":
                self.next()
        self.next()
        schema.enums[enum.name] = enum

    def union(self, schema: Schema) -> None:
        union = Union(self.next())
        self.attributes()
        self.expect("{")
        while self.peek() != "}":
            name = self.next()
            table = name
            if self.peek() == ":":  # an aliased member, `Alias: Table`
                self.next()
                table = self.next()
            union.members.append((name, table, "deprecated" in self.attributes()))
            if self.peek() == ",":
                self.next()
        self.next()
        schema.unions[union.name] = union

    def table(self, schema: Schema, struct: bool) -> None:
        table = Table(self.next(), struct=struct)
        self.attributes()
        self.expect("{")
        while self.peek() != "}":
            name = self.next()
            self.expect(":")
            vector = self.peek() == "["
            if vector:
                self.next()
            type_ = self.next()
            if vector:
                self.expect("]")
            if self.peek() == "=":
                self.next()
                self.next()  # the default: the semantic checks state the ones they use
            attrs = self.attributes()
            if "id" in attrs:
                raise SystemExit(f"gen_model_verifier: {table.name}.{name}: explicit ids are not supported")
            self.expect(";")
            table.fields.append(Field(name, type_, vector, "deprecated" in attrs))
        self.next()
        schema.tables[table.name] = table


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class Emitter:
    def __init__(self, schema: Schema) -> None:
        self.s = schema
        self.table_index = {name: i for i, name in enumerate(n for n, t in schema.tables.items() if not t.struct)}
        self.union_index = {name: i for i, name in enumerate(schema.unions)}

    def scalar_size(self, type_: str) -> int | None:
        type_ = _short(type_)
        if type_ in SCALARS:
            return SCALARS[type_]
        if type_ in self.s.enums:
            return SCALARS[self.s.enums[type_].base]
        return None

    def struct_layout(self, name: str) -> tuple[int, int]:
        size, align = 0, 1
        for f in self.s.tables[name].fields:
            fsize = self.scalar_size(f.type)
            if fsize is not None:
                fsize, falign = fsize, fsize
            else:
                fsize, falign = self.struct_layout(_short(f.type))
            size = (size + falign - 1) // falign * falign + fsize
            align = max(align, falign)
        return (size + align - 1) // align * align, align

    def slots(self, table: Table) -> list[tuple[str, str]]:
        """(field name, C initializer) per vtable slot."""
        out = []
        for f in table.fields:
            type_ = _short(f.type)
            size = self.scalar_size(type_)
            if type_ in self.s.unions:
                if f.vector:
                    raise SystemExit(f"gen_model_verifier: {table.name}.{f.name}: vectors of unions are not supported")
                kind = "FBV_DEPRECATED" if f.deprecated else "FBV_UNION_TYPE"
                out.append((f"{f.name}_type", f'{{"{f.name}_type", {kind}, 1, 1, 0}}'))
                kind = "FBV_DEPRECATED" if f.deprecated else "FBV_UNION"
                out.append((f.name, f'{{"{f.name}", {kind}, 4, 4, {self.union_index[type_]}}}'))
                continue
            if f.deprecated:
                out.append((f.name, f'{{"{f.name}", FBV_DEPRECATED, 0, 0, 0}}'))
            elif type_ == "string":
                kind = "FBV_VEC_STRING" if f.vector else "FBV_STRING"
                out.append((f.name, f'{{"{f.name}", {kind}, 4, 4, 0}}'))
            elif size is not None:
                kind = "FBV_VEC_SCALAR" if f.vector else "FBV_SCALAR"
                out.append((f.name, f'{{"{f.name}", {kind}, {size}, {size}, 0}}'))
            elif type_ in self.s.tables and self.s.tables[type_].struct:
                ssize, salign = self.struct_layout(type_)
                kind = "FBV_VEC_STRUCT" if f.vector else "FBV_STRUCT"
                out.append((f.name, f'{{"{f.name}", {kind}, {salign}, {ssize}, 0}}'))
            elif type_ in self.table_index:
                kind = "FBV_VEC_TABLE" if f.vector else "FBV_TABLE"
                out.append((f.name, f'{{"{f.name}", {kind}, 4, 4, {self.table_index[type_]}}}'))
            else:
                raise SystemExit(f"gen_model_verifier: {table.name}.{f.name}: unknown type {f.type!r}")
        return out

    def header_text(self) -> str:
        lines = [
            "/* generated by scripts/gen_model_verifier.py from schemas/tflite_schema.fbs; do not edit */",
            "/* Slots of the fields, values of the enums and union members of TFLite's model schema. */",
            "#ifndef DLG_TFLMODEL_VERIFY_H",
            "#define DLG_TFLMODEL_VERIFY_H",
            "",
            '#include "fbverify.h"',
            "",
            "extern const fbv_schema tfl_model_schema;",
            "",
        ]
        for name, table in self.s.tables.items():
            if table.struct:
                continue
            lines.append(f"#define {PREFIX}_T_{name} {self.table_index[name]}")
            for slot, (fname, _) in enumerate(self.slots(table)):
                lines.append(f"#define {PREFIX}_{name}_{fname} {slot}")
        for name, enum in self.s.enums.items():
            for value_name, value in enum.values:
                lines.append(f"#define {PREFIX}_{name}_{value_name} {value}")
            lines.append(f"#define {PREFIX}_{name}__MAX {max(v for _, v in enum.values)}")
        for name, union in self.s.unions.items():
            for number, (value_name, _, _) in enumerate(union.members, 1):
                lines.append(f"#define {PREFIX}_{name}_{value_name} {number}")
        lines += ["", "#endif", ""]
        return "\n".join(lines)

    def source_text(self) -> str:
        lines = [
            "/* generated by scripts/gen_model_verifier.py from schemas/tflite_schema.fbs; do not edit */",
            "/* TFLite's model schema as tables for the verifier in fbverify.c: one field per vtable slot. */",
            '#include "tflmodel_verify.h"',
            "",
        ]
        for name, table in self.s.tables.items():
            if table.struct:
                continue
            slots = self.slots(table)
            if slots:
                lines.append(f"static const fbv_field f_{name}[] = {{")
                lines += [f"    {init}," for _, init in slots]
                lines.append("};")
        for name, union in self.s.unions.items():
            members = ["FBV_NO_TABLE"]
            for _, table, deprecated in union.members:
                members.append("FBV_NO_TABLE" if deprecated else str(self.table_index[_short(table)]))
            lines.append(f"static const uint16_t u_{name}[] = {{{', '.join(members)}}};")
        lines.append("")
        lines.append("static const fbv_table tables[] = {")
        for name, table in self.s.tables.items():
            if not table.struct:
                fields = f"f_{name}" if table.fields else "NULL"
                lines.append(f'    {{"{name}", {fields}, {len(self.slots(table))}}},')
        lines.append("};")
        lines.append("")
        lines.append("static const fbv_union unions[] = {")
        for name, union in self.s.unions.items():
            lines.append(f'    {{"{name}", u_{name}, {len(union.members) + 1}}},')
        lines.append("};")
        lines.append("")
        identifier = f'"{self.s.identifier}"' if self.s.identifier else "NULL"
        lines.append(f"const fbv_schema tfl_model_schema = {{tables, unions, {PREFIX}_T_{self.s.root}, {identifier}}};")
        lines.append("")
        return "\n".join(lines)


def generate() -> dict[Path, str]:
    schema = Parser(SCHEMA.read_text()).parse()
    if not schema.root:
        raise SystemExit("gen_model_verifier: the schema has no root_type")
    emitter = Emitter(schema)
    return {OUT_H: emitter.header_text(), OUT_C: emitter.source_text()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed files differ")
    args = parser.parse_args()
    stale = []
    for path, text in generate().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.relative_to(ROOT))
        else:
            path.write_text(text)
    if stale:
        print(f"stale: {', '.join(map(str, stale))}; run python scripts/gen_model_verifier.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
