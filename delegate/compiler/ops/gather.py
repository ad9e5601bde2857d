"""Ops that move data: CONCATENATION (any axis), PAD / PADV2 (constant padding), RESIZE_BILINEAR.

They compute each output channel from an input coordinate, one lane at a time where channels
shift (dlg_component / dlg_set pick and place a lane of a FLT4).
"""

from __future__ import annotations

import numpy as np

from ...context import model
from .. import layout
from ..graph import Builtin, Graph, Node
from .base import HEAD, LANES, EmitContext, activation_check, activation_code, operands, operation, runtime_io


def _axis4(axis: int, rank: int) -> int:
    return (axis % rank) + (4 - rank)


class Concatenation:
    codes = (Builtin.CONCATENATION,)
    data_inputs = 64

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if not 1 <= len(node.inputs) <= 16:
            return f"{len(node.inputs)} inputs (1 to 16 supported)"
        if all(graph.tensor(i).is_constant for i in node.inputs):
            return "all inputs are constants"
        rank = len(graph.tensor(node.outputs[0]).shape)
        if any(len(graph.tensor(i).shape) != rank for i in node.inputs):
            return "inputs of different ranks"
        return activation_check(node.params.get("activation", 0))

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        g = ctx.graph
        rank = len(g.tensor(node.outputs[0]).shape)
        axis = _axis4(node.params.get("axis", 0), rank)
        names = [f"src_{k}" for k in range(len(node.inputs))]
        srcs, objects = operands(names, list(node.inputs), ctx)
        sizes = [layout.bhwc(g.tensor(i).shape)[axis] for i in node.inputs]
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(int).tolist()
        lines = [LANES, HEAD]
        if axis == 3 and all(o % 4 == 0 for o in offsets[:-1]):  # channels, every input starts a slice
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
        lines.append("  " + activation_code(node.params.get("activation", 0)) + "\n")
        lines.append("  args.dst_tensor.Write(result, X, Y, S, b);\n}\n")
        return operation("".join(lines), srcs=srcs, tensor_objects=objects)


class Pad:
    codes = (Builtin.PAD, Builtin.PADV2)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph, constant_inputs=(1, 2), data_inputs=1)
        if problem:
            return problem
        paddings = graph.tensor(node.inputs[1]).constant
        if paddings is None or np.asarray(paddings).shape != (len(graph.tensor(node.inputs[0]).shape), 2):
            return "paddings must be a constant [rank, 2] tensor"
        if (np.asarray(paddings) < 0).any():
            return "negative paddings"
        if node.op == Builtin.PADV2 and len(node.inputs) > 2:
            value = graph.tensor(node.inputs[2]).constant
            if value is None or np.asarray(value).size != 1:
                return "PADV2 needs a constant scalar pad value"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        g = ctx.graph
        rank = len(g.tensor(node.inputs[0]).shape)
        pads = np.zeros((4, 2), int)
        pads[4 - rank :] = np.asarray(g.tensor(node.inputs[1]).constant).reshape(rank, 2)
        value = 0.0
        if node.op == Builtin.PADV2 and len(node.inputs) > 2:
            value = float(np.asarray(g.tensor(node.inputs[2]).constant).reshape(-1)[0])
        code = (
            LANES
            + HEAD
            + """  FLT4 result = (FLT4)((FLT)(args.value));
  int xi = X - args.pad_x; int yi = Y - args.pad_y; int bi = b - args.pad_b;
  if (xi >= 0 && xi < args.src_tensor.Width() && yi >= 0 && yi < args.src_tensor.Height()
      && bi >= 0 && bi < args.src_tensor.Batch()) {
    for (int k = 0; k < 4; ++k) {
      int ci = S * 4 + k - args.pad_c;
      if (ci >= 0 && ci < args.src_tensor.Channels())
        result = dlg_set(result, k, dlg_component(args.src_tensor.Read(xi, yi, ci / 4, bi), ci % 4));
    }
  }
  args.dst_tensor.Write(result, X, Y, S, b);
}
"""
        )
        ints = {"pad_b": pads[0, 0], "pad_y": pads[1, 0], "pad_x": pads[2, 0], "pad_c": pads[3, 0]}
        return operation(code, srcs=["src_tensor"], ints=ints, floats={"value": value})


class ResizeBilinear:
    codes = (Builtin.RESIZE_BILINEAR,)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph, data_inputs=1)
        if problem:
            return problem
        if len(graph.tensor(node.inputs[0]).shape) != 4:
            return "RESIZE_BILINEAR needs a 4-D input"
        if node.params.get("align_corners") and node.params.get("half_pixel_centers"):
            return "align_corners together with half_pixel_centers"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> model.GPUOperation:
        g = ctx.graph
        _, ih, iw, _ = g.tensor(node.inputs[0]).shape
        _, oh, ow, _ = g.tensor(node.outputs[0]).shape
        align = bool(node.params.get("align_corners"))

        def scale(i: int, o: int) -> float:
            return (i - 1) / (o - 1) if align and o > 1 else i / o

        code = (
            HEAD
            + """  float fy = args.half_pixel ? ((float)Y + 0.5f) * args.scale_y - 0.5f : (float)Y * args.scale_y;
  float fx = args.half_pixel ? ((float)X + 0.5f) * args.scale_x - 0.5f : (float)X * args.scale_x;
  int ih = args.src_tensor.Height(); int iw = args.src_tensor.Width();
  int y0 = (int)floor(fy); y0 = y0 < 0 ? 0 : y0;
  int x0 = (int)floor(fx); x0 = x0 < 0 ? 0 : x0;
  int y1 = (int)ceil(fy); y1 = y1 > ih - 1 ? ih - 1 : y1;
  int x1 = (int)ceil(fx); x1 = x1 > iw - 1 ? iw - 1 : x1;
  float dy = fy - (float)y0; float dx = fx - (float)x0;
  float4 top = convert_float4(args.src_tensor.Read(x0, y0, S, b)) * (1.0f - dx)
             + convert_float4(args.src_tensor.Read(x1, y0, S, b)) * dx;
  float4 bottom = convert_float4(args.src_tensor.Read(x0, y1, S, b)) * (1.0f - dx)
                + convert_float4(args.src_tensor.Read(x1, y1, S, b)) * dx;
  FLT4 result = TO_FLT4(top * (1.0f - dy) + bottom * dy);
  args.dst_tensor.Write(result, X, Y, S, b);
}
"""
        )
        ints = {"half_pixel": int(bool(node.params.get("half_pixel_centers")))}
        floats = {"scale_y": scale(ih, oh), "scale_x": scale(iw, ow)}
        return operation(code, srcs=["src_tensor"], ints=ints, floats=floats)
