"""Shapes known before the graph runs: shape arithmetic folded at compile time, and the tensors
whose shapes only exist at run time.

TFLite computes some shapes only when a node runs: a RESHAPE whose shape is not a constant, a PAD
whose paddings are computed, a WHERE: their outputs, and everything computed from them, are
"dynamic" tensors. Converters emit many such shapes as integer arithmetic on static shapes
(``SHAPE -> STRIDED_SLICE -> PACK -> RESHAPE`` for a Keras reshape that keeps the batch): with the
model's shapes fixed, those values are fixed too. ``resolve`` evaluates them (small int32 / int64
tensors only, a few ops with TFLite's semantics) so the nodes reading them compile like nodes with
constant shapes, and names every tensor whose shape still depends on values computed at run time,
with the node that makes it so: nodes touching those stay on TFLite's CPU kernels. Ops that pick
values without arithmetic (``Traits.folds_values``) fold constants of any type the same way: a
SELECT_V2 of constants (a causal attention mask) becomes the constant it computes.

A node whose semantics this module does not know (a custom op the compiler has no op for, control
flow) counts as making its outputs' shapes dynamic: a static shape must be proven, not assumed. A
custom op the compiler has an op for is proven by that op's output_shapes.

Resource variables (streaming models keep their state in them): a READ_VARIABLE's output has the
shape of the value last assigned to its variable. Its model's declared shape is taken when it is
fully static and every ASSIGN_VARIABLE of the graph writing that variable writes a tensor of that
shape and type (``variable_reason``). The first value is assigned elsewhere (a CALL_ONCE's
initialising subgraph), out of this graph's sight: every invoke of a partition checks that each
tensor it binds has the dims it was compiled for and fails with an error saying so otherwise
(csrc/plugin.c), so a state of another shape is never read with the compiled layout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from .graph import Graph, Node
from .op_names import BUILTIN_OPERATORS
from .ops import CUSTOM_OPS, op_for

_FLOAT32, _INT32, _INT64, _BOOL = 1, 2, 4, 6  # TfLiteType
#: integer tensors up to this many elements are evaluated (shape vectors, scalars)
MAX_ELEMENTS = 64
#: the largest output an op that picks values (``Traits.folds_values``) folds from constants: an
#: attention mask over 1024 tokens in float32 (the plugin reads such a node's constant inputs
#: whole during Prepare: ``fold_reads``)
MAX_FOLDED_BYTES = 1 << 22
#: the types such a fold writes, as numpy holds them
_VALUE_TYPES = {_FLOAT32: np.float32, _INT32: np.int32, _INT64: np.int64, _BOOL: np.bool_}


#: TFLite's builtin operator codes by name (from the generated table, compiler/op_names.py)
_Op = IntEnum("_Op", {name: code for code, name in BUILTIN_OPERATORS.items()})


_REDUCERS = (_Op.MEAN, _Op.SUM, _Op.REDUCE_PROD, _Op.REDUCE_MAX, _Op.REDUCE_MIN, _Op.REDUCE_ANY, _Op.REDUCE_ALL)
#: op -> the input positions whose values (not shapes) decide the output's shape
SHAPE_INPUTS: dict[int, tuple[int, ...]] = {
    _Op.RESHAPE: (1,),
    _Op.PAD: (1,),
    _Op.PADV2: (1,),
    _Op.MIRROR_PAD: (1,),
    _Op.SLICE: (1, 2),
    _Op.STRIDED_SLICE: (1, 2, 3),
    _Op.RESIZE_BILINEAR: (1,),
    _Op.RESIZE_NEAREST_NEIGHBOR: (1,),
    _Op.EXPAND_DIMS: (1,),
    _Op.TRANSPOSE: (1,),
    **{op: (1,) for op in _REDUCERS},
    _Op.ARG_MAX: (1,),
    _Op.ARG_MIN: (1,),
    _Op.TILE: (1,),
    _Op.SPLIT: (0,),
    _Op.SPLIT_V: (1, 2),
    _Op.FILL: (0,),
    _Op.BROADCAST_TO: (1,),
    _Op.BROADCAST_ARGS: (0, 1),
    _Op.ONE_HOT: (1,),
    _Op.SPACE_TO_BATCH_ND: (1, 2),
    _Op.BATCH_TO_SPACE_ND: (1, 2),
    _Op.TRANSPOSE_CONV: (0,),
    _Op.CONV_3D_TRANSPOSE: (0,),
    _Op.SCATTER_ND: (2,),
    _Op.RANGE: (0, 1, 2),
    _Op.RANDOM_UNIFORM: (0,),
    _Op.RANDOM_STANDARD_NORMAL: (0,),
    _Op.MULTINOMIAL: (1,),
    _Op.SEGMENT_SUM: (1,),
    _Op.UNSORTED_SEGMENT_SUM: (2,),
    _Op.UNSORTED_SEGMENT_MAX: (2,),
    _Op.UNSORTED_SEGMENT_MIN: (2,),
    _Op.UNSORTED_SEGMENT_PROD: (2,),
}
#: ops whose output shape depends on their data or on state: never static
VALUE_SHAPED = frozenset(
    {
        _Op.WHERE,
        _Op.UNIQUE,
        _Op.NON_MAX_SUPPRESSION_V4,
        _Op.NON_MAX_SUPPRESSION_V5,
        _Op.IF,
        _Op.WHILE,
        _Op.CALL_ONCE,
    }
)
#: builtin codes up to this are known to this module's tables; newer ones count as unknown
_KNOWN_UP_TO = 161


@dataclass
class StaticShapes:
    """What ``resolve`` found: folded values, and the tensors whose shapes are only known at run time."""

    #: integer tensors computed here from static shapes and constants (TFLite computes them at run time)
    values: dict[int, np.ndarray] = field(default_factory=dict)
    #: tensor -> why its shape is only known at run time
    dynamic: dict[int, str] = field(default_factory=dict)

    def reason(self, node: Node) -> str | None:
        """Why ``node`` cannot be compiled for static shapes, or None."""
        for i in (*node.inputs, *node.outputs):
            if i >= 0 and i in self.dynamic:
                return f"tensor {i}'s shape is only known at run time: {self.dynamic[i]}"
        return None


def resolve(graph: Graph, plan: list[int], name_of: Callable[[Node], str] = lambda n: n.name) -> StaticShapes:
    """Walk ``plan`` (execution order): fold shape arithmetic, and mark run-time shapes."""
    found = StaticShapes()
    writes = variable_writes(graph)

    def value(i: int) -> np.ndarray | None:
        if i < 0:
            return None
        t = graph.tensor(i)
        if t.is_constant and t.constant is not None:
            return np.asarray(t.constant)
        return found.values.get(i)

    for index in plan:
        node = graph.nodes[index]
        inherited = next((found.dynamic[i] for i in node.inputs if i >= 0 and i in found.dynamic), None)
        reason = inherited
        if reason is None:
            reason = _dynamic_reason(node, graph, value, name_of)
        if reason is None and node.op == _Op.READ_VARIABLE:
            reason = variable_reason(node, graph, writes, name_of(node))
        if reason is not None:
            for o in node.outputs:
                found.dynamic.setdefault(o, reason)
            continue
        outputs = _evaluate(node, graph, value)
        if outputs is None:
            outputs = _picked_values(node, graph, value)
        if outputs is None:
            continue
        for o, result in zip(node.outputs, outputs, strict=True):
            t = graph.tensor(o)
            if t.dtype in _VALUE_TYPES and tuple(result.shape) == tuple(t.shape):
                found.values[o] = result.astype(_VALUE_TYPES[t.dtype])
    return found


def _dynamic_reason(
    node: Node, graph: Graph, value: Callable[[int], np.ndarray | None], name_of: Callable[[Node], str]
) -> str | None:
    label = name_of(node)
    if node.op == _Op.CUSTOM:
        return _custom_reason(node, graph, label)
    if node.op > _KNOWN_UP_TO:
        return f"{label} is an op whose output shapes are not known before it runs"
    if node.op in VALUE_SHAPED:
        return f"{label} computes its output shapes when it runs"
    for position in SHAPE_INPUTS.get(node.op, ()):
        if position < len(node.inputs) and node.inputs[position] >= 0 and value(node.inputs[position]) is None:
            return f"{label} takes its output shape from tensor {node.inputs[position]}, computed at run time"
    if node.op == _Op.RESHAPE and len(node.inputs) > 1 and node.inputs[1] >= 0:
        shape = value(node.inputs[1])
        out = graph.tensor(node.outputs[0]).shape
        if shape is not None and not _reshape_matches(shape, graph.tensor(node.inputs[0]).shape, out):
            return f"{label}'s computed shape {shape.tolist()} is not the model's {list(out)}"
    return None


def variable_key(graph: Graph, resource: int) -> tuple[str, ...]:
    """Which variable resource tensor ``resource`` names: the container and shared name of the
    VAR_HANDLE making it (two handles may name one variable), else the tensor itself."""
    for node in graph.nodes.values():
        if node.op == _Op.VAR_HANDLE and node.outputs and node.outputs[0] == resource:
            return ("name", str(node.params.get("container", "")), str(node.params.get("shared_name", "")))
    return ("tensor", str(resource))


def variable_writes(graph: Graph) -> dict[tuple[str, ...], list[int]]:
    """Each variable's written tensors: the values of the graph's ASSIGN_VARIABLE nodes."""
    writes: dict[tuple[str, ...], list[int]] = {}
    for node in graph.nodes.values():
        if node.op == _Op.ASSIGN_VARIABLE and len(node.inputs) == 2 and min(node.inputs) >= 0:
            writes.setdefault(variable_key(graph, node.inputs[0]), []).append(node.inputs[1])
    return writes


def variable_reason(node: Node, graph: Graph, writes: dict[tuple[str, ...], list[int]], label: str) -> str | None:
    """Why READ_VARIABLE ``node``'s output shape is not its declared one, or None (module docstring)."""
    if len(node.inputs) != 1 or len(node.outputs) != 1 or min(*node.inputs, *node.outputs) < 0:
        return f"{label} computes its output shapes when it runs"
    out = graph.tensor(node.outputs[0])
    if out.signature is not None and any(d < 0 for d in out.signature):
        return f"{label} reads a variable whose shape the model leaves open ({list(out.signature)})"
    for written in writes.get(variable_key(graph, node.inputs[0]), []):
        value = graph.tensor(written)
        if value.shape != out.shape or value.dtype != out.dtype:
            return (
                f"{label} reads a variable that tensor {written} of shape {list(value.shape)} is written "
                f"with, not the {list(out.shape)} it declares"
            )
    return None


