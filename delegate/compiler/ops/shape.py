"""Ops that re-index data: SQUEEZE, EXPAND_DIMS, CAST (float to float), TRANSPOSE, SLICE, STRIDED_SLICE,
TILE, MIRROR_PAD, SPACE_TO_DEPTH, DEPTH_TO_SPACE, RESIZE_NEAREST_NEIGHBOR, SPLIT, SPLIT_V, and the
reductions SUM, MEAN, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD over any constant axes.

Each output lane (b, Y, X, c) reads input lane (bi, yi, xi, ci), generated per node from its
constant parameters, in the runtime's 4-D view of tensors (layout.bhwc: shapes left-padded to 4).
"""

from __future__ import annotations

import numpy as np

from ...context import model
from ..graph import FLOAT32, Builtin, Graph, Node
from .base import HEAD, LANES, EmitContext, float_tensors, operation, runtime_io
from .transform import Reshape

_OUT = ("b", "Y", "X", "c")
_IN = ("bi", "yi", "xi", "ci")
_SIZE = ("Batch", "Height", "Width", "Channels")


def _gather_code(exprs: list[str]) -> str:
    mapping = "".join(f"    int {name} = {expr};\n" for name, expr in zip(_IN, exprs, strict=True))
    return (
        LANES
        + HEAD
        + """  FLT4 result = INIT_FLT4(0.0f);
  for (int k = 0; k < 4; ++k) {
    int c = S * 4 + k;
    if (c >= args.dst_tensor.Channels()) break;
"""
        + mapping
        + """    result = dlg_set(result, k, dlg_component(args.src_tensor.Read(xi, yi, ci / 4, bi), ci % 4));
  }
  args.dst_tensor.Write(result, X, Y, S, b);
}
"""
    )


def _const(graph: Graph, node: Node, position: int) -> np.ndarray | None:
    if position >= len(node.inputs) or node.inputs[position] < 0:
        return None
    value = graph.tensor(node.inputs[position]).constant
    return None if value is None else np.asarray(value).reshape(-1)


def _data_check(node: Node, graph: Graph, data: int = 0, constants: tuple[int, ...] = ()) -> str | None:
    for position in constants:
        if position >= len(node.inputs) or _const(graph, node, position) is None:
            return f"input {position} is not a constant"
    problem = runtime_io(node.__class__(node.index, node.op, node.version, (node.inputs[data],), node.outputs), graph)
    if problem:
        return problem
    if graph.tensor(node.inputs[data]).is_constant:
        return "the input is a constant"
    return None


def _rank(graph: Graph, tensor: int) -> int:
    return len(graph.tensor(tensor).shape)


def _surviving(in_rank: int, out_rank: int, dropped: set[int]) -> dict[int, str]:
    """Input 4-D dim -> output coordinate, when the output keeps the input's dims not in ``dropped``
    (in order) and its rank is ``out_rank``."""
    pad, pad_out = 4 - in_rank, 4 - out_rank
    kept = [pad + d for d in range(in_rank) if d not in dropped]
    return {j: _OUT[pad_out + i] for i, j in enumerate(kept)}


class SameOrder(Reshape):
    """SQUEEZE, EXPAND_DIMS and float-to-float CAST keep the row-major order: the RESHAPE kernel."""

    codes = (Builtin.SQUEEZE, Builtin.EXPAND_DIMS, Builtin.CAST)

    def check(self, node: Node, graph: Graph) -> str | None:
        if node.op == Builtin.CAST:
            types = {graph.tensor(node.inputs[0]).dtype, graph.tensor(node.outputs[0]).dtype}
            if types != {FLOAT32}:
                return "CAST other than float32 to float32"
        return super().check(node, graph)


class Transpose:
    codes = (Builtin.TRANSPOSE,)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = _data_check(node, graph, constants=(1,))
        if problem:
            return problem
        perm, rank = _const(graph, node, 1), _rank(graph, node.inputs[0])
        if perm is None or sorted(int(p) % rank for p in perm) != list(range(rank)):
            return "the permutation is not a permutation of the input's dimensions"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        rank = _rank(ctx.graph, node.inputs[0])
        pad = 4 - rank
        perm4 = list(range(pad)) + [int(p) % rank + pad for p in _const(ctx.graph, node, 1)]  # type: ignore[union-attr]
        exprs = ["0"] * 4
        for d, j in enumerate(perm4):
            exprs[j] = _OUT[d]
        return operation(_gather_code(exprs), srcs=["src_tensor"])


