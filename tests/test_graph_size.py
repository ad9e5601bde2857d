"""Large graphs: prepare time linear in nested control flow, contexts within the runtime's bounds
(long chains split, partitions cut where they stop fitting), and no persistent kernel too long to build.

The nested-IF and nested-WHILE models prepare in a subprocess with a timeout, timed against
TFLite alone on the same model in the same process: work that doubles at each level of nesting
never finishes at depth 60, so a timeout is the failure it guards against.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from delegate.compiler import bounds
from delegate.compiler.graph import FLOAT32, Builtin, Graph, Node, Tensor
from delegate.compiler.partition import CompileOptions, compile_partition
from delegate.context import bounds as context_bounds
from delegate.errors import PartitionTooLargeError
from delegate.runtime import Runtime, launches, persistent, plan
from delegate.runtime.limits import LIMITS

ROOT = Path(__file__).resolve().parent.parent

#: builds the model, then times creating + allocating + invoking it with TFLite alone and with the
#: delegate; prints the two times and whether both gave x + 1
_TIMED = """
import json, sys, time
import numpy as np
sys.path.insert(0, {root!r})
from tests import graph_models
import delegate
from delegate.api import host_runtime

model = getattr(graph_models, {builder!r})({depth})
host = host_runtime()
cpu = host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES

def timed(**kwargs):
    start = time.perf_counter()
    interpreter = host.Interpreter(model_content=model, **kwargs)
    interpreter.allocate_tensors()
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    for detail in interpreter.get_input_details():
        value = np.array([True]) if detail["dtype"] == np.bool_ else x
        interpreter.set_tensor(detail["index"], value)
    interpreter.invoke()
    y = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    return time.perf_counter() - start, bool(np.array_equal(y, x + 1))

alone, alone_ok = timed(experimental_op_resolver_type=cpu)
loaded = delegate.load_delegate(program_cache={cache!r})
with_delegate, delegate_ok = timed(experimental_delegates=[loaded], experimental_op_resolver_type=cpu)
print(json.dumps([alone, alone_ok, with_delegate, delegate_ok]))
"""


def _timed(builder: str, depth: int, cache: Path) -> tuple[float, float]:
    script = _TIMED.format(root=str(ROOT), builder=builder, depth=depth, cache=str(cache))
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{builder}({depth}) did not prepare within 120 s: work grows with the nesting depth")
    assert run.returncode == 0, run.stderr[-3000:]
    alone, alone_ok, with_delegate, delegate_ok = json.loads(run.stdout.strip().splitlines()[-1])
    assert alone_ok and delegate_ok, "the model did not compute x + 1"
    return alone, with_delegate


@pytest.mark.parametrize("builder", ["nested_if", "nested_while"])
def test_nesting_60_deep_prepares_within_a_second_of_tflite(builder, tmp_path):
    alone, with_delegate = _timed(builder, 60, tmp_path)
    # Doubling per level is 2^60 times the work; linear is milliseconds per subgraph.
    assert with_delegate - alone < 1.0, (alone, with_delegate)


#: the chain through the delegate and through TFLite's builtin CPU kernels; prints both outputs
#: and how many nodes the delegate ran
_CHAIN = """
import json, sys
import numpy as np
sys.path.insert(0, {root!r})
from tests import graph_models
from tests.helpers import delegate_and_builtin

