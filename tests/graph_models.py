"""Large TFLite graphs for the graph-size tests and benchmarks/prepare_scaling.py: IF and WHILE
nested many levels deep, and long elementwise chains (built with tests/tflite_builder.py)."""

from __future__ import annotations

import numpy as np

from delegate.compiler.graph import Builtin

from .tflite_builder import Op, Subgraph, T, build_model

IF, WHILE = 118, 119
#: the shape every graph here computes on
SHAPE = (1, 4)


def _add(a: int, b: int, out: int) -> Op:
    return Op(Builtin.ADD, [a, b], [out], ("AddOptions", {}))


def nested_if(depth: int) -> bytes:
    """A model whose main graph is an IF, each branch of which is an IF, ``depth`` levels deep
    (both branches of a level are the next level's subgraph); the innermost adds 1 to ``x``.

    Inputs: ``cond`` (bool [1]), ``x`` (float32 [1, 4]); output ``x + 1``. Every subgraph takes
    ``(cond, x)``: an IF passes its condition on as the branch's first input.
    """

    def level(k: int) -> tuple[list[T], list[Op]]:
        tensors = [T((1,), dtype=np.bool_), T(SHAPE), T(SHAPE), T(SHAPE, np.ones(SHAPE, np.float32))]
        if k == depth:
            return tensors, [_add(1, 3, 2)]
        branches = {"ThenSubgraphIndex": k + 1, "ElseSubgraphIndex": k + 1}
        return tensors, [Op(IF, [0, 0, 1], [2], ("IfOptions", branches))]

    (main_tensors, main_ops), *rest = [level(k) for k in range(depth + 1)]
    return build_model(main_tensors, main_ops, [0, 1], [2], tuple(Subgraph(t, o, [0, 1], [2]) for t, o in rest))


def nested_while(depth: int) -> bytes:
    """A model whose main graph is a WHILE loop, whose body runs a WHILE loop, ``depth`` levels
    deep; each loop runs once (its counter goes from 0 to 1) and the innermost body adds 1 to ``x``.

    Input ``x`` (float32 [1, 4]); output ``x + 1``. Loop variables: (counter [1], x). Level k's
    condition (counter < 1) is subgraph 2k - 1, its body subgraph 2k: TFLite's WHILE does not
    take a condition subgraph that an enclosing loop is running.
    """
    one, zero = np.ones((1,), np.float32), np.zeros((1,), np.float32)

    def cond() -> Subgraph:
        tensors = [T((1,)), T(SHAPE), T((1,), one), T((1,), dtype=np.bool_)]
        return Subgraph(tensors, [Op(Builtin.LESS, [0, 2], [3])], [0, 1], [3])

    def loop(level: int, counter: int, x: int, outs: list[int]) -> Op:
        indices = {"CondSubgraphIndex": 2 * level - 1, "BodySubgraphIndex": 2 * level}
        return Op(WHILE, [counter, x], outs, ("WhileOptions", indices))

    def zero_counter(zero: int, out: int) -> Op:
        # a loop's counter starts as a computed tensor: TFLite's WHILE does not take a constant
        return Op(Builtin.MUL, [zero, zero], [out], ("MulOptions", {}))

    subgraphs = []
    for k in range(1, depth + 1):
        # 0 counter, 1 x, 2 one, 3 counter + 1, 4 x out, 5 zero, 6 inner counter, 7 inner counter out
        tensors = [T((1,)), T(SHAPE), T((1,), one), T((1,)), T(SHAPE), T((1,), zero), T((1,)), T((1,))]
        if k == depth:
            tensors.append(T(SHAPE, np.ones(SHAPE, np.float32)))
            ops = [_add(0, 2, 3), _add(1, 8, 4)]
        else:
            ops = [_add(0, 2, 3), zero_counter(5, 6), loop(k + 1, 6, 1, [7, 4])]
        subgraphs += [cond(), Subgraph(tensors, ops, [0, 1], [3, 4])]
    main = [T(SHAPE), T((1,), zero), T((1,)), T((1,)), T(SHAPE)]
    return build_model(main, [zero_counter(1, 2), loop(1, 2, 0, [3, 4])], [0], [4], tuple(subgraphs))


def elementwise_chain(length: int) -> bytes:
    """``length`` elementwise ops in one chain on a [1, 4] input: y = y * 0.999 + 0.001, alternating
    MUL and ADD of constants, so that the values stay bounded however long the chain (the fixed
    point is 1) and every op's result matters."""
    tensors = [T(SHAPE), T((1,), np.array([0.999], np.float32)), T((1,), np.array([0.001], np.float32))]
    ops = []
    for k in range(length):
        tensors.append(T(SHAPE))
        source = len(tensors) - 2 if k else 0
        if k % 2 == 0:
            ops.append(Op(Builtin.MUL, [source, 1], [len(tensors) - 1], ("MulOptions", {})))
        else:
            ops.append(_add(source, 2, len(tensors) - 1))
    return build_model(tensors, ops, [0], [len(tensors) - 1])
