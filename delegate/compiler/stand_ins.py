"""Nodes of TFLite's plan that stand for nodes the compiler adds to the graph.

An inlined STABLEHLO_COMPOSITE stands for its decomposition's nodes (composites.py), an unrolled
WHILE for its body's copies (while_loop.py). The claim sees the added nodes in the plan; TFLite
sees only its own, so a stand-in is claimed when every node it stands for is, and a partition
compiles those nodes in its place. ``StandIns`` keeps that correspondence for one kind; the
kinds differ only in how they say why a stand-in stays on CPU (``refusal``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph import Graph, Node


@dataclass
class StandIns:
    """The plan with each stand-in replaced by its nodes (``members``, in execution order), and
    why each node that could have been one is not (node index -> why)."""

    plan: list[int]
    members: dict[int, list[int]] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)
    _owners: dict[int, int] = field(default_factory=dict, repr=False)

    def expand(self, nodes: list[int]) -> list[int]:
        """``nodes`` (of the plan before expansion) with each stand-in replaced by its nodes."""
        return [m for n in nodes for m in self.members.get(n, [n])]

    def owner(self, index: int) -> int | None:
        """The stand-in whose node ``index`` is, or None."""
        if len(self._owners) != sum(map(len, self.members.values())):
            self._owners = {m: owner for owner, members in self.members.items() for m in members}
        return self._owners.get(index)

    def outer(self, index: int) -> int:
        """The stand-in whose node ``index`` is, else ``index`` itself."""
        owner = self.owner(index)
        return index if owner is None else owner

    def real(self, nodes: list[int]) -> list[int]:
        """``nodes`` (of the expanded plan) in the plan before expansion, in its order: a stand-in
        is there when all of its nodes are."""
        given = set(nodes)
        out: list[int] = []
        for index in self.plan:
            owner = self.owner(index)
            if owner is None:
                if index in given:
                    out.append(index)
            elif index == self.members[owner][0] and all(m in given for m in self.members[owner]):
                out.append(owner)
        return out

    def collapse(self, graph: Graph, claimed: list[int], unsupported: dict[str, str]) -> list[int]:
        """The claim over the expanded plan (``claimed``) as ``real`` nodes. The added nodes' names
        leave ``unsupported`` (they are no nodes of TFLite's); a stand-in that is not claimed whole
        is there instead, with the first of its nodes left out and that node's reason."""
        taken = set(claimed)
        for index, why in self.reasons.items():
            unsupported[graph.nodes[index].name] = why
        for owner, members in self.members.items():
            whys = {m: unsupported.pop(graph.nodes[m].name, None) for m in members}
            left = [m for m in members if m not in taken]
            if left:
                first = next((m for m in left if whys[m] is not None), left[0])
                unsupported[graph.nodes[owner].name] = self.refusal(graph, owner, graph.nodes[first], whys[first])
        return self.real(claimed)

    def refusal(self, graph: Graph, owner: int, member: Node, why: str | None) -> str:
        """Why stand-in ``owner`` stays on CPU, ``member`` being a node of it that is not claimed,
        for ``why`` (None: the claim left it out with no reason of its own)."""
        return f"its node {member.name} stays on CPU: {why or 'it is claimed only with the nodes it feeds'}"