def _custom_reason(node: Node, graph: Graph, label: str) -> str | None:
    """A custom op the compiler knows has the output shapes its op computes (it has no TFLite kernel
    to compute others), when the model's shapes are those; any other custom op's are unknown."""
    op = CUSTOM_OPS.get(node.custom_name)
    try:
        computed = op.output_shapes(node, graph) if op is not None else None
    except ValueError as exc:
        return f"{label} has options its output shapes cannot be computed from: {exc}"
    if computed is None:
        return f"{label} is an op whose output shapes are not known before it runs"
    stored = [tuple(graph.tensor(o).shape) for o in node.outputs]
    if computed != stored:
        return f"{label} computes output shapes {computed}, not the model's {stored}"
    return None


def _reshape_matches(shape: np.ndarray, src: tuple[int, ...], out: tuple[int, ...]) -> bool:
    dims = [int(d) for d in np.asarray(shape).reshape(-1)]
    if dims.count(-1) > 1:
        return False
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or math.prod(src) % known:
            return False
        dims[dims.index(-1)] = math.prod(src) // known
    return tuple(dims) == tuple(out)


def _small_ints(arrays: list[np.ndarray | None]) -> list[np.ndarray] | None:
    if any(a is None for a in arrays):
        return None
    out = [np.asarray(a) for a in arrays]  # type: ignore[arg-type]
    if any(a.dtype.kind not in "iub" or a.size > MAX_ELEMENTS for a in out):
        return None
    return [a.astype(np.int64) for a in out]


