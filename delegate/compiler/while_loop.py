"""WHILE loops with a trip count known before they run, unrolled into the calling graph.

Keras 3 converts its RNN layers (LSTM, GRU, their Bidirectional wrappers) to a WHILE whose loop
counters start at constants of the calling graph, whose condition compares them with constants,
and whose body adds a constant to them: the trip count is fixed by the model. Each trip's copy of
the body then sees its counters as constants, so what the body computes from them (the GATHER
reading step i of the sequence, the SLICE / CONCATENATION writing step i of the output list) is
evaluated here and leaves copies of the body's float work with constant indices, which the
compiler runs like any other nodes. The WHILE becomes one node of a partition that runs the
unrolled copies.

The plugin captures the condition and body subgraphs (``Loop``, on the WHILE node's params under
``LOOP``), or why it could not (``LOOP_REASON``); ``expand_loops`` puts the unrolled nodes and
tensors into the calling graph, with indices of their own past the graph's, and says for each WHILE
that stays on CPU why.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from .fingerprint import partition_fingerprint
from .graph import BOOL, FLOAT32, INT32, Builtin, Graph, Node, Tensor
from .ops import op_for
from .ops.constant_value import CONSTANT_VALUE
from .stand_ins import StandIns

#: node params key of a WHILE's captured subgraphs (a ``Loop``), and of why they were not captured
LOOP = "loop"
LOOP_REASON = "loop_reason"
#: params key of an unrolled copy: which WHILE, body node and trip it copies (for messages)
UNROLLED_FROM = "unrolled_from"
#: params key of an unrolled WHILE: its copies' nodes (what cpu_choice.py counts for it)
UNROLLED = "unrolled"
#: builtin code of WHILE (not in graph.Builtin: no op of the compiler runs it as a node)
WHILE = 119
#: the most nodes the copies of a loop's body may add to a partition: each is a kernel or a link
#: of one, and a partition's kernels are bounded (context/bounds.py MAX_NODES, 4096)
MAX_UNROLLED_NODES = 2048
#: the most trips a loop is evaluated for, whatever its body holds (a body of folded values only)
MAX_TRIPS = 4096
#: folded values up to this size (bytes) become constants of the graph; larger ones stay nodes
MAX_FOLDED_BYTES = 1 << 16
_VALUE_TYPES = {FLOAT32: np.float32, INT32: np.int32, 4: np.int64, BOOL: np.bool_}
#: ops that only move values: their float results are folded exactly
_MOVES = frozenset(
    {
        Builtin.RESHAPE,
        Builtin.SQUEEZE,
        Builtin.EXPAND_DIMS,
        Builtin.SLICE,
        Builtin.STRIDED_SLICE,
        Builtin.CONCATENATION,
        Builtin.GATHER,
        Builtin.SELECT,
        Builtin.SELECT_V2,
    }
)
_COMPARE = {
    Builtin.LESS: np.less,
    Builtin.LESS_EQUAL: np.less_equal,
    Builtin.GREATER: np.greater,
    Builtin.GREATER_EQUAL: np.greater_equal,
    Builtin.EQUAL: np.equal,
    Builtin.NOT_EQUAL: np.not_equal,
    Builtin.LOGICAL_AND: np.logical_and,
    Builtin.LOGICAL_OR: np.logical_or,
}


@dataclass
class Subgraph:
    """A subgraph of the model as its own context holds it: its graph (every constant valued), its
    execution plan, and its inputs and outputs (tensor indices of that subgraph)."""

    graph: Graph
    plan: list[int]
    inputs: list[int]
    outputs: list[int]


@dataclass
class Loop:
    """A WHILE's condition and body."""

    cond: Subgraph
    body: Subgraph

    def __str__(self) -> str:
        """What a fingerprint of the WHILE node takes of it (compiler/fingerprint.py writes params
        with ``str``): each subgraph's nodes, shapes and interface, not their arrays' text."""
        parts = [f"{partition_fingerprint(s.graph, s.plan)}:{s.inputs}:{s.outputs}" for s in (self.cond, self.body)]
        return f"Loop({', '.join(parts)})"


@dataclass
class Expansion(StandIns):
    """The plan with each unrollable WHILE replaced by its copies' nodes (``members``), why each
    other WHILE stays on CPU (node index -> why), and each unrolled one's trip count."""

    trips: dict[int, int] = field(default_factory=dict)

    def refusal(self, graph: Graph, owner: int, member: Node, why: str | None) -> str:
        unrolled = f"unrolled ({self.trips[owner]} trips)"
        if why is None:
            return f"{unrolled}, a copy of its body is not claimed"
        return f"{unrolled}, {member.params.get(UNROLLED_FROM, member.name)} cannot run on the delegate: {why}"


