"""Elementwise ops: binary ops with TFLite broadcasting and constant operands, and unary ops."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import ClassVar

import numpy as np

from .. import int_ranges, layout
from ..graph import INT32, Activation, Builtin, Carried, Graph, Node
from ..kernel import WIDE_SLICE, Kernel
from ..kernels.common.math_code import exp_code
from ..kernels.common.pieces import HEAD, activation_code, operation, written
from ..kernels.cpu.gemm_blocks import SLICE_PARTS
from ..quant_table import RealFunction, lookup_code, table
from ..selectors.pointwise import ROW_PIXELS, select_elementwise
from ..selectors.spec import KernelSpec, Variant
from . import shape_rules
from .base import EmitContext, Link, Op, activation_check, operands, runtime_io, table_object, value_tensors
from .conv_render import launched
from .traits import NO_TRAITS, Quantization, Traits

#: traits of the binary ops (ops/traits.py)
_ADDS = Traits(quantization=Quantization.REQUANTIZES, passes_bound=True)
#: computed in real values and rounded onto the output's grid, as TFLite's integer kernel does
_REQUANTIZES_BINARY = Traits(quantization=Quantization.REQUANTIZES)
_PICKS = Traits(quantization=Quantization.KEEPS_INTEGERS, keeps_small=True)

#: result from FLT4 operands ``{a}`` and ``{b}``, and the op's traits
BINARY: dict[int, tuple[str, Traits]] = {
    Builtin.ADD: ("{a} + {b}", _ADDS),
    Builtin.SUB: ("{a} - {b}", _ADDS),
    Builtin.MUL: ("{a} * {b}", Traits(quantization=Quantization.REQUANTIZES, keeps_small=True)),
    Builtin.DIV: ("{a} / {b}", Traits(small_value_input=1)),
    Builtin.MAXIMUM: ("{a} > {b} ? {a} : {b}", _PICKS),
    Builtin.MINIMUM: ("{a} < {b} ? {a} : {b}", _PICKS),
    Builtin.SQUARED_DIFFERENCE: ("({a} - {b}) * ({a} - {b})", _REQUANTIZES_BINARY),
    Builtin.POW: ("pow({a}, {b})", Traits(small_value_input=0)),
    Builtin.PRELU: ("{a} < INIT_FLT4(0.0f) ? {a} * {b} : {a}", NO_TRAITS),
}
FUSED = (Builtin.ADD, Builtin.SUB, Builtin.MUL, Builtin.DIV)
#: the binary ops folded on integer shape values (shapes.py), with numpy's function
_INTEGER_FOLDS = {
    Builtin.ADD: np.add,
    Builtin.SUB: np.subtract,
    Builtin.MAXIMUM: np.maximum,
    Builtin.MINIMUM: np.minimum,
}


def read_broadcast(name: str, indent: str = "  ", zero_extended: bool = False,
                   constant: tuple[int, int, int, int] | None = None) -> str:  # fmt: skip
    """Read operand ``name`` at the output's coordinates, dimensions of size 1 broadcast; or, when
    ``zero_extended`` (the input of a channel PAD merged into this op, compiler/pad_merge.py), with
    the channels past its own read as zeros. ``constant``: the (b, h, w, c) of a constant operand,
    whose shape no resize changes: its broadcast dimensions are written in, not tested per element
    (a scalar is one load at a fixed place, which the compiler keeps out of the pixel loop)."""
    a = f"args.{name}"
    if zero_extended:
        zero = "(FLT)(0.0f)"
        return (
            f"{indent}FLT4 {name}_v = S < {a}.Slices() ? {a}.Read(X, Y, S, b) : (FLT4)({zero});\n"
            f"{indent}int {name}_left = {a}.Channels() - S * 4;\n"
            f"{indent}if ({name}_left < 4) {name}_v = (FLT4)({name}_left > 0 ? {name}_v.x : {zero}, "
            f"{name}_left > 1 ? {name}_v.y : {zero}, {name}_left > 2 ? {name}_v.z : {zero}, {zero});\n"
        )
    if constant is not None:
        batch, height, width, channels = constant
        at = ", ".join(
            "0" if size == 1 else coordinate
            for size, coordinate in zip((width, height, layout.slices(channels), batch), "XYSb", strict=True)
        )
        read = f"{a}.Read({at})"
        return f"{indent}FLT4 {name}_v = {f'(FLT4)({read}.x)' if channels == 1 else read};\n"
    return (
        f"{indent}FLT4 {name}_v = {a}.Read({a}.Width() == 1 ? 0 : X, {a}.Height() == 1 ? 0 : Y, "
        f"{a}.Slices() == 1 ? 0 : S, {a}.Batch() == 1 ? 0 : b);\n"
        f"{indent}if ({a}.Channels() == 1) {name}_v = (FLT4)({name}_v.x);\n"
    )


def constant_shape(graph: Graph, tensor: int) -> tuple[int, int, int, int] | None:
    """``read_broadcast``'s ``constant`` for operand ``tensor``: its (b, h, w, c) if a constant."""
    t = graph.tensor(tensor)
    return layout.bhwc(t.shape) if t.constant is not None else None


