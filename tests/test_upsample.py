"""The upsampling rewrite (compiler/upsample.py): the RESHAPE / TILE chain TensorFlow's converter
writes for Keras 3's UpSampling2D (as in tests/models/yolo_fpn_tiny.tflite), built op by op, runs
as one kernel and matches TFLite's builtin kernels exactly (it copies values); chains it must not
take (a tensor inside read elsewhere, a TILE that repeats instead of upsampling) still run right."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import Builtin

from .test_ops import run_both
from .tflite_builder import Op, T, build_model

pytestmark = pytest.mark.opencl


class _Chain:
    """A model under construction: tensors and ops, each op reading the last tensor."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.tensors = [T(shape)]
        self.ops: list[Op] = []

    def reshape(self, shape: tuple[int, ...], src: int | None = None) -> int:
        src = len(self.tensors) - 1 if src is None else src
        self.tensors += [T((len(shape),), np.array(shape, np.int32), np.int32), T(shape)]
        options = ("ReshapeOptions", {"NewShape": list(shape)})
        self.ops.append(Op(Builtin.RESHAPE, [src, len(self.tensors) - 2], [len(self.tensors) - 1], options))
        return len(self.tensors) - 1

    def tile(self, multiples: tuple[int, ...]) -> int:
        src = len(self.tensors) - 1
        shape = tuple(d * m for d, m in zip(self.tensors[src].shape, multiples, strict=True))
        self.tensors += [T((len(multiples),), np.array(multiples, np.int32), np.int32), T(shape)]
        self.ops.append(Op(Builtin.TILE, [src, len(self.tensors) - 2], [len(self.tensors) - 1]))
        return len(self.tensors) - 1


def _keras(shape: tuple[int, int, int, int], fy: int, fx: int, rows_first: bool = True) -> _Chain:
    """UpSampling2D((fy, fx)) as the converter writes it: rows repeated, then columns (or the other way)."""
    b, h, w, c = shape
    chain = _Chain(shape)
    if rows_first:
        chain.reshape((b, h, 1, w, c))
        chain.tile((1, 1, fy, 1, 1))
        chain.reshape((b, h * fy, w, 1, c))
        chain.tile((1, 1, 1, fx, 1))
    else:
        chain.reshape((b, h, w, 1, c))
        chain.tile((1, 1, 1, fx, 1))
        chain.reshape((b, h, 1, w * fx, c))
        chain.tile((1, 1, fy, 1, 1))
    chain.reshape((b, h * fy, w * fx, c))
    return chain


def _run(chain: _Chain, outputs: list[int], precision: str = "F32") -> int:
    """The delegate's outputs checked against TFLite's (exact: copies); the kernels it ran."""
    shape = chain.tensors[0].shape
    x = np.random.default_rng(sum(shape)).uniform(-3, 3, shape).astype(np.float32)
    got, want, state = run_both(build_model(chain.tensors, chain.ops, [0], outputs), [x], precision)
    assert len(state.delegated_nodes) == len(chain.ops), state.unsupported
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        if precision == "F32":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-3)
    return sum(p.kernels for p in state.partitions)


@pytest.mark.parametrize(
    ("shape", "fy", "fx", "rows_first"),
    [
        ((1, 5, 5, 8), 2, 2, True),  # yolo-like: factor 2
        ((1, 4, 3, 6), 2, 3, True),
        ((1, 3, 4, 5), 3, 2, False),  # channels not a multiple of 4, columns first
        ((2, 4, 4, 6), 2, 2, True),  # batch 2: rank-5 tensors with a leading 2
        ((1, 2, 3, 4), 1, 4, True),
    ],
)
def test_keras_upsampling_is_one_kernel(shape, fy, fx, rows_first):
    chain = _keras(shape, fy, fx, rows_first)
    assert _run(chain, [len(chain.tensors) - 1]) == 1


def test_keras_upsampling_in_half_precision():
    chain = _keras((1, 4, 4, 12), 2, 2)
    assert _run(chain, [len(chain.tensors) - 1], "F16") == 1


def test_chain_whose_inner_tensor_has_another_reader_is_not_taken():
    chain = _keras((1, 4, 4, 6), 2, 2)
    inner = chain.ops[1].outputs[0]  # the rows repeated, (1, 4, 2, 4, 6)
    end = len(chain.tensors) - 1
    other = chain.reshape((1, 8, 4, 6), src=inner)
    assert _run(chain, [end, other]) > 1


def test_chain_whose_inner_tensor_is_a_model_output_is_not_taken():
    chain = _keras((1, 4, 4, 6), 2, 2)
    assert _run(chain, [len(chain.tensors) - 1, chain.ops[2].outputs[0]]) > 1


def test_tile_that_repeats_the_whole_image_is_not_upsampling():
    # out[y] = in[y % h]: the shapes of an upsampling by (2, 1), the values of a repeat
    chain = _Chain((1, 4, 5, 6))
    chain.reshape((1, 1, 4, 5, 6))
    chain.tile((1, 2, 1, 1, 1))
    end = chain.reshape((1, 8, 5, 6))
    _run(chain, [end])


def test_four_d_tile_is_not_upsampling():
    chain = _Chain((1, 3, 4, 5))
    end = chain.tile((1, 2, 2, 1))
    _run(chain, [end])
