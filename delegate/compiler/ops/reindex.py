"""Ops that re-index data: TRANSPOSE, SLICE, STRIDED_SLICE, TILE, REVERSE_V2, SPACE_TO_DEPTH,
DEPTH_TO_SPACE, SPLIT and SPLIT_V, and the helpers the other re-indexing families (pad.py, resize.py, reduce.py)
share.

Each output lane (b, Y, X, c) reads input lane (bi, yi, xi, ci), generated per node from its
constant parameters, in the runtime's 4-D view of tensors (layout.bhwc: shapes left-padded to 4).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from ..graph import Builtin, Graph, Node
from ..kernel import Kernel, Piece
from ..kernels.common.pieces import HEAD, LANE_LOOP, input_lane, operation, written
from .base import EmitContext, Op, float_tensors, runtime_io
from .traits import MOVES_INTEGERS, Quantization, Traits

#: TILE and SPLIT copy values, whose bounds they keep; precision.py has them pass small values only
_COPIES = Traits(quantization=Quantization.KEEPS_INTEGERS, keeps_small=True)

OUT = ("b", "Y", "X", "c")
SIZE = ("Batch", "Height", "Width", "Channels")


#: an output slice that is one input slice (the channel axis unmoved): one read, no lane loop
_SLICE_COPY = "  FLT4 result = args.src_tensor.Read(xi, yi, S, bi);\n"


def gather_code(exprs: list[str]) -> list[Piece]:
    """The kernel setting each output lane (b, Y, X, c) from input lane (bi, yi, xi, ci) = ``exprs``."""
    return written(
        LANE_LOOP
        + input_lane(exprs)
        + """    result = dlg_set(result, k, dlg_component(args.src_tensor.Read(xi, yi, ci / 4, bi), ci % 4));
  }
