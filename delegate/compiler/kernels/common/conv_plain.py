"""The generic convolution kernels, one output FLT4 per work-item, on any storage: CONV_2D
(``CONV``, and ``GROUPED`` one output lane at a time), DEPTHWISE_CONV_2D (``DEPTHWISE``,
``DEPTHWISE_MULTIPLIER``), FULLY_CONNECTED and TRANSPOSE_CONV. ``{activation}`` in each stands for
the fused activation's code; their scalar arguments are the window's (compiler/window.py)."""

from __future__ import annotations

from .pieces import HEAD, LANES

_WINDOW = """
  for (int ky = 0; ky < args.kernel_h; ++ky) {
    int yc = Y * args.stride_h + ky * args.dilation_h - args.pad_h;
    if (yc < 0 || yc >= args.src_tensor.Height()) continue;
    for (int kx = 0; kx < args.kernel_w; ++kx) {
      int xc = X * args.stride_w + kx * args.dilation_w - args.pad_w;
      if (xc < 0 || xc >= args.src_tensor.Width()) continue;
"""


#: Close a kernel that accumulated ``acc``: convert, apply the fused activation (the write follows).
_FINISH = """  FLT4 result = TO_FLT4(acc);
  {activation}
"""


def _mac(x: str, y: str, indent: str) -> str:
    """Accumulate input slices at (x, y) against the weight rows from ``w`` on (four FLT4 rows a slice)."""
    body = f"""for (int s = 0; s < src_slices; ++s) {{
  FLT4 src = args.src_tensor.Read({x}, {y}, s, b);
  acc += TO_ACCUM_FLT4(src.x * args.weights.Read(w) + src.y * args.weights.Read(w + 1)
                     + src.z * args.weights.Read(w + 2) + src.w * args.weights.Read(w + 3));
  w += 4;
}}
"""
    return "".join(indent + line + "\n" for line in body.splitlines())


# Weights: FLT4 rows (out slice S, ky, kx, in slice s, in channel i) holding 4 output channels.
CONV = (
    HEAD
    + """  ACCUM_FLT4 acc = TO_ACCUM_FLT4(args.biases.Read(S));
  int src_slices = args.src_tensor.Slices();"""
    + _WINDOW
    + """      int w = ((S * args.kernel_h + ky) * args.kernel_w + kx) * src_slices * 4;
"""
    + _mac("xc", "yc", "      ")
    + """    }
  }
"""
    + _FINISH
)

# Grouped: output channel oc reads input channels [g * cin_group, (g + 1) * cin_group) of its group g;
# weights as TFLite stores them, [oc][ky][kx][input channel within the group].
GROUPED = (
    LANES
    + HEAD
    + """  FLT4 bias = args.biases.Read(S);
  FLT4 result = INIT_FLT4(0.0f);
  for (int k = 0; k < 4; ++k) {
    int oc = S * 4 + k;
    if (oc >= args.dst_tensor.Channels()) break;
    int first = (oc / args.cout_group) * args.cin_group;
    float acc = (float)dlg_component(bias, k);"""
    + _WINDOW.replace("\n  ", "\n    ")
    + """        int w = ((oc * args.kernel_h + ky) * args.kernel_w + kx) * args.cin_group;
        for (int i = 0; i < args.cin_group; ++i) {
          int ic = first + i;
          FLT v = dlg_component(args.src_tensor.Read(xc, yc, ic / 4, b), ic % 4);
          acc += (float)v * (float)args.weights.Read(w + i);
        }
      }
    }
    if (k == 0) result.x = (FLT)acc; else if (k == 1) result.y = (FLT)acc; else if (k == 2) result.z = (FLT)acc;
    else result.w = (FLT)acc;
  }
  {activation}
"""
)

# Depth multiplier 1: output slice S reads input slice S; weights FLT4 per (S, ky, kx).
DEPTHWISE = (
    HEAD
    + "  ACCUM_FLT4 acc = TO_ACCUM_FLT4(args.biases.Read(S));"
    + _WINDOW
    + """      acc += TO_ACCUM_FLT4(args.src_tensor.Read(xc, yc, S, b)
                           * args.weights.Read((S * args.kernel_h + ky) * args.kernel_w + kx));
    }
  }
"""
    + _FINISH
)

# Depth multiplier m > 1: output channel c reads input channel c / m, one component at a time.
DEPTHWISE_MULTIPLIER = (
    LANES
    + HEAD
    + "  ACCUM_FLT4 acc = TO_ACCUM_FLT4(args.biases.Read(S));"
    + _WINDOW
    + """      FLT4 w = args.weights.Read((S * args.kernel_h + ky) * args.kernel_w + kx);
      int c0 = (S * 4) / args.multiplier;
      int c1 = (S * 4 + 1) / args.multiplier;
      int c2 = (S * 4 + 2) / args.multiplier;
      int c3 = (S * 4 + 3) / args.multiplier;
      int last = args.src_tensor.Channels() - 1;
      c1 = c1 > last ? last : c1; c2 = c2 > last ? last : c2; c3 = c3 > last ? last : c3;
      FLT4 src;
      src.x = dlg_component(args.src_tensor.Read(xc, yc, c0 / 4, b), c0 % 4);
      src.y = dlg_component(args.src_tensor.Read(xc, yc, c1 / 4, b), c1 % 4);
      src.z = dlg_component(args.src_tensor.Read(xc, yc, c2 / 4, b), c2 % 4);
      src.w = dlg_component(args.src_tensor.Read(xc, yc, c3 / 4, b), c3 % 4);
      acc += TO_ACCUM_FLT4(src * w);
    }
  }
"""
    + _FINISH
)


# Fully connected: a 1x1 convolution over (b, h, w) rows; weights as for CONV_2D.
FULLY_CONNECTED = (
    HEAD
    + """  ACCUM_FLT4 acc = TO_ACCUM_FLT4(args.biases.Read(S));
  int src_slices = args.src_tensor.Slices();
  int w = S * src_slices * 4;
"""
    + _mac("X", "Y", "  ")
    + _FINISH
)


# Transposed convolution as a gather: output (X, Y) takes input (iy, ix) through tap (ky, kx) when
# Y + pad_h - ky = iy * stride_h (and likewise for x). Weights laid out as for CONV_2D (OHWI).
TRANSPOSE_CONV = (
    HEAD
    + """  ACCUM_FLT4 acc = TO_ACCUM_FLT4(args.biases.Read(S));
  int src_slices = args.src_tensor.Slices();
  for (int ky = 0; ky < args.kernel_h; ++ky) {
    int ty = Y + args.pad_h - ky;
    if (ty < 0 || ty % args.stride_h != 0) continue;
    int yc = ty / args.stride_h;
    if (yc >= args.src_tensor.Height()) continue;
    for (int kx = 0; kx < args.kernel_w; ++kx) {
      int tx = X + args.pad_w - kx;
      if (tx < 0 || tx % args.stride_w != 0) continue;
      int xc = tx / args.stride_w;
      if (xc >= args.src_tensor.Width()) continue;
      int w = ((S * args.kernel_h + ky) * args.kernel_w + kx) * src_slices * 4;
"""
    + _mac("xc", "yc", "      ")
    + """    }
  }
"""
    + _FINISH
)
