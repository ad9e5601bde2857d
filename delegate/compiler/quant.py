"""Full-integer (int8 / uint8) graphs carried in float, upstream's way (enable_quantized_inference).

Every per-tensor quantized activation (a non-constant int8 / uint8 tensor with one scale and zero
point) is carried as a float tensor holding its real value, ``(q - zero_point) * scale``; its
quantization stays on the tensor as ``Tensor.carried``. Quantized constants (int8 / uint8
weights, per tensor or per channel; int32 biases, whose scale is the input's times the weights')
become the float constants they stand for, so a quantized node runs as the float op. After each
node writing a carried tensor, a quantize-and-dequantize step (``qdq_code``: times the scale's
reciprocal, clamped to the type's range less the zero point, rounded half away from zero as
TFLite does, back to float) puts the result on the tensor's grid, as TFLite's integer kernels do: the float result
before it is the integer kernel's accumulator times its real scale, so the two agree to within a
rounding step where the value sits on a tie. The step is linked into the producer's kernel, in
front of its writes (kernel.WriteHook), so it costs no kernel of its own: once per wider vector
where the kernel holds them (kernel.WideOps), and a table of the grid's integers linked after it
(quant_table.py) takes the rounded integer as its index (``rounded_lookup_code``).

On devices with AVX512-VNNI (CompileOptions.int8_dot), a 1x1 or windowed CONV_2D or a
FULLY_CONNECTED over a carried input multiplies integers instead: its weights' codes are kept
(Tensor.codes), the input's codes are recovered from the carried values, and the exact int32 sums
times the real scales give the float result the rounding step takes (kernels/cpu/gemm_blocks.py,
``integer_slice_loop``).

Ops whose integer kernels keep the integers (their traits say ``Quantization.KEEPS_INTEGERS``,
ops/traits.py: data movement, max / average pooling, MAXIMUM / MINIMUM, resizes) write the input's
integers read on the output's grid; carried in float they agree only while every quantized tensor
of the node has one quantization, so a node with two stays on CPU (``integer_copy_problem``).

At a partition's edges carried tensors are converted (csrc/plugin.c): an int8 / uint8 input is
dequantized into a float staging copy before the run, an output quantized after it.
"""

from __future__ import annotations

import numpy as np

from .graph import FLOAT32, INT32, Builtin, Carried, Graph, IntegerCodes, Node, Tensor
from .ops import Quantization, traits_of
from .quant_table import TIE, lanes

INT8, UINT8 = 9, 3
#: the integer range of each carried type
RANGES = {INT8: (-128, 127), UINT8: (0, 255)}


def quantization(code: int) -> Quantization:
    """How the op of ``code`` treats quantization: its own declaration (``Op.traits``)."""
    return traits_of(code).quantization


def carried_params(t: Tensor) -> Carried | None:
    """How ``t`` is carried when it is a per-tensor quantized int8 / uint8 activation, else None."""
    return None if t.is_constant else _per_tensor(t)


def _per_tensor(t: Tensor) -> Carried | None:
    """``t``'s quantization when it is int8 / uint8 with one valid scale and zero point, else None."""
    if t.dtype not in RANGES or len(t.scales) != 1 or len(t.zero_points) > 1:
        return None
    if not np.isfinite(t.scales[0]) or t.scales[0] <= 0:
        return None
    zero = t.zero_points[0] if t.zero_points else 0
    low, high = RANGES[t.dtype]
    if not low <= zero <= high:
        return None
    return Carried(float(t.scales[0]), int(zero), low, high, t.dtype)


def _quantized_constant(t: Tensor) -> bool:
    if not t.is_constant or t.dtype not in (INT8, UINT8, INT32) or not t.scales:
        return False
    return len(t.zero_points) in (0, 1, len(t.scales))


def _dequantized(t: Tensor) -> np.ndarray | None:
    if t.constant is None:
        return None
    q = np.asarray(t.constant).astype(np.float64)
    shape = [1] * q.ndim
    if len(t.scales) > 1:
        shape[t.quant_axis] = len(t.scales)
    scales = np.asarray(t.scales, np.float64).reshape(shape)
    zero = np.asarray(t.zero_points or [0] * len(t.scales), np.float64).reshape(shape)
    return ((q - zero) * scales).astype(np.float32)


def _symmetric_codes(t: Tensor) -> IntegerCodes | None:
    """``t``'s integers less their zero points where those fit int8 (always for int8 weights, whose
    zero points TFLite requires to be 0; uint8 weights with zero point 128 or near it), kept for the
    integer matrix products (selectors/gemm.integer_input); else None."""
    if t.constant is None or t.dtype not in (INT8, UINT8) or len(set(t.zero_points)) > 1:
        return None  # per-channel zero points: all 0 for int8, never written for uint8
    codes = np.asarray(t.constant, np.int32) - (t.zero_points[0] if t.zero_points else 0)
    if codes.size == 0 or codes.min() < -128 or codes.max() > 127:
        return None
    return IntegerCodes(codes.astype(np.int8), tuple(float(v) for v in t.scales), t.quant_axis)


