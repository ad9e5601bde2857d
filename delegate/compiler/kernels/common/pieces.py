"""The pieces every kernel template is made of: the default head (a work-item per output pixel x
slice), the lane helpers, fused activations, the write that closes a body, and the kernel object
with its constant objects (buffers, linear tensors)."""

from __future__ import annotations

import numpy as np

from ....context import model
from ...graph import Activation
from ...kernel import WRITE, Kernel, Piece, RequiredWorkGroup
from .math_code import logistic_code, tanh_code


def activation_code(act: int, var: str = "result", width: int = 4) -> str:
    """OpenCL statements applying a fused activation to ``var``, a FLT4 (or FLT8 with ``width`` 8),
    with ternaries (PoCL calls min/max) and arithmetic (math_code.py: PoCL calls tanh and exp)."""
    init = "INIT_FLT4({})" if width == 4 else f"((FLT{width})({{}}))"
    zero, one, six = (init.format(v) for v in ("0.0f", "1.0f", "6.0f"))
    if act == Activation.NONE:
        return ""
    if act == Activation.RELU:
        return f"{var} = {var} < {zero} ? {zero} : {var};"
    if act == Activation.RELU6:
        return f"{var} = {var} < {zero} ? {zero} : {var};\n  {var} = {var} > {six} ? {six} : {var};"
    if act == Activation.RELU_N1_TO_1:
        return f"{var} = {var} < -{one} ? -{one} : {var};\n  {var} = {var} > {one} ? {one} : {var};"
    if act == Activation.TANH:
        return tanh_code(var, f"convert_float{width}({var})", width, f"TO_FLT{width}")
    if act == Activation.SIGMOID:
        return logistic_code(var, f"convert_float{width}({var})", width, f"TO_FLT{width}")
    raise ValueError(f"unsupported activation {act}")


#: Pick lane i of a FLT4 (dlg_component) and set lane i (dlg_set): for kernels that move single channels.
LANES = """
FLT dlg_component(FLT4 v, int i) { return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w)); }
FLT4 dlg_set(FLT4 v, int i, FLT x) {
  if (i == 0) v.x = x; else if (i == 1) v.y = x; else if (i == 2) v.z = x; else v.w = x;
  return v;
}
"""


#: Kernel head: X over W*B, Y over H, S over slices of the output; b the batch.
HEAD = """
MAIN_FUNCTION($0) {
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  int B = args.dst_tensor.Batch();
  if (gx >= args.dst_tensor.Width() * B || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  int X = gx, b = 0;
  if (B != 1) { X = gx / B; b = gx % B; }  // batch 1 (the usual case) needs no division
"""


#: an input lane's coordinates in the 4-D view, the names a lane kernel's mapping defines
INPUT_LANE = ("bi", "yi", "xi", "ci")

#: Opening of a kernel that sets the output lane by lane: ``result`` and, per lane ``k`` of the
#: output slice, its channel ``c`` (lanes past the channels are left out).
LANE_LOOP = (
    LANES
    + HEAD
    + """  FLT4 result = INIT_FLT4(0.0f);
  for (int k = 0; k < 4; ++k) {
    int c = S * 4 + k;
    if (c >= args.dst_tensor.Channels()) break;
"""
)


def input_lane(exprs: list[str], indent: str = "    ") -> str:
    """Declarations of the input lane ``INPUT_LANE`` (as many as ``exprs``) = ``exprs``."""
    return "".join(f"{indent}int {name} = {expr};\n" for name, expr in zip(INPUT_LANE, exprs, strict=False))


def operation(body: str | list[Piece], *, srcs: list[str], ints: dict[str, int] | None = None,
              floats: dict[str, float] | None = None, literals: dict[str, int] | None = None,
              work_group: RequiredWorkGroup | None = None, **arguments: list) -> Kernel:  # fmt: skip
    """The kernel of ``body`` over one output ``dst_tensor`` with the scalar arguments given.

    ``ints`` become kernel parameters; ``literals`` are inactive values the runtime writes into the
    source as constants (so the OpenCL compiler can unroll and fold them).
    """
    args = model.Arguments(
        int_values=[
            *(model.IntValue(k, int(v), True) for k, v in (ints or {}).items()),
            *(model.IntValue(k, int(v), False) for k, v in (literals or {}).items()),
        ],
        float_values=[model.FloatValue(k, float(v), True) for k, v in (floats or {}).items()],
        **arguments,
    )
    size = model.Int3(*work_group.size) if work_group else model.Int3(8, 4, 1)
    op = model.GPUOperation(
        arguments=args,
        work_group_size=size,
        tensor_to_grid=model.TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z,
        definition=model.OperationDef(),
        grid_dimension=3,
        src_tensors_names=srcs,
        dst_tensors_names=["dst_tensor"],
    )
    return Kernel(op, [body] if isinstance(body, str) else body, work_group)


def written(body: str) -> list[Piece]:
    """``body``, then the masked write of ``result`` that closes the kernel (where links go)."""
    return [body, WRITE]


def buffer_object(name: str, data: bytes, dtype: np.dtype, element_size: int = 4) -> model.BufferDescriptorMapValue:
    element = model.DataType.FLOAT16 if dtype == np.float16 else model.DataType.FLOAT32
    return model.BufferDescriptorMapValue(
        name,
        model.BufferDescriptor(element_type=element, element_size=element_size, size=len(data), data=data),
    )


def linear_object(name: str, data: bytes, dtype: np.dtype) -> model.TensorLinearDescriptorMapValue:
    element = model.DataType.FLOAT16 if dtype == np.float16 else model.DataType.FLOAT32
    return model.TensorLinearDescriptorMapValue(
        name, model.TensorLinearDescriptor(element_type=element, size=len(data) // (4 * dtype.itemsize), data=data)
    )
