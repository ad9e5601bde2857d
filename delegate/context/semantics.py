"""What the values of a well-formed context must mean before it can run: sizes, work-groups,
the flush period, enums and ids.

The native reader (csrc/ctxfile.c) proves a file is a FlatBuffer of the schema: offsets, strings,
bools and enums. It takes any value a scalar field can hold, so that any well-formed file can be
read, inspected and written back. These rules are what the values must mean for the context to run;
the runtime applies them to every context it loads (a file, bytes or a model built in Python)
before it touches a device, so nothing downstream guesses (a height of -5 is not run as 1). Fields
the runtime does not read (the descriptors of ``definition`` and of ``*_refs``, bound at run time
to the node's tensors, and the stored ``work_groups_count``, which is recomputed) are left alone.

A violation raises ``ContextFormatError`` (kind ``semantic``) naming the node or tensor, the
field, the value and the rule.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from typing import Any

from ..errors import ContextFormatError
from .fields import Kind, field_specs
from .model import (
    BHWDC,
    Arguments,
    CLNode,
    DataType,
    GPUOperation,
    InferenceContext,
    TensorDescriptor,
    TensorStorageType,
    TensorToGrid,
    holds_codes,
)

#: the dimensions of a tensor shape, each a size
_DIMS = ("b", "h", "w", "d", "c")
_AXES = ("x", "y", "z")


def semantic_error(message: str, source: str = "context") -> ContextFormatError:
    """The error of a context that is well-formed but means nothing the runtime can run."""
    return ContextFormatError(message, kind="semantic", source=source)


class _Refusal(Exception):
    """One broken rule; check_semantics turns it into a ContextFormatError with the source."""


def _refuse(where: str, field: str, value: object, rule: str) -> _Refusal:
    prefix = f"{where}: " if where else ""
    return _Refusal(f"{prefix}{field} is {value}; {rule}")


def _node_label(index: int, node: CLNode) -> str:
    return f"node {index} ({node.name})" if node.name else f"node {index}"


@cache
def _enum_plan(cls: type) -> tuple[tuple[str, Kind, type], ...]:
    """The fields of ``cls`` that are enums or lead to one (tables without enums are skipped:
    the scalars of every kernel argument are most of a context's tables)."""
    plan = []
    for spec in field_specs(cls):
        assert spec.target is not None or spec.kind not in (Kind.ENUM, Kind.TABLE, Kind.TABLE_LIST)
        if spec.kind is Kind.ENUM or (spec.kind in (Kind.TABLE, Kind.TABLE_LIST) and _enum_plan(spec.target)):
            plan.append((spec.name, spec.kind, spec.target))
    return tuple(plan)  # type: ignore[arg-type]


class _BadEnum(Exception):
    """An enum field out of range; ``path`` is filled in on the way out (built only on failure)."""

    def __init__(self, field: str, value: int, target: type) -> None:
        super().__init__(field)
        self.path, self.value, self.target = field, value, target


def _walk_enums(obj: Any) -> None:
    for name, kind, target in _enum_plan(type(obj)):
        value = getattr(obj, name)
        if kind is Kind.ENUM:
            if value not in target._value2member_map_:
                raise _BadEnum(name, int(value), target)
            continue
        items = ((None, value),) if kind is Kind.TABLE else enumerate(value)
        for index, item in items:
            if item is None:
                continue
            try:
                _walk_enums(item)
            except _BadEnum as bad:
                bad.path = f"{name}.{bad.path}" if index is None else f"{name}[{index}].{bad.path}"
                raise


def _check_enums(ctx: InferenceContext) -> None:
    """Every enum field of ``ctx``'s tree holds a value its enum defines (files have this from the
    native reader; a model built in Python may hold any int)."""
    try:
        _walk_enums(ctx)
    except _BadEnum as bad:
        top = max(bad.target._value2member_map_)
        raise _refuse("", bad.path, bad.value, f"{bad.target.__name__} has values 0..{top}") from None


def _check_shape(where: str, field: str, shape: BHWDC | None) -> None:
    if shape is None:
        raise _refuse(where, field, "absent", "a tensor needs its shape (b, h, w, d, c)")
    for dim in _DIMS:
        value = getattr(shape, dim)
        if value < 1:
            raise _refuse(
                where, f"{field}.{dim}", value, "every dimension of a tensor shape (b, h, w, d, c) is at least 1"
            )


def _check_tensors(ctx: InferenceContext) -> set[int]:
    """The declared tensor ids, after checking each tensor's id and shape."""
    declared: dict[int, int] = {}
    for index, t in enumerate(ctx.tensors):
        where = f"tensors[{index}]"
        if t.id < 0:
            raise _refuse(where, "id", t.id, "tensor ids are not negative")
        if t.id in declared:
            raise _refuse(where, "id", t.id, f"tensors[{declared[t.id]}] declares it too; tensor ids are unique")
        declared[t.id] = index
        if t.desc is None:
            raise _refuse(f"tensor {t.id}", "desc", "absent", "every tensor needs a descriptor")
        _check_shape(f"tensor {t.id}", "desc.shape", t.desc.shape)
        _check_codes(f"tensor {t.id}", t.desc)
    return set(declared)


def _check_codes(where: str, desc: TensorDescriptor) -> None:
    """A tensor marked as holding codes (model.CODES) is an UNKNOWN-typed BUFFER."""
    if not holds_codes(desc):
        return
    if desc.data_type != DataType.UNKNOWN:
        rule = "a tensor holding codes (state variable codes=uchar4) has data type UNKNOWN"
        raise _refuse(where, "desc.data_type", DataType(desc.data_type).name, rule)
    if desc.storage_type != TensorStorageType.BUFFER:
        rule = "a tensor holding codes (state variable codes=uchar4) is a BUFFER"
        raise _refuse(where, "desc.storage_type", TensorStorageType(desc.storage_type).name, rule)


def _check_ids(where: str, field: str, ids: Iterable[int], declared: set[int], *, distinct: bool) -> None:
    seen: set[int] = set()
    for i, value in enumerate(ids):
        if value not in declared:
            raise _refuse(where, f"{field}[{i}]", value, "no tensor declares that id")
        if distinct and value in seen:
            raise _refuse(where, f"{field}[{i}]", value, f"listed twice; each id appears once in {field}")
        seen.add(value)


def _check_objects(where: str, args: Arguments) -> None:
    """Sizes of the objects the runtime allocates for a node (constants and scratch memory)."""
    for e in args.tensor_objects:
        if e.value is not None:
            _check_shape(where, f"gpu_op.arguments.tensor_objects[{e.key!r}].shape", e.value.shape)
            if holds_codes(e.value):
                field = f"gpu_op.arguments.tensor_objects[{e.key!r}].base_obj.state_vars"
                raise _refuse(where, field, "codes=uchar4", "codes are a runtime tensor's, never an object's")
    for e in args.texture2d_objects:
        if e.value is not None and e.value.size is not None:
            for axis in ("x", "y"):
                value = getattr(e.value.size, axis)
                if value < 1:
                    field = f"gpu_op.arguments.texture2d_objects[{e.key!r}].size.{axis}"
                    raise _refuse(where, field, value, "a texture is at least 1 texel on each axis")
    for kind, entries in (
        ("buffer_objects", args.buffer_objects),
        ("tensor_linear_objects", args.tensor_linear_objects),
    ):
        for e in entries:
            if e.value is not None and e.value.size < 0:
                raise _refuse(where, f"gpu_op.arguments.{kind}[{e.key!r}].size", e.value.size, "a size is not negative")


def _check_launch(where: str, op: GPUOperation) -> None:
    wg = op.work_group_size
    if wg is not None:
        for axis in _AXES:
            value = getattr(wg, axis)
            if value < 1:
                rule = "each axis of a work-group is a number of work-items, at least 1"
                raise _refuse(where, f"gpu_op.work_group_size.{axis}", value, rule)
    if op.tensor_to_grid == TensorToGrid.CUSTOM and op.grid_size is not None:
        dims = op.grid_dimension if 1 <= op.grid_dimension <= 3 else 3  # 0: the default, 3
        for axis in _AXES[:dims]:
            value = getattr(op.grid_size, axis)
            if value < 1:
                rule = "a CUSTOM grid is at least 1 work-item on each axis it uses"
                raise _refuse(where, f"gpu_op.grid_size.{axis}", value, rule)


def _check_node(index: int, node: CLNode, declared: set[int]) -> None:
    where = _node_label(index, node)
    op = node.gpu_op
    if op is None:
        raise _refuse(where, "gpu_op", "absent", "every node runs a kernel")
    _check_ids(where, "input_ids", node.input_ids, declared, distinct=False)  # x * x reads x twice
    _check_ids(where, "output_ids", node.output_ids, declared, distinct=True)
    for names, ids, field in (
        (op.src_tensors_names, node.input_ids, "src_tensors_names"),
        (op.dst_tensors_names, node.output_ids, "dst_tensors_names"),
    ):
        if len(names) != len(ids):
            kind = "input_ids" if field.startswith("src") else "output_ids"
            rule = f"the node has {len(ids)} {kind}, and each is bound to the kernel by one name"
            raise _refuse(where, f"gpu_op.{field}", f"{len(names)} names", rule)
    _check_launch(where, op)
    if op.arguments is not None:
        _check_objects(where, op.arguments)


def _check_root(ctx: InferenceContext, declared: set[int]) -> None:
    if ctx.flush_period < 0:
        raise _refuse("", "flush_period", ctx.flush_period, "a flush period is a number of launches, not negative")
    if ctx.flush_periodically and ctx.flush_period < 1:
        rule = "flush_periodically needs a period of at least 1 launch"
        raise _refuse("", "flush_period", ctx.flush_period, rule)
    _check_ids("", "input_ids", ctx.input_ids, declared, distinct=True)
    _check_ids("", "output_ids", ctx.output_ids, declared, distinct=True)
    codes = {t.id for t in ctx.tensors if t.desc is not None and holds_codes(t.desc)}
    edges = ("input_ids", ctx.input_ids), ("output_ids", ctx.output_ids)
    for field, ids in (*edges, ("variable_ids_and_refs", [pair.first for pair in ctx.variable_ids_and_refs])):
        for i, value in enumerate(ids):
            if value in codes:
                rule = "a tensor holding codes is internal: the runtime converts floats at the edges"
                raise _refuse("", f"{field}[{i}]", value, rule)
    variables: dict[int, int] = {}
    for index, pair in enumerate(ctx.variable_ids_and_refs):
        where = f"variable_ids_and_refs[{index}]"
        if pair.first not in declared:
            raise _refuse(where, "first", pair.first, "no tensor declares that id")
        if pair.first in variables:
            rule = f"variable_ids_and_refs[{variables[pair.first]}] names it too; a tensor has one variable ref"
            raise _refuse(where, "first", pair.first, rule)
        variables[pair.first] = index
        if pair.second < 0:
            raise _refuse(where, "second", pair.second, "a variable ref is a TFLite tensor index, not negative")


def check_semantics(ctx: InferenceContext, source: str = "context") -> None:
    """Raise ``ContextFormatError`` (kind ``semantic``) at the first value of ``ctx`` that means
    nothing runnable; ``source`` names the context in the message (a path, or ``context``)."""
    try:
        _check_enums(ctx)
        declared = _check_tensors(ctx)
        _check_root(ctx, declared)
        for index, node in enumerate(ctx.nodes):
            _check_node(index, node, declared)
    except _Refusal as refusal:
        raise semantic_error(str(refusal), source) from None


__all__ = ["check_semantics", "semantic_error"]
