"""The subgraphs a WHILE runs, captured for the compiler to unroll (compiler/while_loop.py).

TfLiteContext gives a delegate another subgraph's context (AcquireSubgraphContext, during Prepare
only) and so its nodes and tensors, but not which of its tensors are its inputs and outputs, in
which order: those are read from the model file (option ``model_file``; ``delegate.Interpreter``
passes its ``model_path``), checked against the contexts' tensors. Without the file, or on a host
without AcquireSubgraphContext, each WHILE stays on TFLite's CPU kernels with that reason.
"""

from __future__ import annotations

import struct
from typing import Any

from .._native import ffi, lib
from ..compiler.graph import Graph
from ..compiler.while_loop import LOOP, LOOP_REASON, WHILE, Loop, Subgraph
from ..errors import DelegateError
from ..model_check import verify_model
from .capture import capture_graph, capture_tensor, execution_plan

_ACQUIRE = "TfLiteStatus (*)(TfLiteContext *, int, TfLiteContext **)"
_RELEASE = "TfLiteStatus (*)(TfLiteContext *, int)"
#: (inputs, outputs, number of tensors) of each subgraph of the model file
SubgraphIO = list[tuple[list[int], list[int], int]]


def context_address(context: Any) -> int:
    return int(ffi.cast("uintptr_t", context))


def capture_loops(context: Any, graph: Graph, plan: list[int], model_file: str) -> dict[int, tuple[int, int]]:
    """Put each WHILE of ``plan`` its ``Loop`` (or why not, ``LOOP_REASON``) in its params; the
    addresses of the condition's and body's contexts of each WHILE captured (node -> addresses)."""
    loops = [i for i in plan if graph.nodes[i].op == WHILE]
    if not loops:
        return {}
    reason = None
    io: SubgraphIO = []
    if context.AcquireSubgraphContext == ffi.NULL or context.ReleaseSubgraphContext == ffi.NULL:
        reason = "this TFLite runtime does not give a delegate the subgraphs a WHILE runs (no AcquireSubgraphContext)"
    elif not model_file:
        reason = (
            "the delegate reads which tensors are the inputs and outputs of a WHILE's subgraphs from the model "
            "file (TFLite's delegate interface does not give them): pass model_file=PATH to load_delegate "
            "(delegate.Interpreter passes its model_path)"
        )
    else:
        try:
            io = subgraph_io(model_file)
        except (OSError, DelegateError, ValueError, struct.error) as exc:
            reason = f"the model file {model_file} could not be read for its subgraphs: {exc}"
    contexts: dict[int, tuple[int, int]] = {}
    for index in loops:
        node = graph.nodes[index]
        if reason is not None:
            node.params[LOOP_REASON] = reason
            continue
        cond, body = (int(v) for v in node.params.get("subgraphs", (-1, -1)))
        try:
            captured = [_capture_subgraph(context, s, io) for s in (cond, body)]
        except DelegateError as exc:
            node.params[LOOP_REASON] = str(exc)
            continue
        node.params[LOOP] = Loop(captured[0][0], captured[1][0])
        contexts[index] = (captured[0][1], captured[1][1])
    return contexts


def _capture_subgraph(context: Any, index: int, io: SubgraphIO) -> tuple[Subgraph, int]:
    if not 0 < index < len(io):
        raise DelegateError(f"its subgraph {index} is not in the model file")
    acquired = ffi.new("TfLiteContext **")
    acquire, release = (
        ffi.cast(_ACQUIRE, context.AcquireSubgraphContext),
        ffi.cast(_RELEASE, context.ReleaseSubgraphContext),
    )
    if acquire(context, index, acquired) != lib.kTfLiteOk:
        raise DelegateError(f"TFLite did not give the context of its subgraph {index}")
    try:
        sub = acquired[0]
        inputs, outputs, tensors = io[index]
        # kernels may add tensors past the file's (their temporaries): fewer means another model
        if int(sub.tensors_size) < tensors:
            raise DelegateError(
                f"its subgraph {index} has {int(sub.tensors_size)} tensors, fewer than the model file's {tensors}: "
                "model_file is not the model this interpreter runs"
            )
        plan = execution_plan(sub)
        graph = capture_graph(sub, plan, read_limit=None)  # every constant valued: the copies read them
        for i in (*inputs, *outputs):
            if i not in graph.tensors:
                graph.tensors[i] = capture_tensor(sub, i, read_limit=None)
        return Subgraph(graph, plan, inputs, outputs), context_address(sub)
    finally:
        release(context, index)


def subgraph_io(path: str) -> SubgraphIO:
    """Each subgraph's inputs, outputs and number of tensors, read from the model file at ``path``
    (verified first: model_check.py)."""
    verify_model(path)
    with open(path, "rb") as f:
        data = f.read()

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

    model = u32(0)
    start, count = vector(field(model, 2))  # Model.subgraphs
    out: SubgraphIO = []
    for k in range(count):
        entry = start + 4 * k
        sub = entry + u32(entry)
        out.append((ints(field(sub, 1)), ints(field(sub, 2)), vector(field(sub, 0))[1]))  # inputs, outputs, tensors
    return out