def _evaluate(node: Node, graph: Graph, value: Callable[[int], np.ndarray | None]) -> list[np.ndarray] | None:
    """The values of ``node``'s outputs when they are small integer tensors it can compute, else None."""
    outs = [graph.tensor(o) for o in node.outputs]
    if not outs or any(t.dtype not in (_INT32, _INT64) or math.prod(t.shape) > MAX_ELEMENTS for t in outs):
        return None
    if node.op == _Op.SHAPE:
        return [np.asarray(graph.tensor(node.inputs[0]).shape, np.int64)]
    args = _small_ints([value(i) if i >= 0 else None for i in node.inputs])
    if args is None:
        return None
    try:
        result = _compute(node, args, outs[0].shape)
    except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError):
        return None  # not what TFLite would accept either: leave it to TFLite
    return None if result is None else [result]


def fold_reads(graph: Graph) -> list[int]:
    """The constants not read yet (their value None) that ``_picked_values`` would fold from: every
    input of a node whose op picks values and whose inputs are all the model's constants, its
    output within ``MAX_FOLDED_BYTES``."""
    wanted: list[int] = []
    for node in graph.nodes.values():
        op = op_for(node)
        if op is None or not op.traits(node.op).folds_values or len(node.outputs) != 1 or node.outputs[0] < 0:
            continue
        inputs = [graph.tensor(i) for i in node.inputs if i >= 0]
        if not inputs or not all(t.is_constant for t in inputs):
            continue
        out = graph.tensor(node.outputs[0])
        size = math.prod(out.shape) * np.dtype(_VALUE_TYPES.get(out.dtype, np.float32)).itemsize
        if out.dtype in _VALUE_TYPES and size <= MAX_FOLDED_BYTES:
            wanted += [t.index for t in inputs if t.constant is None]
    return wanted


