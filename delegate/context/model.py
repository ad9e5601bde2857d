"""The package's own in-memory model of an InferenceContext (schemas/serialization.fbs).

One dataclass per schema table, with fields declared in the schema's slot order
(the writer and the native reader rely on that order and on these names, which
are also the field names of the C structs in csrc/ctxfile.h). Scalar widths are
carried by the ``Int32`` / ``UInt32`` / ``Float32`` annotations; enums are
``IntEnum`` subclasses stored as bytes. The schema is the one source of the enums: these are
typed copies of flatc's (delegate/_generated), and tests/test_context_enums.py fails when the
two differ.

Conventions, the same as FlatBuffers': ``None`` is an absent string or
sub-table, an empty list or ``b""`` is an absent vector. ``data`` fields hold
``bytes`` when built in Python and zero-copy ``memoryview`` slices of the file
when read natively; the two compare equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Annotated

Int32 = Annotated[int, "int32"]
UInt32 = Annotated[int, "uint32"]
Float32 = Annotated[float, "float32"]
ByteData = bytes | memoryview


class SchemaEnum(IntEnum):
    """An enum of the schema: an int in the file, its name when printed (``print(rt.precision)``
    says F32_F16, not 1); a format spec formats the number (``f"{x:d}"``)."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return self.name if not spec else format(int(self), spec)


class AccessType(SchemaEnum):
    READ = 0
    WRITE = 1
    READ_WRITE = 2


class DataType(SchemaEnum):
    UNKNOWN = 0
    FLOAT32 = 1
    FLOAT16 = 2


class MemoryType(SchemaEnum):
    GLOBAL = 0
    CONSTANT = 1
    LOCAL = 2


class LinearStorageType(SchemaEnum):
    BUFFER = 0
    TEXTURE_2D = 1


class TensorStorageType(SchemaEnum):
    UNKNOWN = 0
    BUFFER = 1
    IMAGE_BUFFER = 2
    TEXTURE_2D = 3
    TEXTURE_3D = 4
    TEXTURE_ARRAY = 5
    SINGLE_TEXTURE_2D = 6


class Layout(SchemaEnum):
    UNKNOWN = 0
    HWC = 1
    BHWC = 2
    HWDC = 3
    BHWDC = 4


class CalculationsPrecision(SchemaEnum):
    F32 = 0
    F32_F16 = 1
    F16 = 2


class TensorToGrid(SchemaEnum):
    CUSTOM = 0
    WB_TO_X_HD_TO_Y_S_TO_Z = 1
    WB_TO_X_HD_TO_Y_Z_IS_1 = 2
    WB_TO_X_H_TO_Y_D_TO_Z = 3
    B_TO_X_Y_IS_1_Z_IS_1 = 4


class CompilerOptions(SchemaEnum):
    ADRENO_FULL_SIMD_LINE = 0
    ADRENO_MORE_WAVES = 1
    POWERVR_FP16 = 2
    CL_OPT_DISABLE = 3
    CL_2_0 = 4
    CL_3_0 = 5


@dataclass
class Int4:
    """Four int32 (x, y, z, w): a struct of the schema."""

    x: Int32 = 0
    y: Int32 = 0
    z: Int32 = 0
    w: Int32 = 0


@dataclass
class Int3:
    """Three int32 (x, y, z): grid and work-group sizes."""

    x: Int32 = 0
    y: Int32 = 0
    z: Int32 = 0


@dataclass
class Int2:
    """Two int32 (x, y)."""

    x: Int32 = 0
    y: Int32 = 0


@dataclass
class IntValue:
    """A named int32 kernel argument; ``active`` ones are passed in packed int4 vectors."""

    name: str | None = None
    value: Int32 = 0
    active: bool = False
    offset: UInt32 = 0


@dataclass
class FloatValue:
    """A named float32 kernel argument; ``active`` ones are passed in packed float4 vectors."""

    name: str | None = None
    value: Float32 = 0.0
    active: bool = False
    offset: UInt32 = 0


@dataclass
class HalfValue:
    """A named float16 kernel argument (held as a Python float)."""

    name: str | None = None
    value: Float32 = 0.0
    active: bool = False
    store_as_f32: bool = False
    offset: UInt32 = 0


@dataclass
class StateVariable:
    """A key/value pair of a GPU object's state."""

    key: str | None = None
    value: str | None = None