"""
    )


def constant_values(graph: Graph, node: Node, position: int) -> np.ndarray | None:
    if position >= len(node.inputs) or node.inputs[position] < 0:
        return None
    value = graph.tensor(node.inputs[position]).constant
    return None if value is None else np.asarray(value).reshape(-1)


#: the highest rank TRANSPOSE and SLICE take (TFLite's kernels take 6): above 4, read through the
#: 4-D view whose first dim merges the leading ones (layout.bhwc)
MAX_RANK = 6


def logical_lane(shape: tuple[int, ...]) -> list[str]:
    """Each dim's index of the output lane (b, Y, X, c) of a tensor of ``shape`` in its 4-D view:
    above rank 4, the leading dims out of b by division (their sizes are literals)."""
    rank = len(shape)
    if rank <= 4:
        return list(OUT[4 - rank :])
    lead = [int(d) for d in shape[: rank - 3]]
    exprs = []
    for k, size in enumerate(lead):
        inner = int(np.prod(lead[k + 1 :], dtype=np.int64))
        exprs.append(f"((b / {inner}) % {size})" if inner > 1 else f"(b % {size})")
    return [*exprs, "Y", "X", "c"]


def view_lane(shape: tuple[int, ...], index: list[str]) -> list[str]:
    """The 4-D view's lane (bi, yi, xi, ci) of the element at ``index`` (one expression per dim) of a
    tensor of ``shape``."""
    rank = len(shape)
    if rank <= 4:
        return ["0"] * (4 - rank) + index
    lead = [int(d) for d in shape[: rank - 3]]
    terms = [f"({index[k]}) * {int(np.prod(lead[k + 1 :], dtype=np.int64))}" for k in range(rank - 3)]
    return [" + ".join(terms), *index[rank - 3 :]]


def data_check(
    node: Node, graph: Graph, data: int = 0, constants: tuple[int, ...] = (), *, high_rank: bool = False
) -> str | None:
    """Input ``data`` and the outputs are runtime float tensors; inputs at ``constants`` are constants
    (``high_rank``: see ``base.value_tensors``)."""
    for position in constants:
        if position >= len(node.inputs) or constant_values(graph, node, position) is None:
            return f"input {position} is not a constant"
    data_only = node.__class__(node.index, node.op, node.version, (node.inputs[data],), node.outputs)
    problem = runtime_io(data_only, graph, high_rank=high_rank)
    if problem:
        return problem
    if graph.tensor(node.inputs[data]).is_constant:
        return "the input is a constant"
    return None


def rank_of(graph: Graph, tensor: int) -> int:
    return len(graph.tensor(tensor).shape)


def surviving(in_rank: int, out_rank: int, dropped: set[int]) -> dict[int, str]:
    """Input 4-D dim -> output coordinate, when the output keeps the input's dims not in ``dropped``
    (in order) and its rank is ``out_rank``."""
    pad, pad_out = 4 - in_rank, 4 - out_rank
    kept = [pad + d for d in range(in_rank) if d not in dropped]
    return {j: OUT[pad_out + i] for i, j in enumerate(kept)}


def float_check(node: Node, graph: Graph, data: int) -> str | None:
    problem = float_tensors(node, graph, [node.inputs[data], *node.outputs])
    if problem:
        return problem
    return "the input is a constant" if graph.tensor(node.inputs[data]).is_constant else None


def _dims_check(
    node: Node, graph: Graph, valid: Callable[[list[int], int], bool], problem: str, *, high_rank: bool = False
) -> str | None:
    """The check of an op whose second input is a constant list of the data input's dimensions
    (TRANSPOSE's permutation, REVERSE_V2's axes): ``problem`` unless ``valid(dims, rank)``
    (``high_rank``: up to MAX_RANK)."""
    data_problem = data_check(node, graph, constants=(1,), high_rank=high_rank)
    if data_problem:
        return data_problem
    if rank_of(graph, node.inputs[0]) > MAX_RANK:
        return f"rank {rank_of(graph, node.inputs[0])} (at most {MAX_RANK})"
    dims, rank = constant_values(graph, node, 1), rank_of(graph, node.inputs[0])
    return None if dims is not None and valid([int(d) for d in dims], rank) else problem


class Transpose(Op):
    codes = (Builtin.TRANSPOSE,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def check(self, node: Node, graph: Graph) -> str | None:
        return _dims_check(
            node,
            graph,
            lambda perm, rank: sorted(p % rank for p in perm) == list(range(rank)),
            "the permutation is not a permutation of the input's dimensions",
            high_rank=True,
        )

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        rank = rank_of(ctx.graph, node.inputs[0])
        if rank > 4:  # timm's attention: qkv (B, N, 3, heads, D) -> (3, B, heads, N, D)
            return _high_rank_transpose(node, ctx.graph)
        pad = 4 - rank
        perm4 = list(range(pad)) + [int(p) % rank + pad for p in constant_values(ctx.graph, node, 1)]  # type: ignore[union-attr]
        exprs = ["0"] * 4
        for d, j in enumerate(perm4):
            exprs[j] = OUT[d]
        if perm4[3] == 3:  # channels stay last (attention's head split / merge): whole slices move
            return operation(written(HEAD + input_lane(exprs[:3], "  ") + _SLICE_COPY), srcs=["src_tensor"])
        return operation(gather_code(exprs), srcs=["src_tensor"])


def _high_rank_transpose(node: Node, graph: Graph) -> Kernel:
    """TRANSPOSE above rank 4: output dim d is input dim perm[d], each tensor read in its 4-D view."""
    src, dst = graph.tensor(node.inputs[0]).shape, graph.tensor(node.outputs[0]).shape
    perm = [int(p) % len(src) for p in constant_values(graph, node, 1)]  # type: ignore[union-attr]
    out = logical_lane(dst)
    index = ["0"] * len(src)
    for d, p in enumerate(perm):
        index[p] = out[d]
    exprs = view_lane(src, index)
    if perm[-1] == len(src) - 1:  # channels stay last: whole slices move
        return operation(written(HEAD + input_lane(exprs[:3], "  ") + _SLICE_COPY), srcs=["src_tensor"])
    return operation(gather_code(exprs), srcs=["src_tensor"])


def strided_slice_values(
    data: np.ndarray, begin: np.ndarray, end: np.ndarray, strides: np.ndarray, p: dict
) -> np.ndarray | None:
    """TFLite's STRIDED_SLICE with positive strides and no ellipsis or new axes (the shape arithmetic
    converters emit); begin and end clamp into the axis as in TFLite, which Python's slices also do."""
    if p.get("ellipsis_mask", 0) or p.get("new_axis_mask", 0) or p.get("offset", False):
        return None
    begin, end, strides = begin.reshape(-1), end.reshape(-1), strides.reshape(-1)
    if not len(begin) == len(end) == len(strides) <= data.ndim or np.any(strides <= 0):
        return None
    index: list[slice | int] = []
    for axis in range(len(begin)):
        size, step = data.shape[axis], int(strides[axis])
        if p.get("shrink_axis_mask", 0) >> axis & 1:
            b = int(begin[axis]) + (size if begin[axis] < 0 else 0)
            if not 0 <= b < size:
                return None
            index.append(b)
            continue
        b = None if p.get("begin_mask", 0) >> axis & 1 else int(begin[axis])
        e = None if p.get("end_mask", 0) >> axis & 1 else int(end[axis])
        index.append(slice(b, e, step))
    return np.asarray(data[tuple(index)])


