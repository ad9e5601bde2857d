"""Differential test of the compiler on random graphs: hypothesis draws small float32 TFLite
models (branches, joins, residual connections, shared operands, several inputs and outputs) from
the ops the compiler supports, emits their operators in a random valid topological order (the
order of operators in the flatbuffer is TFLite's execution order, and the compiler's), runs them
through the delegate (fusion on or off, F32, F32_F16 or F16, drawn per example) and compares every
output with TFLite's builtin CPU kernels on the same seeded inputs. Every node must be delegated,
so a graph the compiler declines cannot pass by running on CPU.

The random-graph test follows; first, the regression it is meant to catch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import delegate
from delegate.api import host_runtime
from delegate.compiler.graph import Builtin

from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

#: Largest error allowed per precision, relative to the output's scale: the largest magnitude
#: (in TFLite's CPU results) of the output and of every tensor it is computed from, inputs and
#: constants included. test_ops.py's tolerances; the scale is taken over the whole chain because
#: half-precision storage rounds every intermediate tensor, so a difference of two large values,
#: or a sum of many, can only be checked against the size of what went into it.
TOLERANCE = {"F32": 1e-4, "F32_F16": 1e-2, "F16": 1e-2}

# --------------------------------------------------------------------------- the graph


@dataclass
class Net:
    """A model under construction: tensors, ops in the order they were made (a topological order),
    model inputs and the seeded data behind them, and the execution order the model is written in."""

    seed: int = 0
    tensors: list[T] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # one line per op, for reports
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    order: list[int] = field(default_factory=list)  # op indices in execution order

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def shape(self, t: int) -> tuple[int, ...]:
        return self.tensors[t].shape

    def is_runtime(self, t: int) -> bool:
        return self.tensors[t].data is None

    def input(self, shape: tuple[int, ...]) -> int:
        self.tensors.append(T(tuple(shape)))
        self.inputs.append(len(self.tensors) - 1)
        return len(self.tensors) - 1

    def const(self, shape: tuple[int, ...], values: np.ndarray | None = None, dtype=np.float32) -> int:
        if values is None:
            values = self.rng.uniform(-1.0, 1.0, size=shape)
        self.tensors.append(T(tuple(shape), np.asarray(values, dtype).reshape(shape), dtype))
        return len(self.tensors) - 1

    def add(self, code: int, inputs: list[int], shape: tuple[int, ...], options=None, note: str = "") -> int:
        """Append op ``code`` reading ``inputs`` (-1: omitted) and writing a new tensor of ``shape``."""
        self.tensors.append(T(tuple(shape)))
        out = len(self.tensors) - 1
        self.ops.append(Op(code, list(inputs), [out], options))
        self.order.append(len(self.ops) - 1)
        args = ", ".join(self._name(i) for i in inputs)
        self.text.append(f"t{out}{list(shape)} = {Builtin(code).name}({args}){' ' + note if note else ''}")
        return out

    def _name(self, t: int) -> str:
        if t < 0:
            return "-"
        if self.is_runtime(t):
            return f"t{t}"
        return f"c{t}{list(self.shape(t))}"

    def producer(self) -> dict[int, int]:
        return {op.outputs[0]: k for k, op in enumerate(self.ops)}

    def ancestors(self, t: int) -> set[int]:
        """``t`` and every tensor it is computed from (constants included)."""
        producer, seen, todo = self.producer(), set(), [t]
        while todo:
            i = todo.pop()
            if i < 0 or i in seen:
                continue
            seen.add(i)
            if i in producer:
                todo += self.ops[producer[i]].inputs
        return seen

    def finish_outputs(self, extra: list[int] = ()) -> None:
        """Outputs: every tensor nobody reads, and ``extra`` (tensors also read by later ops)."""
        read = {i for op in self.ops for i in op.inputs}
        leaves = [op.outputs[0] for op in self.ops if op.outputs[0] not in read]
        self.outputs = list(dict.fromkeys([*leaves, *extra]))

    def feeds(self) -> dict[int, np.ndarray]:
        rng = np.random.default_rng(self.seed + 1)
        return {i: rng.uniform(-1.0, 1.0, size=self.shape(i)).astype(np.float32) for i in self.inputs}

    def model(self) -> bytes:
        return build_model(self.tensors, [self.ops[k] for k in self.order], self.inputs, self.outputs)

    def __repr__(self) -> str:
        ins = ", ".join(f"t{i}{list(self.shape(i))}" for i in self.inputs)
        body = "\n".join(f"  [{k}] {self.text[k]}" for k in self.order)
        outs = ", ".join(f"t{i}" for i in self.outputs)
        return f"Net(seed={self.seed}, inputs: {ins}\n{body}\n  outputs: {outs})"


# --------------------------------------------------------------------------- running it


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Module-wide folder: the model file and the program cache (repeated kernels are built once)."""
    return tmp_path_factory.mktemp("differential")