@dataclass
class GPUObjectDescriptor:
    """What every GPU object descriptor shares: state variables and the access type."""

    state_vars: list[StateVariable] = field(default_factory=list)
    access_type: AccessType = AccessType.READ


@dataclass
class BufferDescriptor:
    """A plain OpenCL buffer object (weights, biases): element type and size, memory type, data."""

    base_obj: GPUObjectDescriptor | None = None
    element_type: DataType = DataType.UNKNOWN
    element_size: Int32 = 0
    memory_type: MemoryType = MemoryType.GLOBAL
    attributes: list[str] = field(default_factory=list)
    size: Int32 = 0
    data: ByteData = b""


@dataclass
class Texture2DDescriptor:
    """A 2D image object: element type, normalisation, size and data."""

    base_obj: GPUObjectDescriptor | None = None
    element_type: DataType = DataType.UNKNOWN
    normalized: bool = False
    normalized_type: DataType = DataType.UNKNOWN
    size: Int2 | None = None
    data: ByteData = b""


@dataclass
class TensorLinearDescriptor:
    """A 1D constant (biases, per-channel values) in a buffer or a 2D texture."""

    base_obj: GPUObjectDescriptor | None = None
    storage_type: LinearStorageType = LinearStorageType.BUFFER
    element_type: DataType = DataType.UNKNOWN
    memory_type: MemoryType = MemoryType.GLOBAL
    size: Int32 = 0
    data: ByteData = b""


@dataclass
class BHWDC:
    """A tensor's shape: batch, height, width, depth, channels."""

    b: Int32 = 0
    h: Int32 = 0
    w: Int32 = 0
    d: Int32 = 0
    c: Int32 = 0


@dataclass
class TensorDescriptor:
    """A tensor's type, storage, layout and shape; ``data`` for constant tensors."""

    base_obj: GPUObjectDescriptor | None = None
    data_type: DataType = DataType.UNKNOWN
    storage_type: TensorStorageType = TensorStorageType.UNKNOWN
    layout: Layout = Layout.UNKNOWN
    shape: BHWDC | None = None
    data: ByteData = b""


#: The mark (a state variable of its ``base_obj``) of a runtime tensor holding int8 codes
#: (compiler/codes.py): one uchar4 word, a slice's four codes, per slice element, in BUFFER
#: storage. Its ``data_type`` is UNKNOWN: the schema's DataType has no 8-bit type, and a runtime
#: that does not know the mark refuses an UNKNOWN tensor rather than reading the words as floats.
CODES = StateVariable("codes", "uchar4")


def holds_codes(desc: TensorDescriptor) -> bool:
    """Does ``desc`` carry the CODES mark?"""
    return desc.base_obj is not None and CODES in desc.base_obj.state_vars


_FLOAT_BYTES = {DataType.FLOAT32: 4, DataType.FLOAT16: 2}


def element_bytes(desc: TensorDescriptor) -> int | None:
    """Bytes per channel of a runtime tensor, None for a type no runtime tensor has: a tensor
    holding codes (CODES) keeps a slice's four in one word, one byte each."""
    if holds_codes(desc):
        return 1
    return _FLOAT_BYTES.get(desc.data_type)


def codes_descriptor(desc: TensorDescriptor) -> TensorDescriptor:
    """``desc``'s tensor holding codes instead (CODES)."""
    return TensorDescriptor(
        base_obj=GPUObjectDescriptor(state_vars=[CODES]),
        data_type=DataType.UNKNOWN,
        storage_type=TensorStorageType.BUFFER,
        layout=desc.layout,
        shape=desc.shape,
    )


@dataclass
class BufferDescriptorMapValue:
    """A named BufferDescriptor of a kernel's arguments."""

    key: str | None = None
    value: BufferDescriptor | None = None


@dataclass
class Texture2DDescriptorMapValue:
    """A named Texture2DDescriptor of a kernel's arguments."""

    key: str | None = None
    value: Texture2DDescriptor | None = None


@dataclass
class TensorLinearDescriptorMapValue:
    """A named TensorLinearDescriptor of a kernel's arguments."""

    key: str | None = None
    value: TensorLinearDescriptor | None = None


@dataclass
class TensorDescriptorMapValue:
    """A named TensorDescriptor (a constant or a kernel-owned tensor) of a kernel's arguments."""

    key: str | None = None
    value: TensorDescriptor | None = None