def _grid(t: Tensor) -> Carried | None:
    """The quantization ``t``'s values are on: a carried activation's, or a quantized constant's
    not dequantized (carry_quantized leaves those read by a node that keeps integers)."""
    return t.carried if t.carried is not None else _per_tensor(t)


def integer_copy_problem(node: Node, graph: Graph) -> str | None:
    """Why carrying ``node`` in float would not give TFLite's answer, for an op whose integer kernel
    keeps the integers (``Quantization.KEEPS_INTEGERS``, int8 CONCATENATION): a quantized tensor it
    reads or writes on another grid than its first output's; None when they share one."""
    keeps = quantization(node.op) is Quantization.KEEPS_INTEGERS
    if (not keeps and node.op != Builtin.CONCATENATION) or not node.outputs:
        return None
    out = graph.tensor(node.outputs[0])
    want = _grid(out)
    if want is None or (node.op == Builtin.CONCATENATION and want.dtype != INT8):
        return None  # uint8 CONCATENATION requantizes its inputs, as the carried values do
    for i in (*node.inputs, *node.outputs):
        if i < 0:
            continue
        t = graph.tensor(i)
        if t.carried is None and t.dtype not in RANGES:
            continue  # shapes, axes, permutations, dequantized constants
        got = _grid(t)
        if got != want:
            held = "not per-tensor quantized" if got is None else f"scale {got.scale:.6g}, zero point {got.zero_point}"
            return (
                f"quantized {node.op_description} with tensor {i} ({held}) not of output {out.index}'s "
                f"quantization (scale {want.scale:.6g}, zero point {want.zero_point}): TFLite's integer "
                "kernel keeps the integers (or rejects the model), which values carried in float cannot"
            )
    return None


def is_quantized_node(node: Node, graph: Graph) -> bool:
    """Does ``node`` read or write a carried tensor?"""
    return any(i >= 0 and graph.tensor(i).carried is not None for i in (*node.inputs, *node.outputs))


def carry_quantized(graph: Graph) -> None:
    """Carry the graph's quantized activations in float and dequantize the quantized constants
    every reader of which is a quantized node (module docstring); idempotent."""
    for t in graph.tensors.values():
        params = carried_params(t)
        if params is not None:
            t.dtype, t.quantized, t.carried = FLOAT32, False, params
    readers: dict[int, list[Node]] = {}
    for node in graph.nodes.values():
        for i in node.inputs:
            if i >= 0:
                readers.setdefault(i, []).append(node)
    # decided before any constant changes, so that a node's every quantized input is still seen
    keeps = {n.index for n in graph.nodes.values() if integer_copy_problem(n, graph) is not None}
    for index, nodes in readers.items():
        t = graph.tensor(index)
        if _quantized_constant(t) and all(is_quantized_node(n, graph) and n.index not in keeps for n in nodes):
            t.codes = _symmetric_codes(t)
            t.constant = _dequantized(t)
            t.dtype, t.quantized, t.scales, t.zero_points, t.quant_axis = FLOAT32, False, (), (), 0


def _literal(v: float) -> str:
    return f"{float(np.float32(v))!r}f"


def _rounded_steps(params: Carried, with_zero_point: bool, width: int) -> tuple[str, str]:
    """Statements setting float``width`` ``q`` to FLT``width`` ``result`` over ``params``' scale,
    clamped to the type's range and rounded half away from zero (a whole number in float: steps
    from the zero point, or with ``with_zero_point`` the integer itself), and the expression
    adding the half that a truncation then rounds with (``qdq_code``)."""
    zero = _literal(params.zero_point)
    # times the reciprocal rather than over the scale: a division's throughput is a fifth of a
    # product's, and the ulp it may differ by is far inside TIE
    scaled = f"convert_float{width}(result) * {_literal(1.0 / params.scale)}"
    scaled += f" + {zero}" if with_zero_point else ""
    # Clamped before rounding: the bounds are whole steps, so rounding cannot leave them, and
    # ordered so that NaN takes the low bound (TFLite's integers hold no NaN). Rounding half away
    # from zero is a truncation of q + copysign(1/2, q), not round() / floor(), which are
    # out-of-line calls on PoCL; TIE added to the half takes a value within float rounding of a
    # tie (x.5) for the tie, which TFLite's exact integer arithmetic (pooling, equal scales)
    # rounds away from zero.
    shift = 0.0 if with_zero_point else float(params.zero_point)
    low, high = _literal(params.low - shift), _literal(params.high - shift)
    half = _literal(0.5 + TIE)
    # A grid whose low end is at or above zero (a ReLU's output, zero point at the type's low end;
    # uint8 counted with its zero point) leaves no negative q after the clamp (NaN and -0 take
    # +0): the half is added as it is, without the sign's two operations (a third of the step).
    # Else the half takes q's sign by a float comparison, not by q's bits (as_uint): an integer
    # view of q turns the clamps' selects into integer compare-and-blend pairs, two operations
    # each, where the float ones are one max / min (same values: -0 and +0 both round to 0, and
    # the clamp left no NaN).
    if params.low - shift >= 0:
        rounded = f"q + {half}"
    else:
        rounded = f"q + (q < 0.0f ? (float{width})(-{half}) : (float{width})({half}))"
    statements = f"    float{width} q = {scaled};\n    q = q > {low} ? q : {low};\n    q = q < {high} ? q : {high};\n"
    return statements, rounded