class Slice(Op):
    """SLICE (begin, size) and STRIDED_SLICE (begin, end, strides; begin and shrink masks)."""

    codes = (Builtin.SLICE, Builtin.STRIDED_SLICE)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        if node.op == Builtin.STRIDED_SLICE:
            return strided_slice_values(args[0], args[1], args[2], args[3], node.params)
        begin, size = args[1].reshape(-1), args[2].reshape(-1)
        index = tuple(slice(int(b), None if s < 0 else int(b + s)) for b, s in zip(begin, size, strict=True))
        return args[0][index]

    def check(self, node: Node, graph: Graph) -> str | None:
        constants = (1, 2, 3) if node.op == Builtin.STRIDED_SLICE else (1, 2)
        problem = data_check(node, graph, constants=constants, high_rank=True)
        if problem:
            return problem
        if rank_of(graph, node.inputs[0]) > MAX_RANK:
            return f"rank {rank_of(graph, node.inputs[0])} (at most {MAX_RANK})"
        if node.params.get("ellipsis_mask") or node.params.get("new_axis_mask") or node.params.get("offset"):
            return "ellipsis, new-axis or offset strided slices"
        if len(constant_values(graph, node, 1)) != rank_of(graph, node.inputs[0]):  # type: ignore[arg-type]
            return "begin does not match the input's rank"
        if node.op == Builtin.STRIDED_SLICE and any(s == 0 for s in constant_values(graph, node, 3)):  # type: ignore[union-attr]
            return "zero stride"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g = ctx.graph
        shape = g.tensor(node.inputs[0]).shape
        rank = len(shape)
        begin = [int(v) for v in constant_values(g, node, 1)]  # type: ignore[union-attr]
        if node.op == Builtin.SLICE:
            starts, strides, shrink = [b + shape[d] if b < 0 else b for d, b in enumerate(begin)], [1] * rank, set()
        else:
            strides = [int(v) for v in constant_values(g, node, 3)]  # type: ignore[union-attr]
            masks = node.params
            starts, shrink = [], set()
            for d in range(rank):
                if masks.get("begin_mask", 0) >> d & 1:
                    start = 0 if strides[d] > 0 else shape[d] - 1
                else:
                    start = begin[d] + shape[d] if begin[d] < 0 else begin[d]
                    start = min(max(start, 0), shape[d] - 1 if strides[d] < 0 else shape[d])
                starts.append(start)
                if masks.get("shrink_axis_mask", 0) >> d & 1:
                    shrink.add(d)
        if rank > 4 or rank_of(g, node.outputs[0]) > 4:  # read in the 4-D views, the offsets literals
            out = iter(logical_lane(g.tensor(node.outputs[0]).shape))
            index = [
                f"{starts[d]}" if d in shrink else f"{starts[d]} + {strides[d]} * {next(out)}" for d in range(rank)
            ]
            return operation(gather_code(view_lane(shape, index)), srcs=["src_tensor"])
        pad = 4 - rank
        feed = surviving(rank, rank_of(g, node.outputs[0]), shrink)
        exprs, ints = [], {}
        for j in range(4):
            d = j - pad
            if d < 0:
                exprs.append("0")
                continue
            ints[f"start{j}"], ints[f"stride{j}"] = starts[d], strides[d]
            exprs.append(f"args.start{j} + args.stride{j} * {feed[j]}" if j in feed else f"args.start{j}")
        return operation(gather_code(exprs), srcs=["src_tensor"], ints=ints)


def _merged_repeat(repeats: list[int], shape: tuple[int, ...]) -> str | None:
    """Each output lane reads its input lane modulo the input's size in the 4-D view, whose first
    dim merges a higher rank's leading dims (layout.bhwc): that is one repeat of that dim only
    where the merged dims before the last one repeated are of size 1."""
    merged = [j for j in range(len(shape) - 3) if repeats[j] != 1]
    if merged and any(d != 1 for d in shape[: merged[-1]]):
        return "a repeated dim that the 4-D view merges into a larger one before it"
    return None


class Tile(Op):
    codes = (Builtin.TILE,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, _COPIES)

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = data_check(node, graph, constants=(1,), high_rank=True)
        if problem is not None:
            return problem
        repeats = self.repeats(node, graph)
        if isinstance(repeats, str):
            return repeats
        return _merged_repeat(repeats, graph.tensor(node.inputs[0]).shape)

    def repeats(self, node: Node, graph: Graph) -> list[int] | str:
        """How many times each dim of the input is repeated, or why the node is no repeat."""
        return [int(m) for m in constant_values(graph, node, 1)]  # type: ignore[union-attr]

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        exprs = [f"{o} % args.src_tensor.{size}()" for o, size in zip(OUT, SIZE, strict=True)]
        return operation(gather_code(exprs), srcs=["src_tensor"])


