"""Sparse constants (TFLite's SparsityParameters): the densifier on hand-made metadata, DENSIFY
folded into the weights of delegated convolutions and fully connected layers against TFLite's
own kernels, and MediaPipe's pose detector, whose fp16 weights are stored sparse."""

from __future__ import annotations

import numpy as np
import pytest
from delegate._native import ffi
from hypothesis import given, settings
from hypothesis import strategies as st

import delegate
from delegate.api import host_runtime
from delegate.compiler.graph import Builtin
from delegate.compiler.sparsity import DimensionMetadata, densify
from delegate.plugin.capture import SMALL_CONSTANT

from .helpers import delegate_and_builtin, shared_path
from .tflite_builder import Op, Sparse, T, build_model, sparsify

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


# ------------------------------------------------------------------ the ABI


def test_sparsity_structs_match_the_runtime_abi():
    assert ffi.offsetof("TfLiteTensor", "sparsity") == 96
    assert ffi.typeof(ffi.new("TfLiteTensor *").sparsity) == ffi.typeof("TfLiteSparsity *")
    assert [name for name, _ in ffi.typeof("TfLiteSparsity").fields] == [
        "traversal_order",
        "block_map",
        "dim_metadata",
        "dim_metadata_size",
    ]
    assert ffi.offsetof("TfLiteSparsity", "dim_metadata_size") == 24 and ffi.sizeof("TfLiteSparsity") == 32
    assert [name for name, _ in ffi.typeof("TfLiteDimensionMetadata").fields] == [
        "format",
        "dense_size",
        "array_segments",
        "array_indices",
    ]
    assert ffi.offsetof("TfLiteDimensionMetadata", "array_segments") == 8
    assert ffi.sizeof("TfLiteDimensionMetadata") == 24


# ------------------------------------------------------------------ sparse weights in models, against TFLite

F32_TOLERANCE = 1e-4
#: SAME padding (the schema's 0): the 7x7 output the models declare
CONV = ("Conv2DOptions", {"Padding": 0, "StrideW": 1, "StrideH": 1})


@pytest.fixture(scope="module")
def programs() -> str:
    """The default program cache, as users have it (tests/test_ops.py: PROGRAM_CACHE)."""
    return "default"


def _run(model: bytes, feeds: list[np.ndarray], programs: str, **options) -> tuple[list, list, object]:
    """The model's outputs through the delegate and through TFLite's builtin CPU kernels, and what
    the delegate claimed."""
    return delegate_and_builtin(model, feeds, programs, **options)


def _assert_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want, strict=True):
        scale = float(np.abs(w).max())
        assert scale > 0
        assert float(np.abs(g - w).max()) <= F32_TOLERANCE * scale