def qdq_code(params: Carried, with_zero_point: bool = False, width: int = 4) -> str:
    """Statements putting FLT``width`` ``result`` on ``params``' grid: TFLite rounds half away
    from zero, the real value over the scale (requantization, QUANTIZE), or ``with_zero_point``
    that plus the zero point (``Traits.rounds_with_zero_point``). A function of each lane alone:
    a kernel with wider vectors (kernel.WideOps) runs it once per vector."""
    statements, rounded = _rounded_steps(params, with_zero_point, width)
    zero = _literal(params.zero_point)
    return (
        "  {\n" + statements + f"    q = convert_float{width}(convert_int{width}({rounded}));\n"
        f"    result = TO_FLT{width}(({'q - ' + zero if with_zero_point else 'q'}) * {_literal(params.scale)});\n"
        "  }\n"
    )


def rounded_lookup_code(params: Carried, entries: str, width: int = 4) -> str:
    """``qdq_code`` onto ``params``' grid followed by a table of that grid's integers
    (quant_table.lookup_code, element i read by ``entries``'s ``Read(i)``), as one step: the
    rounded integer is the table's index, without going back to a real value and over the scale
    again. The same entries: the lookup recovers that integer from the real value exactly."""
    statements, rounded = _rounded_steps(params, False, width)
    reads = ", ".join(f"{entries}.Read(lut_i.{lane})" for lane in lanes(width))
    # the clamp kept q within the type's range less the zero point: the index is in the table
    return (
        "  {\n"
        + statements
        + f"    int{width} lut_i = convert_int{width}({rounded}) + {params.zero_point - params.low};\n"
        f"    result = (FLT{width})({reads});\n"
        "  }\n"
    )


def output_grid_problem(node: Node, graph: Graph) -> str | None:
    """Why the carried values of a LOGISTIC or SOFTMAX output would not be TFLite's (ai-edge-litert
    2.3, measured): its integer kernels refuse a LOGISTIC output scale other than 1/256 and an int8
    SOFTMAX output other than (1/256, -128), and a uint8 SOFTMAX writes as if its output zero point
    were 0. None for other ops, and for outputs on those grids."""
    if node.op not in (Builtin.LOGISTIC, Builtin.SOFTMAX) or not node.outputs:
        return None
    grid = graph.tensor(node.outputs[0]).carried
    if grid is None:
        return None
    on_scale = abs(grid.scale * 256 - 1) <= 1e-3
    if node.op == Builtin.LOGISTIC:
        ok = on_scale
    elif grid.dtype == INT8:
        ok = on_scale and grid.zero_point == -128
    else:
        ok = grid.zero_point == 0
    if ok:
        return None
    return (
        f"quantized {node.op_description} with output scale {grid.scale:.6g} and zero point {grid.zero_point}: "
        "TFLite's integer kernel refuses it or computes another value than the real one rounded onto that grid"
    )


def quantized_reason(node: Node, graph: Graph) -> str | None:
    """Why quantized ``node`` stays on CPU, or None when its quantized form is supported."""
    if quantization(node.op) is Quantization.NONE:
        return f"quantized {node.op_description} is not supported by the compiler"
    problem = integer_copy_problem(node, graph) or output_grid_problem(node, graph)
    if problem:
        return problem
    for i in (*node.inputs, *node.outputs):
        if i < 0:
            continue
        t = graph.tensor(i)
        if t.quantized or (t.dtype in (INT8, UINT8) and not t.is_constant):
            return f"tensor {i} is quantized per channel or with parameters the delegate does not carry"
    out = graph.tensor(node.outputs[0]) if node.outputs else None
    if node.op == Builtin.DEQUANTIZE and (out is None or out.carried is not None):
        return "DEQUANTIZE to a quantized type"
    return None
