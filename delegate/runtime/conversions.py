"""The input and output conversion kernels: float32 BHWDC staging <-> a tensor in any storage.

TFLite hands inputs and takes outputs as row-major float32; every input gets a conversion into
its tensor's device layout and every output one out of it, launched like the nodes.
"""

from __future__ import annotations

from ..context import model
from ..context.model import DataType, TensorToGrid
from .graph import RuntimeTensor

# Conversion kernels between a float32 BHWDC staging buffer and a tensor in any storage.
_CONVERSION_HEAD = """
MAIN_FUNCTION($0) {
  int gx = get_global_id(0);
  int gy = get_global_id(1);
  int s = get_global_id(2);
  int B = args.tensor.Batch(); int D = args.tensor.Depth(); int W = args.tensor.Width();
  int H = args.tensor.Height(); int C = args.tensor.Channels();
  if (gx >= W * B || gy >= H * D || s >= args.tensor.Slices()) return;
  // Integer division is slow on CPUs (a call or a long-latency instruction per work-item): the
  // usual batch 1, depth 1 tensors skip it (about 25% of this kernel on PoCL).
  int x = gx, b = 0, y = gy, z = 0;
  if (B != 1) { x = gx / B; b = gx % B; }
  if (D != 1) { y = gy / D; z = gy % D; }
  int base = (((b * H + y) * W + x) * D + z) * C + s * 4;
"""

_TO_DEVICE = (
    _CONVERSION_HEAD
    + """  __global float* src = args.staging.GetPtr();
  float4 v = (float4)(0.0f);
  v.x = src[base];
  if (s * 4 + 1 < C) v.y = src[base + 1];
  if (s * 4 + 2 < C) v.z = src[base + 2];
  if (s * 4 + 3 < C) v.w = src[base + 3];
  args.tensor.Write(v, x, y, z, s, b);
}
"""
)

_FROM_DEVICE = (
    _CONVERSION_HEAD
    + """  __global float* dst = args.staging.GetPtr();
  float4 v = convert_float4(args.tensor.Read(x, y, z, s, b));
  dst[base] = v.x;
  if (s * 4 + 1 < C) dst[base + 1] = v.y;
  if (s * 4 + 2 < C) dst[base + 2] = v.z;
  if (s * 4 + 3 < C) dst[base + 3] = v.w;
}
"""
)


#: Pixels of a row per work-item in the row conversions (batch 1, depth 1: an image's input),
#: for tensors of up to _ROW_SLICES slices (the code is unrolled over slices).
_ROW_PIXELS = 8
_ROW_SLICES = 4


def _row_conversion_code(channels: int, slices: int, to_device: bool) -> str:
    """A conversion for batch 1, depth 1 tensors: a work-item moves ``_ROW_PIXELS`` pixels of a
    row, every slice, with the channel count a literal (no lane checks at run time). On PoCL about
    3x faster than the per-element kernels for MobileNetV2's 224x224x3 input (150 -> 47 us)."""
    lines = []
    for s in range(slices):
        lanes = [f"x * {channels} + {s * 4 + k}" if s * 4 + k < channels else None for k in range(4)]
        if to_device:
            values = ", ".join(f"row[{i}]" if i else "0.0f" for i in lanes)
            lines.append(f"    args.tensor.Write((float4)({values}), x, y, 0, {s}, 0);\n")
        else:
            lines.append(f"    {{\n    float4 v = convert_float4(args.tensor.Read(x, y, 0, {s}, 0));\n")
            lines += [f"    row[{i}] = v.{'xyzw'[k]};\n" for k, i in enumerate(lanes) if i]
            lines.append("    }\n")
    return f"""
MAIN_FUNCTION($0) {{
  int x0 = get_global_id(0) * {_ROW_PIXELS};
  int y = get_global_id(1);
  int W = args.tensor.Width();
  if (x0 >= W || y >= args.tensor.Height()) return;
  __global float* row = args.staging.GetPtr();
  row += y * W * {channels};
  int end = x0 + {_ROW_PIXELS} < W ? x0 + {_ROW_PIXELS} : W;
  for (int x = x0; x < end; ++x) {{
{"".join(lines)}  }}
}}
"""


def conversion_op(t: RuntimeTensor, to_device: bool) -> model.GPUOperation:
    """The operation converting ``t`` from (``to_device``) or into its float32 staging buffer,
    the buffer object ``staging``; the tensor is bound as ``tensor``."""
    staging_desc = model.BufferDescriptor(element_type=DataType.FLOAT32, element_size=1)
    op = model.GPUOperation(
        code=_TO_DEVICE if to_device else _FROM_DEVICE,
        arguments=model.Arguments(buffer_objects=[model.BufferDescriptorMapValue("staging", staging_desc)]),
        tensor_to_grid=TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z,
        work_group_size=model.Int3(8, 4, 1),
    )
    s = t.shape
    if s.b == 1 and s.d == 1 and s.slices <= _ROW_SLICES:  # an image: rows of pixels, every slice, per work-item
        op.code = _row_conversion_code(s.c, s.slices, to_device)
        op.tensor_to_grid = TensorToGrid.CUSTOM
        blocks = -(-s.w // _ROW_PIXELS)
        op.grid_size = model.Int3(blocks, s.h, 1)
        op.work_group_size = model.Int3(min(blocks, 32), 1, 1)
    return op
