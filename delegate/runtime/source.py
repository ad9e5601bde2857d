"""Program assembly: a node's ``GPUOperation.code`` and ``Arguments`` into complete OpenCL C.

The conventions (documented in docs/runtime.md, and all the compiler may emit):
  - ``MAIN_FUNCTION($0)`` opens the kernel; ``$0`` becomes its parameter list;
  - ``args.NAME`` is a scalar of ``int_values`` / ``float_values`` / ``half_values``: active ones
    are packed into int4 / float4 / half4 parameters, inactive ones become literals;
  - ``args.T.Read(...)``, ``args.T.Write(v, ...)``, ``args.T.Width()`` ... are tensor selectors,
    rewritten for T's storage type and data type;
  - ``args.B.Read(i)`` reads element i of a buffer or linear-tensor object, ``args.X.Read(x, y)``
    a texel of a 2D texture object;
  - precision macros (FLT, FLT4, ACCUM_FLT4, TO_FLT4 ...) come from the context's precision.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ..context import model
from ..context.model import CalculationsPrecision, DataType, LinearStorageType, MemoryType, TensorStorageType
from .device import DeviceInfo

TENSOR_SELECTORS = {
    "Read": (3, 4, 5),
    "ReadFloat": (4, 5),
    "Write": (4, 5, 6),
    "Width": (0,),
    "Height": (0,),
    "Depth": (0,),
    "Slices": (0,),
    "Batch": (0,),
    "Channels": (0,),
    "Offset": (4, 5),
    "ReadAt": (1,),
    "ReadLaneAt": (2,),
    "WriteAt": (2,),
    "PrefetchAt": (1,),
    "CodesAt": (1,),
    "Handle": (0,),
    "HandleAt": (1,),
    "ReadFrom": (2,),
}
#: Selectors of a handle on a tensor's element and the reads from it (buffer-backed storages).
HANDLE_SELECTORS = ("Handle", "HandleAt", "ReadFrom")
#: Selectors that address a tensor's memory linearly: buffer-backed storages only.
LINEAR_SELECTORS = ("Offset", "ReadAt", "ReadLaneAt", "WriteAt", "PrefetchAt", "CodesAt", "Handle", "HandleAt",
                    "ReadFrom")  # fmt: skip
#: selectors whose macro names carry their argument count
TENSOR_SUFFIXED = (
    "Read", "ReadFloat", "Write", "Offset", "ReadAt", "ReadLaneAt", "WriteAt", "PrefetchAt", "CodesAt", "HandleAt",
    "ReadFrom"
)  # fmt: skip
#: The selectors of a tensor holding codes (model.CODES: four 8-bit codes per slice element,
#: compiler/codes.py): its codes as one int (``CodesAt``), written from an int4 of codes
#: (``Write``, ``WriteAt``); no float reads.
CODES_SELECTORS = ("CodesAt", "Write", "WriteAt", "PrefetchAt", "Offset", "Width", "Height", "Depth", "Slices",
                   "Batch", "Channels")  # fmt: skip
#: the lane argument of ReadLaneAt: a literal component index
_LANE = re.compile(r"[0-3]")
_IMAGE_TYPES = {
    TensorStorageType.IMAGE_BUFFER: "image1d_buffer_t",
    TensorStorageType.TEXTURE_2D: "image2d_t",
    TensorStorageType.SINGLE_TEXTURE_2D: "image2d_t",
    TensorStorageType.TEXTURE_ARRAY: "image2d_array_t",
    TensorStorageType.TEXTURE_3D: "image3d_t",
}
_SELECTOR_CALL = re.compile(r"args\.(\w+)\.(\w+)\(")
#: ``args.NAME`` not followed by a '.'; the match's start is checked for a word or '.' before it in
#: code (a lookbehind here would cost the regex engine its fast search for the literal "args.").
_SCALAR = re.compile(r"args\.(\w+)\b(?!\s*\.)")
#: the characters _call_args looks at
_DELIMITERS = re.compile(r"[()\[\]{},]")
#: a call's parentheses with no bracket of any kind between them
_FLAT_CALL = re.compile(r"\(([^()\[\]{}]*)\)")


class SourceError(ValueError):
    """The code uses an argument or selector the runtime does not provide."""


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its declaration and what the runtime binds to it."""

    decl: str
    #: "tensor_buffer" / "tensor_image" / "tensor_shape" (a graph or object tensor, by name),
    #: "object_buffer" / "object_image" (a buffer, linear or texture object, by name),
    #: "int4" / "float4" / "half4" (a packed scalar vector, by index)
    kind: str
    name: str
    index: int = 0


