"""The kernel graph of a partition: one kernel per op, then the fusion passes over it.

``emit_kernels`` emits one ``KernelNode`` per node of the (rewritten) partition, in node order,
each knowing the graph node it runs and its position in that order; a node whose outputs are all
folded constants gets none, and a per-output op (SPLIT) one per output. ``fuse`` then runs an
ordered list of passes over the kernels (fusion.py), each a ``match`` (at one kernel: does its
pattern start there?) and an ``apply`` (merge kernels: drop some, replace or grow others). The
passes never reorder kernels; the scheduler (scheduler.py) orders the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from .graph import Graph, Node
from .kernel import Kernel, KernelNode
from .ops import EmitContext, op_for


def runtime_inputs(node: Node, graph: Graph) -> list[int]:
    op = op_for(node)
    assert op is not None, f"{node.name} was claimed with no op to compile it"
    return [i for i in node.inputs[: op.data_inputs] if i >= 0 and not graph.tensor(i).is_constant]


@dataclass(eq=False)
class KernelGraph:
    """A partition's kernels while the fusion passes run, and what the passes read."""

    graph: Graph
    #: the partition's nodes after the graph rewrites (rewrites.py), in execution order
    nodes: list[int]
    inputs: list[int]
    outputs: list[int]
    emit: EmitContext
    #: names of nodes merged away by a rewrite that another node's kernel carries (a merged PAD)
    names: dict[int, str]
    #: tensors a half-precision partition stores in float32 (precision.py)
    wide: frozenset[int] = frozenset()
    kernels: list[KernelNode] = field(default_factory=list)
    #: tensor -> how many of ``nodes`` read it
    readers: dict[int, int] = field(default_factory=dict)
    #: tensor -> the last of ``nodes`` reading it (the only one where ``readers`` says 1)
    reader_of: dict[int, Node] = field(default_factory=dict)
    #: runtime tensor -> the kernel writing it, open to links
    producer_of: dict[int, KernelNode] = field(default_factory=dict)
    #: node index -> the kernel whose first op it is
    kernel_of: dict[int, KernelNode] = field(default_factory=dict)
    #: nodes read in place by their reader (concatenations, gated MULs): output -> the node's name
    #: (fusion.py)
    in_place_names: dict[int, str] = field(default_factory=dict)
    #: kernels writing a carried tensor with no write hook to round it in (fusion.QuantizeOutputs)
    unrounded: list[KernelNode] = field(default_factory=list)

    def __post_init__(self) -> None:
        for index in self.nodes:
            node = self.graph.nodes[index]
            for i in set(node.inputs):
                self.readers[i] = self.readers.get(i, 0) + 1
                self.reader_of[i] = node

    def only_reader(self, tensor: int) -> Node | None:
        """The one node reading ``tensor``, when it is no partition output."""
        if self.readers.get(tensor, 0) != 1 or tensor in self.outputs:
            return None
        return self.reader_of.get(tensor)

    def place(
        self, kernel: Kernel, inputs: list[int], outputs: list[int], names: list[str], ops: list[Node], position: int
    ) -> KernelNode:
        """A kernel node running ``ops`` from ``position``, open to links."""
        placed = KernelNode(kernel, inputs, outputs, names, ops=ops, position=position)
        if len(placed.input_ids) != len(kernel.operation.src_tensors_names):
            raise ValueError(f"{ops[0].name}: {len(inputs)} runtime inputs for {kernel.operation.src_tensors_names}")
        placed.uses.append((position, [*inputs, *outputs]))
        return placed

    def emit_node(self, node: Node, position: int) -> list[KernelNode]:
        """The kernels of ``node`` by itself (none when its outputs are folded constants)."""
        graph, emit = self.graph, self.emit
        if node.outputs and all(graph.tensor(o).is_constant for o in node.outputs):
            return []  # folded into a constant (fold.py, shapes.py): no kernel
        op = op_for(node)
        assert op is not None
        node_inputs = runtime_inputs(node, graph)
        if op.per_output:  # several outputs: one kernel each, all reading the same input
            placed = [
                KernelNode(kernel, node_inputs, [output], [f"{node.name}:{output}"], stamps_precision=False,
                           ops=[node], position=position, open_to_links=False)
                for kernel, output in op.emit_many(node, emit)
            ]  # fmt: skip
            if placed:
                placed[0].uses.append((position, [*node_inputs, *node.outputs]))
            return placed
        kernel = op.emit(node, emit)
        node_inputs = [j for i in node_inputs for j in emit.read_inputs(i)]
        names = [*node.params.get("fused_names", [node.name])]  # a rewrite's node carries its nodes' names
        names += [self.in_place_names[i] for i in node.inputs if i in self.in_place_names]
        names += [self.names[node.index]] if node.index in self.names else []
        outputs = [*node.outputs, *op.updated_inputs(node)]
        return [self.place(kernel, node_inputs, outputs, names, [node], position)]

    def add(self, placed: list[KernelNode]) -> None:
        for k in placed:
            self.kernels.append(k)
            self.kernel_of.setdefault(k.ops[0].index, k)
            if k.open_to_links:
                self.producer_of[k.output_ids[0]] = k

    def drop(self, kernel: KernelNode) -> None:
        """``kernel`` merged into another: no longer in the graph."""
        kernel.dropped = True
        for i in kernel.output_ids:
            if self.producer_of.get(i) is kernel:
                del self.producer_of[i]

    def replace(self, old: KernelNode, new: KernelNode) -> None:
        """``new`` in ``old``'s place."""
        self.kernels[self.kernels.index(old)] = new
        self.drop(old)
        self.kernel_of[new.ops[0].index] = new
        self.producer_of[new.output_ids[0]] = new


def emit_kernels(site: KernelGraph) -> None:
    """One kernel node per op of the partition, in node order."""
    for position, index in enumerate(site.nodes):
        site.add(site.emit_node(site.graph.nodes[index], position))


@dataclass(frozen=True)
class FusionMatch:
    """A pattern found by a fusion pass: the kernels it merges, and the tensor that joins them."""

    kernels: tuple[KernelNode, ...]
    tensor: int


class Fusion(Protocol):
    def match(self, kernel: KernelNode, site: KernelGraph) -> FusionMatch | None:
        """The pattern starting at ``kernel``, if it is there."""

    def apply(self, site: KernelGraph, found: FusionMatch) -> None:
        """Merge ``found``'s kernels in ``site``."""


def fuse(site: KernelGraph, passes: list[Fusion]) -> None:
    """Each pass in order over the kernels (in node order), applied wherever it matches."""
    for each in passes:
        for kernel in list(site.kernels):
            if kernel.dropped:
                continue
            found = each.match(kernel, site)
            if found is not None:
                each.apply(site, found)
        site.kernels = [k for k in site.kernels if not k.dropped]
