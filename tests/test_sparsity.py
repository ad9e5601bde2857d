"""Sparse constants (TFLite's SparsityParameters): the densifier on hand-made metadata, DENSIFY
folded into the weights of delegated convolutions and fully connected layers against TFLite's
own kernels, and MediaPipe's pose detector, whose fp16 weights are stored sparse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delegate.compiler.sparsity import DimensionMetadata, densify

from .tflite_builder import Sparse, sparsify

DENSE, CSR = 0, 1


def _meta(levels) -> list[DimensionMetadata]:
    return [DimensionMetadata(f, size, np.asarray(seg), np.asarray(idx)) for f, size, seg, idx in levels]


# ------------------------------------------------------------------ the densifier, by hand


def test_all_dense_levels_are_the_values_in_order():
    values = np.arange(24, dtype=np.float32)
    meta = [DimensionMetadata(DENSE, 2), DimensionMetadata(DENSE, 3), DimensionMetadata(DENSE, 4)]
    np.testing.assert_array_equal(densify((2, 3, 4), [0, 1, 2], [], meta, values), values.reshape(2, 3, 4))


@pytest.mark.parametrize("index_dtype", [np.uint8, np.uint16, np.int32])
def test_csr_in_the_last_dimension(index_dtype):
    # 4x4, each row a CSR list of columns
    want = np.array([[1, 0, 2, 0], [0, 0, 0, 3], [0, 0, 0, 0], [0, 6, 0, 7]], np.float32)
    segments = np.array([0, 2, 3, 3, 5], index_dtype)
    indices = np.array([0, 2, 3, 1, 3], index_dtype)
    meta = [DimensionMetadata(DENSE, 4), DimensionMetadata(CSR, 0, segments, indices)]
    got = densify((4, 4), [0, 1], [], meta, np.array([1, 2, 3, 6, 7], np.float32))
    np.testing.assert_array_equal(got, want)


def test_csr_in_an_inner_dimension_keeps_whole_rows():
    # (2, 3, 4): dimension 1 is CSR, dimension 2 dense under it: the rows present are stored whole
    want = np.zeros((2, 3, 4), np.float32)
    want[0, 1] = [1, 0, 2, 3]
    want[1, 0] = [4, 5, 0, 0]
    want[1, 2] = [0, 0, 0, 6]
    meta = _meta([(DENSE, 2, [], []), (CSR, 0, [0, 1, 3], [1, 0, 2]), (DENSE, 4, [], [])])
    values = np.array([1, 0, 2, 3, 4, 5, 0, 0, 0, 0, 0, 6], np.float32)
    np.testing.assert_array_equal(densify((2, 3, 4), [0, 1, 2], [], meta, values), want)


def test_traversal_order_column_major():
    # CSC: columns outer (dense), rows listed per column
    want = np.array([[1, 0, 0], [0, 0, 2], [3, 0, 4]], np.float32)
    meta = _meta([(DENSE, 3, [], []), (CSR, 0, [0, 2, 2, 4], [0, 2, 1, 2])])
    got = densify((3, 3), [1, 0], [], meta, np.array([1, 3, 2, 4], np.float32))
    np.testing.assert_array_equal(got, want)


def test_block_sparse_4x4_in_2x2_blocks():
    # TFLite's own format-converter example: block (1, 0) is all zero and not stored
    want = np.array([[1, 0, 2, 3], [0, 4, 0, 0], [0, 0, 5, 0], [0, 0, 0, 6]], np.float32)
    meta = _meta([(DENSE, 2, [], []), (CSR, 0, [0, 2, 3], [0, 1, 1]), (DENSE, 2, [], []), (DENSE, 2, [], [])])
    values = np.array([1, 0, 0, 4, 2, 3, 0, 0, 5, 0, 0, 6], np.float32)
    np.testing.assert_array_equal(densify((4, 4), [0, 1, 2, 3], [0, 1], meta, values), want)


@pytest.mark.parametrize("index_dtype", [np.uint8, np.int32])
def test_block_sparse_1x4_blocks_as_fully_connected_weights(index_dtype):
    # (2, 8) weights in 1x4 blocks (TFLite's sparse FULLY_CONNECTED layout): block_map [1]
    want = np.array([[0, 0, 0, 0, 1, 2, 3, 4], [5, 0, 0, 6, 0, 0, 0, 0]], np.float32)
    seg, idx = np.array([0, 1, 2], index_dtype), np.array([1, 0], index_dtype)
    meta = [DimensionMetadata(DENSE, 2), DimensionMetadata(CSR, 0, seg, idx), DimensionMetadata(DENSE, 4)]
    got = densify((2, 8), [0, 1, 2], [1], meta, np.array([1, 2, 3, 4, 5, 0, 0, 6], np.float32))
    np.testing.assert_array_equal(got, want)


def test_float16_values_stay_float16():
    meta = [DimensionMetadata(DENSE, 2), DimensionMetadata(CSR, 0, [0, 1, 1], [1])]
    got = densify((2, 2), [0, 1], [], meta, np.array([1.5], np.float16))
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.array([[0, 1.5], [0, 0]], np.float16))


_GOOD_LEVELS = [(DENSE, 4, [], []), (CSR, 0, [0, 2, 3, 3, 5], [0, 2, 3, 1, 3])]


@pytest.mark.parametrize(
    "shape,order,block_map,levels,count,message",
    [
        ((4, 4), [0], [], _GOOD_LEVELS, 5, "traversal_order has 1 entries"),
        ((4, 4), [0, 1], [], _GOOD_LEVELS[:1], 5, "1 dimension metadata entries for 2"),
        ((4, 4), [1, 1], [], _GOOD_LEVELS, 5, "is not the original dimensions"),
        ((4, 4), [0, 1], [], [(DENSE, 3, [], []), _GOOD_LEVELS[1]], 5, "DENSE of size 3"),
        ((4, 4), [0, 1], [], [(DENSE, 4, [], []), (CSR, 0, [0, 2, 3, 5], [0, 2, 3, 1, 3])], 5, "needs 5"),
        ((4, 4), [0, 1], [], [(DENSE, 4, [], []), (CSR, 0, [0, 3, 2, 3, 5], [0, 2, 3, 1, 3])], 5, "do not rise"),
        ((4, 4), [0, 1], [], [(DENSE, 4, [], []), (CSR, 0, [0, 2, 3, 3, 9], [0, 2, 3, 1, 3])], 5, "do not rise"),
        ((4, 4), [0, 1], [], [(DENSE, 4, [], []), (CSR, 0, [0, 2, 3, 3, 5], [0, 2, 4, 1, 3])], 5, "not all in 0..3"),
        ((4, 4), [0, 1], [], [(DENSE, 4, [], []), (CSR, 0, [0, 2, 3, 3, 5], [0, 2, 3, 1, -1])], 5, "not all in"),
        ((4, 4), [0, 1], [], [(DENSE, 4, [], []), (CSR, 0, [0, 2, 3, 3, 5], [0, 0, 3, 1, 3])], 5, "same dense"),
        ((4, 4), [0, 1], [], _GOOD_LEVELS, 6, "describe 5 stored values, the tensor holds 6"),
        ((4, 4), [0, 1], [], [(DENSE, 4, [], []), (7, 0, [], [])], 5, "dimension type 7"),
        ((4, 4), [0, 1, 2], [2], [*_GOOD_LEVELS, (DENSE, 2, [], [])], 5, r"block_map \[2\] does not name"),
        ((4, 4), [0, 1, 2], [1], [(DENSE, 4, [], []), (DENSE, 1, [], []), (DENSE, 3, [], [])], 12, "blocks of 3"),
        ((4, 4), [0, 1, 2], [1], [(DENSE, 4, [], []), (DENSE, 1, [], []), (CSR, 0, [0], [])], 12, "block dimension"),
        ((4, 4), [0, 1], [], [(DENSE, 4, [], []), (CSR, 0, [0.0, 2.0], [1.5])], 5, "not integers"),
    ],
)
def test_malformed_metadata_is_a_value_error(shape, order, block_map, levels, count, message):
    with pytest.raises(ValueError, match=message):
        densify(shape, order, block_map, _meta(levels), np.ones(count, np.float32))


def test_stored_values_must_be_a_vector():
    with pytest.raises(ValueError, match="flat vector"):
        densify((2,), [0], [], _meta([(DENSE, 2, [], [])]), np.ones((1, 2), np.float32))


# ------------------------------------------------------------------ round trips with the test encoder


def _zeroed(rng: np.random.Generator, shape: tuple[int, ...], density: float) -> np.ndarray:
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    return np.where(rng.random(shape) < density, x, 0).astype(np.float32)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    formats=st.lists(st.sampled_from([DENSE, CSR]), min_size=4, max_size=4),
    density=st.sampled_from([0.0, 0.3, 1.0]),
    permute=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_densify_inverts_the_encoder(shape, formats, density, permute, seed):
    rng = np.random.default_rng(seed)
    dense = _zeroed(rng, tuple(shape), density)
    order = list(rng.permutation(len(shape))) if permute else list(range(len(shape)))
    spec = Sparse(formats[: len(shape)], [int(i) for i in order])
    values, levels = sparsify(dense, spec)
    got = densify(dense.shape, spec.traversal_order, [], _meta(levels), values)
    np.testing.assert_array_equal(got, dense)


@settings(max_examples=30, deadline=None)
@given(
    blocks=st.tuples(st.integers(1, 3), st.integers(1, 4)),
    counts=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    formats=st.tuples(st.sampled_from([DENSE, CSR]), st.sampled_from([DENSE, CSR])),
    density=st.sampled_from([0.0, 0.3, 1.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_block_sparse_round_trip(blocks, counts, formats, density, seed):
    rng = np.random.default_rng(seed)
    shape = (blocks[0] * counts[0], blocks[1] * counts[1])
    block_mask = rng.random(counts) < density
    dense = rng.uniform(-1, 1, shape).astype(np.float32) * np.kron(block_mask, np.ones(blocks))
    spec = Sparse([*formats, DENSE, DENSE], block_map=[0, 1], block_sizes=list(blocks))
    values, levels = sparsify(dense.astype(np.float32), spec)
    got = densify(shape, [0, 1, 2, 3], [0, 1], _meta(levels), values)
    np.testing.assert_array_equal(got, dense.astype(np.float32))


_small_ints = st.lists(st.integers(-2, 9), max_size=8)


@settings(max_examples=200, deadline=None)
@given(
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=3),
    order=st.lists(st.integers(-1, 4), min_size=0, max_size=4),
    block_map=st.lists(st.integers(-1, 3), max_size=2),
    levels=st.lists(st.tuples(st.integers(-1, 2), st.integers(-1, 5), _small_ints, _small_ints), max_size=5),
    count=st.integers(0, 12),
)
def test_arbitrary_metadata_gives_an_array_or_a_value_error(shape, order, block_map, levels, count):
    try:
        got = densify(shape, order, block_map, _meta(levels), np.arange(1, count + 1, dtype=np.float32))
    except ValueError:
        return
    assert got.shape == tuple(shape)
    # every stored value lands exactly once
    assert np.count_nonzero(got) == count and set(got[got != 0].tolist()) == set(range(1, count + 1))