@dataclass
class KernelSource:
    """A kernel's complete OpenCL source, its parameters and packed scalar arguments."""

    #: the complete program text: ``prelude`` + ``body``
    text: str
    params: list[Param]
    int4s: list[np.ndarray] = field(default_factory=list)
    float4s: list[np.ndarray] = field(default_factory=list)
    half4s: list[np.ndarray] = field(default_factory=list)
    #: type and extension definitions shared by every kernel of a precision on a device
    prelude: str = ""
    #: this kernel's selector macros and code; its kernel function is ``main_function``
    body: str = ""


def effective_precision(requested: CalculationsPrecision, device: DeviceInfo) -> CalculationsPrecision:
    """F16 math needs cl_khr_fp16; without it F16 steps up to F32_F16 (half storage, float math)."""
    if requested == CalculationsPrecision.F16 and not device.fp16:
        return CalculationsPrecision.F32_F16
    return requested


def float_literal(value: float) -> str:
    """``value`` as an OpenCL float literal (rounded to float32; NAN and the infinities by name)."""
    v = float(np.float32(value))
    if np.isnan(v):
        return "NAN"
    if np.isinf(v):
        return "INFINITY" if v > 0 else "(-INFINITY)"
    return f"{v!r}f"


def _prelude(precision: CalculationsPrecision, device: DeviceInfo, half_math: bool) -> str:
    flt = "half" if half_math else "float"
    accum = "half" if precision == CalculationsPrecision.F16 and half_math else "float"
    lines = []
    if device.fp16:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if device.image_3d_writes:
        lines.append("#pragma OPENCL EXTENSION cl_khr_3d_image_writes : enable")
    lines += [
        f"#define FLT {flt}",
        *(f"#define FLT{n} {flt}{n}" for n in (2, 3, 4, 8, 16)),
        f"#define ACCUM_FLT {accum}",
        *(f"#define ACCUM_FLT{n} {accum}{n}" for n in (2, 3, 4, 8, 16)),
        f"#define TO_FLT(v) (({flt})(v))",
        f"#define TO_FLT1(v) (({flt})(v))",
        *(f"#define TO_FLT{n}(v) convert_{flt}{n}(v)" for n in (2, 3, 4, 8, 16)),
        f"#define TO_ACCUM_TYPE(v) convert_{accum}4(v)",
        f"#define TO_ACCUM_FLT(v) (({accum})(v))",
        f"#define TO_ACCUM_FLT4(v) convert_{accum}4(v)",
        f"#define TO_ACCUM_FLT8(v) convert_{accum}8(v)",
        f"#define TO_ACCUM_FLT16(v) convert_{accum}16(v)",
        f"#define INIT_FLT(v) (({flt})(v))",
        f"#define INIT_FLT4(v) (({flt}4)(v))",
        f"#define INIT_ACCUM_FLT4(v) (({accum}4)(v))",
        *(f"#define GLOBAL_ID_{i} get_global_id({i})" for i in range(3)),
        *(f"#define LOCAL_ID_{i} get_local_id({i})" for i in range(3)),
        *(f"#define GROUP_ID_{i} get_group_id({i})" for i in range(3)),
        *(f"#define GROUP_SIZE_{i} get_local_size({i})" for i in range(3)),
        "__constant sampler_t smp_none = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;",
        "__constant sampler_t smp_zero = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_CLAMP | CLK_FILTER_NEAREST;",
    ]
    return "\n".join(lines) + "\n"


