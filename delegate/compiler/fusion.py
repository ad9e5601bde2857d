"""Fusion: the ordered passes over a partition's kernel graph (kernel_graph.py), each a ``match``
at one kernel and an ``apply`` that merges kernels, as upstream's GPU delegate merges its
operations after converting them (``FUSIONS``, in the order they run):

- ``ConcatReadInPlace``: a CONCATENATION whose only reader (a matrix-product CONV_2D) reads its
  inputs in place gets no kernel; the reader is emitted again reading them.
- ``DepthwisePair``: a depthwise convolution and the 1x1 convolution reading it, one kernel
  (ops/conv_pair.py), on devices that give it local memory (CompileOptions.pair_local_bytes).
- ``GatedRead``: a squeeze-excite block's broadcast MUL(x, gate) whose only reader (a flat
  matrix-product CONV_2D) multiplies as it reads gets no kernel (ops/gated_read.py).
- ``QuantizeOutputs``: a kernel writing a carried tensor (quant.py) rounds onto its grid before
  each write (runs with fusion off too).
- ``PixelSoftmax``: a softmax at the pixel ops of the matrix product before it (below).
- ``ElementwiseLink``: an elementwise op linked into its producer's kernel (below).

The passes never reorder kernels: the scheduler (scheduler.py) does, afterwards.

A chain of ops after a producer runs inside the producer's kernel.

An op that says it links (``Op.links``: a unary op, a binary op whose other operand is a
constant or any runtime tensor, a 1x1 depthwise convolution that is a per-channel scale and shift)
is linked into the kernel that produces its input when that input has no other reader and is not
a partition output, and the kernel declares the writes of its ``result`` (kernel.WriteHook): its
code runs on ``result`` in front of every write (the schema's ``linkable`` / ``linkable_count``),
saving one kernel launch and one trip through memory. The op writes its own code (``Op.link``),
its arguments named in the link's namespace (ops/base.py ``Link``). Where the kernel holds wider
vectors before its writes (kernel.WideOps) and every op linked before it ran there, an op that is
a function of each lane alone (``Op.wide_link``) runs there too, once per vector. A SOFTMAX /
LOG_SOFTMAX links into a matrix-product kernel that holds every channel of its pixels
(kernel.PixelOps) and has nothing linked yet: it runs on the accumulators, before the writes (so
before any op linked after it).

A swish, MUL(y, LOGISTIC(y)), is one unary op by the time these passes run (the graph rewrite of
swish.py, ops/swish.py): y's only reader, so it links into y's producer as one op; unfused, y
has two readers and neither node links into its producer.
"""

from __future__ import annotations

import numpy as np

from .bounds import takes_another_link
from .graph import Builtin, Carried, Graph, Node
from .kernel import Kernel, KernelNode
from .kernel_graph import Fusion, FusionMatch, KernelGraph
from .ops import op_for, traits_of
from .ops.base import EmitContext, Link
from .ops.conv_pair import pair_operation
from .ops.gated_read import GatedInput, gated_mul
from .ops.pixel_softmax import accepts_pixel_softmax, pixel_softmax_code
from .quant_step import qdq_code, rounded_lookup_code
from .quant_table import ByteTable, byte_table, lookup_code
from .selectors.conv import reads_concat_in_place, reads_gated
from .selectors.pair import select_pair

_SOFTMAX = (Builtin.SOFTMAX, Builtin.LOG_SOFTMAX)


def linkable(node: Node, graph: Graph, fused_input: int, producer: KernelNode) -> bool:
    """Can ``node`` run on the result of ``producer``, the kernel producing ``fused_input``?"""
    out = graph.tensor(node.outputs[0]).shape
    if graph.tensor(fused_input).shape != out:
        return False
    kernel = producer.kernel
    if node.op in _SOFTMAX:
        ops = kernel.pixel_ops
        return (
            bool(out) and ops is not None and not kernel.links
            and accepts_pixel_softmax(ops, out[-1], node.op == Builtin.LOG_SOFTMAX)
        )  # fmt: skip
    if not kernel.accepts_links or not takes_another_link(kernel):
        return False  # no write hooks, or a kernel as long as it should grow (bounds.py)
    op = op_for(node)
    return op is not None and op.links(node, graph, fused_input)