class BroadcastTo(Tile):
    """BROADCAST_TO (input, constant shape): TILE's kernel, each dim of size 1 repeated to the
    output's (grouped-query attention's heads: RESHAPE to rank 5, BROADCAST_TO, RESHAPE back)."""

    codes = (Builtin.BROADCAST_TO,)
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, _COPIES)

    def repeats(self, node: Node, graph: Graph) -> list[int] | str:
        src, dst = graph.tensor(node.inputs[0]).shape, graph.tensor(node.outputs[0]).shape
        if len(src) != len(dst) or any(s not in (1, d) for s, d in zip(src, dst, strict=True)):
            return f"broadcasts {list(src)} to {list(dst)}: only dims of size 1, at the output's rank, are repeated"
        return [d if s == 1 else 1 for s, d in zip(src, dst, strict=True)]

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return tuple(int(d) for d in np.asarray(constant_values(graph, node, 1)).reshape(-1))


class Reverse(Op):
    """REVERSE_V2: the input read backwards along the constant axes (Bidirectional RNNs)."""

    codes = (Builtin.REVERSE_V2,)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def check(self, node: Node, graph: Graph) -> str | None:
        return _dims_check(
            node,
            graph,
            lambda axes, rank: all(-rank <= a < rank for a in axes),
            "an axis is outside the input's rank",
        )

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        rank = rank_of(ctx.graph, node.inputs[0])
        flipped = {4 - rank + int(a) % rank for a in constant_values(ctx.graph, node, 1)}  # type: ignore[union-attr]
        exprs = [
            f"args.src_tensor.{size}() - 1 - {o}" if j in flipped else o
            for j, (o, size) in enumerate(zip(OUT, SIZE, strict=True))
        ]
        return operation(gather_code(exprs), srcs=["src_tensor"])


class SpaceDepth(Op):
    codes = (Builtin.SPACE_TO_DEPTH, Builtin.DEPTH_TO_SPACE)
    data_inputs = 1
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, MOVES_INTEGERS)

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = data_check(node, graph)
        if problem:
            return problem
        if rank_of(graph, node.inputs[0]) != 4 or node.params.get("block_size", 0) < 1:
            return "needs a 4-D input and a block size"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        if node.op == Builtin.SPACE_TO_DEPTH:
            exprs = [
                "b",
                "Y * args.block + (c / args.src_tensor.Channels()) / args.block",
                "X * args.block + (c / args.src_tensor.Channels()) % args.block",
                "c % args.src_tensor.Channels()",
            ]
        else:
            exprs = [
                "b",
                "Y / args.block",
                "X / args.block",
                "((Y % args.block) * args.block + X % args.block) * args.dst_tensor.Channels() + c",
            ]
        return operation(gather_code(exprs), srcs=["src_tensor"], ints={"block": node.params["block_size"]})


class Split(Op):
    """SPLIT (axis, input) and SPLIT_V (input, sizes, axis): one slicing kernel per output."""

    codes = (Builtin.SPLIT, Builtin.SPLIT_V)
    data_inputs = 2
    code_traits: ClassVar[dict[int, Traits]] = dict.fromkeys(codes, _COPIES)
    per_output = True

    def _positions(self, node: Node) -> tuple[int, int]:
        return (1, 0) if node.op == Builtin.SPLIT else (0, 2)  # (data, axis)

    def check(self, node: Node, graph: Graph) -> str | None:
        data, axis = self._positions(node)
        if len(node.inputs) <= max(data, axis) or constant_values(graph, node, axis) is None:
            return "the axis is not a constant"
        problem = float_check(node, graph, data)
        return problem

    def emit_many(self, node: Node, ctx: EmitContext) -> list[tuple[Kernel, int]]:
        g = ctx.graph
        data, axis_position = self._positions(node)
        rank = rank_of(g, node.inputs[data])
        axis = int(constant_values(g, node, axis_position)[0]) % rank + 4 - rank  # type: ignore[index]
        out, offset = [], 0
        for output in node.outputs:
            exprs = [f"{o} + args.offset" if j == axis else o for j, o in enumerate(OUT)]
            out.append((operation(gather_code(exprs), srcs=["src_tensor"], ints={"offset": offset}), output))
            offset += g.tensor(output).shape[axis - (4 - rank)]
        return out
