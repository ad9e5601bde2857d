"""What every op module shares: the op interface, the emit context, support checks, operands and
constants (the pieces of kernel text are kernels/common/pieces.py's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ...context import model
from ...context.model import CalculationsPrecision, TensorStorageType
from .. import layout
from ..graph import BOOL, FLOAT32, INT32, INT64, Activation, Carried, Graph, Node, Tensor
from ..kernel import Kernel
from ..options import CompileOptions
from .gated_read import GatedInput
from .traits import NO_TRAITS, Traits


@dataclass
class EmitContext:
    """What an op's code generator may read: the graph, the compile options, in-place reads."""

    graph: Graph
    #: precision, storage and the kernel choices (selectors/ read them)
    options: CompileOptions = field(default_factory=CompileOptions)
    #: CONCATENATION outputs that are never written: their only reader (a matrix-product CONV_2D)
    #: reads the concatenation's inputs instead, in order (fusion.ConcatReadInPlace decides which)
    concat_sources: dict[int, list[int]] = field(default_factory=dict)
    #: MUL outputs never written: their only reader (a flat matrix-product CONV_2D) reads the
    #: MUL's operands instead, multiplying as it reads (ops/gated_read.py; fusion.GatedRead)
    gated_reads: dict[int, GatedInput] = field(default_factory=dict)

    def read_inputs(self, tensor: int) -> list[int]:
        """The tensors a kernel reads for ``tensor``: the inputs of a concatenation or gate it reads in
        place, else ``tensor`` itself."""
        gated = self.gated_reads.get(tensor)
        return [gated.source, gated.gate] if gated is not None else self.concat_sources.get(tensor, [tensor])

    @property
    def precision(self) -> CalculationsPrecision:
        return self.options.precision

    @property
    def storage(self) -> TensorStorageType:
        return self.options.storage

    @property
    def dtype(self) -> np.dtype:
        return layout.storage_dtype(self.precision)

    @property
    def linear_storage(self) -> bool:
        """Runtime tensors live in buffers, so kernels may address them linearly (Offset / ReadAt)."""
        return self.options.linear_storage

    def desc(self, tensor: int) -> model.TensorDescriptor:
        return layout.tensor_descriptor(self.graph.tensor(tensor).shape, self.precision)


@dataclass
class Link:
    """Where a linked op (fusion.py) runs: inside ``kernel``, on its ``result``. The op's arguments
    join the kernel's under names in its own namespace (``name``), so that two links of one op do
    not collide; its runtime operands join the kernel's inputs (``input_ids``)."""

    kernel: Kernel
    input_ids: list[int]
    ctx: EmitContext
    #: the prefix of every name the link adds (``link3``: the third op linked into the kernel)
    namespace: str

    def name(self, local: str = "") -> str:
        """The kernel-wide name of the link's ``local`` name (the namespace itself for none)."""
        return f"{self.namespace}_{local}" if local else self.namespace

    @property
    def arguments(self) -> model.Arguments:
        arguments = self.kernel.operation.arguments
        assert arguments is not None
        return arguments

    def add_float(self, local: str, value: float) -> str:
        """A float parameter of the link; its expression in the code."""
        self.arguments.float_values.append(model.FloatValue(self.name(local), float(value), True))
        return f"args.{self.name(local)}"

    def add_table(self, local: str, values: np.ndarray) -> str:
        """A float32 table of the link (a buffer object, element i read by ``Read(i)``); its expression."""
        data = np.ascontiguousarray(values, np.float32).tobytes()
        self.arguments.buffer_objects.append(table_object(self.name(local), data))
        return f"args.{self.name(local)}"

    def add_operand(self, local: str, tensor: int) -> str:
        """Tensor ``tensor`` as an operand (a constant object, else a runtime input); its name."""
        name = self.name(local)
        t = self.ctx.graph.tensor(tensor)
        if t.constant is not None:
            self.arguments.tensor_objects.append(constant_tensor(name, t, self.ctx))
        else:
            self.kernel.operation.src_tensors_names.append(name)
            self.input_ids.append(tensor)
        return name


