"""Elementwise ops: binary ops with TFLite broadcasting and constant operands, and unary ops."""

from __future__ import annotations

from ...context import model
from .. import layout
from ..graph import Activation, Builtin, Graph, Node
from ..kernel import Kernel
from .base import HEAD, EmitContext, Op, activation_check, activation_code, operands, operation, runtime_io, written

#: result from FLT4 a_v and b_in_v
BINARY = {
    Builtin.ADD: "a_v + b_in_v",
    Builtin.SUB: "a_v - b_in_v",
    Builtin.MUL: "a_v * b_in_v",
    Builtin.DIV: "a_v / b_in_v",
    Builtin.MAXIMUM: "a_v > b_in_v ? a_v : b_in_v",
    Builtin.MINIMUM: "a_v < b_in_v ? a_v : b_in_v",
    Builtin.SQUARED_DIFFERENCE: "(a_v - b_in_v) * (a_v - b_in_v)",
    Builtin.POW: "pow(a_v, b_in_v)",
    Builtin.PRELU: "a_v < INIT_FLT4(0.0f) ? a_v * b_in_v : a_v",
}
FUSED = (Builtin.ADD, Builtin.SUB, Builtin.MUL, Builtin.DIV)


def read_broadcast(name: str, indent: str = "  ", zero_extended: bool = False) -> str:
    """Read operand ``name`` at the output's coordinates, dimensions of size 1 broadcast; or, when
    ``zero_extended`` (the input of a channel PAD merged into this op, compiler/pad_merge.py), with
    the channels past its own read as zeros."""
    a = f"args.{name}"
    if zero_extended:
        zero = "(FLT)(0.0f)"
        return (
            f"{indent}FLT4 {name}_v = S < {a}.Slices() ? {a}.Read(X, Y, S, b) : (FLT4)({zero});\n"
            f"{indent}int {name}_left = {a}.Channels() - S * 4;\n"
            f"{indent}if ({name}_left < 4) {name}_v = (FLT4)({name}_left > 0 ? {name}_v.x : {zero}, "
            f"{name}_left > 1 ? {name}_v.y : {zero}, {name}_left > 2 ? {name}_v.z : {zero}, {zero});\n"
        )
    return (
        f"{indent}FLT4 {name}_v = {a}.Read({a}.Width() == 1 ? 0 : X, {a}.Height() == 1 ? 0 : Y, "
        f"{a}.Slices() == 1 ? 0 : S, {a}.Batch() == 1 ? 0 : b);\n"
        f"{indent}if ({a}.Channels() == 1) {name}_v = (FLT4)({name}_v.x);\n"
    )


class Binary(Op):
    codes = tuple(BINARY)
    data_inputs = 2

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if len(node.inputs) != 2:
            return "binary op without two inputs"
        out_shape = graph.tensor(node.outputs[0]).shape
        out = layout.bhwc(out_shape)
        for i in node.inputs:
            t = graph.tensor(i)
            if len(t.shape) > len(out_shape):
                return f"input {i} has a higher rank than the output"
            if any(d not in (1, o) for d, o in zip(layout.bhwc(t.shape), out, strict=True)):
                return f"input {i} of shape {t.shape} does not broadcast to the output"
        if all(graph.tensor(i).is_constant for i in node.inputs):
            return "both inputs are constants"
        return activation_check(node.params.get("activation", 0)) if node.op in FUSED else None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        srcs, objects = operands(["a", "b_in"], list(node.inputs), ctx)
        act = activation_code(node.params.get("activation", 0)) if node.op in FUSED else ""
        extended = node.params.get("zero_extended", ())
        code = (
            HEAD
            + read_broadcast("a", zero_extended=node.inputs[0] in extended)
            + read_broadcast("b_in", zero_extended=node.inputs[1] in extended)
            + f"  FLT4 result = {BINARY[Builtin(node.op)]};\n  {act}\n"
        )
        return row_runs(operation(written(code), srcs=srcs, tensor_objects=objects), node, ctx)


