"""A node's kernel while its partition compiles: source in pieces, hooks, metadata; rendered once.

An op's generator returns a ``Kernel``: the ``GPUOperation`` that launches it (everything but the
code) and its body, OpenCL text with typed pieces at the points other ops may join it:

- ``WriteHook``: a write of the FLT4 ``result`` (``WRITE`` at (X, Y, S, b), ``WRITE_AT`` at a
  linear index). Elementwise ops linked into the kernel (fusion.py) run on ``result`` in front
  of every one, in the order they were linked. A kernel without write hooks takes no links.
- ``WideOps``: a point where a kernel holds a wider vector (FLT8, FLT16) of one pixel's channels
  that the write hooks after it marked ``wide`` write in FLT4 parts. Linked ops that are a
  function of each lane alone (``Op.wide_link``: a swish) run there once on the whole vector
  rather than on each part: on a CPU device the part takes as many instructions as the whole.
  A point that names the vector's first slice (and has its pixel's X, Y, b) also takes ops
  reading an operand there (``Op.wide_operand_link``: a residual ADD).
- ``PixelOps``: a point of a matrix-product kernel where a work-item holds every channel of its
  pixels in accumulators; a softmax linked there (ops/pixel_softmax.py) runs on them. Unused, it
  renders as a comment naming its parameters.
- ``CodesRead``: where an integer matrix product takes its input's codes: converted from the
  carried floats, or loaded where the input carries codes (``Kernel.reads_codes``, codes.py).
- ``ENTRY``: the kernel's entry line, with the ``reqd_work_group_size`` of its
  ``RequiredWorkGroup`` and the runtime's ``SERIAL_MARKER`` when the work-group is serial.

Fusion and the pair kernel read this metadata, never the text. ``KernelNode`` adds what the
partition knows (tensor ids, the TFLite nodes run) and renders into the context's ``CLNode``,
whose name (kernel_names.py) carries the nodes run into the context file, where the plugin's
reports count them, for a partition read back from the serialization cache as for a fresh one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..context import model
from ..context.kernel_text import SERIAL_MARKER
from . import kernel_names

if TYPE_CHECKING:
    from .graph import Carried, Node

#: Zero the lanes of the last slice past the channel count, so that no NaN or inf from padding
#: ever reaches a later kernel that multiplies all four lanes.
LANE_MASK = """  if (S == args.dst_tensor.Slices() - 1) {
    int left = args.dst_tensor.Channels() - S * 4;
    if (left < 4) result.w = (FLT)(0.0f);
    if (left < 3) result.z = (FLT)(0.0f);
    if (left < 2) result.y = (FLT)(0.0f);
  }
"""


@dataclass(frozen=True)
class WriteHook:
    """A write of the kernel's ``result`` after the lane mask, closing the kernel's block: linked
    ops run in front of it. ``store``: the store call, ``{value}`` standing for what it stores.
    ``wide``: ``result`` is a part of a vector that went through a ``WideOps`` point, where the
    kernel's wide links ran."""

    store: str
    wide: bool = False

    @property
    def text(self) -> str:
        return self._with("result")

    def codes_text(self, grid: Carried) -> str:
        """``text`` storing the codes of ``result`` on ``grid`` instead (a tensor carrying codes,
        codes.py): after the lane mask, so that a padding lane holds the real zero's code."""
        from .quant_step import codes_code  # kernel code imports this module

        return self._with(codes_code("convert_float4(result)", grid))

    def _with(self, value: str) -> str:
        return f"{LANE_MASK}  {self.store.format(value=value)}\n}}\n"


_STORE = "args.dst_tensor.Write({value}, X, Y, S, b);"
#: for kernels that know the linear index ``at`` of (X, Y, S, b) (buffer storages)
_STORE_AT = "args.dst_tensor.WriteAt({value}, at);"
WRITE = WriteHook(_STORE)
WRITE_AT = WriteHook(_STORE_AT)
#: the writes of parts of a vector that went through a ``WideOps`` point
WRITE_WIDE = WriteHook(_STORE, wide=True)
WRITE_AT_WIDE = WriteHook(_STORE_AT, wide=True)


#: the name of a WideOps point's first slice in the wide links' code (``WideOps.first_slice``)
WIDE_SLICE = "wide_s"