class _Refused(Exception):
    """Why a loop is not unrolled."""


def expand_loops(graph: Graph, plan: list[int], first_tensor: int) -> Expansion:
    """Unroll every WHILE of ``plan`` that can be, adding its copies to ``graph`` (tensors numbered
    from ``first_tensor``, past every tensor of the interpreter's subgraph; nodes past the plan's)."""
    expansion = Expansion(list(plan))
    if not any(graph.nodes[i].op == WHILE for i in plan):
        return expansion
    next_tensor = max(first_tensor, max(graph.tensors, default=-1) + 1)
    next_node = max(graph.nodes, default=-1) + 1
    out: list[int] = []
    for index in plan:
        node = graph.nodes[index]
        if node.op != WHILE:
            out.append(index)
            continue
        node.params.pop(UNROLLED, None)  # from an earlier expansion of this node
        unroller = _Unroller(graph, node, next_tensor, next_node, plan)
        try:
            trips = unroller.run()
            if not unroller.nodes:
                raise _Refused(f"unrolled ({trips} trips), it leaves nothing to compute: its outputs are constants")
        except _Refused as exc:
            expansion.reasons[index] = str(exc)
            out.append(index)
            continue
        unroller.commit()
        next_tensor, next_node = unroller.next_tensor, unroller.next_node
        expansion.members[index] = [n.index for n in unroller.nodes]
        node.params[UNROLLED] = tuple(expansion.members[index])
        expansion.trips[index] = trips
        out.extend(expansion.members[index])
    expansion.plan = out
    return expansion


