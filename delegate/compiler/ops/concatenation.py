"""CONCATENATION along any axis (one read in place by its reader needs no kernel: partition.py)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from .. import layout
from ..graph import Builtin, Graph, Node
from ..kernel import WRITE, Kernel, Piece
from ..kernels.common.pieces import HEAD, LANES, activation_code, operation, written
from ..selectors.pointwise import select_copy
from ..selectors.spec import Variant
from . import shape_rules
from .base import EmitContext, Op, activation_check, operands, runtime_io
from .conv_render import launched
from .elementwise import ROW_START, row_runs
from .traits import Quantization, Traits

#: the most inputs one kernel reads (each a tensor argument of its own)
MAX_INPUTS = 16


def _axis4(axis: int, rank: int) -> int:
    return (axis % rank) + (4 - rank)


def concat_axis(node: Node, graph: Graph) -> int:
    """The axis ``node`` concatenates along, in BHWC (3: channels)."""
    return _axis4(node.params.get("axis", 0), len(graph.tensor(node.outputs[0]).shape))


def copies_on_grid(node: Node, graph: Graph) -> bool:
    """Does CONCATENATION ``node`` copy its inputs' values as they are: no activation, every input on
    the output's grid (compiler/quant.py; a constant, never carried, is on none), or all unquantized?"""
    grid = graph.tensor(node.outputs[0]).carried
    return not node.params.get("activation", 0) and all(graph.tensor(i).carried == grid for i in node.inputs)


class Concatenation(Op):
    codes = (Builtin.CONCATENATION,)
    data_inputs = 64
    #: requantizes each input onto the output's grid; its reader may read its inputs in place
    code_traits: ClassVar[dict[int, Traits]] = {
        Builtin.CONCATENATION: Traits(quantization=Quantization.REQUANTIZES, passes_bound=True, own_kernel=False)
    }

    def writes_grid(self, node: Node, graph: Graph) -> bool:
        return graph.tensor(node.outputs[0]).carried is not None and copies_on_grid(node, graph)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.concatenation(node, graph)

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        return np.concatenate(args, axis=int(node.params.get("axis", 0)))

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if not 1 <= len(node.inputs) <= MAX_INPUTS:
            return f"{len(node.inputs)} inputs (1 to {MAX_INPUTS} supported)"
        if all(graph.tensor(i).is_constant for i in node.inputs):
            return "all inputs are constants"
        rank = len(graph.tensor(node.outputs[0]).shape)
        if any(len(graph.tensor(i).shape) != rank for i in node.inputs):
            return "inputs of different ranks"
        return activation_check(node.params.get("activation", 0))

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        g = ctx.graph
        axis = concat_axis(node, g)
        names = [f"src_{k}" for k in range(len(node.inputs))]
        srcs, objects = operands(names, list(node.inputs), ctx)
        sizes = [layout.bhwc(g.tensor(i).shape)[axis] for i in node.inputs]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        activation = "  " + activation_code(node.params.get("activation", 0)) + "\n"
        lanes = axis == 3 and any(o % 4 for o in offsets[:-1])  # an input starts inside a slice
        spec = select_copy(node, g, ctx.options)
        if axis == 3 and not lanes and spec.variant is Variant.ROW_RUNS:
            kernel = launched(
                operation(_slice_runs(names, offsets, activation), srcs=srcs, tensor_objects=objects), spec
            )
        else:
            code = _per_item(names, offsets, axis, lanes) + activation
            kernel = operation(written(code), srcs=srcs, tensor_objects=objects)
            # runs of pixels where the selector chose them, as a copy takes (the lane by lane copy
            # starts with its helpers, not HEAD)
            kernel = kernel if lanes else row_runs(kernel, node, ctx, spec)
        kernel.codes_writer = True  # it writes only through its write hooks
        return kernel


def _per_item(names: list[str], offsets: list[int], axis: int, lanes: bool) -> str:
    """The body setting ``result`` with a work-item per output FLT4: whole slices along channels,
    lane by lane (``lanes``), or along another axis."""
    lines = [LANES, HEAD] if lanes else [HEAD]
    if axis == 3 and not lanes:
        lines.append("  FLT4 result;\n")
        for n, name in enumerate(names):
            first, last = offsets[n] // 4, layout.slices(offsets[n + 1])
            where = "if" if n == 0 else "else if"
            lines.append(f"  {where} (S < {last}) result = args.{name}.Read(X, Y, S - {first}, b);\n")
        lines.append("  else result = INIT_FLT4(0.0f);\n")
    elif axis == 3:  # channels: place lane by lane
        lines.append("  FLT4 result = INIT_FLT4(0.0f);\n  for (int k = 0; k < 4; ++k) {\n    int c = S * 4 + k;\n")
        for n, name in enumerate(names):
            lo, hi = offsets[n], offsets[n + 1]
            lines.append(
                f"    if (c >= {lo} && c < {hi}) result = dlg_set(result, k, dlg_component("
                f"args.{name}.Read(X, Y, (c - {lo}) / 4, b), (c - {lo}) % 4));\n"
            )
        lines.append("  }\n")
    else:
        coord = {0: "b", 1: "Y", 2: "X"}[axis]
        lines.append("  FLT4 result = INIT_FLT4(0.0f);\n")
        for n, name in enumerate(names):
            lo, hi = offsets[n], offsets[n + 1]
            at = {
                "b": ("X", "Y", "S", f"b - {lo}"),
                "Y": ("X", f"Y - {lo}", "S", "b"),
                "X": (f"X - {lo}", "Y", "S", "b"),
            }[coord]
            lines.append(f"  if ({coord} >= {lo} && {coord} < {hi}) result = args.{name}.Read({', '.join(at)});\n")
    return "".join(lines)


def _slice_runs(names: list[str], offsets: list[int], activation: str) -> list[Piece]:
    """Whole slices along channels, a run of pixels per work-item (``ROW_START``): the input is
    picked once for the run, whose loop then copies (and runs the links) without a branch."""
    body: list[Piece] = [ROW_START]
    for n, name in enumerate(names):
        first, last = offsets[n] // 4, layout.slices(offsets[n + 1])
        where = "if" if n == 0 else "} else if"
        loop = "    for (int X = X0; X < X1; ++X) {\n"
        body += [
            f"  {where} (S < {last}) {{\n{loop}  FLT4 result = args.{name}.Read(X, Y, S - {first}, b);\n{activation}",
            WRITE,
        ]
    return [*body, "  }\n}\n"]