class Binary(Op):
    codes = tuple(BINARY)
    data_inputs = 2
    code_traits: ClassVar[dict[int, Traits]] = {code: traits for code, (_, traits) in BINARY.items()}

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        fn = _INTEGER_FOLDS.get(node.op)
        return None if fn is None or node.params.get("activation", 0) else fn(args[0], args[1])

    def traits(self, code: int) -> Traits:
        return replace(super().traits(code), own_kernel=False)  # linked into its producer's kernel

    def check(self, node: Node, graph: Graph) -> str | None:
        if node.outputs and graph.tensor(node.outputs[0]).dtype == INT32:
            return _int32_problem(node, graph)
        problem = runtime_io(node, graph)
        if problem:
            return problem
        return _broadcast_problem(node, graph) or (
            activation_check(node.params.get("activation", 0)) if node.op in FUSED else None
        )

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        srcs, objects = operands(["a", "b_in"], list(node.inputs), ctx)
        act = _activation(node, ctx.graph)
        extended = node.params.get("zero_extended", ())
        a, b = node.inputs
        code = (
            HEAD
            + read_broadcast("a", zero_extended=a in extended, constant=constant_shape(ctx.graph, a))
            + read_broadcast("b_in", zero_extended=b in extended, constant=constant_shape(ctx.graph, b))
            + f"  FLT4 result = {BINARY[node.op][0].format(a='a_v', b='b_in_v')};\n  {act}\n"
        )
        kernel = operation(written(code), srcs=srcs, tensor_objects=objects)
        kernel.codes_writer = True  # it writes only through its write hook
        return row_runs(kernel, node, ctx)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.broadcast(node, graph)

    def links(self, node: Node, graph: Graph, fused_input: int) -> bool:
        return node.inputs.count(fused_input) == 1

    def link(self, node: Node, fused_input: int, link: Link) -> str:
        other = next(i for i in node.inputs if i != fused_input)
        name = link.add_operand("", other)
        extended = other in node.params.get("zero_extended", ())
        lines = [read_broadcast(name, "    ", extended, constant_shape(link.ctx.graph, other))]
        first, second = ("result", f"{name}_v") if node.inputs[0] == fused_input else (f"{name}_v", "result")
        lines.append(f"    FLT4 {name}_a = {first}; FLT4 {name}_b = {second};\n")
        lines.append(f"    result = {BINARY[node.op][0].format(a=f'{name}_a', b=f'{name}_b')};\n")
        if node.op in FUSED:
            lines.append("    " + _activation(node, link.ctx.graph) + "\n")
        return "".join(lines)

    def wide_operand_link(self, node: Node, fused_input: int, link: Link, width: int) -> str | None:
        """The op on a whole FLT``width`` (a matrix product's accumulator, kernel.WideOps): the
        operand read slice by slice as ``link`` reads it (its broadcasts included) into one vector,
        then one vector op and activation instead of one per FLT4 part (a residual ADD's share of an
        int8 1x1 product, which rounds its output twice, was about 40% of the kernel's time)."""
        if node.op not in _WIDE_BINARY or link.ctx.graph.tensor(node.outputs[0]).dtype == INT32:
            return None
        other = next(i for i in node.inputs if i != fused_input)
        name = link.name("")
        extended = other in node.params.get("zero_extended", ())
        constant = constant_shape(link.ctx.graph, other)
        lines = [f"    FLT{width} {name}_w;\n"]
        for j, part in enumerate(SLICE_PARTS[width]):
            # the part's slice as ``S``, in a block of its own, as the FLT4 read names it
            read = read_broadcast(name, "      ", extended, constant)
            lines.append(f"    {{\n      int S = {WIDE_SLICE} + {j};\n{read}")
            lines.append(f"      {name}_w.{part} = {name}_v;\n    }}\n")
        first, second = ("result", f"{name}_w") if node.inputs[0] == fused_input else (f"{name}_w", "result")
        lines.append(f"    FLT{width} {name}_a = {first}; FLT{width} {name}_b = {second};\n")
        lines.append(f"    result = {BINARY[node.op][0].format(a=f'{name}_a', b=f'{name}_b')};\n")
        act = node.params.get("activation", 0) if node.op in FUSED else Activation.NONE
        activation = activation_code(act, "result", width)
        if activation:
            lines.append("    " + activation + "\n")
        return "".join(lines)