@dataclass(frozen=True)
class WideOps:
    """Where a kernel holds FLT``width`` ``var``, one pixel's consecutive channels, which only
    ``wide`` write hooks write: the wide links run on it there. ``first_slice``: the expression
    of the vector's first output slice where the pixel's (X, Y, b) are defined and every slice of
    the vector lies inside the output ("": the point offers no coordinates)."""

    var: str
    width: int
    first_slice: str = ""

    def code(self, wide_linked: list[dict[int, str]], reads: bool = False) -> str:
        """The wide links' code on ``var`` (in the namespace their statements use: ``result``);
        ``reads``: some link reads an operand at the vector's slices (``WIDE_SLICE``)."""
        if not wide_linked:
            return ""
        body = "".join(codes[self.width] for codes in wide_linked)
        at = f"  int {WIDE_SLICE} = {self.first_slice};\n" if reads else ""
        return f"  {{ FLT{self.width} result = {self.var};\n{at}{body}  {self.var} = result; }}\n"


@dataclass(frozen=True)
class PixelOps:
    """Where a matrix-product work-item holds its ``pixels`` x ``groups`` accumulators ``a{g}{p}``
    of ``width`` channels each, before the fused ``activation`` (TFLite's enum) is applied."""

    pixels: int
    groups: int
    activation: int
    width: int = 8

    def marker(self) -> str:
        """The text of the point when nothing is linked there."""
        return (
            f"  /* pixel ops: pixels={self.pixels} groups={self.groups} activation={self.activation}"
            f" width={self.width} */\n"
        )


@dataclass(frozen=True)
class Entry:
    """The kernel's entry line (``MAIN_FUNCTION($0) {``), declared by the kernel's work-group."""


ENTRY = Entry()


@dataclass(frozen=True)
class RequiredWorkGroup:
    """The work-group size a kernel's code relies on; ``serial``: its code shares the work-group's
    items over GROUP_SIZE_0 work-items, so a persistent kernel may run it as one work-item."""

    size: tuple[int, int, int]
    serial: bool = False

    def entry(self) -> str:
        x, y, z = self.size
        line = f"__attribute__((reqd_work_group_size({x}, {y}, {z}))) MAIN_FUNCTION($0) {{\n"
        if self.serial:
            line += f"  /* {SERIAL_MARKER}: the work-group's items are shared among GROUP_SIZE_0 work-items */\n"
        return line


@dataclass(frozen=True)
class CodesRead:
    """Statements setting an integer matrix product's input codes: ``converted`` from the carried
    float values, or ``loaded`` from a tensor that carries them (``Kernel.reads_codes``)."""

    converted: str
    loaded: str


Piece = str | WriteHook | WideOps | PixelOps | CodesRead | Entry