def link(producer: KernelNode, node: Node, fused_input: int, ctx: EmitContext) -> None:
    """Run ``node`` in ``producer``'s kernel and make ``producer`` write ``node``'s output."""
    kernel = producer.kernel
    if node.op in _SOFTMAX:
        ops = kernel.pixel_ops
        assert ops is not None
        beta = float(node.params.get("beta", 1.0)) if node.op == Builtin.SOFTMAX else 1.0
        channels = ctx.graph.tensor(fused_input).shape[-1]
        kernel.pixel_code = pixel_softmax_code(ops, channels, beta, node.op == Builtin.LOG_SOFTMAX)
    else:
        op = op_for(node)
        assert op is not None
        # the op's code in a block of its own, its names in the namespace of the kernel's n-th link
        place = Link(kernel, producer.input_ids, ctx, f"link{kernel.links + 1}")
        found = op.lookup(node, ctx.graph)
        if found is not None:
            _link_table(kernel, place, *found, ctx.graph.tensor(node.outputs[0]).carried)
        else:
            code = "  {\n" + op.link(node, fused_input, place) + "  }\n"
            wide = {width: op.wide_link(node, ctx.graph, width) for width in kernel.wide_widths}
            reads = False
            if kernel.wide_coordinates and not all(c is not None for c in wide.values()):
                # an op reading an operand at the vector's slices (after ``link`` added the operand)
                wide = {width: op.wide_operand_link(node, fused_input, place, width) for width in kernel.wide_widths}
                reads = True
            if _append_link(kernel, code, wide) and reads:
                kernel.wide_reads = True
    producer.output_ids = list(node.outputs)
    producer.nodes += node.params.get("fused_names", [node.name])  # a rewrite's node carries its nodes' names


def _append_link(kernel: Kernel, code: str, wide: dict[int, str | None]) -> bool:
    """Link ``code`` into ``kernel`` in front of its writes, and at its wider vectors (``wide``,
    per width of its kernel.WideOps points) when every link before it runs there and it has
    code for each width. Whether it runs there."""
    kernel.linked.append(code)
    kernel.rounds_onto = kernel.on_grid = None
    if len(kernel.wide_linked) == len(kernel.linked) - 1:  # every op before it ran wide
        if wide and all(c is not None for c in wide.values()):
            kernel.wide_linked.append({width: f"  {{\n{c}  }}\n" for width, c in wide.items() if c is not None})
            return True
    return False


def _link_table(kernel: Kernel, place: Link, src: Carried, values: np.ndarray, dst: Carried | None) -> None:
    """A table of ``src``'s integers (quant_table.py) linked into ``kernel``: when the kernel's
    last step rounds onto ``src`` (its output's rounding, quant_step.qdq_code), the rounded integer
    is the index (quant_step.rounded_lookup_code) and that step is left empty, its link slot kept so
    that later links' names stay apart. Its 16-wide reads look codes up (quant_table.ByteTable)
    where the device has the byte permute and the values are on ``dst``, the output's grid."""
    entries = place.add_table("table", values)
    widths = kernel.wide_widths
    codes = _byte_table(place, values, dst) if 16 in widths and place.ctx.options.byte_lookup else None
    if kernel.rounds_onto != src:
        _append_link(kernel, lookup_code(src, entries), {w: lookup_code(src, entries, w, codes) for w in widths})
        return
    wide = len(kernel.wide_linked) == len(kernel.linked)  # the rounding step ran wide
    kernel.linked[-1] = ""
    if wide:
        kernel.wide_linked[-1] = {width: "" for width in kernel.wide_linked[-1]}
    wide_code: dict[int, str | None] = {w: rounded_lookup_code(src, entries, w, codes) for w in widths}
    _append_link(kernel, rounded_lookup_code(src, entries), wide_code)


def _byte_table(place: Link, values: np.ndarray, dst: Carried | None) -> ByteTable | None:
    """The codes of a table's ``values`` as a buffer object of ``place``'s (quant_table.byte_table),
    where they are on ``dst``."""
    if dst is None:
        return None
    data = byte_table(values, dst)
    return None if data is None else ByteTable(place.add_table("codes", np.frombuffer(data, np.float32)), dst)


def regrids(graph: Graph, node: Node) -> bool:
    """Does ``node`` write a carried tensor (quant.py) whose values its inputs may not hold already?"""
    out = graph.tensor(node.outputs[0]).carried if node.outputs else None
    data = [graph.tensor(i) for i in node.inputs if i >= 0 and not graph.tensor(i).is_constant]
    return out is not None and any(t.carried != out for t in data)