#: binary ops that run on a whole vector of a matrix product (``Binary.wide_operand_link``): the
#: same lane-wise arithmetic as on FLT4 (PRELU's code names FLT4 constants; DIV and POW left as they were)
_WIDE_BINARY = (Builtin.ADD, Builtin.SUB, Builtin.MUL, Builtin.MAXIMUM, Builtin.MINIMUM, Builtin.SQUARED_DIFFERENCE)


def _broadcast_problem(node: Node, graph: Graph) -> str | None:
    """Two inputs broadcasting to the output as TFLite broadcasts, not both constants."""
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
    return None


def _int32_problem(node: Node, graph: Graph) -> str | None:
    """An int32 binary op (int_ranges.py): ADD, SUB, MUL, MAXIMUM, MINIMUM of int32 tensors whose
    results the device's float32 holds exactly."""
    if node.op not in int_ranges.ARITHMETIC:
        return f"int32 {Builtin(node.op).name} is not supported by the compiler"
    if len(node.outputs) != 1:
        return f"{len(node.outputs)} outputs (one expected)"
    present = [i for i in node.inputs if i >= 0]
    return (
        value_tensors(graph, [*present, *node.outputs], (INT32,))
        or _broadcast_problem(node, graph)
        or int_ranges.inexact_constant(graph, present)
        or int_ranges.inexact_reason(graph, node)
    )


def _activation(node: Node, graph: Graph) -> str:
    """The statements of the node's fused activation: int32 kernels apply only the clamps (TFLite's
    ignore the others), float kernels each one ``activation_check`` takes."""
    act = node.params.get("activation", 0) if node.op in FUSED else Activation.NONE
    if graph.tensor(node.outputs[0]).dtype == INT32 and act not in int_ranges.CLAMPS:
        return ""
    return activation_code(act)


@dataclass(frozen=True)
class UnarySpec:
    """A unary op: statements turning FLT4 ``result`` (the input) into the op's value, naming its
    float parameters ``{name}`` (bound to the kernel's arguments, in a linked op's namespace)."""

    statement: str
    traits: Traits = NO_TRAITS
    #: float parameters: name -> (the node's parameter it is read from, its default)
    floats: tuple[tuple[str, float], ...] = ()
    #: what the op computes on real values, for int8 / uint8 tensors carried in float: then it
    #: runs as a table of its input's integers (quant_table.py); None, its statements run on them
    real: RealFunction | None = None
    #: the statements on a FLT{width} ``result`` (Op.wide_link), for ops without float parameters
    wide: Callable[[int], str] | None = None

    def code(self, names: dict[str, str]) -> str:
        return self.statement.format(**names) if self.floats else self.statement


_CLAMPS = Traits(quantization=Quantization.REQUANTIZES, passes_bound=True)
_REQUANTIZES = Traits(quantization=Quantization.REQUANTIZES)


