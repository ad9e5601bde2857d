"""The subgraphs a WHILE runs, captured for the compiler to unroll (compiler/while_loop.py).

TfLiteContext gives a delegate another subgraph's context (AcquireSubgraphContext, during Prepare
only) and so its nodes and tensors, but not which of its tensors are its inputs and outputs, in
which order: those are read from the model file. That is option ``model_file``
(``delegate.Interpreter`` passes its ``model_path``) or, without it, the model file TFLite mapped
into this process when it loaded the model from a path (``mapped_models``: any host, read where
TFLite maps it). A file stands for the model only where each captured subgraph's tensors have
the file's names. Without such a file (a model given as bytes), or on a host without
AcquireSubgraphContext, each WHILE stays on TFLite's CPU kernels with that reason.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Any

from .._native import ffi
from ..compiler.claim import EXCLUDED
from ..compiler.graph import Graph
from ..compiler.while_loop import LOOP, LOOP_REASON, WHILE, Loop, Subgraph
from ..errors import DelegateError
from ..model_check import TFLITE_IDENTIFIER, verify_model
from .capture import capture_graph, capture_tensor, execution_plan, held_subgraph

_MAPS = "/proc/self/maps"
#: the schema's TensorType -> TfLiteType: FLOAT32 and FLOAT16 are numbered apart, INT32 to INT8
#: alike, the types after INT8 one apart
_TFLITE_TYPES = {0: 1, 1: 10, **{t: t for t in range(2, 10)}, **{t: t + 1 for t in range(10, 18)}}


@dataclass(frozen=True)
class SubgraphFile:
    """A subgraph as the model file holds it: its inputs, outputs, and each tensor's name and
    type (TfLiteType)."""

    inputs: list[int]
    outputs: list[int]
    tensors: list[tuple[str, int]]


@dataclass(frozen=True)
class ModelFile:
    """A model file's subgraphs, and where the file is (for messages)."""

    where: str
    subgraphs: list[SubgraphFile]


def context_address(context: Any) -> int:
    return int(ffi.cast("uintptr_t", context))


def capture_loops(
    context: Any, graph: Graph, plan: list[int], model_file: str, *, excluded: bool = False
) -> dict[int, tuple[int, int]]:
    """Put each WHILE of ``plan`` its ``Loop`` (or why not, ``LOOP_REASON``) in its params; the
    addresses of the condition's and body's contexts of each WHILE captured (node -> addresses).
    ``excluded``: none is (option exclude_ops names WHILE)."""
    loops = [i for i in plan if graph.nodes[i].op == WHILE]
    if not loops:
        return {}
    reason = None
    files: list[ModelFile] = []
    if excluded:
        reason = EXCLUDED
    elif context.AcquireSubgraphContext == ffi.NULL or context.ReleaseSubgraphContext == ffi.NULL:
        reason = "this TFLite runtime does not give a delegate the subgraphs a WHILE runs (no AcquireSubgraphContext)"
    elif model_file:
        try:
            files = [read_model_file(model_file)]
        except (OSError, DelegateError, ValueError, struct.error) as exc:
            reason = f"the model file {model_file} could not be read for its subgraphs: {exc}"
    else:
        files = mapped_models()
        if not files:
            reason = (
                "the delegate reads which tensors are the inputs and outputs of a WHILE's subgraphs from the model "
                "file (TFLite's delegate interface does not give them), and this model was not loaded from a file: "
                "pass model_file=PATH to load_delegate (delegate.Interpreter passes its model_path)"
            )
    contexts: dict[int, tuple[int, int]] = {}
    for index in loops:
        node = graph.nodes[index]
        if reason is not None:
            node.params[LOOP_REASON] = reason
            continue
        cond, body = (int(v) for v in node.params.get("subgraphs", (-1, -1)))
        try:
            captured = [_capture_subgraph(context, s, files, given=bool(model_file)) for s in (cond, body)]
        except DelegateError as exc:
            node.params[LOOP_REASON] = str(exc)
            continue
        node.params[LOOP] = Loop(captured[0][0], captured[1][0])
        contexts[index] = (captured[0][1], captured[1][1])
    return contexts


def _capture_subgraph(context: Any, index: int, files: list[ModelFile], given: bool) -> tuple[Subgraph, int]:
    with held_subgraph(context, index) as sub:
        held = _matching(sub, index, files)
        if len(held) != 1:
            raise DelegateError(_no_file(index, files, held, given))
        inputs, outputs = held.pop()
        plan = execution_plan(sub)
        graph = capture_graph(sub, plan, read_limit=None)  # every constant valued: the copies read them
        for i in (*inputs, *outputs):
            if i not in graph.tensors:
                graph.tensors[i] = capture_tensor(sub, i, read_limit=None)
        return Subgraph(graph, plan, inputs, outputs), context_address(sub)


