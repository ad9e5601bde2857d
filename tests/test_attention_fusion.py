"""The attention rewrite (compiler/attention.py) and its op (compiler/ops/attention.py): BATCH_MATMUL
-> [MUL scale] -> [mask] -> SOFTMAX -> BATCH_MATMUL built op by op, run as one kernel where it
applies (separate kernels where it does not) and checked against TFLite's builtin kernels."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import Builtin
from delegate.compiler.ops.attention import MAX_KEYS

from .test_ops import TOLERANCE, run_both
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl


def _attention(heads, m, n, d, dv, *, adj_y=True, scale=0.25, mask=None, beta=1.0, batch=1, score_output=False):
    """Tensors, ops, inputs and outputs of attention over inputs Q [batch, heads, m, d], K (as
    [.., n, d] with ``adj_y``, else [.., d, n]) and V [.., n, dv]; ``mask`` "add" (a constant
    [1, 1, m, n]), "select" (SELECT_V2 of a constant causal condition and -1e9) or None."""
    lead = (batch, heads)
    scores = (*lead, m, n)
    k_shape = (*lead, n, d) if adj_y else (*lead, d, n)
    tensors = [T((*lead, m, d)), T(k_shape), T((*lead, n, dv)), T(scores)]  # 0 Q, 1 K, 2 V, 3 scores
    ops = [Op(Builtin.BATCH_MATMUL, [0, 1], [3], ("BatchMatMulOptions", {"AdjX": False, "AdjY": adj_y}))]

    def add(op, inputs, options=None):
        tensors.append(T(scores))
        ops.append(Op(op, inputs, [len(tensors) - 1], options))
        return len(tensors) - 1

    def constant(data, dtype=np.float32):
        tensors.append(T(data.shape, data=data, dtype=dtype))
        return len(tensors) - 1

    s = 3
    if scale is not None:
        s = add(Builtin.MUL, [s, constant(np.array(scale, np.float32))])
    rng = np.random.default_rng(5)
    if mask == "add":
        s = add(Builtin.ADD, [s, constant(rng.uniform(-3, 0, (1, 1, m, n)).astype(np.float32))])
    elif mask == "select":
        causal = np.tril(np.ones((m, n), bool)).reshape(1, 1, m, n)
        s = add(Builtin.SELECT_V2, [constant(causal, np.bool_), s, constant(np.array(-1e9, np.float32))])
    probs = add(Builtin.SOFTMAX, [s], ("SoftmaxOptions", {"Beta": beta}))
    tensors.append(T((*lead, m, dv)))
    ops.append(Op(Builtin.BATCH_MATMUL, [probs, 2], [len(tensors) - 1], ("BatchMatMulOptions", {})))
    outputs = [len(tensors) - 1, *([3] if score_output else [])]
    return tensors, ops, [0, 1, 2], outputs


def _run(model_parts, feeds_shapes, precision="F32"):
    tensors, ops, inputs, outputs = model_parts
    rng = np.random.default_rng(7)
    feeds = [rng.uniform(-2, 2, tensors[i].shape).astype(np.float32) for i in inputs]
    got, want, state = run_both(build_model(tensors, ops, inputs, outputs), feeds, precision)
    assert len(state.delegated_nodes) == len(ops), state.unsupported
    for g, w in zip(got, want, strict=True):
        err = float(np.abs(g.astype(np.float64) - w).max())
        assert err <= TOLERANCE[precision] * max(float(np.abs(w).max()), 1.0), err
    return sum(p.kernels for p in state.partitions)


@pytest.mark.parametrize("adj_y", [True, False])
@pytest.mark.parametrize("scale", [0.25, None])
@pytest.mark.parametrize("mask", [None, "add", "select"])
def test_attention_fuses(adj_y, scale, mask):
    """Every form of the chain runs as one kernel, with TFLite's results."""
    parts = _attention(3, 10, 13, 12, 8, adj_y=adj_y, scale=scale, mask=mask)
    assert _run(parts, None) == 1


@pytest.mark.parametrize(
    ("heads", "m", "n", "d", "dv", "batch"),
    [(1, 1, 1, 4, 4, 1), (4, 17, 17, 6, 10, 1), (2, 9, MAX_KEYS, 16, 16, 2), (2, 5, MAX_KEYS, 7, 5, 1)],
)
def test_attention_shapes(heads, m, n, d, dv, batch):
    """Rows past the last block of rows, keys and depths past whole slices, batches, the longest keys."""
    parts = _attention(heads, m, n, d, dv, mask="add", beta=0.7, batch=batch)
    assert _run(parts, None) == 1


def test_attention_half():
    parts = _attention(2, 24, 24, 16, 16, adj_y=False, mask="select")
    assert _run(parts, None, "F16") == 1


def test_attention_past_the_key_bound_stays_unfused():
    """More keys than a work-item holds: the separate kernels run it (scores, scale, softmax, product)."""
    parts = _attention(1, 4, MAX_KEYS + 1, 8, 4, adj_y=True, mask=None)
    assert _run(parts, None) > 1


def test_attention_scores_output_stays_unfused():
    """Scores that are also a graph output must be computed: no fusion."""
    parts = _attention(2, 6, 6, 8, 8, score_output=True)
    assert _run(parts, None) > 1