class Op:
    """An op family: the builtin codes it runs, its support check and its code generator.

    ``OPS`` (ops/__init__.py) maps each code to one instance, ``CUSTOM_OPS`` each custom op's
    name (``op_for`` finds a node's). ``emit`` returns the node's ``Kernel`` (``operation`` builds
    one), or for a family with ``per_output`` set, ``emit_many`` one kernel per output.
    What the partition compiler relies on in every kernel:

    - it writes one runtime tensor, ``dst_tensor``, and reads the node's non-constant data inputs
      (the first ``data_inputs``) in order by ``src_tensors_names``; constants are objects;
    - a kernel that computes its output FLT4 by FLT4 in ``result``, with ``X``, ``Y``, ``S`` and
      ``b`` its coordinates, writes it through the write hooks (kernel.WRITE, or kernel.WRITE_AT
      with the linear index ``at``): then elementwise ops can be linked in (fusion.py). Any
      other write leaves the kernel closed to links;
    - ``$0`` in the entry line stands for the kernel's parameters (runtime/source.py).
    """

    codes: tuple[int, ...] = ()
    #: the custom ops (builtin code CUSTOM) it serves, by the name the model's operator code gives
    custom_names: tuple[str, ...] = ()
    #: how many leading inputs carry data; non-constant ones become the kernel's src tensors, in order
    data_inputs: int = 1
    #: the node gets one kernel per output (``emit_many``), named ``node:output``
    per_output: bool = False

    #: each code's traits (ops/traits.py); a code not listed has none
    code_traits: ClassVar[dict[int, Traits]] = {}

    def check(self, node: Node, graph: Graph) -> str | None:
        """None when the node is supported, else why not (shown in the partition summary)."""
        raise NotImplementedError

    def traits(self, code: int) -> Traits:
        """What the passes around code generation ask of ``code``: quantization, precision, weights."""
        return self.code_traits.get(code, NO_TRAITS)

    def implied_shape(self, node: Node, graph: Graph) -> tuple[int, ...] | None:
        """The output shape the op computes from its inputs and parameters (ops/shape_rules.py), or
        None where it does not say (shape_check.py then trusts the model's)."""
        return None

    def fold(self, node: Node, args: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray | None:
        """Constant folding: the node's output computed at compile time from its inputs' values
        (small integer tensors, as int64: the shape arithmetic of compiler/shapes.py), or None where
        the op does not fold them. Raising ValueError, IndexError or TypeError counts as None."""
        return None

    def macs(self, node: Node, graph: Graph) -> int:
        """Multiply-adds of the node (cpu_choice.py's cost): matrix products only, 0 for others."""
        return 0

    def links(self, node: Node, graph: Graph, fused_input: int) -> bool:
        """Whether the node can run inside the kernel producing ``fused_input``, on its ``result``
        (fusion.py has checked the shapes and the kernel's write hooks)."""
        return False

    def link(self, node: Node, fused_input: int, link: Link) -> str:
        """The node's code on ``result`` inside another kernel (``links`` said it can), its names
        in ``link``'s namespace."""
        raise NotImplementedError

    def wide_link(self, node: Node, graph: Graph, width: int) -> str | None:
        """The node's code on a FLT``width`` ``result`` (a kernel's kernel.WideOps point) when it
        is a function of each lane alone, with no arguments; None where it runs only as ``link``."""
        return None

    def wide_operand_link(self, node: Node, fused_input: int, link: Link, width: int) -> str | None:
        """The node's code on a FLT``width`` ``result`` at a kernel.WideOps point naming its first
        slice (``kernel.WIDE_SLICE``), the pixel at (X, Y, b), when it reads operands there: called
        after ``link`` added them in ``link``'s namespace. None where it runs only as ``link``."""
        return None

    def lookup(self, node: Node, graph: Graph) -> tuple[Carried, np.ndarray] | None:
        """(its input's grid, its table) when the node runs as a table of its input's integers
        (quant_table.py); None otherwise."""
        return None

    def writes_grid(self, node: Node, graph: Graph) -> bool:
        """Whether the node's code writes its carried output (compiler/quant.py) on the output's
        grid already (a table of its integers, quant_table.py; a copy of inputs on that grid), so
        that no rounding step follows it."""
        return False

    def updated_inputs(self, node: Node) -> tuple[int, ...]:
        """Inputs the op updates in place, as TFLite's kernel does (variable tensors: an LSTM's
        state): its kernel writes them after its output (``dst_tensors_names`` past the first),
        and the partition hands them back to TFLite as outputs (partition.py)."""
        return ()

    def output_shapes(self, node: Node, graph: Graph) -> list[tuple[int, ...]] | None:
        """For a custom op: the output shapes it computes from its input shapes and options (TFLite
        cannot tell, as the op has no kernel there), or None when it cannot say. Raises ValueError
        on options it cannot read."""
        return None

    def emit(self, node: Node, ctx: EmitContext) -> Kernel:
        """The node's kernel; runtime tensors are named by ``src_tensors_names`` / ``dst_tensors_names``."""
        raise NotImplementedError

    def emit_many(self, node: Node, ctx: EmitContext) -> list[tuple[Kernel, int]]:
        """For ``per_output`` families: (kernel, output tensor) for each output, all reading the same inputs."""
        raise NotImplementedError


#: TfLiteType -> the name reasons use
DTYPE_NAMES = {FLOAT32: "float32", INT32: "int32", INT64: "int64", BOOL: "bool"}


def value_tensors(
    graph: Graph, indices: list[int], dtypes: tuple[int, ...] = (FLOAT32,), *, high_rank: bool = False
) -> str | None:
    """Shared check: the tensors exist, are of one of ``dtypes``, unquantized, of rank <= 4 and static.
    ``high_rank``: the op's indexing follows layout.bhwc's 4-D view (reshapes, TILE), so a higher
    rank is taken too, its extra leading dims merged into the first of four.

    Every tensor lives on the device as float storage (FLT4): int32 and bool values as floats
    (docs/ops.md, "Bool and int32 tensors"), so only the ops that know that accept other dtypes."""
    for i in indices:
        if i < 0:
            continue
        t = graph.tensor(i)
        if t.dtype not in dtypes and t.is_constant and t.scales:
            # fold.hybrid_weights dequantizes these when enable_quantized_inference is on
            return (
                f"tensor {i} is quantized weights, dequantized only for float activations (dynamic-range)"
                " with enable_quantized_inference on"
            )
        if t.dtype in (3, 9) and t.scales and not t.is_constant:  # uint8, int8: compiler/quant.py carries these
            return f"tensor {i} is a quantized activation, carried in float only with enable_quantized_inference on"
        if t.dtype not in dtypes:
            return f"tensor {i} is not {' or '.join(DTYPE_NAMES.get(d, str(d)) for d in dtypes)}"
        if t.quantized:
            return f"tensor {i} is quantized"
        if len(t.shape) > 4 and not high_rank:
            return f"tensor {i} has rank {len(t.shape)} (at most 4)"
        if any(d <= 0 for d in t.shape):
            return f"tensor {i} has a dynamic or empty shape {t.shape}"
    return None


def float_tensors(node: Node, graph: Graph, indices: list[int], *, high_rank: bool = False) -> str | None:
    """Shared check: the tensors exist, are float32, unquantized, of rank <= 4 and static."""
    return value_tensors(graph, indices, high_rank=high_rank)


def runtime_io(
    node: Node,
    graph: Graph,
    constant_inputs: tuple[int, ...] = (),
    data_inputs: int | None = None,
    *,
    high_rank: bool = False,
) -> str | None:
    """Check the first ``data_inputs`` inputs (all by default) and the output are float tensors, and that
    inputs at ``constant_inputs`` positions are constants (``high_rank``: see ``value_tensors``)."""
    present = [i for i in node.inputs[:data_inputs] if i >= 0]
    problem = float_tensors(node, graph, [*present, *node.outputs], high_rank=high_rank)
    if problem:
        return problem
    for position in constant_inputs:
        if position < len(node.inputs) and node.inputs[position] >= 0:
            if not graph.tensor(node.inputs[position]).is_constant:
                return f"input {position} (tensor {node.inputs[position]}) is not a constant"
    if len(node.outputs) != 1:
        return f"{len(node.outputs)} outputs (one expected)"
    return None


def activation_check(act: int) -> str | None:
    """Fused activations the delegate claims: the clamping ones. TFLite's CPU kernels apply fused
    activations as a min/max clamp, so a fused TANH or SIGMOID is not what they compute (a CONV_2D
    with fused TANH came back un-activated): such nodes stay on CPU rather than disagree."""
    if act in (Activation.NONE, Activation.RELU, Activation.RELU_N1_TO_1, Activation.RELU6):
        return None
    try:
        name = Activation(act).name
    except ValueError:
        name = str(act)
    return f"fused activation {name} is left to TFLite's CPU kernels"


#: half's smallest normal and largest finite values
_HALF_TINY, _HALF_MAX = 2.0**-14, 65504.0


def fits_half(values: np.ndarray) -> bool:
    """Whether every value keeps half's relative precision: none below its normal range but zero
    (an epsilon added before a LOG, 1e-10, would be 0) and none above its largest (infinity)."""
    magnitudes = np.abs(np.asarray(values, dtype=np.float64))
    nonzero = magnitudes[magnitudes != 0]
    return not nonzero.size or (float(nonzero.min()) >= _HALF_TINY and float(nonzero.max()) <= _HALF_MAX)


def constant_tensor(name: str, tensor: Tensor, ctx: EmitContext) -> model.TensorDescriptorMapValue:
    """A constant operand as a tensor object (BUFFER storage, uploaded once): in the partition's
    precision, or in float32 when half would not hold its values (``fits_half``)."""
    precision = ctx.precision
    if precision != CalculationsPrecision.F32 and tensor.constant is not None and not fits_half(tensor.constant):
        precision = CalculationsPrecision.F32
    desc = layout.tensor_descriptor(tensor.shape, precision)
    desc.data = layout.buffer_layout(tensor.constant, tensor.shape, layout.storage_dtype(precision))
    return model.TensorDescriptorMapValue(name, desc)


def table_object(name: str, data: bytes) -> model.BufferDescriptorMapValue:
    """A buffer object of float32 elements read one by one (``Read(i)``), in every precision."""
    element = model.BufferDescriptor(element_type=model.DataType.FLOAT32, element_size=1, size=len(data), data=data)
    return model.BufferDescriptorMapValue(name, element)


def operands(names: list[str], indices: list[int], ctx: EmitContext) -> tuple[list[str], list]:
    """Split a node's operands into runtime src names (in order) and constant tensor objects."""
    srcs, objects = [], []
    for name, index in zip(names, indices, strict=True):
        t = ctx.graph.tensor(index)
        if t.constant is not None:
            objects.append(constant_tensor(name, t, ctx))
        else:
            srcs.append(name)
    return srcs, objects