class Slice:
    """SLICE (begin, size) and STRIDED_SLICE (begin, end, strides; begin and shrink masks)."""

    codes = (Builtin.SLICE, Builtin.STRIDED_SLICE)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        constants = (1, 2, 3) if node.op == Builtin.STRIDED_SLICE else (1, 2)
        problem = _data_check(node, graph, constants=constants)
        if problem:
            return problem
        if node.params.get("ellipsis_mask") or node.params.get("new_axis_mask") or node.params.get("offset"):
            return "ellipsis, new-axis or offset strided slices"
        if len(_const(graph, node, 1)) != _rank(graph, node.inputs[0]):  # type: ignore[arg-type]
            return "begin does not match the input's rank"
        if node.op == Builtin.STRIDED_SLICE and any(s == 0 for s in _const(graph, node, 3)):  # type: ignore[union-attr]
            return "zero stride"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        g = ctx.graph
        shape = g.tensor(node.inputs[0]).shape
        rank = len(shape)
        begin = [int(v) for v in _const(g, node, 1)]  # type: ignore[union-attr]
        if node.op == Builtin.SLICE:
            starts, strides, shrink = [b + shape[d] if b < 0 else b for d, b in enumerate(begin)], [1] * rank, set()
        else:
            strides = [int(v) for v in _const(g, node, 3)]  # type: ignore[union-attr]
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
        pad = 4 - rank
        feed = _surviving(rank, _rank(g, node.outputs[0]), shrink)
        exprs, ints = [], {}
        for j in range(4):
            d = j - pad
            if d < 0:
                exprs.append("0")
                continue
            ints[f"start{j}"], ints[f"stride{j}"] = starts[d], strides[d]
            exprs.append(f"args.start{j} + args.stride{j} * {feed[j]}" if j in feed else f"args.start{j}")
        return operation(_gather_code(exprs), srcs=["src_tensor"], ints=ints)


class Tile:
    codes = (Builtin.TILE,)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        return _data_check(node, graph, constants=(1,))

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        exprs = [f"{o} % args.src_tensor.{size}()" for o, size in zip(_OUT, _SIZE, strict=True)]
        return operation(_gather_code(exprs), srcs=["src_tensor"])


class MirrorPad:
    codes = (Builtin.MIRROR_PAD,)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = _data_check(node, graph, constants=(1,))
        if problem:
            return problem
        if node.params.get("mode") not in (1, 2):
            return "unknown mirror padding mode"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        rank = _rank(ctx.graph, node.inputs[0])
        pads = np.zeros((4, 2), int)
        pads[4 - rank :] = _const(ctx.graph, node, 1).reshape(rank, 2)  # type: ignore[union-attr]
        reflect = node.params.get("mode") == 1  # REFLECT: edge not repeated; SYMMETRIC: repeated
        exprs, ints = [], {}
        for j, (o, size) in enumerate(zip(_OUT, _SIZE, strict=True)):
            ints[f"pad{j}"] = int(pads[j, 0])
            i, n = f"({o} - args.pad{j})", f"args.src_tensor.{size}()"
            low = f"-{i}" if reflect else f"-{i} - 1"
            high = f"2 * {n} - 2 - {i}" if reflect else f"2 * {n} - 1 - {i}"
            exprs.append(f"{i} < 0 ? {low} : ({i} >= {n} ? {high} : {i})")
        return operation(_gather_code(exprs), srcs=["src_tensor"], ints=ints)


class SpaceDepth:
    codes = (Builtin.SPACE_TO_DEPTH, Builtin.DEPTH_TO_SPACE)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = _data_check(node, graph)
        if problem:
            return problem
        if _rank(graph, node.inputs[0]) != 4 or node.params.get("block_size", 0) < 1:
            return "needs a 4-D input and a block size"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
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
        return operation(_gather_code(exprs), srcs=["src_tensor"], ints={"block": node.params["block_size"]})


class ResizeNearest:
    codes = (Builtin.RESIZE_NEAREST_NEIGHBOR,)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = _data_check(node, graph)
        if problem:
            return problem
        return None if _rank(graph, node.inputs[0]) == 4 else "needs a 4-D input"

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        g = ctx.graph
        _, ih, iw, _ = g.tensor(node.inputs[0]).shape
        _, oh, ow, _ = g.tensor(node.outputs[0]).shape
        align, half = bool(node.params.get("align_corners")), bool(node.params.get("half_pixel_centers"))

        def scale(i: int, o: int) -> float:
            return (i - 1) / (o - 1) if align and o > 1 else i / o

        def coord(o: str, axis: str, size: str) -> str:
            v = f"((float){o} + {0.5 if half else 0.0}f) * args.scale_{axis}"
            picked = f"(int)round({v})" if align else f"(int)floor({v})"
            clamped = f"min({picked}, args.src_tensor.{size}() - 1)"
            return f"max({clamped}, 0)"

        exprs = ["b", coord("Y", "y", "Height"), coord("X", "x", "Width"), "c"]
        return operation(
            _gather_code(exprs), srcs=["src_tensor"], floats={"scale_y": scale(ih, oh), "scale_x": scale(iw, ow)}
        )


