"""GATHER and EMBEDDING_LOOKUP: slices of a float32 table picked by integer indices (an int8 /
uint8 table is carried in float, quant.py: its values are picked as TFLite picks its integers).

GATHER (params, indices; axis, batch_dims) writes params.shape[:axis] + indices.shape[batch_dims:]
+ params.shape[axis + 1:], each element params[..., indices[...], ...] (TFLite's kernel, batch
dims shared by params and indices). EMBEDDING_LOOKUP (ids, value) is GATHER on axis 0 of value
with rank-1 ids. The table is a constant (an embedding) or a runtime tensor; the indices int32 or
int64, runtime (token ids) or constant (a reindex of a runtime table).

Indices live on the device as floats, like every int32 tensor (docs/ops.md, "Bool and int32
tensors"), exact up to 2^24 (the runtime refuses larger partition inputs), stored in float32 in
every precision (precision.py) and read with ``ReadFloat``, so half math never rounds them. An
index is clamped into the axis before any read: TFLite's kernels fail the invoke on an index out
of range; the kernel reads row 0 for one below 0 and the last row for one past the end, never
outside the table. Constant indices out of range leave the node to TFLite, which reports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...context import model
from ...context.model import CalculationsPrecision
from .. import layout
from ..graph import INT32, INT64, Builtin, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, LANE_LOOP, operation, written
from .base import EmitContext, Op, constant_tensor, value_tensors
from .traits import Quantization, Traits

#: the output's coordinates in the runtime's 4-D view (layout.bhwc: shapes left-padded to 4)
_OUT = ("b", "Y", "X", "c")
#: the table's values pass through unscaled (precision.py): a float32 need travels to the table;
#: TFLite's int8 / uint8 lookups copy the table's integers (EMBEDDING_LOOKUP's hybrid form, an int8
#: table read into float32, is no quantized node: it stays on CPU)
_PICKS = Traits(quantization=Quantization.KEEPS_INTEGERS, passes_bound=True, keeps_small=True)

#: one lane of a float4 (the index, read unconverted)
_INDEX_LANE = """
float dlg_index_lane(float4 v, int i) { return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w)); }
"""


@dataclass(frozen=True)
class Form:
    """A node as GATHER: its table and indices tensors, the axis picked along and the batch dims."""

    params: int
    indices: int
    axis: int
    batch_dims: int


def form_of(node: Node, graph: Graph) -> Form:
    """The node as GATHER, axis and batch dims made non-negative; ValueError where TFLite's kernel
    would refuse them."""
    if len(node.inputs) != 2 or any(i < 0 for i in node.inputs) or len(node.outputs) != 1:
        raise ValueError(f"{len(node.inputs)} inputs and {len(node.outputs)} outputs (2 and 1 expected)")
    if node.op == Builtin.EMBEDDING_LOOKUP:
        ids, table = node.inputs
        if len(graph.tensor(ids).shape) != 1 or len(graph.tensor(table).shape) < 2:
            raise ValueError("the ids are not of rank 1 or the table is not of rank 2 or more")
        return Form(table, ids, 0, 0)
    params, indices = node.inputs
    p_shape, i_shape = graph.tensor(params).shape, graph.tensor(indices).shape
    axis, batch_dims = int(node.params.get("axis", 0)), int(node.params.get("batch_dims", 0))
    axis += len(p_shape) if axis < 0 else 0
    batch_dims += len(i_shape) if batch_dims < 0 else 0
    if not 0 <= batch_dims <= axis < len(p_shape) or batch_dims > len(i_shape):
        raise ValueError(f"axis {axis} and batch_dims {batch_dims} do not fit the params and indices")
    if tuple(p_shape[:batch_dims]) != tuple(i_shape[:batch_dims]):
        raise ValueError("the batch dims of params and indices differ")
    return Form(params, indices, axis, batch_dims)


def gathered_shape(form: Form, graph: Graph) -> tuple[int, ...]:
    p_shape, i_shape = graph.tensor(form.params).shape, graph.tensor(form.indices).shape
    return (*p_shape[: form.axis], *i_shape[form.batch_dims :], *p_shape[form.axis + 1 :])


class Gather(Op):
    codes = (Builtin.GATHER, Builtin.EMBEDDING_LOOKUP)
    data_inputs = 2
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, _PICKS)

    def check(self, node: Node, graph: Graph) -> str | None:
        form = form_of(node, graph)
        problem = (
            value_tensors(graph, [form.params, node.outputs[0]])
            or value_tensors(graph, [form.indices], (INT32, INT64))
            or _rank_problem(form, graph)
        )
        if problem:
            return problem
        table, indices = graph.tensor(form.params), graph.tensor(form.indices)
        if table.is_constant and indices.is_constant:
            return "every input is a constant"
        if indices.is_constant:
            values = indices.constant
            if values is None:
                return f"constant indices {form.indices} are too large to check when the graph is prepared"
            size = table.shape[form.axis]
            if values.size and (int(values.min()) < 0 or int(values.max()) >= size):
                return f"constant indices out of range [0, {size}) (TFLite reports them)"
        return None

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return gathered_shape(form_of(node, graph), graph)

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        """GATHER of shape values (Keras' Tensordot picks dims of a SHAPE): indices in range only,
        as TFLite reports the others."""
        if node.op != Builtin.GATHER or int(node.params.get("batch_dims", 0)) != 0:
            return None
        data, indices = args
        axis = int(node.params.get("axis", 0)) % max(data.ndim, 1)
        if np.any(indices < 0) or np.any(indices >= data.shape[axis]):
            return None
        return np.take(data, indices, axis=axis)

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g = ctx.graph
        form = form_of(node, g)
        names = {form.params: "params", form.indices: "indices"}
        srcs, objects = [], []
        for tensor in node.inputs:  # runtime inputs in input order (Op: src_tensors_names)
            t = g.tensor(tensor)
            if t.constant is None:
                srcs.append(names[tensor])
            elif tensor == form.indices:
                objects.append(_index_object(t.constant, t.shape, g.tensor(form.params).shape[form.axis]))
            else:
                objects.append(constant_tensor("params", t, ctx))
        return operation(written(_code(form, g)), srcs=srcs, tensor_objects=objects)


def _rank_problem(form: Form, graph: Graph) -> str | None:
    rank = len(gathered_shape(form, graph))
    return f"the output would have rank {rank} (at most 4)" if rank > 4 else None


def _index_object(values: np.ndarray, shape: tuple[int, ...], size: int) -> model.TensorDescriptorMapValue:
    """Constant indices as a float32 tensor object in every precision (half's integers stop at
    2048), clamped as the kernel clamps runtime ones."""
    clamped = np.clip(np.asarray(values, np.int64), 0, size - 1).astype(np.float32)
    desc = layout.tensor_descriptor(shape, CalculationsPrecision.F32)
    desc.data = layout.buffer_layout(clamped, shape, np.dtype(np.float32))
    return model.TensorDescriptorMapValue("indices", desc)


def _coordinates(form: Form, graph: Graph, row: str) -> tuple[list[str], list[str]]:
    """The 4-D coordinates (b, h, w, c) of the index an output element reads, and of the table
    element, with the table's axis at ``row``; both in terms of the output's (``_OUT``)."""
    p_rank, i_rank = len(graph.tensor(form.params).shape), len(graph.tensor(form.indices).shape)
    picked = i_rank - form.batch_dims  # index dims in the output, from ``form.axis`` on
    out_pad = 4 - (p_rank - 1 + picked)

    def out(d: int) -> str:
        return _OUT[out_pad + d]

    index = ["0"] * 4
    for j in range(i_rank):
        index[4 - i_rank + j] = out(j) if j < form.batch_dims else out(form.axis + j - form.batch_dims)
    table = ["0"] * 4
    for j in range(p_rank):
        table[4 - p_rank + j] = out(j) if j < form.axis else row if j == form.axis else out(j - 1 + picked)
    return index, table


def _code(form: Form, graph: Graph) -> str:
    """The kernel: read the index, clamp it into the axis, read the table there. When the axis is
    not the table's last, the output's channels are the table's: one index and one FLT4 per
    work-item; otherwise each of the 4 lanes reads its own index."""
    size = graph.tensor(form.params).shape[form.axis]
    index, table = _coordinates(form, graph, "row")
    ib, iy, ix, ic = index
    pick = (
        f"float iv = dlg_index_lane(args.indices.ReadFloat({ix}, {iy}, ({ic}) / 4, {ib}), ({ic}) % 4);\n"
        # NaN compares false: row 0
        f"int row = iv >= {size - 1}.0f ? {size - 1} : (iv > 0.0f ? (int)iv : 0);\n"
    )
    pb, py, px, pc = table
    if form.axis < len(graph.tensor(form.params).shape) - 1:  # pc is "c": whole slices
        body = "  " + pick.replace("\n", "\n  ") + f"FLT4 result = args.params.Read({px}, {py}, S, {pb});\n"
        return _INDEX_LANE + HEAD + body
    lane = "    " + pick.replace("\n", "\n    ")
    return (
        _INDEX_LANE
        + LANE_LOOP
        + lane
        + f"result = dlg_set(result, k, dlg_component(args.params.Read({px}, {py}, ({pc}) / 4, {pb}), ({pc}) % 4));\n"
        + "  }\n"
    )


OP = Gather()