@dataclass(eq=False)
class Kernel:
    """The GPUOperation launching a kernel (its ``code`` left for ``render``) and its body."""

    operation: model.GPUOperation
    body: list[Piece]
    work_group: RequiredWorkGroup | None = None
    #: code blocks of the elementwise ops linked in, in order (run in front of every write)
    linked: list[str] = field(default_factory=list)
    #: the code of the op linked at ``pixel_ops`` (a softmax), if any
    pixel_code: str | None = None
    #: the first of ``linked`` (a prefix: linked order holds) as code on a wider ``result``, per
    #: width of the kernel's ``WideOps`` points; ``wide`` write hooks run only the rest
    wide_linked: list[dict[int, str]] = field(default_factory=list)
    #: one of ``wide_linked`` reads an operand at the vector's slices (``WideOps.first_slice``)
    wide_reads: bool = False
    #: the grid the last of ``linked`` rounds ``result`` onto (the rounding step of a carried
    #: output, quant_step.qdq_code), which a table read next may fold into its index (fusion.py)
    rounds_onto: Carried | None = None
    #: the grid ``result`` is on without a rounding step (Op.writes_grid: the last of ``linked``
    #: looks it up in a table of that grid's values, quant_table.py, or the kernel's own op copies
    #: values already on it): on the grid as after a rounding step, but no step a table may fold into
    on_grid: Carried | None = None
    #: the grid of ``src_tensor`` where every read of it is a ``CodesRead`` (an integer matrix
    #: product, which may read the tensor as codes, codes.py); None: it reads values
    codes_input: Carried | None = None
    #: its ``dst_tensor`` is written only through its write hooks, which may write codes (codes.py)
    codes_writer: bool = False
    #: ``src_tensor`` carries codes: the ``CodesRead`` pieces load them (set by codes.py)
    reads_codes: bool = False
    #: ``dst_tensor`` carries codes on this grid: the write hooks write them (set by codes.py)
    writes_codes: Carried | None = None

    @property
    def accepts_links(self) -> bool:
        """Does the kernel declare the writes of its ``result`` (so linked ops can run there)?"""
        return any(isinstance(piece, WriteHook) for piece in self.body)

    @property
    def wide_coordinates(self) -> bool:
        """Does every ``WideOps`` point of the kernel name its vector's slices (and it has one)?"""
        points = [piece for piece in self.body if isinstance(piece, WideOps)]
        return bool(points) and all(piece.first_slice for piece in points)

    @property
    def wide_widths(self) -> set[int]:
        """The widths of the kernel's ``WideOps`` points (empty: it has none)."""
        return {piece.width for piece in self.body if isinstance(piece, WideOps)}

    def hook_links(self, hook: WriteHook) -> str:
        """The linked code in front of ``hook``."""
        return "".join(self.linked[len(self.wide_linked) :] if hook.wide else self.linked)

    @property
    def pixel_ops(self) -> PixelOps | None:
        return next((piece for piece in self.body if isinstance(piece, PixelOps)), None)

    @property
    def links(self) -> int:
        """How many ops are linked into the kernel."""
        return len(self.linked) + (self.pixel_code is not None)

    def source_size(self) -> int:
        """The length of ``render()``'s text, without rendering it."""
        size = 0
        for piece in self.body:
            if isinstance(piece, str):
                size += len(piece)
            elif isinstance(piece, WriteHook):
                size += len(self.hook_links(piece)) + len(self._hook_text(piece))
            elif isinstance(piece, CodesRead):
                size += len(piece.loaded if self.reads_codes else piece.converted)
            elif isinstance(piece, WideOps):
                size += len(piece.code(self.wide_linked, self.wide_reads))
            elif isinstance(piece, PixelOps):
                size += len(piece.marker() if self.pixel_code is None else self.pixel_code)
            else:
                size += len(self.work_group.entry() if self.work_group else "MAIN_FUNCTION($0) {\n")
        return size

    def _hook_text(self, hook: WriteHook) -> str:
        return hook.text if self.writes_codes is None else hook.codes_text(self.writes_codes)

    def render(self) -> str:
        """The kernel's OpenCL text."""
        out = []
        for piece in self.body:
            if isinstance(piece, str):
                out.append(piece)
            elif isinstance(piece, WriteHook):
                out.append(self.hook_links(piece) + self._hook_text(piece))
            elif isinstance(piece, CodesRead):
                out.append(piece.loaded if self.reads_codes else piece.converted)
            elif isinstance(piece, WideOps):
                out.append(piece.code(self.wide_linked, self.wide_reads))
            elif isinstance(piece, PixelOps):
                out.append(piece.marker() if self.pixel_code is None else self.pixel_code)
            else:
                out.append(self.work_group.entry() if self.work_group else "MAIN_FUNCTION($0) {\n")
        return "".join(out)


@dataclass(eq=False)
class KernelNode:
    """A kernel placed in a partition: the tensors it reads and writes and the TFLite nodes it runs
    (its own first; more when ops are linked in, a pair runs, or a concatenation is read in place)."""

    kernel: Kernel
    input_ids: list[int]
    output_ids: list[int]
    nodes: list[str]
    #: render writes the partition's precision into the operation's definition (the per-output
    #: kernels of SPLIT and the copies of constant outputs never had it: they keep the default, which
    #: the runtime never reads)
    stamps_precision: bool = True
    #: the graph nodes it runs, in the order they joined (emitted, paired, linked)
    ops: list[Node] = field(default_factory=list)
    #: where its first op is in the partition's node order (the scheduler starts from there)
    position: int = 0
    #: the linked ops: (position, runtime operands besides the linked tensor), for the scheduler
    joins: list[tuple[int, list[int]]] = field(default_factory=list)
    #: (position, tensors) each time an op joins: the context lists tensors in order of first use
    uses: list[tuple[int, list[int]]] = field(default_factory=list)
    #: a later op may link into it (not the per-output kernels of SPLIT)
    open_to_links: bool = True
    #: a fusion pass merged it into another kernel
    dropped: bool = False

    @property
    def fused_ops(self) -> int:
        return len(self.nodes) - 1

    def render(self, precision: model.CalculationsPrecision) -> model.CLNode:
        """The context's node: the kernel's text rendered, its definition at ``precision``."""
        op = self.kernel.operation
        op.code = self.kernel.render()
        op.linkable_count = self.kernel.links
        if op.definition is not None and self.stamps_precision:
            op.definition.precision = precision
        name = kernel_names.joined(self.nodes)
        return model.CLNode(gpu_op=op, input_ids=self.input_ids, output_ids=self.output_ids, name=name)
