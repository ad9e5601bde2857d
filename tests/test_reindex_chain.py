"""The re-index chain rewrite (compiler/reindex_chains.py, ops/reindex_chain.py): chains of
RESHAPE / TRANSPOSE / SQUEEZE / EXPAND_DIMS run as one kernel and copy exactly what TFLite's
builtin kernels copy (attention's head split and merge on whole slices, K^T as one channel of four
pixels, other channel counts lane by lane; ranks 2 to 5, batch 2, half precision); a chain whose
inner tensor has another reader keeps its kernels. The axes the kernel reads by are checked
against numpy's composition too."""

from __future__ import annotations

import math

import numpy as np
import pytest

from delegate.compiler.graph import Builtin
from delegate.compiler.ops.reindex_chain import axes_of, pixel_step, slice_moves, source_index

from .test_ops import check, rand, run_both
from .tflite_builder import Op, T, build_model


class _Chain:
    """A model under construction: each op reads the last tensor unless told otherwise."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.tensors = [T(shape)]
        self.ops: list[Op] = []

    def last(self) -> int:
        return len(self.tensors) - 1

    def _out(self, shape: tuple[int, ...]) -> int:
        self.tensors.append(T(tuple(shape)))
        return self.last()

    def reshape(self, shape: tuple[int, ...], src: int | None = None) -> int:
        src = self.last() if src is None else src
        self.tensors.append(T((len(shape),), np.array(shape, np.int32), np.int32))
        out = self._out(shape)
        self.ops.append(Op(Builtin.RESHAPE, [src, out - 1], [out], ("ReshapeOptions", {"NewShape": list(shape)})))
        return out

    def transpose(self, perm: tuple[int, ...], src: int | None = None) -> int:
        src = self.last() if src is None else src
        shape = self.tensors[src].shape
        self.tensors.append(T((len(perm),), np.array(perm, np.int32), np.int32))
        out = self._out(tuple(shape[p] for p in perm))
        self.ops.append(Op(Builtin.TRANSPOSE, [src, out - 1], [out]))
        return out

    def expand_dims(self, axis: int) -> int:
        src = self.last()
        shape = list(self.tensors[src].shape)
        shape.insert(axis, 1)
        self.tensors.append(T((1,), np.array([axis], np.int32), np.int32))
        out = self._out(tuple(shape))
        self.ops.append(Op(Builtin.EXPAND_DIMS, [src, out - 1], [out]))
        return out

    def squeeze(self) -> int:
        src = self.last()
        out = self._out(tuple(d for d in self.tensors[src].shape if d != 1))
        self.ops.append(Op(Builtin.SQUEEZE, [src], [out]))
        return out

    def numpy(self, x: np.ndarray) -> np.ndarray:
        """The chain's output from numpy, op by op (the last tensor's)."""
        values = {0: x}
        for op in self.ops:
            src = values[op.inputs[0]]
            if op.code == Builtin.TRANSPOSE:
                src = src.transpose(self.tensors[op.inputs[1]].data)
            values[op.outputs[0]] = src.reshape(self.tensors[op.outputs[0]].shape)
        return values[self.last()]


def _kernels(chain: _Chain, outputs: list[int] | None = None, precision: str = "F32") -> int:
    """The delegate's outputs against TFLite's (F32: equal, a copy is exact); the kernels it ran
    (delegated whatever the CPU estimate: small chains would stay on CPU)."""
    outputs = outputs or [chain.last()]
    x = rand(chain.tensors[0].shape, np.random.default_rng(5))
    if precision != "F32":
        state = check(chain.tensors, chain.ops, [0], outputs, [x], precision, cpu_when_faster=False)
        return sum(p.kernels for p in state.partitions)
    model = build_model(chain.tensors, chain.ops, [0], outputs)
    got, want, state = run_both(model, [x], cpu_when_faster=False)
    assert len(state.delegated_nodes) == len(chain.ops), state.unsupported
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    return sum(p.kernels for p in state.partitions)


def _split(tokens: int, heads: int, depth: int, batch: int = 1) -> _Chain:
    """Attention's head split: (B, N, H * D) -> (B, N, H, D) -> (B, H, N, D)."""
    chain = _Chain((batch, tokens, heads * depth))
    chain.reshape((batch, tokens, heads, depth))
    chain.transpose((0, 2, 1, 3))
    return chain


@pytest.mark.parametrize(
    ("tokens", "heads", "depth", "batch"),
    [(16, 4, 8, 1), (9, 2, 12, 1), (5, 3, 4, 2), (7, 3, 5, 1), (6, 2, 3, 1)],
)
def test_head_split_is_one_kernel(tokens, heads, depth, batch):
    # depth 5 and 3: channel counts not multiples of 4, the lane-by-lane kernel
    assert _kernels(_split(tokens, heads, depth, batch)) == 1


