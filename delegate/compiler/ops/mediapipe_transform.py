"""MediaPipe's custom ops TransformTensorBilinear and TransformLandmarks (attention face-mesh models).

Both read an affine matrix from a runtime tensor (16 floats, row-major: a [1, 4, 4] or [4, 4]
tensor, or 16 channels; only the first two rows are used) and take flexbuffer options. MediaPipe's
kernels (mediapipe/util/tflite/operations/transform_tensor_bilinear.cc, transform_landmarks.cc)
and TFLite GPU's option parsers (delegates/gpu/common/mediapipe/) define them, batch 1 only:

- TransformTensorBilinear (version 2; options output_height, output_width) and TransformTensor
  / TransformTensorBilinear version 1 (options mode "bilinear", output_size [h, w]; the options
  tell the versions apart, as an unresolved op's registration is always version 1): output
  [1, h, w, C]; output pixel (x, y) samples the input at (m0 . (x, y, 0, 1), m1 . (x, y, 0, 1)),
  bilinearly, neighbours outside the input reading 0, and is 0 when the point lies outside [0, W-1]
  x [0, H-1]. Version 2 first corrects the matrix for aligned corners: m[3] += (m[0] + m[1]) / 2 - 1/2.
- TransformLandmarks, version 1 (4-D [1, H, W, C], options dimensions 2 or 3 and scale) and version
  2 (3-D [1, N, D], dimensions D, scale 1): each landmark (``dimensions`` channels) gets x' = m0 .
  (x, y, 0, scale), y' = m1 . (x, y, 0, scale); a third coordinate is copied.
"""

from __future__ import annotations

from typing import Any

from .. import layout
from ..graph import FLOAT32, Graph, Node
from ..kernel import Kernel
from ..kernels.common.pieces import HEAD, LANES, operation, written
from .base import EmitContext, Op

_BILINEAR, _LEGACY, _LANDMARKS = "TransformTensorBilinear", "TransformTensor", "TransformLandmarks"