class Split:
    """SPLIT (axis, input) and SPLIT_V (input, sizes, axis): one slicing kernel per output."""

    codes = (Builtin.SPLIT, Builtin.SPLIT_V)
    data_inputs = 2

    def _positions(self, node: Node) -> tuple[int, int]:
        return (1, 0) if node.op == Builtin.SPLIT else (0, 2)  # (data, axis)

    def check(self, node: Node, graph: Graph) -> str | None:
        data, axis = self._positions(node)
        if len(node.inputs) <= max(data, axis) or _const(graph, node, axis) is None:
            return "the axis is not a constant"
        problem = float_check(node, graph, data)
        return problem

    def emit_many(self, node: Node, ctx: EmitContext) -> list[tuple[model.GPUOperation, int]]:
        g = ctx.graph
        data, axis_position = self._positions(node)
        rank = _rank(g, node.inputs[data])
        axis = int(_const(g, node, axis_position)[0]) % rank + 4 - rank  # type: ignore[index]
        out, offset = [], 0
        for output in node.outputs:
            exprs = [f"{o} + args.offset" if j == axis else o for j, o in enumerate(_OUT)]
            out.append((operation(_gather_code(exprs), srcs=["src_tensor"], ints={"offset": offset}), output))
            offset += g.tensor(output).shape[axis - (4 - rank)]
        return out

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        raise NotImplementedError("SPLIT has several outputs: use emit_many")


def float_check(node: Node, graph: Graph, data: int) -> str | None:
    problem = float_tensors(node, graph, [node.inputs[data], *node.outputs])
    if problem:
        return problem
    return "the input is a constant" if graph.tensor(node.inputs[data]).is_constant else None


_REDUCE = {
    Builtin.SUM: ("0.0f", "acc += v;"),
    Builtin.MEAN: ("0.0f", "acc += v;"),
    Builtin.REDUCE_MAX: ("-INFINITY", "acc = v > acc ? v : acc;"),
    Builtin.REDUCE_MIN: ("INFINITY", "acc = v < acc ? v : acc;"),
    Builtin.REDUCE_PROD: ("1.0f", "acc *= v;"),
}


class Reduce:
    codes = tuple(_REDUCE)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = _data_check(node, graph, constants=(1,))
        if problem:
            return problem
        rank = _rank(graph, node.inputs[0])
        if rank == 0:
            return "a scalar input"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        g = ctx.graph
        rank = _rank(g, node.inputs[0])
        pad = 4 - rank
        axes = {int(a) % rank for a in _const(g, node, 1)}  # type: ignore[union-attr]
        keep = bool(node.params.get("keep_dims"))
        feed = (
            {pad + d: _OUT[pad + d] for d in range(rank)} if keep else _surviving(rank, _rank(g, node.outputs[0]), axes)
        )
        reduced = {pad + a for a in axes}
        init, update = _REDUCE[Builtin(node.op)]
        loops, exprs = [], []
        for j, size in enumerate(_SIZE):
            if j in reduced:
                loops.append(f"    for (int r{j} = 0; r{j} < args.src_tensor.{size}(); ++r{j})\n")
                exprs.append(f"r{j}")
            else:
                exprs.append(feed.get(j, "0"))
        mapping = "".join(f"    int {name} = {expr};\n" for name, expr in zip(_IN, exprs, strict=True))
        count = " * ".join(f"args.src_tensor.{_SIZE[j]}()" for j in sorted(reduced)) or "1"
        finish = f"acc / (float)({count})" if node.op == Builtin.MEAN else "acc"
        if exprs[3] == _OUT[3]:
            # The output's channel is the input's: reduce whole slices (float4 lanes at once), as a
            # global average pool does; 4x fewer reads than lane by lane and vector arithmetic.
            mapping = "".join(f"      int {name} = {expr};\n" for name, expr in zip(_IN[:3], exprs[:3], strict=True))
            code = (
                HEAD
                + f"  float4 acc = (float4)({init});\n"
                + "".join(loops).replace("    for", "  for")
                + "  {\n"
                + mapping
                + "      float4 v = convert_float4(args.src_tensor.Read(xi, yi, S, bi));\n"
                + f"      {update}\n  }}\n"
                + f"  FLT4 result = TO_FLT4({finish});\n"
                + "  args.dst_tensor.Write(result, X, Y, S, b);\n}\n"
            )
            return operation(code, srcs=["src_tensor"])
        code = (
            LANES
            + HEAD
            + """  FLT4 result = INIT_FLT4(0.0f);
  for (int k = 0; k < 4; ++k) {
    int c = S * 4 + k;
    if (c >= args.dst_tensor.Channels()) break;
"""
            + f"    float acc = {init};\n"
            + "".join(loops)
            + "    {\n"
            + mapping.replace("    int", "      int")
            + "      float v = (float)dlg_component(args.src_tensor.Read(xi, yi, ci / 4, bi), ci % 4);\n"
            + f"      {update}\n    }}\n"
            + f"    result = dlg_set(result, k, (FLT)({finish}));\n  }}\n"
            + "  args.dst_tensor.Write(result, X, Y, S, b);\n}\n"
        )
        return operation(code, srcs=["src_tensor"])