class _Unroller:
    """One WHILE's unrolling: tensors and nodes made aside, put into the graph by ``commit``."""

    def __init__(self, graph: Graph, node: Node, next_tensor: int, next_node: int, plan: list[int]) -> None:
        self.graph, self.node, self.plan = graph, node, plan
        self.next_tensor, self.next_node = next_tensor, next_node
        self.tensors: dict[int, Tensor] = {}
        self.nodes: list[Node] = []
        #: tensors of no elements (a SLICE of size 0: what a list write before step 0 reads)
        self.empty: set[int] = set()
        self.body_constants: dict[int, int] = {}

    # --- the calling graph's tensors and the ones made here --------------------------------------

    def tensor(self, index: int) -> Tensor:
        return self.tensors[index] if index in self.tensors else self.graph.tensor(index)

    def value(self, index: int) -> np.ndarray | None:
        t = self.tensor(index)
        return np.asarray(t.constant) if t.is_constant and t.constant is not None else None

    def new_tensor(self, like: Tensor, shape: tuple[int, ...], value: np.ndarray | None = None) -> int:
        index = self.next_tensor
        self.next_tensor += 1
        self.tensors[index] = dataclasses.replace(
            like, index=index, shape=tuple(shape), is_constant=value is not None, constant=value, signature=tuple(shape)
        )
        if math.prod(shape) == 0:
            self.empty.add(index)
        return index

    def constant(self, like: Tensor, value: np.ndarray) -> int:
        return self.new_tensor(like, tuple(value.shape), value.astype(_VALUE_TYPES[like.dtype]))

    def commit(self) -> None:
        self.graph.tensors.update(self.tensors)
        for n in self.nodes:
            self.graph.nodes[n.index] = n

    # --- the loop ---------------------------------------------------------------------------------

    def run(self) -> int:
        loop = self.node.params.get(LOOP)
        if not isinstance(loop, Loop):
            raise _Refused(str(self.node.params.get(LOOP_REASON, "its condition and body subgraphs were not captured")))
        values = list(self.node.inputs)
        self._check_interface(loop, values)
        values = [self._materialized(v) for v in values]
        body_nodes = len(loop.body.plan)
        trips = 0
        while self._condition(loop.cond, values):
            trips += 1
            if trips > MAX_TRIPS:
                raise _Refused(f"it runs more than {MAX_TRIPS} trips")
            values = self._trip(loop.body, values, trips)
            if len(self.nodes) > MAX_UNROLLED_NODES:
                raise _Refused(
                    f"unrolled, its body ({body_nodes} nodes) would add more than {MAX_UNROLLED_NODES} nodes "
                    f"by trip {trips}: a partition has room for a bounded number of kernels"
                )
        self._bind_outputs(values)
        return trips

    def _materialized(self, value: int) -> int:
        """A float loop value the calling graph starts at a constant, written into a tensor of the
        copies' (ops/constant_value.py): the body's float ops read runtime data in every trip."""
        t = self.tensor(value)
        if t.dtype != FLOAT32 or not t.is_constant:
            return value
        made = self.new_tensor(t, t.shape)
        params = {UNROLLED_FROM: f"{self.node.name} (the first value of tensor {value})"}
        self.nodes.append(Node(self.next_node, CONSTANT_VALUE, 1, (value,), (made,), params))
        self.next_node += 1
        return made

    def _check_interface(self, loop: Loop, values: list[int]) -> None:
        sides = (
            ("condition's inputs", loop.cond.graph, loop.cond.inputs),
            ("body's inputs", loop.body.graph, loop.body.inputs),
            ("body's outputs", loop.body.graph, loop.body.outputs),
        )
        for what, graph, ids in sides:
            if len(ids) != len(values):
                raise _Refused(f"its {what} are {len(ids)} tensors for {len(values)} loop values")
            for k, (i, v) in enumerate(zip(ids, values, strict=True)):
                a, b = graph.tensor(i), self.tensor(v)
                if a.dtype != b.dtype or a.shape != b.shape:
                    raise _Refused(
                        f"loop value {k} is {list(b.shape)} of type {b.dtype} in the calling graph but "
                        f"{list(a.shape)} of type {a.dtype} among its {what}"
                    )
        if len(loop.cond.outputs) != 1:
            raise _Refused(f"its condition has {len(loop.cond.outputs)} outputs")
        if len(self.node.outputs) != len(values):
            raise _Refused(f"it has {len(self.node.outputs)} outputs for {len(values)} loop values")

    def _condition(self, cond: Subgraph, values: list[int]) -> bool:
        known: dict[int, np.ndarray] = {}
        for i, v in zip(cond.inputs, values, strict=True):
            value = self.value(v)
            if value is not None:
                known[i] = value
        for index in cond.plan:
            node = cond.graph.nodes[index]
            args = []
            for i in node.inputs:
                t = cond.graph.tensor(i)
                arg = known.get(i, np.asarray(t.constant) if t.is_constant and t.constant is not None else None)
                if arg is None:
                    k = cond.inputs.index(i) if i in cond.inputs else None
                    where = f"loop value {k}" if k is not None else f"tensor {i}"
                    raise _Refused(
                        f"its condition reads {where}, computed at run time: the trip count is not known before it runs"
                    )
                args.append(arg)
            result = _fold(node, args, [cond.graph.tensor(o) for o in node.outputs])
            if result is None:
                raise _Refused(f"its condition's {node.op_description} is not evaluated before the loop runs")
            known.update(zip(node.outputs, result, strict=True))
        out = known.get(cond.outputs[0])
        if out is None or out.size != 1:
            raise _Refused("its condition does not give one value before the loop runs")
        return bool(out.reshape(-1)[0])

    def _trip(self, body: Subgraph, values: list[int], trip: int) -> list[int]:
        env: dict[int, int] = dict(zip(body.inputs, values, strict=True))
        for index in body.plan:
            node = body.graph.nodes[index]
            inputs = tuple(self._mapped(body, i, env) for i in node.inputs)
            outs = [body.graph.tensor(o) for o in node.outputs]
            args = [self.value(i) if i >= 0 else None for i in inputs]
            valued = [a for a in args if a is not None]
            folded = _fold(node, valued, outs) if inputs and len(valued) == len(inputs) else None
            if folded is not None and all(_small(v) for v in folded):
                for o, v, t in zip(node.outputs, folded, outs, strict=True):
                    env[o] = self.constant(t, v)
                continue
            self._copy(node, inputs, outs, env, trip)
        values = [env[o] if o in env else self._mapped(body, o, env) for o in body.outputs]
        for k, (v, start) in enumerate(zip(values, self.node.inputs, strict=True)):
            if self.tensor(v).shape != self.tensor(start).shape:
                raise _Refused(
                    f"loop value {k} changes shape in trip {trip} "
                    f"({list(self.tensor(start).shape)} -> {list(self.tensor(v).shape)})"
                )
        return values

    def _mapped(self, body: Subgraph, i: int, env: dict[int, int]) -> int:
        if i < 0 or i in env:
            return env.get(i, i)
        t = body.graph.tensor(i)
        if not t.is_constant or t.constant is None:
            raise _Refused(f"its body reads tensor {i}, which no node of the body writes")
        if i not in self.body_constants:
            self.body_constants[i] = self.constant(t, np.asarray(t.constant))
        return self.body_constants[i]

    def _copy(self, node: Node, inputs: tuple[int, ...], outs: list[Tensor], env: dict[int, int], trip: int) -> None:
        """A copy of body ``node`` reading ``inputs`` (of the calling graph), with fresh outputs."""
        where = f"its body's {node.name} (trip {trip})"
        if any(i in self.empty for i in inputs):  # constants of no elements are in it too (new_tensor)
            if node.op != Builtin.CONCATENATION:
                raise _Refused(f"{where} reads a tensor of no elements")
            inputs = tuple(i for i in inputs if i not in self.empty)
        shapes = self._shapes(node, inputs, outs, where)
        outputs = []
        for t, shape in zip(outs, shapes, strict=True):
            made = self.new_tensor(t, shape)
            if math.prod(shape) == 0:
                self.empty.add(made)
            outputs.append(made)
        for o, made in zip(node.outputs, outputs, strict=True):
            env[o] = made
        if all(o in self.empty for o in outputs):
            return  # nothing to compute: its readers drop it
        params = copy.copy(node.params)
        params[UNROLLED_FROM] = f"{self.node.name}/{node.name} (trip {trip})"
        op = node.op
        if op == Builtin.CONCATENATION and len(inputs) == 1:  # the rest was empty: a copy
            op = Builtin.RESHAPE
            inputs = (inputs[0], self._shape_constant(outputs[0]))
            params = {UNROLLED_FROM: params[UNROLLED_FROM]}
        made_node = dataclasses.replace(node, index=self.next_node, op=op, inputs=inputs, outputs=tuple(outputs))
        made_node.params = params
        self.nodes.append(made_node)
        self.next_node += 1

    def _shape_constant(self, of: int) -> int:
        shape = np.asarray(self.tensor(of).shape, np.int32)
        return self.constant(Tensor(-1, INT32, shape.shape), shape)

    def _shapes(self, node: Node, inputs: tuple[int, ...], outs: list[Tensor], where: str) -> list[tuple[int, ...]]:
        """The output shapes of a copy: the body's, unless they are placeholders of shapes known only
        at run time, which are computed here from the copy's inputs."""
        if not any(t.signature is not None and any(d < 0 for d in t.signature) for t in outs):
            if node.op != Builtin.CONCATENATION or len(inputs) == len(node.inputs):
                return [t.shape for t in outs]
        op = op_for(node)
        if op is None or len(outs) != 1:
            raise _Refused(f"{where} has an output whose shape is only known at run time")
        args = [
            self.value(i) if self.value(i) is not None else np.zeros(self.tensor(i).shape, np.float32) for i in inputs
        ]
        try:
            result = op.fold(node, args, outs[0].shape)
        except (ValueError, IndexError, TypeError) as exc:
            raise _Refused(f"{where}'s output shape could not be computed: {exc}") from None
        if result is None:
            raise _Refused(f"{where} has an output whose shape is only known at run time")
        return [tuple(int(d) for d in np.shape(result))]

    def _bind_outputs(self, values: list[int]) -> None:
        """Make each final loop value the WHILE's output tensor in the calling graph: its copy's
        output renamed, or a node writing it (a constant: the final counters; a value passed
        through), so that every output TFLite may read is written."""
        renamed: set[int] = set()
        for out, final in zip(self.node.outputs, values, strict=True):
            made = next((n for n in self.nodes if final in n.outputs), None)
            if made is not None and final not in renamed:
                renamed.add(final)
                for n in self.nodes:
                    n.outputs = tuple(out if o == final else o for o in n.outputs)
                    n.inputs = tuple(out if i == final else i for i in n.inputs)
                continue
            params = {UNROLLED_FROM: f"{self.node.name} (its output {out})"}
            if self.value(final) is not None:
                written = Node(self.next_node, CONSTANT_VALUE, 1, (final,), (out,), params)
            else:  # a loop value passed through (or one written twice): a copy
                written = Node(self.next_node, Builtin.RESHAPE, 1, (final, self._shape_constant(out)), (out,), params)
            self.nodes.append(written)
            self.next_node += 1


