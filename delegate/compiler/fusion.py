"""Fusion: a chain of ops after a producer runs inside the producer's kernel.

An op that says it links (``Op.links``: a unary op, a binary op whose other operand is a
constant or any runtime tensor, a 1x1 depthwise convolution that is a per-channel scale and shift)
is linked into the kernel that produces its input when that input has no other reader and is not
a partition output, and the kernel declares the writes of its ``result`` (kernel.WriteHook): its
code runs on ``result`` in front of every write (the schema's ``linkable`` / ``linkable_count``),
saving one kernel launch and one trip through memory. The op writes its own code (``Op.link``),
its arguments named in the link's namespace (ops/base.py ``Link``). A SOFTMAX / LOG_SOFTMAX links
into a matrix-product kernel that holds every channel of its pixels (kernel.PixelOps) and has
nothing linked yet: it runs on the accumulators, before the writes (so before any op linked after
it).
"""

from __future__ import annotations

from .bounds import takes_another_link
from .graph import Builtin, Graph, Node
from .kernel import KernelNode
from .ops import op_for
from .ops.base import EmitContext, Link
from .ops.pixel_softmax import accepts_pixel_softmax, pixel_softmax_code

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
        kernel.linked.append("  {\n" + op.link(node, fused_input, place) + "  }\n")
    producer.output_ids = list(node.outputs)
    producer.nodes.append(node.name)
