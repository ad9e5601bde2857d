"""A blocked CONV_2D kernel: each work-item computes 4 consecutive output pixels x 2 output slices.

The 8 FLT4 accumulators share each input read across two output slices and each weight read
across four pixels, which cuts memory traffic about 3x against one-output-per-item and fills the
vector registers (float8-wide work on PoCL's AVX2 targets). Weights use the CONV_2D layout
(layout.conv_weights). The write loop ends with the standard masked write, so elementwise ops
still fuse into it.
"""

from __future__ import annotations

from ...kernel import WRITE, Piece

PIXELS = 4
SLICES = 2


def _acc(p: int, s: int) -> str:
    return f"a{s}{p}"


def blocked_conv_code(activation: str) -> list[Piece]:
    lines = [
        """
MAIN_FUNCTION($0) {
  int gx = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S0 = GLOBAL_ID_2 * 2;
  int B = args.dst_tensor.Batch();
  int W = args.dst_tensor.Width();
  int xblocks = (W + 3) / 4;
  if (gx >= xblocks * B || Y >= args.dst_tensor.Height() || S0 >= args.dst_tensor.Slices()) return;
  int X0 = (gx / B) * 4;
  int b = gx % B;
  int S1 = S0 + 1 < args.dst_tensor.Slices() ? S0 + 1 : S0;
  int src_slices = args.src_tensor.Slices();
  int iw = args.src_tensor.Width();
  FLT4 bias0 = args.biases.Read(S0);
  FLT4 bias1 = args.biases.Read(S1);
"""
    ]
    for s in range(SLICES):
        for p in range(PIXELS):
            lines.append(f"  ACCUM_FLT4 {_acc(p, s)} = TO_ACCUM_FLT4(bias{s});\n")
    lines.append("""  for (int ky = 0; ky < args.kernel_h; ++ky) {
    int yc = Y * args.stride_h + ky * args.dilation_h - args.pad_h;
    if (yc < 0 || yc >= args.src_tensor.Height()) continue;
    for (int kx = 0; kx < args.kernel_w; ++kx) {
""")
    for p in range(PIXELS):
        lines.append(f"      int x{p} = (X0 + {p}) * args.stride_w + kx * args.dilation_w - args.pad_w;\n")
        lines.append(f"      FLT m{p} = (x{p} >= 0 && x{p} < iw) ? (FLT)(1.0f) : (FLT)(0.0f);\n")
        lines.append(f"      x{p} = (x{p} >= 0 && x{p} < iw) ? x{p} : 0;\n")
    lines.append("""      int w0 = ((S0 * args.kernel_h + ky) * args.kernel_w + kx) * src_slices * 4;
      int w1 = ((S1 * args.kernel_h + ky) * args.kernel_w + kx) * src_slices * 4;
      for (int s = 0; s < src_slices; ++s) {
""")
    for p in range(PIXELS):
        lines.append(f"        FLT4 v{p} = args.src_tensor.Read(x{p}, yc, s, b) * m{p};\n")
    for s in range(SLICES):
        w = f"w{s}"
        lines.append(f"        FLT4 k{s}0 = args.weights.Read({w}); FLT4 k{s}1 = args.weights.Read({w} + 1);\n")
        lines.append(f"        FLT4 k{s}2 = args.weights.Read({w} + 2); FLT4 k{s}3 = args.weights.Read({w} + 3);\n")
        for p in range(PIXELS):
            lines.append(
                f"        {_acc(p, s)} += TO_ACCUM_FLT4(v{p}.x * k{s}0 + v{p}.y * k{s}1 + v{p}.z * k{s}2"
                f" + v{p}.w * k{s}3);\n"
            )
    lines.append("        w0 += 4; w1 += 4;\n      }\n    }\n  }\n")
    lines.append("  for (int i = 0; i < 8; ++i) {\n")
    chain = "a13"
    for index in range(6, -1, -1):
        s, p = divmod(index, PIXELS)
        chain = f"(i == {index} ? {_acc(p, s)} : {chain})"
    lines.append(f"    FLT4 result = TO_FLT4({chain});\n")
    lines.append("""    int X = X0 + (i & 3);
    int S = i < 4 ? S0 : S0 + 1;
    if (X >= W || S >= args.dst_tensor.Slices()) continue;
""")
    lines.append(f"    {activation}\n")
    return ["".join(lines), WRITE, "}\n"]
