"""Differential test of the compiler on random graphs: hypothesis draws small float32 TFLite
models (branches, joins, residual connections, shared operands, several inputs and outputs) from
the ops the compiler supports, emits their operators in a random valid topological order (the
order of operators in the flatbuffer is TFLite's execution order, and the compiler's), runs them
through the delegate (fusion on or off, F32, F32_F16 or F16, drawn per example) and compares every
output with TFLite's builtin CPU kernels on the same seeded inputs. Every node must be delegated,
so a graph the compiler declines cannot pass by running on CPU.

A failure prints the graph in execution order (``Net``'s listing: tensors ``t``, constants ``c``
with their shapes) and whether the other fusion setting computes it right. First comes an explicit
regression: a binary op linked into the kernel of its first operand's producer while its other
operand is written by a later kernel (fails with fusion until the compiler checks that order).

Budget: EXAMPLES = 50 examples (each a model built, compiled by PoCL and run once, plus TFLite's
CPU run) took 82 s on an idle 2-core machine, 101 s derandomized (CI) and 135 s while other work
shared the cores. On the compiler with that fusion bug the first example (the simplest graph:
RELU(x), RELU(x), ADD of the two) already fails, and 26 of 60 random examples did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import delegate
from delegate.api import host_runtime
from delegate.compiler.graph import Builtin

from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl

#: Largest error allowed per precision, relative to the output's scale: the largest magnitude
#: (in TFLite's CPU results) of the output and of every float tensor it is computed from, inputs
#: and weights included. test_ops.py's tolerances; the scale is taken over the whole chain because
#: half-precision storage rounds every intermediate tensor, so a difference of two large values,
#: or a sum of many, can only be checked against the size of what went into it.
TOLERANCE = {"F32": 1e-4, "F32_F16": 1e-2, "F16": 1e-2}

#: Examples per run; derandomized under CI (tests/conftest.py's "ci" profile).
EXAMPLES = 50

#: tensor sizes: up to 16 rows and columns (the depthwise + 1x1 pair kernel needs 14 of each)
#: and 16 channels
MAX_HW = 16
MAX_C = 16

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

    def _repr_pretty_(self, printer, cycle) -> None:  # hypothesis prints examples with it
        printer.text(repr(self))

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


def run_delegate(net: Net, path: Path, feeds: dict[int, np.ndarray], precision: str, fuse: bool, programs: str):
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
        floats = [i for i in net.ancestors(o) if np.dtype(net.tensors[i].dtype) == np.float32]
        scale = max(max(float(np.abs(want[i]).max(initial=0.0)) for i in floats), 1e-6)
        err = float(np.abs(g.astype(np.float64) - w).max(initial=0.0))
        if not err <= TOLERANCE[precision] * scale:  # NaN fails
            bad.append(f"t{o}: max abs error {err:.3g} > {TOLERANCE[precision]} x scale {scale:.3g}")
    return bad


def differential(net: Net, workdir: Path, precision: str, fuse: bool) -> None:
    path = workdir / "model.tflite"
    path.write_bytes(net.model())
    feeds = net.feeds()
    want = reference(net, path, feeds)
    got, state = run_delegate(net, path, feeds, precision, fuse, "default")
    bad = errors(net, got, want, precision)
    if bad:
        # Say whether the other fusion setting computes it right: a fusion bug, or not.
        other, _ = run_delegate(net, path, feeds, precision, not fuse, "default")
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
        t1 = net.add(Builtin.CONV_2D, [x, w, b], (1, 6, 7, 8), _conv_options(1, SAME, 0), "1x1")
    u = net.add(Builtin.NEG, [x], (1, 6, 7, 8))
    t2 = net.add(Builtin.TANH, [u], (1, 6, 7, 8))
    net.add(Builtin.ADD, [t1, t2], (1, 6, 7, 8), ("AddOptions", {"FusedActivationFunction": 0}))
    net.finish_outputs()
    differential(net, workdir, "F32", fuse)


# --------------------------------------------------------------------------- the generator

UNARY = [
    Builtin.RELU,
    Builtin.TANH,
    Builtin.LOGISTIC,
    Builtin.RELU6,
    Builtin.RELU_N1_TO_1,
    Builtin.ABS,
    Builtin.NEG,
    Builtin.SQUARE,
    Builtin.HARD_SWISH,
    Builtin.LEAKY_RELU,
    Builtin.ELU,
    Builtin.SIN,
    Builtin.COS,
]
#: binary ops whose other operand is a runtime tensor or a constant
BINARY = [Builtin.ADD, Builtin.MUL, Builtin.SUB, Builtin.MAXIMUM, Builtin.MINIMUM, Builtin.SQUARED_DIFFERENCE]
#: binary ops taking a constant second operand only (a divisor away from 0, PReLU's alpha)
CONSTANT_SECOND = [Builtin.DIV, Builtin.PRELU]
_ACTIVATED = {Builtin.ADD: "AddOptions", Builtin.SUB: "SubOptions", Builtin.MUL: "MulOptions"}
_ACTIVATED[Builtin.DIV] = "DivOptions"
_ACT_NAMES = {0: "", 1: "relu", 2: "relu_n1_to_1", 3: "relu6"}
SAME, VALID = 0, 1  # tflite Padding
#: what a single node is (the Generator method making it)
KINDS = ["unary", "binary", "conv", "depthwise", "pool", "concat", "pad", "resize", "softmax", "fully_connected"]
KINDS += ["mean", "head", "separable"]
#: what the nodes of a branch are: ops (and pairs of ops) that can keep their input's shape
SAME_SHAPE = ["unary", "binary", "conv", "depthwise", "pool", "fully_connected", "unary", "binary", "softmax"]
SAME_SHAPE += ["head", "separable"]
#: nodes per graph, about (a step adds one node, or a block of up to 7)
MAX_NODES = 12


def _conv_options(stride: int, padding: int, act: int, name: str = "Conv2DOptions", **extra) -> tuple:
    return (name, {"Padding": padding, "StrideW": stride, "StrideH": stride, "FusedActivationFunction": act, **extra})


def _out(size: int, k: int, stride: int, padding: int) -> int:
    return (size + stride - 1) // stride if padding == SAME else (size - k + stride) // stride


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape two 4-D shapes broadcast to, or None."""
    if len(a) != len(b) or any(x != y and 1 not in (x, y) for x, y in zip(a, b, strict=True)):
        return None
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