def flex_options(options: bytes) -> dict[str, Any]:
    """A node's flexbuffer options as a dict; ValueError when they are not a flexbuffer map."""
    from flatbuffers import flexbuffers  # here: a warm start loads no flatbuffers (tests/test_plugin.py)

    try:
        value = flexbuffers.Loads(options) if options else {}
    except Exception as exc:  # the flexbuffers reader raises whatever a bad byte leads it to
        raise ValueError(f"custom options are not a flexbuffer map: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError(f"custom options are a flexbuffer {type(value).__name__}, not a map")
    return value


def _rank_float(graph: Graph, i: int, rank: int) -> str | None:
    t = graph.tensor(i)
    if t.dtype != FLOAT32 or t.quantized or len(t.shape) != rank or t.shape[0] != 1:
        return f"tensor {i} is not a float32 tensor of rank {rank} and batch 1"
    return None


def matrix_rows(graph: Graph, i: int) -> str | None:
    """How the kernels read the matrix's rows 0 and 1 (``row(r)``): None when they cannot."""
    t = graph.tensor(i)
    if t.dtype != FLOAT32 or t.quantized or len(t.shape) > 4:
        return None
    b, h, w, c = layout.bhwc(t.shape)
    if (b, h, w, c) == (1, 1, 4, 4):
        return "args.matrix.Read({r}, 0, 0, 0)"
    if (b, h, w, c) == (1, 1, 1, 16):
        return "args.matrix.Read(0, 0, {r}, 0)"
    return None


def _rows_code(read: str) -> str:
    """m0 and m1, the matrix's first two rows, as float4."""
    return "".join(f"  float4 m{r} = convert_float4({read.format(r=r)});\n" for r in (0, 1))


def bilinear_options(node: Node) -> tuple[int, int, bool]:
    """(output height, width, aligned corners) of a TransformTensorBilinear node.

    The version is told by the options: an unresolved custom op's registration says version 1
    whatever the model's operator code says, and version 2's options (output_height,
    output_width) are not version 1's (mode, output_size)."""
    opts = flex_options(node.custom_options)
    if "output_height" in opts and "output_width" in opts and "output_size" not in opts:
        height, width = opts["output_height"], opts["output_width"]
        aligned = True
    elif "output_size" in opts and "output_height" not in opts:
        if opts.get("mode", "bilinear") != "bilinear":
            raise ValueError(f"mode {opts['mode']!r}: only bilinear interpolation is defined")
        size = opts["output_size"]
        if not isinstance(size, list) or len(size) != 2:
            raise ValueError(f"output_size {size!r} is not [height, width]")
        height, width = size
        aligned = False
    else:
        raise ValueError(f"options {sorted(opts)}: neither output_height and output_width nor output_size")
    if not (isinstance(height, int) and isinstance(width, int) and height > 0 and width > 0):
        raise ValueError(f"output size {height}x{width} is not positive")
    return height, width, aligned


_SAMPLE = """{rows}{correction}  float tx = m0.x * (float)X + m0.y * (float)Y + m0.z * 0.0f + m0.w;
  float ty = m1.x * (float)X + m1.y * (float)Y + m1.z * 0.0f + m1.w;
  int W = args.src_tensor.Width(), H = args.src_tensor.Height();
  FLT4 result = INIT_FLT4(0.0f);
  if (!(tx < 0.0f || tx > (float)(W - 1) || ty < 0.0f || ty > (float)(H - 1))) {
    float fx = floor(tx), fy = floor(ty);
    int x0 = (int)fx, y0 = (int)fy;
    float4 q11 = convert_float4(args.src_tensor.Read(x0, y0, S, b));
    float4 q21 = x0 + 1 < W ? convert_float4(args.src_tensor.Read(x0 + 1, y0, S, b)) : (float4)(0.0f);
    float4 q12 = y0 + 1 < H ? convert_float4(args.src_tensor.Read(x0, y0 + 1, S, b)) : (float4)(0.0f);
    float4 q22 = x0 + 1 < W && y0 + 1 < H ? convert_float4(args.src_tensor.Read(x0 + 1, y0 + 1, S, b))
                                          : (float4)(0.0f);
    float right = tx - fx, lower = ty - fy;
    float4 up = (1.0f - right) * q11 + right * q21;
    float4 down = (1.0f - right) * q12 + right * q22;
    result = TO_FLT4(lower * down + (1.0f - lower) * up);
  }
"""
_ALIGN = """  m0.w += m0.x * 0.5f + m0.y * 0.5f - 0.5f;
  m1.w += m1.x * 0.5f + m1.y * 0.5f - 0.5f;
"""


class TransformTensorBilinear(Op):
    """MediaPipe's TransformTensorBilinear (and TransformTensor): inputs (data, matrix)."""

    custom_names = (_BILINEAR, _LEGACY)
    data_inputs = 2

    def output_shapes(self, node: Node, graph: Graph) -> list[tuple[int, ...]] | None:
        if len(node.inputs) != 2 or len(node.outputs) != 1 or min(node.inputs) < 0:
            return None
        src = graph.tensor(node.inputs[0]).shape
        if len(src) != 4:
            return None
        height, width, _ = bilinear_options(node)
        return [(1, height, width, src[3])]

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) != 2 or len(node.outputs) != 1 or min(*node.inputs, *node.outputs) < 0:
            return f"{len(node.inputs)} inputs and {len(node.outputs)} outputs (data, matrix -> output expected)"
        problem = _rank_float(graph, node.inputs[0], 4) or _rank_float(graph, node.outputs[0], 4)
        if problem:
            return problem
        if matrix_rows(graph, node.inputs[1]) is None or graph.tensor(node.inputs[1]).is_constant:
            return f"the matrix {graph.tensor(node.inputs[1]).shape} is not a runtime [1, 4, 4] float32 tensor"
        stored = tuple(graph.tensor(node.outputs[0]).shape)
        computed = self.output_shapes(node, graph)
        return None if computed == [stored] else f"the model's output shape {stored} is not the op's {computed}"

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        _, _, aligned = bilinear_options(node)
        read = matrix_rows(ctx.graph, node.inputs[1])
        assert read is not None
        code = _SAMPLE.replace("{rows}", _rows_code(read)).replace("{correction}", _ALIGN if aligned else "")
        return operation(written(HEAD + code), srcs=["src_tensor", "matrix"])


def landmarks_options(node: Node, graph: Graph) -> tuple[int, float]:
    """(dimensions, scale) of a TransformLandmarks node: version 1 takes 4-D landmarks, version 2
    3-D ones (MediaPipe's kernels require so), which tells the version apart (the unresolved op's
    registration says 1 whatever the model says)."""
    rank = len(graph.tensor(node.inputs[0]).shape)
    if rank == 4:
        opts = flex_options(node.custom_options)
        dims, scale = opts.get("dimensions", 3), opts.get("scale", 1.0)
    elif rank == 3:
        dims, scale = graph.tensor(node.inputs[0]).shape[-1], 1.0
    else:
        raise ValueError(f"landmarks of rank {rank} (4 for version 1, 3 for version 2)")
    if dims not in (2, 3) or not isinstance(scale, (int, float)) or scale == 0:
        raise ValueError(f"dimensions {dims} (2 or 3) and scale {scale} (not 0) are not what the op takes")
    return int(dims), float(scale)