@pytest.mark.parametrize(("tokens", "heads", "depth"), [(16, 4, 8), (10, 2, 12), (7, 3, 5)])
def test_head_merge_is_one_kernel(tokens, heads, depth):
    chain = _Chain((1, heads, tokens, depth))
    chain.transpose((0, 2, 1, 3))
    chain.reshape((1, tokens, heads * depth))
    assert _kernels(chain) == 1


def test_keys_split_and_transposed_is_one_kernel():
    # K's split then K^T: three nodes, the channels moved (lane by lane)
    chain = _split(12, 4, 8)
    chain.transpose((0, 1, 3, 2))
    assert _kernels(chain) == 1


def test_tokens_onto_channels_is_one_kernel():
    # an output slice is one channel of four input pixels, the input with rows and batches
    chain = _Chain((2, 3, 4, 8))
    chain.reshape((2, 12, 8))
    chain.transpose((0, 2, 1))
    assert _kernels(chain) == 1


@pytest.mark.parametrize("tokens", [13, 10])
def test_keys_of_any_token_count(tokens):
    # K^T with tokens not a multiple of 4: the last slice's lanes past the channels read nothing
    chain = _split(tokens, 2, 8)
    chain.transpose((0, 1, 3, 2))
    assert _kernels(chain) == 1


def test_rank_5_chain():
    # timm's qkv: (B, N, 3 * H * D) -> (B, N, 3, H, D) -> (3, B, H, N, D) -> (3 * B, H, N, D)
    chain = _Chain((1, 10, 3 * 2 * 8))
    chain.reshape((1, 10, 3, 2, 8))
    chain.transpose((2, 0, 3, 1, 4))
    chain.reshape((3, 2, 10, 8))
    assert _kernels(chain) == 1


def test_rank_2_and_3_chain():
    chain = _Chain((6, 20))
    chain.reshape((6, 4, 5))
    chain.transpose((1, 0, 2))
    chain.reshape((24, 5))
    assert _kernels(chain) == 1


def test_squeeze_and_expand_dims_in_a_chain():
    chain = _Chain((1, 5, 6))
    chain.expand_dims(0)
    chain.transpose((0, 1, 3, 2))
    chain.squeeze()
    assert _kernels(chain) == 1


def test_inner_tensor_with_a_second_reader_is_not_merged():
    chain = _split(8, 2, 4)
    split = chain.last()
    reshaped = chain.ops[0].outputs[0]
    other = chain.transpose((0, 1, 3, 2), src=reshaped)  # the reshaped tensor read again
    assert _kernels(chain, [split, other]) == 3


def test_inner_partition_output_is_not_merged():
    chain = _split(8, 2, 4)
    assert _kernels(chain, [chain.last(), chain.ops[0].outputs[0]]) == 2


@pytest.mark.parametrize("depth", [8, 5])
def test_head_split_in_half_precision(depth):
    assert _kernels(_split(12, 2, depth), precision="F16") == 1


@pytest.mark.parametrize(
    "build",
    [
        lambda: _split(16, 4, 8),
        lambda: _split(7, 3, 5, 2),
        lambda: _rank_5(),
    ],
)
def test_axes_give_numpy_composition(build):
    chain = build()
    shape = chain.tensors[0].shape
    index = chain.numpy(np.arange(math.prod(shape)).reshape(shape)).reshape(-1)
    axes = axes_of(index)
    assert axes is not None
    np.testing.assert_array_equal(source_index(axes, index.size), index)


def _rank_5() -> _Chain:
    chain = _Chain((2, 6, 3 * 4 * 4))
    chain.reshape((2, 6, 3, 4, 4))
    chain.transpose((2, 0, 3, 1, 4))
    return chain


def test_slice_moves_only_whole_slices():
    assert slice_moves(((8, 1), (16, 32), (4, 8)), (1, 16, 32), (1, 4, 16, 8))
    assert not slice_moves(((5, 1), (7, 15), (3, 5)), (1, 7, 15), (1, 3, 7, 5))
    assert not slice_moves(((16, 32), (8, 1), (4, 8)), (1, 16, 32), (1, 4, 8, 16))


def test_pixel_step_only_for_one_channel_of_four_pixels():
    assert pixel_step(((16, 32), (8, 1), (4, 8)), (1, 16, 32), (1, 4, 8, 16)) == 1
    assert pixel_step(((8, 1), (16, 32), (4, 8)), (1, 16, 32), (1, 4, 16, 8)) is None
    assert pixel_step(((7, 15), (5, 1), (3, 5)), (1, 7, 15), (1, 3, 5, 7)) == 1
    assert pixel_step(((5, 1), (7, 15), (3, 5)), (1, 7, 15), (1, 3, 7, 5)) is None
    assert pixel_step(((6, 8), (8, 1)), (6, 8), (4, 12)) is None  # a slice's lanes in two runs


def test_no_axes_for_an_uneven_map():
    assert axes_of(np.array([0, 2, 1, 3, 5, 4])) is None
