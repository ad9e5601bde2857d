"""A synthetic, MobileNetV2-shaped InferenceContext for demos, tests and benchmarks.

It has MobileNetV2's layer structure (64 kernels, 3.5 M float32 weights, about
14 MB) with realistic arguments, tensor descriptors and kernel sources (plain,
unoptimised convolutions in the runtime's conventions), filled with seeded
random weights. With ``weight_scale=1`` it runs on the runtime; other scales
only change the file size (for format benchmarks) and must not be run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import (
    BHWDC,
    AccessType,
    Arguments,
    BufferDescriptor,
    BufferDescriptorMapValue,
    CalculationsPrecision,
    CLNode,
    DataType,
    GPUObjectDescriptor,
    GPUOperation,
    InferenceContext,
    Int3,
    IntValue,
    Layout,
    LinearStorageType,
    MemoryType,
    OperationDef,
    StateVariable,
    TensorDescriptor,
    TensorDescriptorMapValue,
    TensorDescWithId,
    TensorLinearDescriptor,
    TensorLinearDescriptorMapValue,
    TensorStorageType,
    TensorToGrid,
)

# MobileNetV2 inverted residual settings: expansion t, channels c, repeats n, stride s.
_BLOCKS = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]

_WINDOW = """
  for (int ky = 0; ky < args.kernel_size_y; ++ky) {
    int y_c = Y * args.stride_y + ky * args.dilation_y - args.padding_y;
    if (y_c < 0 || y_c >= args.src_tensor.Height()) continue;
    for (int kx = 0; kx < args.kernel_size_x; ++kx) {
      int x_c = X * args.stride_x + kx * args.dilation_x - args.padding_x;
      if (x_c < 0 || x_c >= args.src_tensor.Width()) continue;
"""

_HEADER = """
MAIN_FUNCTION($0) {
  int X = GLOBAL_ID_0;
  int Y = GLOBAL_ID_1;
  int S = GLOBAL_ID_2;
  if (X >= args.dst_tensor.Width() || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
"""

#: Kernel sources per layer kind, in the runtime's conventions (docs/runtime.md). Weights are
#: laid out per output slice, window position and input slice, four FLT4 rows per step.
_KERNELS = {
    "conv": _HEADER
    + "  ACCUM_FLT4 acc = INIT_ACCUM_FLT4(0.0f);"
    + _WINDOW
    + """      for (int s = 0; s < args.src_tensor.Slices(); ++s) {
        FLT4 src = args.src_tensor.Read(x_c, y_c, s);
        int w = (((S * args.kernel_size_y + ky) * args.kernel_size_x + kx) * args.src_tensor.Slices() + s) * 4;
        acc.x += dot(src, args.weights.Read(w + 0));
        acc.y += dot(src, args.weights.Read(w + 1));
        acc.z += dot(src, args.weights.Read(w + 2));
        acc.w += dot(src, args.weights.Read(w + 3));
      }
    }
  }
  FLT4 result = TO_FLT4(acc) + args.biases.Read(S);
  {activation}
  args.dst_tensor.Write(result, X, Y, S);
}
""",
    "depthwise": _HEADER
    + "  ACCUM_FLT4 acc = INIT_ACCUM_FLT4(0.0f);"
    + _WINDOW
    + """      int w = (S * args.kernel_size_y + ky) * args.kernel_size_x + kx;
      acc += TO_ACCUM_FLT4(args.src_tensor.Read(x_c, y_c, S) * args.weights.Read(w));
    }
  }
  FLT4 result = TO_FLT4(acc) + args.biases.Read(S);
  {activation}
  args.dst_tensor.Write(result, X, Y, S);
}
""",
    "pool": _HEADER
    + "  ACCUM_FLT4 acc = INIT_ACCUM_FLT4(0.0f);\n  float count = 0.0f;"
    + _WINDOW
    + """      acc += TO_ACCUM_FLT4(args.src_tensor.Read(x_c, y_c, S));
      count += 1.0f;
    }
  }
  FLT4 result = TO_FLT4(acc / (count > 0.0f ? count : 1.0f));
  {activation}
  args.dst_tensor.Write(result, X, Y, S);
}
""",
    "add": _HEADER
    + """  FLT4 result = args.src_tensor_0.Read(X, Y, S) + args.src_tensor_1.Read(X, Y, S);
  {activation}
  args.dst_tensor.Write(result, X, Y, S);
}
""",
}


@dataclass(frozen=True)
class _Layer:
    name: str
    kernel: int
    stride: int
    src: BHWDC
    dst: BHWDC
    #: "conv", "depthwise", "pool" or "add" (no weights for the last two)
    kind: str
    relu6: bool
    #: tensor ids read; the layer at index i writes tensor i + 1
    inputs: tuple[int, ...]


def _layers(size: int) -> list[_Layer]:
    layers: list[_Layer] = []
    h = size
    c = 3

    def add(name: str, cout: int, kernel: int, stride: int, kind: str, relu6: bool) -> None:
        nonlocal h, c
        oh = (h + stride - 1) // stride
        src, dst = BHWDC(1, h, h, 1, c), BHWDC(1, oh, oh, 1, cout)
        layers.append(_Layer(name, kernel, stride, src, dst, kind, relu6, (len(layers),)))
        h, c = oh, cout

    add("conv_stem", 32, 3, 2, "conv", True)
    block = 0
    for t, cout, n, s in _BLOCKS:
        for i in range(n):
            cin, block_input = c, len(layers)
            stride = s if i == 0 else 1
            if t != 1:
                add(f"block{block}_expand", cin * t, 1, 1, "conv", True)
            add(f"block{block}_depthwise", c, 3, stride, "depthwise", True)
            add(f"block{block}_project", cout, 1, 1, "conv", False)
            if stride == 1 and cin == cout:
                add(f"block{block}_add", cout, 1, 1, "add", False)
                last = layers[-1]
                layers[-1] = _Layer(**{**last.__dict__, "inputs": (block_input, len(layers) - 1)})
            block += 1
    add("conv_head", 1280, 1, 1, "conv", True)
    add("global_pool", c, h, h, "pool", False)
    add("classifier", 1000, 1, 1, "conv", False)
    return layers


def _tensor(shape: BHWDC, storage: TensorStorageType, dtype: DataType) -> TensorDescriptor:
    base = GPUObjectDescriptor(state_vars=[StateVariable("batched", "false")])
    return TensorDescriptor(base_obj=base, data_type=dtype, storage_type=storage, layout=Layout.BHWC, shape=shape)


def synthetic_mobilenet(
    *,
    image_size: int = 224,
    weight_scale: float = 1.0,
    precision: CalculationsPrecision = CalculationsPrecision.F32,
    storage: TensorStorageType = TensorStorageType.BUFFER,
    seed: int = 0,
) -> InferenceContext:
    """A MobileNetV2-shaped context; ``weight_scale`` scales the weight bytes (0 = none)."""
    rng = np.random.default_rng(seed)
    dtype = DataType.FLOAT16 if precision == CalculationsPrecision.F16 else DataType.FLOAT32
    layers = _layers(image_size)
    ctx = InferenceContext(precision=precision, storage_type=storage, input_ids=[0], output_ids=[len(layers)])
    ctx.tensors.append(TensorDescWithId(_tensor(layers[0].src, storage, dtype), 0))
    for index, layer in enumerate(layers):
        dst_id = index + 1
        src = _tensor(layer.src, storage, dtype)
        dst = _tensor(layer.dst, storage, dtype)
        ctx.tensors.append(TensorDescWithId(dst, dst_id))
        weighted = layer.kind in ("conv", "depthwise")
        # Channels padded to slices of 4, as the kernels read them.
        src_slices, dst_slices = (layer.src.c + 3) // 4, (layer.dst.c + 3) // 4
        per_out_slice = layer.kernel * layer.kernel * (src_slices * 16 if layer.kind == "conv" else 4)
        weight_count = int(per_out_slice * dst_slices * weight_scale) if weighted else 0
        weights = rng.standard_normal(weight_count, dtype=np.float32).tobytes()
        bias_count = int(dst_slices * 4 * weight_scale) if weighted else 0
        biases = rng.standard_normal(bias_count, dtype=np.float32).tobytes()
        pad = (layer.kernel - 1) // 2
        src_names = ["src_tensor"] if len(layer.inputs) == 1 else [f"src_tensor_{i}" for i in range(len(layer.inputs))]
        ints = {
            "kernel_size_x": layer.kernel,
            "kernel_size_y": layer.kernel,
            "stride_x": layer.stride,
            "stride_y": layer.stride,
            "padding_x": pad,
            "padding_y": pad,
            "dilation_x": 1,
            "dilation_y": 1,
        }
        arguments = Arguments(
            int_values=[IntValue(name, value, True, i) for i, (name, value) in enumerate(ints.items())],
            tensor_refs=[
                *(TensorDescriptorMapValue(name, src) for name in src_names),
                TensorDescriptorMapValue("dst_tensor", dst),
            ],
            buffer_objects=[]
            if not weighted
            else [
                BufferDescriptorMapValue(
                    "weights",
                    BufferDescriptor(
                        base_obj=GPUObjectDescriptor(access_type=AccessType.READ),
                        element_type=dtype,
                        element_size=4,
                        memory_type=MemoryType.GLOBAL,
                        size=len(weights),
                        data=weights,
                    ),
                )
            ],
            tensor_linear_objects=[]
            if not weighted
            else [
                TensorLinearDescriptorMapValue(
                    "biases",
                    TensorLinearDescriptor(
                        storage_type=LinearStorageType.BUFFER,
                        element_type=dtype,
                        memory_type=MemoryType.GLOBAL,
                        size=layer.dst.c,
                        data=biases,
                    ),
                )
            ],
        )
        slices = (layer.dst.c + 3) // 4
        grid = Int3(layer.dst.w, layer.dst.h, slices)
        wg = Int3(8, 4, 1)
        activation = "result = clamp(result, INIT_FLT4(0.0f), INIT_FLT4(6.0f));" if layer.relu6 else ""
        op = GPUOperation(
            arguments=arguments,
            code=_KERNELS[layer.kind].replace("{activation}", activation),
            work_group_size=wg,
            tensor_to_grid=TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z,
            definition=OperationDef(precision=precision, src_tensors=[src] * len(src_names), dst_tensors=[dst]),
            grid_dimension=3,
            work_group_launch_order=Int3(0, 1, 2),
            grid_size=grid,
            src_tensors_names=src_names,
            dst_tensors_names=["dst_tensor"],
            work_groups_count=Int3(-(-grid.x // wg.x), -(-grid.y // wg.y), -(-grid.z // wg.z)),
        )
        ctx.nodes.append(CLNode(gpu_op=op, input_ids=list(layer.inputs), output_ids=[dst_id], name=layer.name))
    return ctx