class Generator:
    """Draws nodes onto a Net; every choice is a hypothesis draw, so failures shrink (towards chains
    in generation order). Weights and inputs come from the Net's seed. Each op method appends one
    node reading runtime tensor ``a`` (and maybe others) and returns its output; ``keep`` asks for
    an output of ``a``'s shape."""

    def __init__(self, draw, net: Net):
        self.draw, self.net = draw, net

    def choice(self, items: list):
        return self.draw(st.sampled_from(items))

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))

    def flag(self) -> bool:
        return self.draw(st.booleans())

    def runtime(self) -> list[int]:
        """Runtime tensors, most recent first."""
        n = self.net
        return [i for i in reversed(range(len(n.tensors))) if n.is_runtime(i)]

    def pick(self, pool: list[int]) -> int:
        """A tensor of ``pool``: the first (the most recent) half the time, else any other."""
        if len(pool) == 1 or not self.flag():
            return pool[0]
        return pool[self.integer(1, len(pool) - 1)]

    def channels(self) -> int:
        """A channel count: whole slices of 4 half the time (concatenations read in place need them)."""
        return self.choice([4, 8, 12, 16]) if self.flag() else self.integer(1, MAX_C)

    def weights(self, shape: tuple[int, ...], fan_in: int) -> int:
        """Weights in [-1, 1] scaled to keep a layer's output about as large as its input."""
        scale = min(1.0, math.sqrt(3.0 / fan_in))
        return self.net.const(shape, self.net.rng.uniform(-scale, scale, size=shape))

    def step(self) -> None:
        """One node on any tensor, or a block: two chains from one tensor, joined."""
        if self.choice([False, False, True]):
            getattr(self, self.choice(KINDS))(self.pick(self.runtime()))
            return
        a = self.pick(self.runtime())
        ends = []
        for _ in range(2):
            t = a
            for _ in range(self.choice([1, 2, 0, 3])):  # 0: a residual connection (or a joined with itself)
                t = getattr(self, self.choice(SAME_SHAPE))(t, keep=True)
            ends.append(t)
        self.join(*ends)

    # ---- ops

    def unary(self, a: int, keep: bool = True) -> int:
        op = self.choice(UNARY)
        options = ("LeakyReluOptions", {"Alpha": 0.2}) if op == Builtin.LEAKY_RELU else None
        return self.net.add(op, [a], self.net.shape(a), options)

    def binary(self, a: int, keep: bool = False) -> int:
        """``a`` and a runtime tensor (it broadcasts to ``a`` or ``a`` to it), ``a`` itself, a new
        model input or a constant, in either order."""
        n = self.net
        op = self.choice(BINARY + CONSTANT_SECOND)
        sa = n.shape(a)
        how = "constant" if op in CONSTANT_SECOND else self.choice(["runtime", "constant", "same", "new input"])
        if how == "runtime":
            fits = (lambda s: _broadcast(s, sa) == sa) if keep else (lambda s: _broadcast(s, sa) is not None)
            pool = [t for t in self.runtime() if t != a and fits(n.shape(t))]
            how = how if pool else "constant"
        if how == "runtime":
            b = self.pick(pool)
        elif how == "same":
            b = a
        elif how == "new input":
            bb, h, w, c = sa
            b = n.input(self.choice([sa, (bb, 1, 1, c), (1, h, w, 1)]))
        else:
            b = self.constant_operand(op, sa)
        inputs = [a, b]
        if op not in CONSTANT_SECOND and self.flag():
            inputs.reverse()
        return self.binary_node(op, inputs)

    def binary_node(self, op: int, inputs: list[int]) -> int:
        n = self.net
        shapes = [n.shape(i) for i in inputs]
        full = next(s for s in shapes if len(s) == 4)
        out = _broadcast(*(s if len(s) == 4 else full for s in shapes))
        options, note = None, ""
        if op in _ACTIVATED:
            act = self.choice([0, 0, 1, 2, 3])
            options, note = (_ACTIVATED[op], {"FusedActivationFunction": act}), _ACT_NAMES[act]
        return n.add(op, inputs, out, options, note)

    def join(self, left: int, right: int) -> int:
        """A binary op of two runtime tensors (the ends of two branches), or their concatenation."""
        n = self.net
        sl, sr = n.shape(left), n.shape(right)
        if sl[:3] == sr[:3] and sl[3] + sr[3] <= MAX_C and not self.choice([True, True, True, False]):
            out = (*sl[:3], sl[3] + sr[3])
            joined = n.add(Builtin.CONCATENATION, [left, right], out, ("ConcatenationOptions", {"Axis": -1}))
            if self.flag():  # projected back to the left's channels (a convolution may read it in place)
                return self.conv(joined, keep=True, cout=sl[3])
            return joined
        if _broadcast(sl, sr) is None:
            return self.binary(left)
        return self.binary_node(self.choice(BINARY), [left, right])

    def constant_operand(self, op: int, out: tuple[int, ...]) -> int:
        _, h, w, c = out
        shapes = [out, (c,), (1, 1, 1, c), (1, h, w, 1), (h, w, c), (1, 1, w, 1), (1,), ()]
        if op == Builtin.PRELU:
            shapes = [(c,), (1, 1, c), out, (h, w, c)]  # alpha broadcasts over the input
        shape = self.choice(shapes)
        values = None
        if op == Builtin.DIV:
            rng = self.net.rng
            values = rng.uniform(0.5, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        return self.net.const(shape, values)

    def window(self, a: int, keep: bool, kernels: list[int]) -> tuple[int, int, int]:
        """Kernel size, stride and padding of a window op on ``a``."""
        _, h, w, _ = self.net.shape(a)
        k = self.choice(kernels)
        if keep:
            return k, 1, SAME
        stride, padding = self.choice([1, 2]), self.choice([SAME, VALID])
        return k, stride, SAME if padding == VALID and k > min(h, w) else padding

    def conv(self, a: int, keep: bool = False, cout: int | None = None) -> int:
        n = self.net
        b, h, w, cin = n.shape(a)
        k, stride, padding = self.window(a, keep, [1, 3])
        if cout is None:
            cout = cin if keep or self.flag() else self.channels()
        act = self.choice([0, 1, 2, 3])
        oh, ow = _out(h, k, stride, padding), _out(w, k, stride, padding)
        filters, bias = self.weights((cout, k, k, cin), k * k * cin), n.const((cout,), n.rng.uniform(-0.5, 0.5, cout))
        note = f"{k}x{k} stride {stride} {'SAME' if padding == SAME else 'VALID'} {_ACT_NAMES[act]}"
        return n.add(Builtin.CONV_2D, [a, filters, bias], (b, oh, ow, cout), _conv_options(stride, padding, act), note)

    def depthwise(self, a: int, keep: bool = False) -> int:
        n = self.net
        b, h, w, cin = n.shape(a)
        k, stride, padding = self.window(a, keep, [3, 1])
        multiplier = self.choice([1, 2]) if 2 * cin <= MAX_C and not keep else 1
        act, cout = self.choice([0, 1, 2, 3]), cin * multiplier
        oh, ow = _out(h, k, stride, padding), _out(w, k, stride, padding)
        filters, bias = self.weights((1, k, k, cout), k * k), n.const((cout,), n.rng.uniform(-0.5, 0.5, cout))
        options = _conv_options(stride, padding, act, "DepthwiseConv2DOptions", DepthMultiplier=multiplier)
        note = f"{k}x{k} stride {stride} {'SAME' if padding == SAME else 'VALID'} x{multiplier} {_ACT_NAMES[act]}"
        return n.add(Builtin.DEPTHWISE_CONV_2D, [a, filters, bias], (b, oh, ow, cout), options, note)

    def pool(self, a: int, keep: bool = False) -> int:
        n = self.net
        b, h, w, c = n.shape(a)
        op = self.choice([Builtin.MAX_POOL_2D, Builtin.AVERAGE_POOL_2D])
        act = self.choice([0, 0, 1, 3])
        if not keep and self.choice([False, False, False, True]):  # global: (B, 1, 1, C)
            kh, kw, stride, padding = h, w, 1, VALID
        else:
            kh, stride, padding = self.window(a, keep, [3, 2])
            kw = kh
        oh, ow = _out(h, kh, stride, padding), _out(w, kw, stride, padding)
        options = _conv_options(stride, padding, act, "Pool2DOptions", FilterWidth=kw, FilterHeight=kh)
        note = f"{kh}x{kw} stride {stride} {'SAME' if padding == SAME else 'VALID'} {_ACT_NAMES[act]}"
        return n.add(op, [a], (b, oh, ow, c), options, note)

    def concat(self, a: int, keep: bool = False) -> int:
        """Channels of 2 or 3 tensors of the same batch and size (``a`` again allowed)."""
        n = self.net
        b, h, w, _ = n.shape(a)
        parts = [a]
        for _ in range(self.integer(1, 2)):
            room = MAX_C - sum(n.shape(t)[3] for t in parts)
            pool = [t for t in self.runtime() if n.shape(t)[:3] == (b, h, w) and n.shape(t)[3] <= room]
            if not pool:
                break
            parts.append(self.pick(pool))
        if len(parts) == 1:
            return self.unary(a)
        if self.flag():
            parts.reverse()
        out = (b, h, w, sum(n.shape(t)[3] for t in parts))
        return n.add(Builtin.CONCATENATION, parts, out, ("ConcatenationOptions", {"Axis": self.choice([3, -1])}))

    def pad(self, a: int, keep: bool = False) -> int:
        n = self.net
        b, h, w, c = n.shape(a)
        pads = [[0, 0]]
        for size, limit in ((h, MAX_HW), (w, MAX_HW)):
            before = self.integer(0, min(2, limit - size))
            pads.append([before, self.integer(0, min(2, limit - size - before))])
        pads.append([0, self.integer(0, min(2, MAX_C - c))] if self.flag() else [0, 0])
        out = tuple(d + p + q for d, (p, q) in zip((b, h, w, c), pads, strict=True))
        paddings = n.const((4, 2), np.array(pads), np.int32)
        if self.flag():
            return n.add(Builtin.PAD, [a, paddings], out, note=str(pads))
        value = n.const((1,), n.rng.uniform(-1, 1, 1))
        return n.add(Builtin.PADV2, [a, paddings, value], out, note=str(pads))

    def resize(self, a: int, keep: bool = False) -> int:
        n = self.net
        b, _, _, c = n.shape(a)
        size = (self.integer(1, MAX_HW), self.integer(1, MAX_HW))
        mode = self.choice(["plain", "align", "half"])
        options = ("ResizeBilinearOptions", {"AlignCorners": mode == "align", "HalfPixelCenters": mode == "half"})
        size_tensor = n.const((2,), np.array(size), np.int32)
        return n.add(Builtin.RESIZE_BILINEAR, [a, size_tensor], (b, *size, c), options, mode)

    def softmax(self, a: int, keep: bool = True) -> int:
        if self.choice([True, True, False]):
            beta = self.choice([1.0, 0.5])
            options = ("SoftmaxOptions", {"Beta": beta})
            return self.net.add(Builtin.SOFTMAX, [a], self.net.shape(a), options, f"beta {beta}")
        return self.net.add(Builtin.LOG_SOFTMAX, [a], self.net.shape(a))

    def head(self, a: int, keep: bool = False) -> int:
        """A convolution, then a softmax over its channels (which may run inside its kernel)."""
        return self.softmax(self.conv(a, keep))

    def separable(self, a: int, keep: bool = False) -> int:
        """Depthwise, then 1x1 convolution (the pair may run as one kernel)."""
        mid = self.depthwise(a, keep)
        return self.conv_1x1(mid, self.net.shape(a)[3] if keep else None)

    def conv_1x1(self, a: int, cout: int | None) -> int:
        n = self.net
        b, h, w, cin = n.shape(a)
        cout = cout or self.channels()
        act = self.choice([0, 1, 2, 3])
        filters, bias = self.weights((cout, 1, 1, cin), cin), n.const((cout,), n.rng.uniform(-0.5, 0.5, cout))
        options = _conv_options(1, SAME, act)
        return n.add(Builtin.CONV_2D, [a, filters, bias], (b, h, w, cout), options, f"1x1 {_ACT_NAMES[act]}")

    def fully_connected(self, a: int, keep: bool = False) -> int:
        """Over the channels of every pixel (keep_num_dims: the output stays 4-D)."""
        n = self.net
        b, h, w, cin = n.shape(a)
        cout, act = cin if keep or self.flag() else self.channels(), self.choice([0, 1, 3])
        weights = self.weights((cout, cin), cin)
        bias = n.const((cout,), n.rng.uniform(-0.5, 0.5, cout)) if self.flag() else -1
        options = ("FullyConnectedOptions", {"FusedActivationFunction": act, "KeepNumDims": True})
        return n.add(Builtin.FULLY_CONNECTED, [a, weights, bias], (b, h, w, cout), options, _ACT_NAMES[act])

    def mean(self, a: int, keep: bool = False) -> int:
        """Over height and width, kept: (B, 1, 1, C), an operand binary ops broadcast."""
        n = self.net
        b, _, _, c = n.shape(a)
        axes = n.const((2,), np.array([1, 2]), np.int32)
        return n.add(Builtin.MEAN, [a, axes], (b, 1, 1, c), ("ReducerOptions", {"KeepDims": True}))


@st.composite
def nets(draw) -> Net:
    net = Net(seed=draw(st.integers(0, 2**31 - 1)))
    size = st.one_of(st.integers(1, 12), st.integers(14, MAX_HW))
    shape = (draw(st.sampled_from([1, 1, 1, 2])), draw(size), draw(size))
    gen = Generator(draw, net)
    net.input((*shape, gen.channels()))
    for _ in range(draw(st.integers(1, 4))):
        if len(net.ops) < MAX_NODES:
            gen.step()
    # Also as outputs: some tensors later ops read (the host wants them written).
    extra = [op.outputs[0] for op in net.ops if draw(st.sampled_from([False] * 7 + [True]))]
    net.finish_outputs(extra)
    # A random valid topological order: each step runs one op whose inputs are all computed.
    producer = net.producer()
    needs = [{producer[i] for i in op.inputs if i in producer} for op in net.ops]
    order: list[int] = []
    while len(order) < len(net.ops):
        ready = [k for k in range(len(net.ops)) if k not in order and needs[k] <= set(order)]
        order.append(ready[draw(st.integers(0, len(ready) - 1))])
    net.order = order
    return net


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=nets(), precision=st.sampled_from(["F32", "F32_F16", "F16"]), fuse=st.sampled_from([True, True, False]))
def test_random_graphs_match_tflite(net, precision, fuse, workdir):
    differential(net, workdir, precision, fuse)