def reference(net: Net, path: Path, feeds: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    """Every tensor's value under TFLite's builtin CPU kernels (no default delegate)."""
    host = host_runtime()
    cpu = host.Interpreter(
        model_path=str(path),
        experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES,
        experimental_preserve_all_tensors=True,
    )
    cpu.allocate_tensors()
    for i, value in feeds.items():
        cpu.set_tensor(i, value)
    cpu.invoke()
    values = {i: np.array(cpu.get_tensor(i)) for i in range(len(net.tensors)) if net.is_runtime(i)}
    values.update({i: net.tensors[i].data for i in range(len(net.tensors)) if not net.is_runtime(i)})
    return values


def run_delegate(net: Net, path: Path, feeds: dict[int, np.ndarray], precision: str, fuse: bool, programs: Path):
    interpreter = delegate.Interpreter(str(path), precision=precision, fuse=fuse, program_cache=str(programs))
    state = interpreter.opencl
    assert not state.unsupported, f"nodes left on CPU: {state.unsupported}\n{net}"
    assert not state.fallbacks, f"partitions fell back to CPU: {state.fallbacks}\n{net}"
    assert len(state.delegated_nodes) == len(net.ops), f"{state.delegated_nodes} of {len(net.ops)} delegated\n{net}"
    interpreter.allocate_tensors()
    for i, value in feeds.items():
        interpreter.set_tensor(i, value)
    interpreter.invoke()  # once: a second invoke could read a tensor a first one left behind
    return {i: np.array(interpreter.get_tensor(i)) for i in net.outputs}, state


def errors(net: Net, got: dict[int, np.ndarray], want: dict[int, np.ndarray], precision: str) -> list[str]:
    """One line per output whose error exceeds the tolerance (NaN included)."""
    bad = []
    for o in net.outputs:
        g, w = got[o], want[o]
        if g.shape != w.shape:
            bad.append(f"t{o}: shape {g.shape}, expected {w.shape}")
            continue
        scale = max(max(float(np.abs(want[i]).max(initial=0.0)) for i in net.ancestors(o)), 1e-6)
        err = float(np.abs(g.astype(np.float64) - w).max(initial=0.0))
        if not err <= TOLERANCE[precision] * scale:  # NaN fails
            bad.append(f"t{o}: max abs error {err:.3g} > {TOLERANCE[precision]} x scale {scale:.3g}")
    return bad


def differential(net: Net, workdir: Path, precision: str, fuse: bool) -> None:
    path = workdir / "model.tflite"
    path.write_bytes(net.model())
    feeds = net.feeds()
    want = reference(net, path, feeds)
    got, state = run_delegate(net, path, feeds, precision, fuse, workdir / "programs")
    bad = errors(net, got, want, precision)
    if bad:
        # Say whether the other fusion setting computes it right: a fusion bug, or not.
        other, _ = run_delegate(net, path, feeds, precision, not fuse, workdir / "programs")
        verdict = errors(net, other, want, precision)
        kernels = [p.kernels for p in state.partitions]
        pytest.fail(
            f"{precision}, fuse={fuse} ({kernels} kernels): " + "; ".join(bad) + f"\nwith fuse={not fuse}: "
            f"{'; '.join(verdict) if verdict else 'correct'}\n{net}"
        )


# --------------------------------------------------------------------------- the regression


@pytest.mark.parametrize("producer", ["RELU", "CONV_2D"])
@pytest.mark.parametrize("fuse", [True, False])
def test_linked_binary_op_whose_other_operand_is_written_later(producer, fuse, workdir):
    """t1 = op_a(x); t2 = op_b chain of x, placed after op_a; y = ADD(t1, t2). Linking the ADD into
    op_a's kernel (its first operand's producer) would read t2 before the chain writes it."""
    net = Net(seed=11)
    x = net.input((1, 6, 7, 8))
    if producer == "RELU":
        t1 = net.add(Builtin.RELU, [x], (1, 6, 7, 8))
    else:
        w, b = net.const((8, 1, 1, 8), net.rng.uniform(-0.6, 0.6, (8, 1, 1, 8))), net.const((8,))
        t1 = net.add(Builtin.CONV_2D, [x, w, b], (1, 6, 7, 8), _conv_options(1, 1, 0), "1x1")
    u = net.add(Builtin.NEG, [x], (1, 6, 7, 8))
    t2 = net.add(Builtin.TANH, [u], (1, 6, 7, 8))
    net.add(Builtin.ADD, [t1, t2], (1, 6, 7, 8), ("AddOptions", {"FusedActivationFunction": 0}))
    net.finish_outputs()
    differential(net, workdir, "F32", fuse)


def _conv_options(stride: int, padding: int, act: int, name: str = "Conv2DOptions", **extra) -> tuple:
    return (name, {"Padding": padding, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": act, **extra})
