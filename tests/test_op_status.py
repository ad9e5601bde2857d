"""docs/ops.md's op status table is what scripts/gen_op_status.py writes from the compiler's tables."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_op_status", ROOT / "scripts" / "gen_op_status.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_op_status_table_is_current():
    gen = _generator()
    doc = gen.DOC.read_text()
    assert gen.written(doc) == doc, "docs/ops.md's op status table is stale: run python scripts/gen_op_status.py"


def test_the_table_follows_the_compiler():
    from delegate.compiler.graph import Builtin

    table = _generator().table()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[2:]}
    assert "| delegate | delegate | delegate (int8 weights" in rows["CONV_2D"]
    assert "CPU: no quantized form" in rows["SUM"]
    assert "one quantization in and out" in rows["STRIDED_SLICE"]
    assert Builtin.LOG.name in rows and "Convolution2DTransposeBias (MediaPipe custom op)" in rows