def quantize_output(placed: KernelNode, node: Node, graph: Graph) -> bool:
    """Round ``node``'s result onto its output's grid in ``placed``'s kernel when the output is a
    carried tensor (quant.py): the step runs in front of the kernel's writes, linked like an op
    (at its wider vectors too, where the links before it run there).
    False when the kernel has no write hook for it and the step is needed."""
    params = graph.tensor(node.outputs[0]).carried if len(node.outputs) == 1 else None
    op = op_for(node)
    kernel = placed.kernel
    if params is None:
        return True
    if op is not None and op.writes_grid(node, graph):
        # a table whose values are on the grid (quant_table.py), or a copy of values on it: the
        # last step ends on the grid, as a rounding step would (the output may carry codes, codes.py)
        kernel.on_grid = params
        return True
    if kernel.accepts_links:
        with_zero_point = traits_of(node.op).rounds_with_zero_point
        wide = {width: qdq_code(params, with_zero_point, width) for width in kernel.wide_widths}
        _append_link(kernel, qdq_code(params, with_zero_point), wide)
        kernel.rounds_onto = None if with_zero_point else params
    return kernel.accepts_links or not regrids(graph, node)


def _no_write_hook(node: Node) -> ValueError:
    return ValueError(f"{node.name}: its kernel has no write hook for the quantize-and-dequantize step")


class ConcatReadInPlace:
    """A CONCATENATION output whose only reader reads the concatenation's inputs in place: the
    concatenation gets no kernel and its output no memory; its reader's kernel carries its name."""

    def match(self, kernel: KernelNode, site: KernelGraph) -> FusionMatch | None:
        node = kernel.ops[0]
        if node.op != Builtin.CONCATENATION or len(node.outputs) != 1 or not kernel.open_to_links:
            return None
        out = node.outputs[0]
        reader = site.only_reader(out)
        if reader is None or reader.index not in site.kernel_of:
            return None
        if regrids(site.graph, node):
            return None  # its output must be rounded onto its grid, which a read in place skips
        if not reads_concat_in_place(reader, node, site.graph, site.emit.options):
            return None
        return FusionMatch((kernel, site.kernel_of[reader.index]), out)

    def apply(self, site: KernelGraph, found: FusionMatch) -> None:
        concat, reader = found.kernels
        site.emit.concat_sources[found.tensor] = list(concat.ops[0].inputs)
        site.in_place_names[found.tensor] = concat.ops[0].name
        site.drop(concat)
        (again,) = site.emit_node(reader.ops[0], reader.position)
        site.replace(reader, again)


class DepthwisePair:
    """A depthwise node and the 1x1 convolution reading it in one kernel (ops/conv_pair.py), where
    selectors/pair.select_pair gives the pair a kernel. The depthwise output must have no other
    reader, not be a partition output, and not need float32 storage (the pair holds it in FLT
    local memory)."""

    def match(self, kernel: KernelNode, site: KernelGraph) -> FusionMatch | None:
        node = kernel.ops[0]
        if site.emit.options.pair_local_bytes <= 0 or node.op != Builtin.DEPTHWISE_CONV_2D or len(node.outputs) != 1:
            return None
        if len(kernel.ops) != 1:
            return None
        out = node.outputs[0]
        conv = site.reader_of.get(out)
        if conv is None or site.readers.get(out, 0) != 1 or out in site.outputs or out in site.wide:
            return None
        if conv.index not in site.kernel_of:
            return None
        if site.graph.tensor(out).carried is not None:
            return None  # the depthwise output is rounded onto its grid, which the pair kernel has no point for
        if select_pair(node, conv, site.graph, site.emit.options) is None:
            return None
        return FusionMatch((kernel, site.kernel_of[conv.index]), out)

    def apply(self, site: KernelGraph, found: FusionMatch) -> None:
        first, second = found.kernels
        node, conv = first.ops[0], second.ops[0]
        spec = select_pair(node, conv, site.graph, site.emit.options)
        assert spec is not None  # match found one
        kernel = pair_operation(node, conv, site.emit, spec)
        names = [node.name, conv.name, *(site.names[i] for i in (node.index, conv.index) if i in site.names)]
        pair = site.place(kernel, [node.inputs[0]], list(conv.outputs), names, [node, conv], first.position)
        site.drop(second)
        site.replace(first, pair)


