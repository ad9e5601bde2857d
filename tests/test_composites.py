"""STABLEHLO_COMPOSITE nodes compiled by inlining their decomposition (compiler/composites.py,
plugin/composites.py): the graph surgery on small graphs, and litert-torch's composites
(tests/models/torch_composites*.tflite) delegated whole, or left on CPU with their reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from delegate.compiler.claim import EXCLUDED
from delegate.compiler.composites import Decomposition, Inlining, inline, mismatch, ordered_results
from delegate.compiler.graph import FLOAT32, Builtin, Graph, Node, Tensor
from delegate.model_run import run_model

from .helpers import assert_outputs_close, delegate_and_builtin

MODELS = Path(__file__).resolve().parent / "models"
F32_TOLERANCE = 1e-4


def _tensor(index: int, shape: tuple[int, ...], value: np.ndarray | None = None) -> Tensor:
    return Tensor(index, FLOAT32, shape, is_constant=value is not None, constant=value)


def _caller() -> tuple[Graph, Node]:
    """x (0) and w (1) -> COMPOSITE -> y (2) -> MUL by itself -> z (3)."""
    composite = Node(0, Builtin.STABLEHLO_COMPOSITE, 1, (0, 1), (2,), {"name": "odml.rms_norm", "subgraph": 1})
    tail = Node(1, Builtin.MUL, 1, (2, 2), (3,))
    tensors = {0: _tensor(0, (1, 4, 8)), 1: _tensor(1, (8,), np.ones(8, np.float32)), 2: _tensor(2, (1, 4, 8))}
    tensors[3] = _tensor(3, (1, 4, 8))
    return Graph(tensors, {0: composite, 1: tail}), composite


def _body(eps: float = 1e-6) -> Decomposition:
    """y = x * w + eps over arguments 5 (x) and 6 (w), through 7; the result is 9."""
    tensors = {
        5: _tensor(5, (1, 4, 8)),
        6: _tensor(6, (8,)),
        7: _tensor(7, (1, 4, 8)),
        8: _tensor(8, (1,), np.array([eps], np.float32)),
        9: _tensor(9, (1, 4, 8)),
    }
    nodes = {0: Node(0, Builtin.MUL, 1, (5, 6), (7,)), 1: Node(1, Builtin.ADD, 1, (7, 8), (9,))}
    return Decomposition(Graph(tensors, nodes), [0, 1], arguments=[5, 6], results=[9])


def test_inline_reads_the_composites_inputs_and_writes_its_outputs():
    graph, composite = _caller()
    members = inline(graph, composite, _body(), first_tensor=10, first_node=2)
    assert members == [2, 3]
    mul, add = graph.nodes[2], graph.nodes[3]
    assert (mul.op, mul.inputs, mul.outputs) == (Builtin.MUL, (0, 1), (10,))
    assert add.inputs[0] == 10 and add.outputs == (2,)  # the composite's output, as its reader sees it
    assert graph.tensors[add.inputs[1]].constant.tolist() == [pytest.approx(1e-6)]
    assert graph.nodes[0] is composite and graph.nodes[1].inputs == (2, 2)  # TFLite's view is kept


def test_a_composite_is_claimed_only_with_all_of_its_nodes():
    graph, composite = _caller()
    inlining = Inlining([0, 1], members={0: inline(graph, composite, _body(), 10, 2)})
    inlining.plan = inlining.expand([0, 1])
    assert inlining.plan == [2, 3, 1]
    assert inlining.collapse(graph, [2, 3, 1], {}) == [0, 1]
    unsupported = {"add_3": "ADD is not supported here"}
    assert inlining.collapse(graph, [2, 1], unsupported) == [1]
    assert "add_3" not in unsupported  # a node the model does not show is reported under its composite
    assert "ADD" in unsupported["stablehlo_composite_0"] and "odml.rms_norm" in unsupported["stablehlo_composite_0"]


def test_a_decomposition_of_other_shapes_or_arity_is_refused():
    graph, composite = _caller()
    assert mismatch(graph, composite, _body()) is None
    narrow = _body()
    narrow.graph.tensors[9] = _tensor(9, (1, 4, 4))
    assert "[1, 4, 4]" in mismatch(graph, composite, narrow)
    one_argument = Decomposition(narrow.graph, narrow.plan, [5], [9])
    assert "takes 1" in mismatch(graph, composite, one_argument)


def test_results_are_put_in_the_order_of_the_composites_outputs():
    graph, composite = _caller()
    composite.outputs = (2, 3)
    graph.tensors[3] = _tensor(3, (1, 4, 1))
    body = _body()
    body.graph.tensors[7] = _tensor(7, (1, 4, 1))
    swapped = Decomposition(body.graph, body.plan, body.arguments, [7, 9])
    assert ordered_results(graph, composite, swapped).results == [9, 7]


def test_the_decompositions_constants_are_in_its_digest():
    # a compiled partition is keyed by it: another epsilon must not load the first one's kernels
    assert _body(1e-6).digest() == _body(1e-6).digest()
    assert _body(1e-6).digest() != _body(1e-5).digest()


@pytest.mark.opencl
def test_litert_torch_composites_run_in_one_partition(tmp_path):
    model = (MODELS / "torch_composites.tflite").read_bytes()
    ids = [np.random.default_rng(3).integers(0, 96, (1, 12)).astype(np.int32)]
    got, want, state = delegate_and_builtin(model, ids, str(tmp_path), cpu_when_faster="false")
    assert_outputs_close(got, want, F32_TOLERANCE)
    main, *decompositions = state.subgraphs
    assert len(main.delegated_nodes) == main.total_nodes and len(main.partitions) == 1, main.unsupported
    inlined = sorted(r.inlined_into for r in decompositions)
    assert len(decompositions) == 7 and all(inlined), inlined  # 3 RMSNorm, 2 attention, 2 LayerNorm
    assert all(not r.partitions for r in decompositions)  # not compiled a second time


@pytest.mark.opencl
def test_exclude_ops_stablehlo_composite_keeps_the_composites_on_cpu(tmp_path):
    model = (MODELS / "torch_composites.tflite").read_bytes()
    ids = [np.random.default_rng(3).integers(0, 96, (1, 12)).astype(np.int32)]
    options = {"cpu_when_faster": "false", "exclude_ops": "STABLEHLO_COMPOSITE"}
    got, want, state = delegate_and_builtin(model, ids, str(tmp_path), **options)
    assert_outputs_close(got, want, F32_TOLERANCE)
    main, *decompositions = state.subgraphs
    composites = [name for name in main.unsupported if name.startswith("stablehlo_composite")]
    assert len(composites) == 7 and all(main.unsupported[n] == EXCLUDED for n in composites), main.unsupported
    assert not any(r.inlined_into for r in decompositions)  # TFLite runs them: each prepared as a subgraph


@pytest.mark.opencl
def test_a_composite_with_an_op_the_delegate_lacks_stays_on_cpu_with_its_reason():
    result = run_model(str(MODELS / "torch_composites_mixed.tflite"), {"cpu_when_faster": "false"}, runs=0,
                       progress=False)  # fmt: skip
    reasons = result["cpu_nodes"]
    running_sum = [why for name, why in reasons.items() if name.startswith("stablehlo_composite")]
    assert any("example.running_sum" in why and "CUMSUM" in why for why in running_sum), reasons
    # the two results of example.gated (one also read inside it) were told apart: it is delegated
    assert not any("example.gated" in why for why in reasons.values()), reasons
    for o in result["outputs"]:
        assert o["max_abs_error"] <= F32_TOLERANCE * max(1.0, o["max_abs_reference"]), o


@pytest.mark.opencl
def test_a_serialized_partition_with_composites_is_read_back(tmp_path):
    model = (MODELS / "torch_composites.tflite").read_bytes()
    ids = [np.random.default_rng(4).integers(0, 96, (1, 12)).astype(np.int32)]
    options = {"cpu_when_faster": "false", "serialization_dir": str(tmp_path / "ser")}
    first, want, _ = delegate_and_builtin(model, ids, str(tmp_path), **options)
    second, _, state = delegate_and_builtin(model, ids, str(tmp_path), **options)
    assert [p.cache for p in state.partitions] == ["hit"]
    assert_outputs_close(first, want, F32_TOLERANCE)
    assert_outputs_close(second, want, F32_TOLERANCE)
