"""Hand-built contexts for runtime tests (through the package's own model and writer)."""

from __future__ import annotations

import numpy as np

from delegate.context import model as m

T = m.TensorStorageType
STORAGES = [st for st in T if st != T.UNKNOWN]

SCALE_BIAS = """
MAIN_FUNCTION($0) {
  int X = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  if (X >= args.dst_tensor.Width() || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  FLT4 v = args.src_tensor.Read(X, Y, S) * (FLT)(args.scale) + args.bias.Read(S);
  args.dst_tensor.Write(v, X, Y, S);
}
"""

BINARY_ADD = """
MAIN_FUNCTION($0) {
  int X = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  if (X >= args.dst_tensor.Width() || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  args.dst_tensor.Write(args.a.Read(X, Y, S) + args.b.Read(X, Y, S), X, Y, S);
}
"""


def desc(c: int, st: m.TensorStorageType = T.BUFFER, dt: m.DataType = m.DataType.FLOAT32, h: int = 3, w: int = 5,
         b: int = 1, d: int = 1) -> m.TensorDescriptor:  # fmt: skip
    return m.TensorDescriptor(data_type=dt, storage_type=st, layout=m.Layout.BHWC, shape=m.BHWDC(b, h, w, d, c))


def scale_bias_op(scale: float, bias: bytes, *, code: str = SCALE_BIAS, active: bool = True) -> m.GPUOperation:
    return m.GPUOperation(
        code=code,
        arguments=m.Arguments(
            float_values=[m.FloatValue("scale", scale, active)],
            tensor_linear_objects=[
                m.TensorLinearDescriptorMapValue(
                    "bias", m.TensorLinearDescriptor(element_type=m.DataType.FLOAT32, size=len(bias) // 16, data=bias)
                )
            ],
        ),
        tensor_to_grid=m.TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z,
        work_group_size=m.Int3(4, 4, 1),
        src_tensors_names=["src_tensor"],
        dst_tensors_names=["dst_tensor"],
    )


def add_op() -> m.GPUOperation:
    return m.GPUOperation(
        code=BINARY_ADD,
        tensor_to_grid=m.TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z,
        work_group_size=m.Int3(8, 2, 1),
        src_tensors_names=["a", "b"],
        dst_tensors_names=["dst_tensor"],
    )


def single_node(op: m.GPUOperation, src: m.TensorDescriptor, dst: m.TensorDescriptor, **kw) -> m.InferenceContext:
    return m.InferenceContext(
        nodes=[m.CLNode(gpu_op=op, input_ids=[0], output_ids=[1], name="node0")],
        tensors=[m.TensorDescWithId(src, 0), m.TensorDescWithId(dst, 1)],
        input_ids=[0],
        output_ids=[1],
        **kw,
    )


def chain(n: int, c: int = 8) -> m.InferenceContext:
    """x -> +1 -> +1 ... (n nodes), plus a residual add of the first and last intermediate."""
    nodes, tensors = [], [m.TensorDescWithId(desc(c, h=16, w=16), 0)]
    ones = np.ones((c + 3) // 4 * 4, np.float32).tobytes()
    for i in range(n):
        nodes.append(m.CLNode(gpu_op=scale_bias_op(1.0, ones), input_ids=[i], output_ids=[i + 1], name=f"inc{i}"))
        tensors.append(m.TensorDescWithId(desc(c, h=16, w=16), i + 1))
    nodes.append(m.CLNode(gpu_op=add_op(), input_ids=[1, n], output_ids=[n + 1], name="residual"))
    tensors.append(m.TensorDescWithId(desc(c, h=16, w=16), n + 1))
    return m.InferenceContext(nodes=nodes, tensors=tensors, input_ids=[0], output_ids=[n + 1])