def _sparse_weights(rng, shape, spec: Sparse, density: float = 0.35) -> np.ndarray:
    """Random weights of ``shape`` with parts zeroed so that ``spec`` stores fewer values than the
    dense tensor: whole blocks for a block-sparse spec, else whole slices under its last CSR level."""
    if spec.block_map:
        units = [1] * len(shape)
        for dim, size in zip(spec.block_map, spec.block_sizes, strict=True):
            units[dim] = size
    else:
        last = max(i for i, f in enumerate(spec.formats) if f == CSR)
        units = [1] * (last + 1) + list(shape[last + 1 :])
    counts = tuple(d // u for d, u in zip(shape, units, strict=True))
    weights = (rng.uniform(-1, 1, shape) * np.kron(rng.random(counts) < density, np.ones(units))).astype(np.float32)
    assert sparsify(weights, spec)[0].size < weights.size / 2
    return weights


#: (name, spec, weight shape of the convolution [O, H, W, I])
CONV_FORMATS = [
    ("csr_last_dim", Sparse([DENSE, DENSE, DENSE, CSR], index_type="uint8"), (8, 3, 3, 6)),
    ("csr_inner_dim", Sparse([DENSE, CSR, DENSE, DENSE], index_type="int32"), (8, 3, 3, 6)),
    ("block_1x1x1x4", Sparse([DENSE, DENSE, DENSE, CSR, DENSE], block_map=[3], block_sizes=[4]), (8, 3, 3, 8)),
    # larger than the constants Prepare reads (SMALL_CONSTANT): read densified when compiling
    ("large_uint16", Sparse([DENSE, DENSE, DENSE, CSR], index_type="uint16"), (64, 3, 3, 96)),
]


def _conv_model(rng, spec: Sparse, wshape, fp16: bool) -> tuple[bytes, list[np.ndarray], int]:
    """input -> CONV_2D whose weights are DENSIFY (-> DEQUANTIZE for fp16) of a sparse constant."""
    cout, _, _, cin = wshape
    weights = _sparse_weights(rng, wshape, spec)
    dtype = np.float16 if fp16 else np.float32
    shape = (1, 7, 7, cin)
    tensors = [T(shape), T(wshape, weights.astype(dtype), dtype, sparse=spec), T(wshape, dtype=dtype)]
    ops = [Op(Builtin.DENSIFY, [1], [2])]
    if fp16:
        tensors.append(T(wshape))
        ops.append(Op(Builtin.DEQUANTIZE, [2], [3], version=3))
    w = len(tensors) - 1
    tensors += [T((cout,), rng.uniform(-1, 1, cout).astype(np.float32)), T((1, 7, 7, cout))]
    ops.append(Op(Builtin.CONV_2D, [0, w, w + 1], [w + 2], CONV))
    return build_model(tensors, ops, [0], [w + 2]), [rng.uniform(-1, 1, shape).astype(np.float32)], len(ops)


@pytest.mark.opencl
@pytest.mark.parametrize("fp16", [False, True], ids=["f32", "f16"])
@pytest.mark.parametrize("name,spec,wshape", CONV_FORMATS, ids=[c[0] for c in CONV_FORMATS])
def test_densify_into_conv_is_delegated_and_matches_tflite(name, spec, wshape, fp16, programs):
    model, feeds, n_ops = _conv_model(np.random.default_rng(len(name)), spec, wshape, fp16)
    if name.startswith("large"):
        assert np.prod(wshape) * (2 if fp16 else 4) > SMALL_CONSTANT
    got, want, state = _run(model, feeds, programs)
    assert state.unsupported == {} and len(state.delegated_nodes) == n_ops == state.total_nodes
    _assert_close(got, want)


FC_FORMATS = [
    ("block_1x4", Sparse([DENSE, CSR, DENSE], block_map=[1], block_sizes=[4], index_type="uint8")),
    ("block_4x4_csr_csr", Sparse([CSR, CSR, DENSE, DENSE], block_map=[0, 1], block_sizes=[4, 4], index_type="int32")),
    ("csr_rows", Sparse([DENSE, CSR], index_type="uint16")),
]


@pytest.mark.opencl
@pytest.mark.parametrize("fp16", [False, True], ids=["f32", "f16"])
@pytest.mark.parametrize("name,spec", FC_FORMATS, ids=[c[0] for c in FC_FORMATS])
def test_densify_into_fully_connected_is_delegated_and_matches_tflite(name, spec, fp16, programs):
    rng = np.random.default_rng(7 + len(name))
    wshape = (16, 32)
    weights = _sparse_weights(rng, wshape, spec)
    dtype = np.float16 if fp16 else np.float32
    tensors = [T((3, 32)), T(wshape, weights.astype(dtype), dtype, sparse=spec), T(wshape, dtype=dtype)]
    ops = [Op(Builtin.DENSIFY, [1], [2])]
    if fp16:
        tensors.append(T(wshape))
        ops.append(Op(Builtin.DEQUANTIZE, [2], [3], version=3))
    w = len(tensors) - 1
    tensors += [T((16,), rng.uniform(-1, 1, 16).astype(np.float32)), T((3, 16))]
    ops.append(Op(Builtin.FULLY_CONNECTED, [0, w, w + 1], [w + 2], ("FullyConnectedOptions", {})))
    model = build_model(tensors, ops, [0], [w + 2])
    got, want, state = _run(model, [rng.uniform(-1, 1, (3, 32)).astype(np.float32)], programs)
    assert state.unsupported == {} and len(state.delegated_nodes) == len(ops)
    _assert_close(got, want)


@pytest.mark.opencl
def test_densify_stays_on_cpu_when_its_consumer_does(programs):
    spec = Sparse([DENSE, DENSE, DENSE, CSR])
    model, feeds, _ = _conv_model(np.random.default_rng(3), spec, (8, 3, 3, 6), fp16=True)
    got, want, state = _run(model, feeds, programs, exclude_ops="CONV_2D")
    assert state.delegated_nodes == []
    assert state.unsupported["densify_0"] == "DENSIFY folded only when every consumer is delegated"
    assert state.unsupported["dequantize_1"] == "DEQUANTIZE folded only when every consumer is delegated"
    _assert_close(got, want)


@pytest.mark.opencl
def test_serialization_cache_tells_sparse_weights_apart_by_their_indices(tmp_path, programs):
    """Two models whose sparse weights store the same values at other positions: without a
    model_token, the cache key hashes the sparsity parameters too."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (2, 8)).astype(np.float32)
    outputs = []
    for row in ([1, 0, 2, 0, 0, 0, 3, 0], [0, 1, 0, 2, 0, 0, 0, 3]):
        weights = np.tile(np.array(row, np.float32), (4, 1))
        tensors = [T((2, 8)), T((4, 8), weights, sparse=Sparse([DENSE, CSR])), T((4, 8)), T((2, 4))]
        ops = [
            Op(Builtin.DENSIFY, [1], [2]),
            Op(Builtin.FULLY_CONNECTED, [0, 2, -1], [3], ("FullyConnectedOptions", {})),
        ]
        got, want, state = _run(build_model(tensors, ops, [0], [3]), [x], programs, serialization_dir=str(tmp_path))
        assert len(state.delegated_nodes) == 2 and state.partitions[0].cache == "miss"
        _assert_close(got, want)
        outputs.append(got[0])
    assert not np.allclose(outputs[0], outputs[1])


# ------------------------------------------------------------------ MediaPipe's pose detector


@pytest.mark.opencl
def test_pose_detection_sparse_fp16_weights_fully_delegated(programs):
    path = str(shared_path("models", "real", "mediapipe__pose_detection.tflite"))
    interpreter = delegate.Interpreter(path, program_cache=programs)
    interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    feeds = []
    for d in interpreter.get_input_details():
        feeds.append(rng.random(tuple(d["shape"]), dtype=np.float32))
        interpreter.set_tensor(d["index"], feeds[-1])
    interpreter.invoke()
    state = interpreter.opencl
    assert state.unsupported == {}
    assert len(state.delegated_nodes) == state.total_nodes == 291
    cpu = host_runtime().Interpreter(model_path=path)
    cpu.allocate_tensors()
    for d, x in zip(cpu.get_input_details(), feeds, strict=True):
        cpu.set_tensor(d["index"], x)
    cpu.invoke()
    got = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    _assert_close(got, [cpu.get_tensor(d["index"]) for d in cpu.get_output_details()])