#: statements turning FLT4 ``result`` (the input) into the op's value
UNARY = {
    Builtin.LOGISTIC: activation_code(Activation.SIGMOID),
    Builtin.RELU: activation_code(Activation.RELU),
    Builtin.RELU6: activation_code(Activation.RELU6),
    Builtin.RELU_N1_TO_1: activation_code(Activation.RELU_N1_TO_1),
    Builtin.TANH: activation_code(Activation.TANH),
    Builtin.ABS: "result = fabs(result);",
    Builtin.NEG: "result = -result;",
    Builtin.EXP: "result = exp(result);",
    Builtin.LOG: "result = log(result);",
    Builtin.SQRT: "result = sqrt(result);",
    Builtin.RSQRT: "result = rsqrt(result);",
    Builtin.SQUARE: "result = result * result;",
    Builtin.SIN: "result = sin(result);",
    Builtin.COS: "result = cos(result);",
    Builtin.ELU: "result = result < INIT_FLT4(0.0f) ? exp(result) - INIT_FLT4(1.0f) : result;",
    Builtin.HARD_SWISH: """FLT4 r6 = result + INIT_FLT4(3.0f);
  r6 = r6 < INIT_FLT4(0.0f) ? INIT_FLT4(0.0f) : r6;
  r6 = r6 > INIT_FLT4(6.0f) ? INIT_FLT4(6.0f) : r6;
  result = result * r6 * INIT_FLT4(1.0f / 6.0f);""",
    Builtin.LEAKY_RELU: "result = result < INIT_FLT4(0.0f) ? result * (FLT)(args.alpha) : result;",
    # On tensors carried in float (compiler/quant.py) both are the identity: QUANTIZE's rounding
    # onto its output's grid is the quantize-and-dequantize step every carried output gets.
    Builtin.QUANTIZE: "",
    Builtin.DEQUANTIZE: "",
}


class Unary(Op):
    codes = tuple(UNARY)
    data_inputs = 1

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if len(node.inputs) != 1 or graph.tensor(node.inputs[0]).is_constant:
            return "unary op on a constant"
        if graph.tensor(node.inputs[0]).shape != graph.tensor(node.outputs[0]).shape:
            return "input and output shapes differ"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        code = HEAD + "  FLT4 result = args.src_tensor.Read(X, Y, S, b);\n  " + UNARY[Builtin(node.op)] + "\n"
        floats = {"alpha": node.params.get("alpha", 0.2)} if node.op == Builtin.LEAKY_RELU else None
        return row_runs(operation(written(code), srcs=["src_tensor"], floats=floats), node, ctx)


#: Pixels of a row per work-item of an elementwise kernel on CPU devices: a work-item per pixel
#: spends more on its own setup (bounds, coordinates, the broadcast operands' offsets) than on its
#: FLT4 of work (benchmarks/RESULTS.md, "Elementwise kernels in runs of pixels").
ROW_PIXELS = 8

#: ``HEAD`` with a loop over a run of ROW_PIXELS pixels of one row, one slice: the body and its
#: closing write run once per pixel (the write closes the loop; ``row_runs`` closes the kernel).
ROW_HEAD = f"""
MAIN_FUNCTION($0) {{
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int runs = (W + {ROW_PIXELS - 1}) / {ROW_PIXELS};
  if (gx >= runs * B || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  int X0 = gx * {ROW_PIXELS}, b = 0;
  if (B != 1) {{ X0 = (gx / B) * {ROW_PIXELS}; b = gx % B; }}
  int X1 = X0 + {ROW_PIXELS} < W ? X0 + {ROW_PIXELS} : W;
  for (int X = X0; X < X1; ++X) {{
"""


def row_runs(kernel: Kernel, node: Node, ctx: EmitContext) -> Kernel:
    """``kernel`` (a ``HEAD`` body, one pixel per work-item) with ROW_PIXELS pixels per work-item
    on CPU devices; GPUs keep a work-item per pixel (their work-items are cheap, and coalesced
    neighbours read neighbouring pixels)."""
    if ctx.kernel_family == "gpu":
        return kernel
    head = kernel.body[0]
    assert isinstance(head, str) and head.startswith(HEAD)
    kernel.body[0] = ROW_HEAD + head[len(HEAD) :]
    kernel.body.append("}\n")
    b, h, w, c = layout.bhwc(ctx.graph.tensor(node.outputs[0]).shape)
    op = kernel.operation
    op.tensor_to_grid = model.TensorToGrid.CUSTOM
    op.grid_size = model.Int3(-(-w // ROW_PIXELS) * b, h, layout.slices(c))
    return kernel
