"""The swish rewrite: MUL(y, LOGISTIC(y)), either operand order, becomes one node of ops/swish.py,
a unary op on y. Alone, y has two readers (the LOGISTIC and the MUL), so neither links into y's
producer (fusion.py) and each swish costs two kernels and two trips through memory; the fused node
is y's only reader and links like any unary op. The LOGISTIC's output must be read by the MUL
only and not be a partition output; the MUL must have no fused activation."""

from __future__ import annotations

from .graph import FLOAT32, Builtin, Node
from .ops.swish import SWISH
from .rewrites import Match, Site, replace_nodes


class SwishRewrite:
    """The rewrite pass: ``match`` at the MUL, ``apply`` puts the fused node in its place."""

    def match(self, node: Node, site: Site) -> Match | None:
        if node.op != Builtin.MUL or len(node.inputs) != 2 or len(node.outputs) != 1:
            return None
        if node.params.get("activation", 0):
            return None
        graph = site.graph
        for gate, y in (node.inputs, node.inputs[::-1]):
            logistic = site.producer.get(gate)
            if logistic is None or logistic.op != Builtin.LOGISTIC or tuple(logistic.inputs) != (y,):
                continue
            if gate == y or site.only_reader(gate) is not node:
                continue  # the sigmoid is wanted elsewhere: it must be written
            shapes = {graph.tensor(t).shape for t in (y, gate, node.outputs[0])}
            if len(shapes) != 1 or any(graph.tensor(t).dtype != FLOAT32 for t in (y, gate)):
                continue
            fused = Node(
                index=node.index,
                op=SWISH,
                version=1,
                inputs=(y,),
                outputs=node.outputs,
                params={"gate_grid": graph.tensor(gate).carried, "fused_names": [logistic.name, node.name]},
            )
            return Match(tuple(i for i in site.nodes if i in (logistic.index, node.index)), fused)
        return None

    def apply(self, site: Site, found: Match) -> Site:
        return replace_nodes(site, found)