#: each output channel c of a landmark starting at channel ``base``: x', y' or the copied z
_LANDMARK = """  FLT4 result = INIT_FLT4(0.0f);
  for (int k = 0; k < 4; ++k) {
    int c = S * 4 + k;
    if (c >= args.channels) break;
    int base = (c / args.dims) * args.dims;
    float lx = (float)dlg_component(args.src_tensor.Read(X, Y, base / 4, b), base % 4);
    float ly = (float)dlg_component(args.src_tensor.Read(X, Y, (base + 1) / 4, b), (base + 1) % 4);
    float v = c == base ? m0.x * lx + m0.y * ly + m0.z * 0.0f + m0.w * args.scale
            : c == base + 1 ? m1.x * lx + m1.y * ly + m1.z * 0.0f + m1.w * args.scale
            : (float)dlg_component(args.src_tensor.Read(X, Y, S, b), k);
    result = dlg_set(result, k, TO_FLT(v));
  }
"""


class TransformLandmarks(Op):
    """MediaPipe's TransformLandmarks: inputs (landmarks, matrix)."""

    custom_names = (_LANDMARKS,)
    data_inputs = 2

    def output_shapes(self, node: Node, graph: Graph) -> list[tuple[int, ...]] | None:
        if len(node.inputs) != 2 or len(node.outputs) != 1 or min(node.inputs) < 0:
            return None
        return [tuple(graph.tensor(node.inputs[0]).shape)]

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) != 2 or len(node.outputs) != 1 or min(*node.inputs, *node.outputs) < 0:
            return f"{len(node.inputs)} inputs and {len(node.outputs)} outputs (landmarks, matrix -> output expected)"
        rank = len(graph.tensor(node.inputs[0]).shape)
        problem = _rank_float(graph, node.inputs[0], rank) or _rank_float(graph, node.outputs[0], rank)
        if problem:
            return problem
        if matrix_rows(graph, node.inputs[1]) is None or graph.tensor(node.inputs[1]).is_constant:
            return f"the matrix {graph.tensor(node.inputs[1]).shape} is not a runtime [1, 4, 4] float32 tensor"
        dims, _ = landmarks_options(node, graph)
        shape = graph.tensor(node.inputs[0]).shape
        if shape[-1] % dims or tuple(graph.tensor(node.outputs[0]).shape) != tuple(shape):
            return f"landmarks {shape} are not whole {dims}-D points, or the output is not their shape"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        dims, scale = landmarks_options(node, ctx.graph)
        read = matrix_rows(ctx.graph, node.inputs[1])
        assert read is not None
        channels = ctx.graph.tensor(node.inputs[0]).shape[-1]
        body = HEAD + _rows_code(read) + _LANDMARK
        return operation(
            [LANES, *written(body)],
            srcs=["src_tensor", "matrix"],
            literals={"dims": dims, "channels": channels},
            floats={"scale": scale},
        )


_MATRIX = "Landmarks2TransformMatrix"


def matrix_options(node: Node) -> dict[str, Any]:
    """Landmarks2TransformMatrix's version 2 options, checked as MediaPipe's kernel checks them."""
    opts = flex_options(node.custom_options)
    keys = ("subset_idxs", "left_rotation_idx", "right_rotation_idx", "target_rotation_radians")
    keys += ("output_height", "output_width", "scale_x", "scale_y")
    missing = [k for k in keys if k not in opts]
    if missing:
        raise ValueError(f"options lack {', '.join(missing)}")
    subset = opts["subset_idxs"]
    if not isinstance(subset, list) or not subset or not all(isinstance(i, int) and i >= 0 for i in subset):
        raise ValueError(f"subset_idxs {subset!r} is not a list of landmark indices")
    if min(opts["left_rotation_idx"], opts["right_rotation_idx"]) < 0:
        raise ValueError("a rotation index is negative")
    if min(opts["output_height"], opts["output_width"]) <= 0 or min(opts["scale_x"], opts["scale_y"]) <= 0:
        raise ValueError("output size and scales must be positive")
    return opts