def _small(value: np.ndarray) -> bool:
    return value.nbytes <= MAX_FOLDED_BYTES


def _fold(node: Node, args: list[np.ndarray], outs: list[Tensor]) -> list[np.ndarray] | None:
    """The outputs of ``node`` on constant ``args``, with TFLite's semantics, when it is an op of
    integers or bools, or one that only moves values; else None (the node is copied)."""
    if len(args) != len(node.inputs) or not outs or any(t.dtype not in _VALUE_TYPES for t in outs):
        return None
    if node.op == Builtin.LOGICAL_NOT:
        return [np.logical_not(args[0])]
    if node.op in _COMPARE:
        if node.op in (Builtin.LOGICAL_AND, Builtin.LOGICAL_OR) or all(a.dtype.kind in "iub" for a in args):
            return [_COMPARE[node.op](args[0], args[1])]
        return None
    integers = all(t.dtype != FLOAT32 for t in outs)
    if not integers and node.op not in _MOVES:
        return None
    op = op_for(node)
    if op is None or len(outs) != 1:
        return None
    try:
        result = op.fold(node, args, outs[0].shape)
    except (ValueError, IndexError, TypeError, KeyError):
        return None
    if result is None:
        return None
    return [np.asarray(result).astype(_VALUE_TYPES[outs[0].dtype])]