model = graph_models.elementwise_chain({length})
x = np.linspace(-2.0, 2.0, 4, dtype=np.float32).reshape(1, 4)
(ours,), (builtin,), state = delegate_and_builtin(model, [x], {cache!r})
print(json.dumps([ours.tolist(), builtin.tolist(), len(state.delegated_nodes), state.unsupported]))
"""


def test_a_20000_op_chain_runs_through_the_delegate(tmp_path):
    script = _CHAIN.format(root=str(ROOT), length=20_000, cache=str(tmp_path))
    env = dict(os.environ, DELEGATE_BACKGROUND_COMPILE="off")
    try:
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("a 20,000-op chain did not prepare and run within 300 s")
    assert run.returncode == 0, run.stderr[-3000:]
    ours, builtin, delegated, unsupported = json.loads(run.stdout.strip().splitlines()[-1])
    assert delegated == 20_000, unsupported
    # y * 0.999 + 0.001 has the fixed point 1: after 10,000 rounds the input is still visible (e^-10)
    scale = float(np.max(np.abs(builtin)))
    np.testing.assert_allclose(ours, builtin, rtol=0, atol=1e-4 * scale)
    assert np.ptp(builtin) > 1e-5


def _chain(length: int, shape: tuple[int, ...] = (1, 4)) -> tuple[Graph, int]:
    """A graph of ``length`` elementwise ops in one chain (MUL by 0.999, ADD of 0.001, alternating)."""
    tensors = {
        0: Tensor(0, FLOAT32, shape, "x"),
        1: Tensor(1, FLOAT32, (1,), "scale", True, np.array([0.999], np.float32)),
        2: Tensor(2, FLOAT32, (1,), "shift", True, np.array([0.001], np.float32)),
    }
    nodes, previous = {}, 0
    for k in range(length):
        out = len(tensors)
        tensors[out] = Tensor(out, FLOAT32, shape, f"t{out}")
        op, constant = (Builtin.MUL, 1) if k % 2 == 0 else (Builtin.ADD, 2)
        nodes[k] = Node(k, op, 1, (previous, constant), (out,), {"activation": 0})
        previous = out
    return Graph(tensors, nodes), previous


def test_a_long_chain_is_split_into_kernels_the_runtime_accepts():
    graph, out = _chain(1000)
    ctx = compile_partition(graph, list(graph.nodes), [0], [out], CompileOptions())
    per_kernel = bounds.MAX_LINKS + 1
    assert len(ctx.nodes) == -(-1000 // per_kernel)
    assert all(n.gpu_op.linkable_count <= bounds.MAX_LINKS for n in ctx.nodes)
    assert all(len(n.gpu_op.code.encode()) <= bounds.NODE_SOURCE_BUDGET for n in ctx.nodes)
    # each kernel reads what the one before wrote: the chain's order is kept
    for before, after in zip(ctx.nodes, ctx.nodes[1:], strict=False):
        assert after.input_ids == before.output_ids


def test_links_stop_before_the_source_budget(monkeypatch):
    # A budget of a few links' worth: the kernel must stop growing before it could pass it.
    graph, out = _chain(40)
    unbounded = compile_partition(graph, list(graph.nodes), [0], [out], CompileOptions())
    per_kernel = bounds.MAX_LINKS + 1
    assert len(unbounded.nodes) == -(-40 // per_kernel)  # MAX_LINKS alone: 2 kernels
    # the first kernel's source with half its links: the budget binds before MAX_LINKS does
    first = len(unbounded.nodes[0].gpu_op.code)
    monkeypatch.setattr(bounds, "NODE_SOURCE_BUDGET", first // 2 + bounds.LINK_SOURCE_BOUND)
    ctx = compile_partition(graph, list(graph.nodes), [0], [out], CompileOptions())
    assert len(ctx.nodes) > len(unbounded.nodes)
    assert all(len(n.gpu_op.code) <= bounds.NODE_SOURCE_BUDGET for n in ctx.nodes)


@pytest.mark.parametrize(
    ("bound", "value", "message"),
    [
        ("MAX_NODES", 3, "more than the runtime's 3 kernels"),
        ("MAX_TOTAL_SOURCE_BYTES", 30_000, "bound of 30000 bytes of source"),
        ("MAX_TENSORS", 3, "more than the runtime's 3 tensors"),
    ],
)
def test_a_partition_over_a_context_bound_names_where_it_stops_fitting(monkeypatch, bound, value, message):
    graph, out = _chain(200)
    # the chain's kernels' source, each counted as the bound counts it, before any bound is lowered
    unbounded = compile_partition(graph, list(graph.nodes), [0], [out], CompileOptions())
    sizes = [len(n.gpu_op.code.encode()) + len((n.gpu_op.elementwise_code or "").encode()) for n in unbounded.nodes]
    within = sum(1 for k in range(len(sizes)) if sum(sizes[: k + 1]) <= value)
    monkeypatch.setattr(context_bounds, bound, value)
    with pytest.raises(PartitionTooLargeError, match=message) as info:
        compile_partition(graph, list(graph.nodes), [0], [out], CompileOptions())
    per_kernel = bounds.MAX_LINKS + 1
    kernels_that_fit = {"MAX_NODES": 3, "MAX_TOTAL_SOURCE_BYTES": within, "MAX_TENSORS": 2}[bound]
    assert 0 < kernels_that_fit < len(unbounded.nodes)
    assert info.value.node == kernels_that_fit * per_kernel  # the first op of the first kernel that does not fit
    assert "split here" in info.value.reason


def test_the_compiler_and_the_runtime_share_the_bounds():
    assert LIMITS.max_nodes == context_bounds.MAX_NODES
    assert LIMITS.max_tensors == context_bounds.MAX_TENSORS
    assert LIMITS.max_node_source_bytes == context_bounds.MAX_NODE_SOURCE_BYTES
    assert LIMITS.max_total_source_bytes == context_bounds.MAX_TOTAL_SOURCE_BYTES
    assert bounds.NODE_SOURCE_BUDGET <= context_bounds.MAX_NODE_SOURCE_BYTES // 4


def test_a_context_past_one_programs_source_runs_as_more_persistent_kernels(monkeypatch):
    graph, out = _chain(400)
    ctx = compile_partition(graph, list(graph.nodes), [0], [out], CompileOptions())
    source = sum(len(n.gpu_op.code) for n in ctx.nodes)
    x = np.linspace(-2.0, 2.0, 4, dtype=np.float32).reshape(1, 1, 1, 4)
    expected = x
    for k in range(400):
        expected = expected * np.float32(0.999) if k % 2 == 0 else expected + np.float32(0.001)
    counts = []
    for bound in (plan.MAX_PERSISTENT_PROGRAM, source // 6):
        monkeypatch.setattr(plan, "MAX_PERSISTENT_PROGRAM", bound)
        with Runtime.load(ctx) as runtime:
            assert runtime.persistent, runtime.persistent_error
            counts.append(sum(name.startswith("persistent ") for name in runtime.launch_names))
            (y,) = runtime.run([x])
        np.testing.assert_allclose(y, expected, rtol=1e-4)
    assert counts[1] > counts[0], counts


def test_persistent_segments_hold_each_program_under_its_bound():
    assert plan.persistent_segments(100, 1) == 1
    assert plan.persistent_segments(plan.MAX_PERSISTENT_PROGRAM, 1) == 1
    assert plan.persistent_segments(plan.MAX_PERSISTENT_PROGRAM + 1, 1) == 2
    assert plan.persistent_segments(3 * plan.MAX_PERSISTENT_PROGRAM, 4) == 4  # the builder's parts, when more


def test_the_nodes_past_the_persistent_source_bound_run_one_by_one(monkeypatch):
    """Persistent kernels take the context's first MAX_PERSISTENT_SOURCE bytes of node source; the
    nodes past it run one by one, not the whole context (which made a model just past the bound
    run all node by node, 1.4x slower)."""
    graph, out = _chain(400)
    ctx = compile_partition(graph, list(graph.nodes), [0], [out], CompileOptions())
    x = np.linspace(-2.0, 2.0, 4, dtype=np.float32).reshape(1, 1, 1, 4)
    monkeypatch.setattr(launches, "MAX_PERSISTENT_SOURCE", 1)
    counted: list[list[int]] = []
    real_sizes = persistent.source_sizes
    monkeypatch.setattr(persistent, "source_sizes", lambda nodes: counted.append(real_sizes(nodes)) or counted[-1])
    with Runtime.load(ctx) as runtime:  # no node within the bound: none persistent
        assert not runtime.persistent and runtime.persistent_error is None
        source = int(re.search(r"have (\d+) bytes of source", runtime.persistent_note or "").group(1))
    # the bound in the sizes the build follows (nodes alike as their steps), through half the kernels
    (sizes,) = counted
    assert source == sum(sizes)
    monkeypatch.setattr(launches, "MAX_PERSISTENT_SOURCE", sum(sizes[: len(sizes) // 2]))
    with Runtime.load(ctx) as runtime:
        assert runtime.persistent and runtime.persistent_error is None
        assert "bytes of source" in (runtime.persistent_note or "")
        names = runtime.launch_names
        alone = [name for name in names if name in runtime.node_names]
        # the first half of the chain's kernels in persistent kernels, the rest by themselves
        assert 0.3 * len(ctx.nodes) <= len(alone) <= 0.7 * len(ctx.nodes), names
        assert alone == [n.name for n in ctx.nodes[-len(alone) :]], names
        (y,) = runtime.run([x])
    expected = x
    for k in range(400):
        expected = expected * np.float32(0.999) if k % 2 == 0 else expected + np.float32(0.001)
    np.testing.assert_allclose(y, expected, rtol=1e-5)


def test_within_source_budget_counts_eligible_nodes_in_order():
    able = [True, False, True, True, True]
    sizes = [10, 100, 10, 10, 10]
    assert plan.within_source_budget(able, sizes, 25) == [True, False, True, False, False]
    assert plan.within_source_budget(able, sizes, 40) == able