class GatedRead:
    """A squeeze-excite MUL(x, gate) (ops/gated_read.py) whose output's only reader, a CONV_2D,
    can read x times the gate (selectors/conv.reads_gated): the MUL gets no kernel and its output
    no memory; the reader is emitted again reading x and the gate, its kernel carrying the MUL's
    name. The output must not need float32 storage in a half-precision partition (the gated read
    is in FLT); a carried one (quant.py) is rounded onto its grid as the convolution reads it,
    where reads_gated finds that done once per value."""

    def match(self, kernel: KernelNode, site: KernelGraph) -> FusionMatch | None:
        node = kernel.ops[0]
        if len(kernel.ops) != 1 or not kernel.open_to_links or gated_mul(node, site.graph) is None:
            return None
        out = node.outputs[0]
        reader = site.only_reader(out)
        if reader is None or reader.index not in site.kernel_of or out in site.wide:
            return None
        if len(site.kernel_of[reader.index].ops) != 1 or not reads_gated(reader, out, site.graph, site.emit.options):
            return None
        return FusionMatch((kernel, site.kernel_of[reader.index]), out)

    def apply(self, site: KernelGraph, found: FusionMatch) -> None:
        mul, reader = found.kernels
        node = mul.ops[0]
        operands = gated_mul(node, site.graph)
        assert operands is not None  # match found them
        site.emit.gated_reads[found.tensor] = GatedInput(*operands)
        site.in_place_names[found.tensor] = node.name
        site.drop(mul)
        (again,) = site.emit_node(reader.ops[0], reader.position)
        site.replace(reader, again)


class QuantizeOutputs:
    """Each kernel writing a carried tensor rounds its result onto the tensor's grid."""

    def match(self, kernel: KernelNode, site: KernelGraph) -> FusionMatch | None:
        node = kernel.ops[-1]
        if not kernel.open_to_links or len(node.outputs) != 1 or site.graph.tensor(node.outputs[0]).carried is None:
            return None
        return FusionMatch((kernel,), node.outputs[0])

    def apply(self, site: KernelGraph, found: FusionMatch) -> None:
        (kernel,) = found.kernels
        if not quantize_output(kernel, kernel.ops[-1], site.graph):
            site.unrounded.append(kernel)  # an error unless a later pass links the op elsewhere


def check_rounded(site: KernelGraph) -> None:
    """Refuse a kernel left writing a carried tensor it cannot round onto its grid."""
    for kernel in site.unrounded:
        if not kernel.dropped:
            raise _no_write_hook(kernel.ops[-1])


def _link_target(kernel: KernelNode, site: KernelGraph) -> FusionMatch | None:
    """The kernel's op linked into the kernel producing one of its inputs, if one can take it."""
    if len(kernel.ops) != 1 or not kernel.open_to_links:
        return None
    node = kernel.ops[0]
    for candidate in node.inputs:
        producer = site.producer_of.get(candidate) if candidate >= 0 else None
        if producer is None or site.only_reader(candidate) is None:
            continue  # another reader, or the host wants it: it must be written
        if linkable(node, site.graph, candidate, producer):
            return FusionMatch((producer, kernel), candidate)
    return None


def _link_into(site: KernelGraph, found: FusionMatch) -> None:
    producer, kernel = found.kernels
    node, fused = kernel.ops[0], found.tensor
    graph = site.graph
    operands = [i for i in node.inputs if i >= 0 and i != fused and graph.tensor(i).constant is None]
    producer.joins.append((kernel.position, operands))
    site.drop(kernel)
    del site.producer_of[fused]
    link(producer, node, fused, site.emit)
    producer.nodes += [site.names[node.index]] if node.index in site.names else []
    if not quantize_output(producer, node, graph):
        raise _no_write_hook(node)
    producer.ops.append(node)
    site.producer_of[node.outputs[0]] = producer
    producer.uses.append((kernel.position, [*producer.input_ids, *node.outputs]))


class PixelSoftmax:
    """A SOFTMAX / LOG_SOFTMAX at the pixel ops of the matrix product producing its input."""

    def match(self, kernel: KernelNode, site: KernelGraph) -> FusionMatch | None:
        return _link_target(kernel, site) if kernel.ops[0].op in _SOFTMAX else None

    def apply(self, site: KernelGraph, found: FusionMatch) -> None:
        _link_into(site, found)


class ElementwiseLink:
    """An op that links (``Op.links``) run in front of the writes of its producer's kernel."""

    def match(self, kernel: KernelNode, site: KernelGraph) -> FusionMatch | None:
        return _link_target(kernel, site) if kernel.ops[0].op not in _SOFTMAX else None

    def apply(self, site: KernelGraph, found: FusionMatch) -> None:
        _link_into(site, found)


#: the fusion passes, in the order they run
FUSIONS: list[Fusion] = [
    ConcatReadInPlace(),
    DepthwisePair(),
    GatedRead(),
    QuantizeOutputs(),
    PixelSoftmax(),
    ElementwiseLink(),
]
#: with fusion off, only the rounding of carried outputs
UNFUSED: list[Fusion] = [QuantizeOutputs()]