def _call_args(code: str, open_paren: int) -> tuple[list[str], int]:
    """The top-level comma-separated arguments of the call whose '(' is at ``open_paren``."""
    flat = _FLAT_CALL.match(code, open_paren)
    if flat is not None:  # most calls: no bracket inside, so every comma is a top-level one
        inside = flat.group(1)
        return ([a.strip() for a in inside.split(",")] if inside.strip() else []), flat.end() - 1
    depth, start, out = 0, open_paren + 1, []
    for match in _DELIMITERS.finditer(code, open_paren):
        c, i = match.group(), match.start()
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                last = code[start:i].strip()
                if last or out:
                    out.append(last)
                return out, i
        elif depth == 1:  # a comma
            out.append(code[start:i].strip())
            start = i + 1
    raise SourceError("unbalanced parentheses in a selector call")


class _Assembler:
    def __init__(
        self,
        op: model.GPUOperation,
        tensors: dict[str, model.TensorDescriptor],
        device: DeviceInfo,
        precision: CalculationsPrecision,
    ) -> None:
        self.op = op
        self.args = op.arguments or model.Arguments()
        self.device = device
        self.precision = effective_precision(precision, device)
        self.half_math = device.fp16 and self.precision != CalculationsPrecision.F32
        self.tensors = dict(tensors)
        for entry in self.args.tensor_objects:
            if entry.key and entry.value:
                self.tensors[entry.key] = entry.value
        self.buffers = {e.key: e.value for e in self.args.buffer_objects if e.key and e.value}
        self.linears = {e.key: e.value for e in self.args.tensor_linear_objects if e.key and e.value}
        self.textures = {e.key: e.value for e in self.args.texture2d_objects if e.key and e.value}
        self.params: list[Param] = []
        self.macros: list[str] = []
        self.scalars: dict[str, str] = {}
        self.result = KernelSource("", [])

    # ------------------------------------------------------------ scalars

    def _pack_scalars(self) -> None:
        a = self.args
        groups = [
            ("int", a.int_values, lambda v: str(int(v.value)), np.int32, self.result.int4s),
            ("float", a.float_values, lambda v: float_literal(v.value), np.float32, self.result.float4s),
        ]
        half_as = "half" if self.device.fp16 else "float"
        half_dtype = np.float16 if self.device.fp16 else np.float32
        groups.append(("half", a.half_values, lambda v: float_literal(v.value), half_dtype, self.result.half4s))
        for kind, values, literal, dtype, vectors in groups:
            active = [v for v in values if v.active]
            for v in values:
                if not v.active and v.name:
                    self.scalars[v.name] = f"(({half_as if kind == 'half' else kind})({literal(v)}))"
            for i, v in enumerate(active):
                self.scalars[v.name or ""] = f"shared_{kind}4_{i // 4}.{'xyzw'[i % 4]}"
            for k in range(0, len(active), 4):
                chunk = [v.value for v in active[k : k + 4]]
                vectors.append(np.array(chunk + [0] * (4 - len(chunk)), dtype=dtype))
        # Scalar vectors come last, as upstream orders them.
        self._scalar_params = [
            *(Param(f"int4 shared_int4_{i}", "int4", "", i) for i in range(len(self.result.int4s))),
            *(Param(f"float4 shared_float4_{i}", "float4", "", i) for i in range(len(self.result.float4s))),
            *(Param(f"{half_as}4 shared_half4_{i}", "half4", "", i) for i in range(len(self.result.half4s))),
        ]

    # ------------------------------------------------------------ tensors

    def _storage_type(self, dt: DataType, components: int) -> tuple[str, str, str]:
        """(pointer element type, read expression format, write statement format) for buffer storage."""
        n = "" if components == 1 else str(components)
        if dt == DataType.FLOAT16 and not self.device.fp16:
            load = f"vload_half{n}({{i}}, {{p}})"
            store = f"vstore_half{n}(convert_float{n}({{v}}), {{i}}, {{p}})"
            return "half", load, store
        base = "half" if dt == DataType.FLOAT16 else "float"
        return f"{base}{n}", "{p}[{i}]", f"{{p}}[{{i}}] = convert_{base}{n}({{v}})"

    def _tensor(self, name: str, desc: model.TensorDescriptor, usage: set[str]) -> None:
        st = TensorStorageType(desc.storage_type)
        if st == TensorStorageType.UNKNOWN:
            raise SourceError(f"tensor {name!r} has storage type UNKNOWN")
        if st != TensorStorageType.BUFFER and st != TensorStorageType.IMAGE_BUFFER and not self.device.images:
            raise SourceError(f"tensor {name!r} uses {st.name}, but the device has no image support")
        writes = "Write" in usage or "WriteAt" in usage
        reads = bool(usage.intersection(("Read", "ReadFloat", "ReadAt", "ReadLaneAt", "ReadFrom")))
        linear_use = usage.intersection(LINEAR_SELECTORS)
        # only where used: the macros are text every program that names the tensor compiles
        handles = bool(usage.intersection(HANDLE_SELECTORS))
        if linear_use and st not in (TensorStorageType.BUFFER, TensorStorageType.IMAGE_BUFFER):
            raise SourceError(
                f"tensor {name!r} uses {', '.join(sorted(linear_use))}, which need BUFFER or IMAGE_BUFFER "
                f"storage, but it is {st.name}"
            )
        if "CodesAt" in usage and not model.holds_codes(desc):
            raise SourceError(f"tensor {name!r} holds no codes (CodesAt)")
        p = f"{name}_shape"
        m = self.macros
        m.append(f"#define {name}_Width() ({p}.s0)")
        m.append(f"#define {name}_Height() ({p}.s1)")
        m.append(f"#define {name}_Depth() ({p}.s2)")
        m.append(f"#define {name}_Slices() ({p}.s3)")
        m.append(f"#define {name}_Batch() ({p}.s4)")
        m.append(f"#define {name}_Channels() ({p}.s5)")
        m.append(f"#define {name}_Read3(x, y, s) {name}_Read5(x, y, 0, s, 0)")
        m.append(f"#define {name}_Read4(x, y, s, b) {name}_Read5(x, y, 0, s, b)")
        m.append(f"#define {name}_ReadFloat4(x, y, s, b) {name}_ReadFloat5(x, y, 0, s, b)")
        m.append(f"#define {name}_Write4(v, x, y, s) {name}_Write6(v, x, y, 0, s, 0)")
        m.append(f"#define {name}_Write5(v, x, y, s, b) {name}_Write6(v, x, y, 0, s, b)")
        # s7: FLT4s from one slice plane to the next (padded planes: memory.slice_pitch)
        linear = f"((s) * {p}.s7 + ((((z) * {p}.s1 + (y)) * {p}.s0 + (x)) * {p}.s4 + (b)))"
        m.append(f"#define {name}_Offset5(x, y, z, s, b) {linear}")
        m.append(f"#define {name}_Offset4(x, y, s, b) {name}_Offset5(x, y, 0, s, b)")
        xb = f"((x) * {p}.s4 + (b))"
        if model.holds_codes(desc):
            self._codes_tensor(name, desc, usage, linear)
        elif st in (TensorStorageType.BUFFER, TensorStorageType.IMAGE_BUFFER):
            elem, load, store = self._storage_type(desc.data_type, 4)
            buf = f"{name}_buf"
            self.params.append(Param(f"__global {elem}* {buf}", "tensor_buffer", name))
            # The tensor starts s6 bytes into its buffer (tensors share one arena).
            m.append(f"#define {name}_ptr ((__global {elem}*)((__global char*){buf} + {p}.s6))")
            buf = f"{name}_ptr"
            # a hint to bring the cache line of FLT4 i in (clang's builtin: PoCL's CPU targets); no
            # load, so an index past the tensor is harmless. Compilers that are not clang (a GPU's,
            # given the cpu kernel family) get no hint rather than an unknown builtin.
            m.append(
                f"#if defined(__clang__)\n#define {name}_PrefetchAt1(i) __builtin_prefetch({buf} + (i))\n"
                f"#else\n#define {name}_PrefetchAt1(i)\n#endif"
            )
            if st == TensorStorageType.IMAGE_BUFFER:
                img = f"{name}_img"
                self.params.append(Param(f"__read_only image1d_buffer_t {img}", "tensor_image", name))
                m.append(f"#define {name}_Read5(x, y, z, s, b) TO_FLT4(read_imagef({img}, {linear}))")
                m.append(f"#define {name}_ReadFloat5(x, y, z, s, b) read_imagef({img}, {linear})")
                m.append(f"#define {name}_ReadAt1(i) TO_FLT4(read_imagef({img}, (i)))")
                m.append(f"#define {name}_ReadLaneAt2(i, l) TO_FLT(read_imagef({img}, (i)).s##l)")
                if handles:  # an image has no pointers: the handle is the index itself
                    m.append(f"#define {name}_Handle() long")
                    m.append(f"#define {name}_HandleAt1(i) ((long)(i))")
                    m.append(f"#define {name}_ReadFrom2(h, j) TO_FLT4(read_imagef({img}, (int)((h) + (j))))")
            else:
                m.append(f"#define {name}_Read5(x, y, z, s, b) TO_FLT4({load.format(i=linear, p=buf)})")
                m.append(f"#define {name}_ReadFloat5(x, y, z, s, b) convert_float4({load.format(i=linear, p=buf)})")
                m.append(f"#define {name}_ReadAt1(i) TO_FLT4({load.format(i='(i)', p=buf)})")
                # one component as a scalar load: a kernel that broadcasts lanes into wide vectors
                # then holds one register per lane it uses, not one per lane of every pixel
                scalar, scalar_load, _ = self._storage_type(desc.data_type, 1)
                lane = scalar_load.format(i="(i) * 4 + (l)", p=f"((__global {scalar}*){buf})")
                m.append(f"#define {name}_ReadLaneAt2(i, l) TO_FLT({lane})")
                # A handle on FLT4 i (``HandleAt``, of type ``Handle()``) and FLT4 j after it
                # (``ReadFrom``): a pointer, so a literal j is a displacement of the load's
                # address; 16-byte elements are past x86's index scales, and an index from the
                # tensor's base costs a shift and an add per load.
                step = "4 * " if elem == "half" else ""
                if handles:
                    m.append(f"#define {name}_Handle() __global const {elem}*")
                    m.append(f"#define {name}_HandleAt1(i) ({buf} + {step}(i))")
                    m.append(f"#define {name}_ReadFrom2(h, j) TO_FLT4({load.format(i='(j)', p='(h)')})")
            m.append(f"#define {name}_Write6(v, x, y, z, s, b) {store.format(i=linear, p=buf, v='v')}")
            m.append(f"#define {name}_WriteAt2(v, i) {store.format(i='(i)', p=buf, v='v')}")
        else:
            if reads and writes:
                raise SourceError(f"tensor {name!r} ({st.name}) is both read and written by one kernel")
            access = "__write_only" if writes else "__read_only"
            img = f"{name}_img"
            self.params.append(Param(f"{access} {_IMAGE_TYPES[st]} {img}", "tensor_image", name))
            if st == TensorStorageType.TEXTURE_2D:
                coord = f"(int2)((((z) * {p}.s0 + (x)) * {p}.s4 + (b)), ((s) * {p}.s1 + (y)))"
            elif st == TensorStorageType.SINGLE_TEXTURE_2D:
                coord = f"(int2)((((z) * {p}.s0 + (x)) * {p}.s4 + (b)), (y))"
            else:
                coord = f"(int4)({xb}, (y), ((s) * {p}.s2 + (z)), 0)"
            m.append(f"#define {name}_Read5(x, y, z, s, b) TO_FLT4(read_imagef({img}, smp_none, {coord}))")
            m.append(f"#define {name}_ReadFloat5(x, y, z, s, b) read_imagef({img}, smp_none, {coord})")
            m.append(f"#define {name}_Write6(v, x, y, z, s, b) write_imagef({img}, {coord}, convert_float4(v))")
        self.params.append(Param(f"int8 {p}", "tensor_shape", name))

    def _codes_tensor(self, name: str, desc: model.TensorDescriptor, usage: set[str], linear: str) -> None:
        """The accessors of a tensor holding codes (CODES_SELECTORS): a uchar4 per slice element, in
        a buffer."""
        if desc.storage_type != TensorStorageType.BUFFER:
            st = TensorStorageType(desc.storage_type).name
            raise SourceError(f"tensor {name!r} holds codes, which need BUFFER storage, but it is {st}")
        other = sorted(usage.difference(CODES_SELECTORS))
        if other:
            raise SourceError(f"tensor {name!r} holds codes, which {', '.join(other)} cannot read")
        p = f"{name}_shape"
        buf = f"{name}_buf"
        self.params.append(Param(f"__global uchar4* {buf}", "tensor_buffer", name))
        ptr = f"((__global uchar4*)((__global char*){buf} + {p}.s6))"
        m = self.macros
        m.append(f"#define {name}_CodesAt1(i) as_int({ptr}[(i)])")
        # an int4 of codes, each kept to its low byte (convert_uchar4, not saturating)
        m.append(f"#define {name}_Write6(v, x, y, z, s, b) ({ptr}[{linear}] = convert_uchar4(v))")
        m.append(f"#define {name}_WriteAt2(v, i) ({ptr}[(i)] = convert_uchar4(v))")
        m.append(
            f"#if defined(__clang__)\n#define {name}_PrefetchAt1(i) __builtin_prefetch({ptr} + (i))\n"
            f"#else\n#define {name}_PrefetchAt1(i)\n#endif"
        )

    # ------------------------------------------------------------ objects

    def _buffer_object(self, name: str, desc: model.BufferDescriptor) -> None:
        n = desc.element_size or 4
        if n not in (1, 2, 4, 8, 16):
            raise SourceError(f"buffer {name!r} has element_size {n}; 1, 2, 4, 8 or 16 are supported")
        elem, load, _ = self._storage_type(desc.element_type or DataType.FLOAT32, n)
        space = "__constant" if desc.memory_type == MemoryType.CONSTANT else "__global"
        self.params.append(Param(f"{space} {elem}* {name}", "object_buffer", name))
        self.macros.append(f"#define {name}_Read(i) TO_FLT{n}({load.format(i='(i)', p=name)})")
        self.macros.append(f"#define {name}_GetPtr() ({name})")

    def _linear_object(self, name: str, desc: model.TensorLinearDescriptor) -> None:
        if desc.storage_type == LinearStorageType.TEXTURE_2D:
            if not self.device.images:
                raise SourceError(f"linear tensor {name!r} is a texture, but the device has no image support")
            self.params.append(Param(f"__read_only image2d_t {name}", "object_image", name))
            self.macros.append(f"#define {name}_Read(i) TO_FLT4(read_imagef({name}, smp_none, (int2)((i), 0)))")
            return
        elem, load, _ = self._storage_type(desc.element_type or DataType.FLOAT32, 4)
        space = "__constant" if desc.memory_type == MemoryType.CONSTANT else "__global"
        self.params.append(Param(f"{space} {elem}* {name}", "object_buffer", name))
        self.macros.append(f"#define {name}_Read(i) TO_FLT4({load.format(i='(i)', p=name)})")

    def _texture_object(self, name: str) -> None:
        if not self.device.images:
            raise SourceError(f"texture {name!r} needs image support, which the device lacks")
        self.params.append(Param(f"__read_only image2d_t {name}", "object_image", name))
        self.macros.append(f"#define {name}_Read(x, y) TO_FLT4(read_imagef({name}, smp_none, (int2)((x), (y))))")

    # ------------------------------------------------------------ rewrite

    def assemble(self, rewrites: dict[tuple, tuple[str, dict[str, set[str]]]] | None = None) -> KernelSource:
        code = self.op.code or ""
        if "MAIN_FUNCTION" not in code:
            raise SourceError("the code has no MAIN_FUNCTION($0)")
        self._pack_scalars()
        # the selectors' rewrite follows from the code and which names are what alone: nodes of one
        # code (a network's repeated blocks) share it through ``rewrites``
        names = (self.tensors, self.buffers, self.linears, self.textures)
        key = (code, *(frozenset(kind) for kind in names))
        done = rewrites.get(key) if rewrites is not None else None
        if done is None:
            done = self._rewrite_selectors(code)
            if rewrites is not None:
                rewrites[key] = done
        code, usage = done
        return self._finish(code, usage)

    def _rewrite_selectors(self, code: str) -> tuple[str, dict[str, set[str]]]:
        """``code`` with its ``args.NAME.SELECTOR(...)`` calls made macro calls, and the selectors
        each name is used with."""
        usage: dict[str, set[str]] = {}
        out, pos = [], 0
        for match in _SELECTOR_CALL.finditer(code):
            if match.start() < pos:
                continue
            name, selector = match.group(1), match.group(2)
            call_args, _ = _call_args(code, match.end() - 1)
            if name in self.tensors:
                counts = TENSOR_SELECTORS.get(selector)
                if counts is None or len(call_args) not in counts:
                    raise SourceError(
                        f"tensor selector {name}.{selector} with {len(call_args)} arguments is not supported "
                        f"(supported: {', '.join(f'{k}/{v}' for k, v in TENSOR_SELECTORS.items())})"
                    )
                if selector == "ReadLaneAt" and not _LANE.fullmatch(call_args[1]):
                    raise SourceError(f"{name}.ReadLaneAt: the lane must be a literal 0-3, not {call_args[1]!r}")
                usage.setdefault(name, set()).add(selector)
                suffix = str(len(call_args)) if selector in TENSOR_SUFFIXED else ""
                out.append(code[pos : match.start()] + f"{name}_{selector}{suffix}(")
            elif name in self.buffers or name in self.linears or name in self.textures:
                if selector not in ("Read", "GetPtr"):
                    raise SourceError(f"object {name!r} has no selector {selector!r} (Read, GetPtr)")
                usage.setdefault(name, set()).add(selector)
                out.append(code[pos : match.start()] + f"{name}_{selector}(")
            else:
                raise SourceError(f"args.{name}.{selector}(): no tensor or object named {name!r}")
            pos = match.end()
        return "".join(out) + code[pos:], usage

    def _finish(self, code: str, usage: dict[str, set[str]]) -> KernelSource:
        def scalar(m: re.Match[str]) -> str:
            before = m.string[m.start() - 1] if m.start() > 0 else " "
            if before.isalnum() or before in "_.":
                return m.group(0)  # part of a longer name (xargs.n) or of a member access (a.args.n)
            if m.group(1) not in self.scalars:
                raise SourceError(f"args.{m.group(1)}: no argument of that name")
            return self.scalars[m.group(1)]

        code = _SCALAR.sub(scalar, code)
        for name in sorted(usage):
            if name in self.tensors:
                self._tensor(name, self.tensors[name], usage[name])
            elif name in self.buffers:
                self._buffer_object(name, self.buffers[name])
            elif name in self.linears:
                self._linear_object(name, self.linears[name])
            else:
                self._texture_object(name)
        # Order as upstream: buffers, then images, then scalar vectors.
        order = {
            "tensor_buffer": 0,
            "object_buffer": 0,
            "tensor_image": 1,
            "object_image": 1,
            "tensor_shape": 2,
        }
        params = sorted(self.params, key=lambda prm: order[prm.kind]) + self._scalar_params
        signature = ",\n    ".join(p.decl for p in params)
        code = code.replace("MAIN_FUNCTION($0)", f"__kernel void main_function(\n    {signature})")
        self.result.prelude = _prelude(self.precision, self.device, self.half_math)
        self.result.body = "\n".join(self.macros) + "\n" + code
        self.result.text = self.result.prelude + self.result.body
        self.result.params = params
        return self.result


def assemble(
    op: model.GPUOperation,
    tensors: dict[str, model.TensorDescriptor],
    device: DeviceInfo,
    precision: CalculationsPrecision,
    rewrites: dict[tuple, tuple[str, dict[str, set[str]]]] | None = None,
) -> KernelSource:
    """Complete OpenCL source of ``op``, with ``tensors`` the descriptors its tensor refs are bound to;
    ``rewrites``: a dict the assemblies of one context share (its nodes of one code rewrite it once)."""
    return _Assembler(op, tensors, device, precision).assemble(rewrites)