#: rotation r (target - the left-right landmark angle), the subset's box in the frame rotated by r,
#: its centre rotated back, and the matrix shift(centre) * rotation(-r) * scale * shift(-output / 2),
#: multiplied out (rows 2 and 3 are the identity's)
_MATRIX_CODE = """  float4 left = convert_float4(args.src_tensor.Read({left}, 0, 0, 0));
  float4 right = convert_float4(args.src_tensor.Read({right}, 0, 0, 0));
  float r = {target}f - atan2(right.y - left.y, right.x - left.x);
  float cr = cos(r), sr = sin(r);
  float4 p = convert_float4(args.src_tensor.Read({first}, 0, 0, 0));
  float x_min = cr * p.x - sr * p.y, x_max = x_min;
  float y_min = sr * p.x + cr * p.y, y_max = y_min;
{points}  float mx = (x_min + x_max) / 2.0f, my = (y_min + y_max) / 2.0f;
  float cx = cos(-r) * mx - sin(-r) * my, cy = sin(-r) * mx + cos(-r) * my;
  float c = cos(-r), s = sin(-r);
  float sx = {scale_x}f * (x_max - x_min) / {width}.0f, sy = {scale_y}f * (y_max - y_min) / {height}.0f;
  float hw = -({width}.0f / 2.0f), hh = -({height}.0f / 2.0f);
  FLT4 result = INIT_FLT4(0.0f);
  if (X == 0) result = TO_FLT4((float4)(c * sx, -s * sy, 0.0f, c * sx * hw - s * sy * hh + cx));
  if (X == 1) result = TO_FLT4((float4)(s * sx, c * sy, 0.0f, s * sx * hw + c * sy * hh + cy));
  if (X == 2) result = INIT_FLT4(0.0f); if (X == 2) result.z = 1.0f;
  if (X == 3) result = INIT_FLT4(0.0f); if (X == 3) result.w = 1.0f;
"""
_POINT = """  p = convert_float4(args.src_tensor.Read({i}, 0, 0, 0));
  {{ float x = cr * p.x - sr * p.y, y = sr * p.x + cr * p.y;
    x_min = x < x_min ? x : x_min; x_max = x > x_max ? x : x_max;
    y_min = y < y_min ? y : y_min; y_max = y > y_max ? y : y_max; }}
"""


class Landmarks2TransformMatrix(Op):
    """MediaPipe's Landmarks2TransformMatrix, version 2 (3-D landmarks [1, N, 3] -> a [1, 4, 4] matrix)."""

    custom_names = (_MATRIX,)
    data_inputs = 1

    def output_shapes(self, node: Node, graph: Graph) -> list[tuple[int, ...]] | None:
        if len(node.inputs) != 1 or len(node.outputs) != 1 or node.inputs[0] < 0:
            return None
        return [(1, 4, 4)] if len(graph.tensor(node.inputs[0]).shape) == 3 else None

    def check(self, node: Node, graph: Graph) -> str | None:
        if len(node.inputs) != 1 or len(node.outputs) != 1 or min(*node.inputs, *node.outputs) < 0:
            return f"{len(node.inputs)} inputs and {len(node.outputs)} outputs (landmarks -> matrix expected)"
        src = graph.tensor(node.inputs[0])
        if len(src.shape) == 4:
            return "version 1 (4-D landmarks) is not implemented; version 2 takes [1, N, 3]"
        if src.dtype != FLOAT32 or src.quantized or len(src.shape) != 3 or src.shape[0] != 1 or src.shape[2] != 3:
            return f"landmarks {src.shape} are not a float32 [1, N, 3] tensor"
        if tuple(graph.tensor(node.outputs[0]).shape) != (1, 4, 4):
            return f"the model's output shape {graph.tensor(node.outputs[0]).shape} is not [1, 4, 4]"
        opts = matrix_options(node)
        used = [*opts["subset_idxs"], opts["left_rotation_idx"], opts["right_rotation_idx"]]
        if max(used) >= src.shape[1]:
            return f"landmark index {max(used)} is past the {src.shape[1]} landmarks"
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        o = matrix_options(node)
        subset = o["subset_idxs"]
        values = {
            "left": o["left_rotation_idx"],
            "right": o["right_rotation_idx"],
            "target": repr(float(o["target_rotation_radians"])),
            "first": subset[0],
            "scale_x": repr(float(o["scale_x"])),
            "scale_y": repr(float(o["scale_y"])),
            "width": o["output_width"],
            "height": o["output_height"],
            "points": "".join(_POINT.format(i=i) for i in subset[1:]),
        }
        code = _MATRIX_CODE
        for key, value in values.items():
            code = code.replace("{" + key + "}", str(value))
        return operation(written(HEAD + code), srcs=["src_tensor"])