def logistic(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x) on real values (a table's, quant_table.py)."""
    return 1.0 / (1.0 + np.exp(-x))


_KEEPS_SMALL = Traits(keeps_small=True)


def hard_swish_code(width: int) -> str:
    """x * relu6(x + 3) / 6 on FLT``width`` ``result`` (ternaries: PoCL calls min and max)."""
    flt = f"FLT{width}"
    init = "INIT_FLT4({})" if width == 4 else f"(({flt})({{}}))"
    zero, three, six, sixth = (init.format(v) for v in ("0.0f", "3.0f", "6.0f", "1.0f / 6.0f"))
    return (
        f"{flt} r6 = result + {three};\n"
        f"  r6 = r6 < {zero} ? {zero} : r6;\n"
        f"  r6 = r6 > {six} ? {six} : r6;\n"
        f"  result = result * r6 * {sixth};"
    )


UNARY: dict[int, UnarySpec] = {
    Builtin.LOGISTIC: UnarySpec(
        activation_code(Activation.SIGMOID),
        replace(_REQUANTIZES, output_bound=1.0),
        real=logistic,
        wide=partial(activation_code, Activation.SIGMOID, "result"),
    ),
    Builtin.RELU: UnarySpec(
        activation_code(Activation.RELU), _CLAMPS, wide=partial(activation_code, Activation.RELU, "result")
    ),
    Builtin.RELU6: UnarySpec(
        activation_code(Activation.RELU6),
        replace(_CLAMPS, output_bound=6.0),
        wide=partial(activation_code, Activation.RELU6, "result"),
    ),
    Builtin.RELU_N1_TO_1: UnarySpec(
        activation_code(Activation.RELU_N1_TO_1),
        replace(_CLAMPS, output_bound=1.0),
        wide=partial(activation_code, Activation.RELU_N1_TO_1, "result"),
    ),
    Builtin.TANH: UnarySpec(
        activation_code(Activation.TANH),
        replace(_REQUANTIZES, output_bound=1.0),
        real=np.tanh,
        wide=partial(activation_code, Activation.TANH, "result"),
    ),
    Builtin.ABS: UnarySpec("result = fabs(result);", _KEEPS_SMALL),
    Builtin.NEG: UnarySpec("result = -result;", _KEEPS_SMALL),
    Builtin.EXP: UnarySpec(exp_code("result", "convert_float4(result)", 4, "TO_FLT4")),
    Builtin.LOG: UnarySpec("result = log(result);", Traits(small_value_input=0)),
    Builtin.SQRT: UnarySpec("result = sqrt(result);", _KEEPS_SMALL),
    Builtin.RSQRT: UnarySpec(
        "result = rsqrt(result);", Traits(small_value_input=0, quantization=Quantization.REQUANTIZES)
    ),
    Builtin.SQUARE: UnarySpec("result = result * result;", _KEEPS_SMALL),
    Builtin.SIN: UnarySpec("result = sin(result);"),
    Builtin.COS: UnarySpec("result = cos(result);"),
    Builtin.ELU: UnarySpec(
        "{ float4 elu_e;\n    "
        + exp_code("elu_e", "convert_float4(result)")
        + "\n    result = result < INIT_FLT4(0.0f) ? TO_FLT4(elu_e - 1.0f) : result; }"
    ),
    Builtin.HARD_SWISH: UnarySpec(
        hard_swish_code(4),
        _REQUANTIZES,
        real=lambda x: x * np.clip(x + 3.0, 0.0, 6.0) / 6.0,
        wide=hard_swish_code,
    ),
    Builtin.LEAKY_RELU: UnarySpec(
        "result = result < INIT_FLT4(0.0f) ? result * (FLT)({alpha}) : result;", _REQUANTIZES, (("alpha", 0.2),)
    ),
    # On tensors carried in float (compiler/quant.py) both are the identity: QUANTIZE's rounding
    # onto its output's grid is the quantize-and-dequantize step every carried output gets.
    Builtin.QUANTIZE: UnarySpec("", _REQUANTIZES),
    Builtin.DEQUANTIZE: UnarySpec("", _REQUANTIZES),
}


class UnaryOp(Op):
    """An op of one runtime input whose output keeps its shape, computed FLT4 by FLT4 by the
    statements of ``spec``: one kernel of its own, or linked into its producer's (fusion.py). A
    new one is a module defining a subclass with its ``codes`` and ``spec`` (ops/gelu.py)."""

    data_inputs = 1

    def spec(self, node: Node) -> UnarySpec:
        raise NotImplementedError

    def traits(self, code: int) -> Traits:
        return replace(super().traits(code), own_kernel=False)  # linked into its producer's kernel

    def check(self, node: Node, graph: Graph) -> str | None:
        problem = runtime_io(node, graph)
        if problem:
            return problem
        if len(node.inputs) != 1 or graph.tensor(node.inputs[0]).is_constant:
            return "unary op on a constant"
        if graph.tensor(node.inputs[0]).shape != graph.tensor(node.outputs[0]).shape:
            return "input and output shapes differ"
        return None

    def lookup(self, node: Node, graph: Graph) -> tuple[Carried, np.ndarray] | None:
        """(the input's grid, the table of the op's values) when the node runs as a table: its
        input and output carried (compiler/quant.py) and its spec saying what it computes."""
        real = self.spec(node).real
        src, dst = graph.tensor(node.inputs[0]).carried, graph.tensor(node.outputs[0]).carried
        if real is None or src is None or dst is None:
            return None
        return src, table(real, src, dst)

    def writes_grid(self, node: Node, graph: Graph) -> bool:
        return self.lookup(node, graph) is not None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        read = HEAD + "  FLT4 result = args.src_tensor.Read(X, Y, S, b);\n"
        found = self.lookup(node, ctx.graph)
        if found is not None:
            src, values = found
            objects = [table_object("table", values.astype(np.float32).tobytes())]
            body = written(read + lookup_code(src, "args.table"))
            kernel = operation(body, srcs=["src_tensor"], buffer_objects=objects)
            return row_runs(kernel, node, ctx)
        spec = self.spec(node)
        floats = {name: node.params.get(name, default) for name, default in spec.floats} or None
        statement = spec.code({name: f"args.{name}" for name, _ in spec.floats})
        code = read + "  " + statement + "\n"
        return row_runs(operation(written(code), srcs=["src_tensor"], floats=floats), node, ctx)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        return shape_rules.same_as_input(node, graph)

    def links(self, node: Node, graph: Graph, fused_input: int) -> bool:
        return True

    def link(self, node: Node, fused_input: int, link: Link) -> str:
        found = self.lookup(node, link.ctx.graph)
        if found is not None:
            src, values = found
            return lookup_code(src, link.add_table("table", values))
        spec = self.spec(node)
        names = {name: link.add_float(name, node.params.get(name, default)) for name, default in spec.floats}
        return "    " + spec.code(names) + "\n"

    def wide_link(self, node: Node, graph: Graph, width: int) -> str | None:
        spec = self.spec(node)
        if spec.wide is None or spec.floats or self.lookup(node, graph) is not None:
            return None
        return "    " + spec.wide(width) + "\n"


class Unary(UnaryOp):
    """The unary ops of the ``UNARY`` table."""

    codes = tuple(UNARY)
    code_traits: ClassVar[dict[int, Traits]] = {code: spec.traits for code, spec in UNARY.items()}

    def spec(self, node: Node) -> UnarySpec:
        return UNARY[node.op]


#: ``HEAD`` for a run of ROW_PIXELS pixels of one row, one slice: X from X0 up to X1
ROW_START = f"""
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
"""
#: ``ROW_START`` with the loop over the run: the body and its closing write run once per pixel
#: (the write closes the loop; ``row_runs`` closes the kernel).
ROW_HEAD = ROW_START + "  for (int X = X0; X < X1; ++X) {\n"


def row_runs(kernel: Kernel, node: Node, ctx: EmitContext, spec: KernelSpec | None = None) -> Kernel:
    """``kernel`` (a ``HEAD`` body, one pixel per work-item) as its selector chose
    (selectors/pointwise.py; ``spec``, else select_elementwise's): ROW_PIXELS pixels of a row per
    work-item, or as it is."""
    spec = spec or select_elementwise(node, ctx.graph, ctx.options)
    if spec.variant is not Variant.ROW_RUNS:
        return kernel
    head = kernel.body[0]
    assert isinstance(head, str) and head.startswith(HEAD)
    kernel.body[0] = ROW_HEAD + head[len(HEAD) :]
    kernel.body.append("}\n")
    return launched(kernel, spec)