@dataclass
class Arguments:
    """A kernel's arguments: scalars, objects and tensors the code names as ``args.NAME``."""

    int_values: list[IntValue] = field(default_factory=list)
    shared_int4s: list[Int32] = field(default_factory=list)
    float_values: list[FloatValue] = field(default_factory=list)
    shared_float4s: list[Float32] = field(default_factory=list)
    half_values: list[HalfValue] = field(default_factory=list)
    shared_half4s: list[Float32] = field(default_factory=list)
    buffer_refs: list[BufferDescriptorMapValue] = field(default_factory=list)
    texture2d_refs: list[Texture2DDescriptorMapValue] = field(default_factory=list)
    tensor_linear_refs: list[TensorLinearDescriptorMapValue] = field(default_factory=list)
    tensor_refs: list[TensorDescriptorMapValue] = field(default_factory=list)
    buffer_objects: list[BufferDescriptorMapValue] = field(default_factory=list)
    texture2d_objects: list[Texture2DDescriptorMapValue] = field(default_factory=list)
    tensor_linear_objects: list[TensorLinearDescriptorMapValue] = field(default_factory=list)
    tensor_objects: list[TensorDescriptorMapValue] = field(default_factory=list)


@dataclass
class OperationDef:
    """A kernel's precision and the descriptors of its source and destination tensors."""

    precision: CalculationsPrecision = CalculationsPrecision.F32
    src_tensors: list[TensorDescriptor] = field(default_factory=list)
    dst_tensors: list[TensorDescriptor] = field(default_factory=list)


@dataclass
class CompilerOption:
    """One vendor compiler option of a kernel."""

    option: CompilerOptions = CompilerOptions.ADRENO_FULL_SIMD_LINE


@dataclass
class GPUOperation:
    """One kernel: its code, arguments, tensor names, grid and work-group size."""

    arguments: Arguments | None = None
    code: str | None = None
    work_group_size: Int3 | None = None
    compiler_options: list[CompilerOption] = field(default_factory=list)
    tensor_to_grid: TensorToGrid = TensorToGrid.CUSTOM
    elementwise: bool = False
    linkable: bool = False
    check_src_channels_size: bool = False
    definition: OperationDef | None = None
    grid_dimension: Int32 = 0
    work_group_launch_order: Int3 | None = None
    grid_size: Int3 | None = None
    src_tensors_names: list[str] = field(default_factory=list)
    dst_tensors_names: list[str] = field(default_factory=list)
    work_groups_count: Int3 | None = None
    linkable_count: Int32 = 0
    elementwise_code: str | None = None


@dataclass
class TensorDescWithId:
    """A runtime tensor of the context: its descriptor and id."""

    desc: TensorDescriptor | None = None
    id: Int32 = 0


@dataclass
class CLNode:
    """One node of the context: its kernel, tensor ids and name."""

    gpu_op: GPUOperation | None = None
    input_ids: list[Int32] = field(default_factory=list)
    output_ids: list[Int32] = field(default_factory=list)
    name: str | None = None


@dataclass
class PairOfValueIds:
    """A (value id, TFLite tensor index) pair of ``variable_ids_and_refs``."""

    first: Int32 = 0
    second: Int32 = 0


@dataclass
class InferenceContext:
    """The root table: a model's compiled GPU program (nodes, tensors, inputs and outputs)."""

    need_flush: bool = False
    flush_periodically: bool = False
    flush_period: Int32 = 0
    need_manual_release: bool = False
    precision: CalculationsPrecision = CalculationsPrecision.F32
    storage_type: TensorStorageType = TensorStorageType.UNKNOWN
    nodes: list[CLNode] = field(default_factory=list)
    tensors: list[TensorDescWithId] = field(default_factory=list)
    input_ids: list[Int32] = field(default_factory=list)
    variable_ids_and_refs: list[PairOfValueIds] = field(default_factory=list)
    output_ids: list[Int32] = field(default_factory=list)


#: Every table of the schema, by its schema name.
TABLES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        Int4,
        Int3,
        Int2,
        IntValue,
        FloatValue,
        HalfValue,
        StateVariable,
        GPUObjectDescriptor,
        BufferDescriptor,
        Texture2DDescriptor,
        TensorLinearDescriptor,
        BHWDC,
        TensorDescriptor,
        BufferDescriptorMapValue,
        Texture2DDescriptorMapValue,
        TensorLinearDescriptorMapValue,
        TensorDescriptorMapValue,
        Arguments,
        OperationDef,
        CompilerOption,
        GPUOperation,
        TensorDescWithId,
        CLNode,
        PairOfValueIds,
        InferenceContext,
    )
}
