"""The transposed-products rewrite (compiler/transposed_products.py): MLP-Mixer's token mixing,
TRANSPOSE -> FULLY_CONNECTED -> GELU -> FULLY_CONNECTED -> TRANSPOSE (then the residual ADD),
built op by op in several shapes, runs without the transposes' kernels and matches TFLite's
builtin kernels within 1e-4; chains it must not take (a transposed tensor read elsewhere, a graph
output inside, a TRANSPOSE of other axes) still run right, with their kernels."""

from __future__ import annotations

import numpy as np
import pytest

from delegate.compiler.graph import Builtin

from .test_ops import check, rand
from .tflite_builder import Op, T

pytestmark = pytest.mark.opencl


class _Chain:
    """A model under construction: tensors and ops, each op reading the last tensor by default."""

    def __init__(self, shape: tuple[int, ...], seed: int) -> None:
        self.tensors = [T(shape)]
        self.ops: list[Op] = []
        self.rng = np.random.default_rng(seed)

    def _out(self, shape: tuple[int, ...]) -> int:
        self.tensors.append(T(shape))
        return len(self.tensors) - 1

    def last(self) -> int:
        return len(self.tensors) - 1

    def transpose(self, perm: tuple[int, ...] | None = None, src: int | None = None) -> int:
        src = self.last() if src is None else src
        shape = self.tensors[src].shape
        rank = len(shape)
        perm = perm or (*range(rank - 2), rank - 1, rank - 2)
        self.tensors.append(T((rank,), np.array(perm, np.int32), np.int32))
        out = self._out(tuple(shape[p] for p in perm))
        self.ops.append(Op(Builtin.TRANSPOSE, [src, out - 1], [out]))
        return out

    def dense(self, units: int, bias: bool = False, act: int = 0) -> int:
        src = self.last()
        shape = self.tensors[src].shape
        self.tensors.append(T((units, shape[-1]), rand((units, shape[-1]), self.rng)))
        inputs = [src, self.last()]
        if bias:
            self.tensors.append(T((units,), rand((units,), self.rng)))
            inputs.append(self.last())
        out = self._out((*shape[:-1], units))
        options = ("FullyConnectedOptions", {"FusedActivationFunction": act, "KeepNumDims": True})
        self.ops.append(Op(Builtin.FULLY_CONNECTED, inputs, [out], options))
        return out

    def gelu(self) -> int:
        src = self.last()
        out = self._out(self.tensors[src].shape)
        self.ops.append(Op(Builtin.GELU, [src], [out], ("GeluOptions", {"Approximate": False})))
        return out

    def add(self, a: int, b: int) -> int:
        out = self._out(self.tensors[a].shape)
        self.ops.append(Op(Builtin.ADD, [a, b], [out], ("AddOptions", {"FusedActivationFunction": 0})))
        return out


def _token_mixing(shape: tuple[int, ...], hidden: int, bias: bool = False, act: int = 0) -> _Chain:
    """x + T(FC(GELU(FC(T(x))))): the token mixing of an MLP-Mixer block, tokens on axis -2."""
    chain = _Chain(shape, sum(shape) + hidden)
    chain.transpose()
    chain.dense(hidden, bias, act)
    chain.gelu()
    chain.dense(shape[-2], bias)
    chain.add(0, chain.transpose())
    return chain


def _kernels(chain: _Chain, outputs: list[int], **options: str) -> int:
    """The delegate's outputs checked against TFLite's within 1e-4; the kernels it ran (delegated
    whatever the CPU estimate: small chains would stay on CPU)."""
    feed = rand(chain.tensors[0].shape, np.random.default_rng(7))
    state = check(chain.tensors, chain.ops, [0], outputs, [feed], cpu_when_faster=False, **options)
    return sum(p.kernels for p in state.partitions)


@pytest.mark.parametrize(
    ("shape", "hidden"),
    [
        ((1, 64, 128), 64),  # the vision set's mlp_mixer
        ((1, 49, 20), 33),  # tokens and channels not multiples of 4
        ((1, 5, 3), 7),  # fewer tokens than a block of rows
        ((16, 24), 12),  # rank 2
        ((1, 2, 9, 8), 6),  # rank 4
        ((2, 10, 12), 16),  # batch 2
    ],
)
def test_token_mixing_runs_without_transposes(shape, hidden):
    # the two products, the GELU linked into the first and the ADD into the second
    chain = _token_mixing(shape, hidden)
    assert _kernels(chain, [chain.last()]) == 2


@pytest.mark.parametrize(
    "options", [{"storage_type": "TEXTURE_2D"}, {"storage_type": "IMAGE_BUFFER"}, {"kernel_family": "gpu"}]
)
def test_token_mixing_on_other_storages_and_kernels(options):
    # BATCH_MATMUL's rows kernel where the block kernel does not apply (textures, the gpu family)
    chain = _token_mixing((1, 20, 12), 9, bias=True)
    assert _kernels(chain, [chain.last()], **options) == 2


@pytest.mark.parametrize("act", [0, 1, 3])
def test_products_with_bias_and_activation(act):
    chain = _token_mixing((1, 13, 10), 9, bias=True, act=act)
    assert _kernels(chain, [chain.last()]) == 2


def test_single_product_between_transposes():
    chain = _Chain((1, 12, 6), 3)
    chain.transpose()
    chain.dense(5)
    chain.transpose()
    assert _kernels(chain, [chain.last()]) == 1


def test_unary_op_last_before_the_closing_transpose():
    chain = _Chain((1, 9, 14), 4)
    chain.transpose()
    chain.dense(11, bias=True)
    chain.gelu()
    chain.transpose()
    assert _kernels(chain, [chain.last()]) == 1


def test_transposed_tensor_with_a_second_reader_is_not_taken():
    chain = _token_mixing((1, 12, 8), 10)
    end = chain.last()
    other = chain.transpose(src=2)  # the transposed input read again: the first TRANSPOSE stays
    assert _kernels(chain, [end, other]) > 3


def test_chain_with_a_graph_output_inside_is_not_taken():
    chain = _token_mixing((1, 12, 8), 10)
    gelu = chain.ops[2].outputs[0]
    assert _kernels(chain, [chain.last(), gelu]) > 2


def test_transpose_of_other_axes_is_not_taken():
    chain = _Chain((1, 4, 6, 5), 5)
    chain.transpose((0, 2, 1, 3))
    chain.dense(7)
    chain.transpose((0, 2, 1, 3))
    assert _kernels(chain, [chain.last()]) == 3


def test_token_mixing_in_half_precision():
    chain = _token_mixing((1, 16, 12), 8, bias=True)
    feed = rand(chain.tensors[0].shape, np.random.default_rng(3))
    state = check(chain.tensors, chain.ops, [0], [chain.last()], [feed], "F16", cpu_when_faster=False)
    assert sum(p.kernels for p in state.partitions) == 2