def _picked_values(node: Node, graph: Graph, value: Callable[[int], np.ndarray | None]) -> list[np.ndarray] | None:
    """The output of a node whose op picks values (``Traits.folds_values``: SELECT_V2 of a constant
    mask) when every input is a constant, of any of ``_VALUE_TYPES``, unquantized, up to
    ``MAX_FOLDED_BYTES``; else None. Nothing rounds, so the value is TFLite's."""
    op = op_for(node)
    if op is None or not op.traits(node.op).folds_values or len(node.outputs) != 1:
        return None
    tensors = [graph.tensor(i) for i in (*node.inputs, *node.outputs) if i >= 0]
    if any(t.dtype not in _VALUE_TYPES or t.scales or t.quantized for t in tensors):
        return None
    out = graph.tensor(node.outputs[0])
    if math.prod(out.shape) * np.dtype(_VALUE_TYPES[out.dtype]).itemsize > MAX_FOLDED_BYTES:
        return None
    args = [value(i) for i in node.inputs if i >= 0]
    if any(a is None for a in args) or len(args) != len(node.inputs):
        return None
    try:
        result = op.fold(node, [np.asarray(a) for a in args], out.shape)  # type: ignore[misc]
    except (ValueError, IndexError, TypeError):
        return None
    return None if result is None else [np.asarray(result)]


def _compute(node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
    """The op's own folding (``Op.fold``); for the shape ops the compiler has no kernel for, here."""
    op = op_for(node)
    if op is not None:
        return op.fold(node, args, out_shape)
    if node.op == _Op.FLOOR_DIV:
        return None if np.any(args[1] == 0) else np.floor_divide(args[0], args[1])
    return None


def fold_values(graph: Graph, found: StaticShapes) -> set[int]:
    """Make ``found``'s values constants of ``graph`` (the compiler reads them like weights and
    shapes stored in the model); the nodes all of whose outputs are such values, which need no kernel."""
    for i, v in found.values.items():
        t = graph.tensor(i)
        t.is_constant, t.constant = True, v
    return {n.index for n in graph.nodes.values() if n.outputs and all(o >= 0 and o in found.values for o in n.outputs)}