def _matching(sub: Any, index: int, files: list[ModelFile]) -> set[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (inputs, outputs) of subgraph ``index`` in each of ``files`` whose tensors of it are
    those of context ``sub`` by name and type (kernels may add tensors past the file's: their
    temporaries)."""
    tensors = [
        (ffi.string(t.name).decode("utf-8", "replace") if t.name != ffi.NULL else "", int(t.type))
        for t in (sub.tensors[i] for i in range(int(sub.tensors_size)))
    ]
    held = set()
    for model in files:
        if index < len(model.subgraphs):
            s = model.subgraphs[index]
            if len(s.tensors) <= len(tensors) and tensors[: len(s.tensors)] == s.tensors:
                held.add((tuple(s.inputs), tuple(s.outputs)))
    return held


def _no_file(index: int, files: list[ModelFile], held: set, given: bool) -> str:
    if given:
        return (
            f"its subgraph {index} is not the model file's ({files[0].where}): "
            "model_file is not the model this interpreter runs"
        )
    if held:
        return f"the model files mapped in this process disagree on its subgraph {index}: pass model_file=PATH"
    return (
        f"none of the model files mapped in this process ({', '.join(m.where for m in files)}) holds its subgraph "
        f"{index}: pass model_file=PATH"
    )


def read_model_file(path: str) -> ModelFile:
    """The model file at ``path``'s subgraphs (verified first: model_check.py)."""
    verify_model(path)
    with open(path, "rb") as f:
        return ModelFile(path, subgraph_files(f.read()))


def mapped_models() -> list[ModelFile]:
    """The TFLite models this process holds mapped from files, read where they are mapped: TFLite
    maps a model it loads from a path whole, from its first byte, read-only. A mapping whose file
    is gone, replaced or shorter than it is skipped (reading past a file's end faults)."""
    try:
        with open(_MAPS, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[1].startswith("r") or int(fields[2], 16) != 0 or not fields[5].startswith("/"):
            continue
        start, end = (int(v, 16) for v in fields[0].split("-"))
        path, inode = fields[5], int(fields[4])
        try:
            st = os.stat(path)
        except OSError:
            continue
        size = min(end - start, st.st_size)
        if st.st_ino != inode or size < 8:
            continue
        data = memoryview(ffi.buffer(ffi.cast("char *", start), size))
        if bytes(data[4:8]) != TFLITE_IDENTIFIER:
            continue
        try:
            verify_model(data, path)
            found.append(ModelFile(f"{path} (mapped)", subgraph_files(data)))
        except (DelegateError, ValueError, struct.error):
            continue
    return found


def subgraph_files(data: bytes | memoryview) -> list[SubgraphFile]:
    """Each subgraph's inputs, outputs and tensor names, read from a verified model's bytes."""

    def u32(at: int) -> int:
        return int(struct.unpack_from("<I", data, at)[0])

    def field(table: int, number: int) -> int | None:
        vtable = table - int(struct.unpack_from("<i", data, table)[0])
        size = int(struct.unpack_from("<H", data, vtable)[0])
        slot = 4 + 2 * number
        offset = int(struct.unpack_from("<H", data, vtable + slot)[0]) if slot < size else 0
        return table + offset if offset else None

    def vector(at: int | None) -> tuple[int, int]:
        if at is None:
            return 0, 0
        start = at + u32(at)
        return start + 4, u32(start)

    def ints(at: int | None) -> list[int]:
        start, count = vector(at)
        return list(struct.unpack_from(f"<{count}i", data, start)) if count else []

    def table(at: int) -> int:
        return at + u32(at)

    def string(at: int | None) -> str:
        start, length = vector(at)
        return bytes(data[start : start + length]).decode("utf-8", "replace") if length else ""

    start, count = vector(field(u32(0), 2))  # Model.subgraphs
    out: list[SubgraphFile] = []
    for k in range(count):
        sub = table(start + 4 * k)
        first, tensors = vector(field(sub, 0))  # SubGraph.tensors
        described = []
        for t in range(tensors):
            tensor = table(first + 4 * t)
            kind = field(tensor, 1)  # Tensor.type, a TensorType (FLOAT32 when absent)
            code = int(struct.unpack_from("<b", data, kind)[0]) if kind is not None else 0
            described.append((string(field(tensor, 3)), _TFLITE_TYPES.get(code, -1)))  # Tensor.name
        out.append(SubgraphFile(ints(field(sub, 1)), ints(field(sub, 2)), described))  # inputs, outputs
    return out
