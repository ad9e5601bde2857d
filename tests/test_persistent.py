"""Persistent kernels (delegate/runtime/persistent.py): the nodes of a context run by one kernel
whose work-groups walk them in order must give exactly what the same kernels give launched one
by one, whatever the number of work-groups and however often it runs."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from delegate import Runtime
from delegate.runtime import driver, launches, persistent
from delegate.runtime import runtime as runtime_module
from delegate.runtime.source import KernelSource, Param

from .helpers import benchmark_module, shared_path
from .runtime_helpers import chain


def _compiled(name: str) -> bytes:
    return benchmark_module("harness.contexts").compiled_context(shared_path("models", f"{name}.tflite"), [])


def _inputs(rt: Runtime, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for shape in rt.input_shapes]


@pytest.fixture
def units(monkeypatch):
    """Make the runtime see ``n`` compute units (more than this machine's workers: the extra
    work-groups start late, when the others may be done)."""

    def set_units(n: int) -> None:
        real = runtime_module.describe

        def describe(device):
            return dataclasses.replace(real(device), compute_units=n)

        monkeypatch.setattr(runtime_module, "describe", describe)

    return set_units


@pytest.fixture
def built_sources(monkeypatch) -> list[str]:
    """The source of every persistent kernel built while the test runs, in order."""
    sources: list[str] = []
    real = persistent.build

    def kept(nodes, names, units=1):
        built = real(nodes, names, units)
        sources.append(built.source)
        return built

    monkeypatch.setattr(persistent, "build", kept)
    return sources


@pytest.mark.parametrize("name", ["small_cnn", "elementwise_mix", "unet_small", "mobilenet_v2"])
def test_a_persistent_kernel_gives_what_the_kernels_give_one_by_one(name, tmp_path):
    payload = _compiled(name)
    with Runtime.load(payload, cache_dir=tmp_path, persistent=False) as one_by_one:
        xs = _inputs(one_by_one, 1)
        expected = one_by_one.run(xs)
        assert not one_by_one.persistent
    with Runtime.load(payload, cache_dir=tmp_path) as rt:
        assert rt.persistent and rt.persistent_error is None
        assert any(label.startswith("persistent ") for label in rt.launch_names)
        for _ in range(3):  # the counters are reset by each run for the next
            for got, want in zip(rt.run(xs), expected, strict=True):
                np.testing.assert_array_equal(got, want)


def test_the_conversions_build_in_the_persistent_kernels_batch(tmp_path, monkeypatch):
    """A persistent load builds in one batch (one ``build_parts``): its persistent kernels, with
    the conversions that run by themselves; those inside a persistent kernel get no program of
    their own unless a plan without persistent kernels needs them. Where helper processes build,
    a small program of its own would hold the start of the large ones."""
    from delegate.runtime.programs import ProgramBuilder

    batches: list[list[str]] = []
    real = ProgramBuilder.build_parts

    def spied(self, parts, options):
        batches.append([what for _, what in parts])
        return real(self, parts, options)

    monkeypatch.setattr(ProgramBuilder, "build_parts", spied)
    payload = _compiled("small_cnn")
    with Runtime.load(payload, cache_dir=tmp_path) as rt:
        assert rt.persistent
        names = rt.launch_names
        xs = _inputs(rt, 3)
        got = rt.run(xs)
    assert len(batches) == 1, batches
    assert batches[0] == ["persistent kernel of input 0 .. output 17"]
    # the conversions run inside the persistent kernel: one launch per call
    assert names == [f"persistent input {rt.input_ids[0]} .. output {rt.output_ids[0]}"]
    with Runtime.load(payload, cache_dir=tmp_path, persistent=False) as one_by_one:
        for a, b in zip(got, one_by_one.run(xs), strict=True):
            np.testing.assert_array_equal(a, b)
    # a first node no persistent kernel takes leaves the input conversion by itself, bound to the
    # caller's memory itself: built with the node kernels, which that node needs
    batches.clear()
    ctx = chain(5)
    op = ctx.nodes[0].gpu_op
    op.code = op.code.replace("MAIN_FUNCTION($0) {", "MAIN_FUNCTION($0) {\n  barrier(CLK_LOCAL_MEM_FENCE);", 1)
    with Runtime.load(ctx, cache_dir=tmp_path, zero_copy=True) as rt:
        assert rt.launch_names == ["input 0", "inc0", "persistent inc1 .. output 6"]
        for seed in range(2):
            x = np.random.default_rng(seed).standard_normal(rt.input_shapes[0]).astype(np.float32)
            np.testing.assert_allclose(rt.run([x])[0], x + 5.0 + (x + 1.0), rtol=1e-6)
    assert len(batches) == 2 and batches[1] == ["persistent kernel of inc1 .. output 6"], batches
    assert batches[0][0].startswith("input 0, inc0, ")


def test_a_persistent_kernel_that_does_not_build_leaves_every_launch_by_itself(tmp_path, monkeypatch):
    """The conversions inside a persistent kernel have no program yet when it fails: the plan that
    replaces it builds them, and binds the caller's memory to them again."""
    real = persistent.build

    def broken(nodes, names, units=1):
        built = real(nodes, names, units)
        return dataclasses.replace(built, source=built.source + "\nthis does not compile\n")

    monkeypatch.setattr(persistent, "build", broken)
    with Runtime.load(chain(3), cache_dir=tmp_path, zero_copy=True) as rt:
        assert not rt.persistent and "did not build" in (rt.persistent_error or "")
        assert rt.launch_names == ["input 0", "inc0", "inc1", "inc2", "residual", "output 4"]
        for seed in range(2):
            x = np.random.default_rng(seed).standard_normal(rt.input_shapes[0]).astype(np.float32)
            np.testing.assert_allclose(rt.run([x])[0], x + 3.0 + (x + 1.0), rtol=1e-6)


@pytest.mark.parametrize("zero_copy", [True, False], ids=["zero_copy", "copies"])
@pytest.mark.parametrize("path", ["shared:elementwise_mix", "tests/models/yolo_fpn_tiny.tflite"])
def test_the_conversions_run_inside_the_persistent_kernels(path, zero_copy, tmp_path):
    """The input conversions open the first persistent kernel and the output ones close the last
    (two inputs; three outputs), their staging buffers that kernel's arguments, bound to the
    caller's arrays (zero copy) or copied through: every call gives the one-by-one plan's outputs,
    with new arrays each call and new contents in the same ones."""
    from pathlib import Path

    model = shared_path("models", "elementwise_mix.tflite") if path.startswith("shared:") else Path(path)
    payload = benchmark_module("harness.contexts").compiled_context(model, [])
    with Runtime.load(payload, cache_dir=tmp_path, persistent=False, zero_copy=zero_copy) as one_by_one:
        calls = [_inputs(one_by_one, seed) for seed in range(3)]
        expected = [[np.array(o) for o in one_by_one.run(xs)] for xs in calls]
    with Runtime.load(payload, cache_dir=tmp_path, zero_copy=zero_copy) as rt:
        names = rt.launch_names
        assert names[0].startswith("persistent input ") and names[-1].endswith(f" .. output {rt.output_ids[-1]}")
        assert not any(name.startswith(("input ", "output ")) for name in names)
        for xs, want in zip(calls, expected, strict=True):
            for got, w in zip(rt.run(xs), want, strict=True):
                np.testing.assert_array_equal(got, w)
        same = [x.copy() for x in calls[0]]
        rt.run(same)
        for x, new in zip(same, calls[1], strict=True):
            x[...] = new  # the same arrays, new contents: the kernel must read them
        for got, w in zip(rt.run(same), expected[1], strict=True):
            np.testing.assert_array_equal(got, w)


@pytest.mark.parametrize("n", [1, 3, 7])
def test_any_number_of_work_groups_gives_the_same_result(n, units, tmp_path):
    ctx = chain(5)
    with Runtime.load(ctx, cache_dir=tmp_path, persistent=False) as one_by_one:
        x = np.random.default_rng(2).standard_normal(one_by_one.input_shapes[0]).astype(np.float32)
        (expected,) = one_by_one.run([x])
    units(n)
    with Runtime.load(ctx, cache_dir=tmp_path) as rt:
        assert [launch[1:] for launch in rt.launches()] == [((n,), (1,))]
        for _ in range(5):
            np.testing.assert_array_equal(rt.run([x])[0], expected)
    np.testing.assert_allclose(expected, x + 5.0 + (x + 1.0), rtol=1e-6)


def test_a_node_it_cannot_take_splits_the_run(tmp_path):
    ctx = chain(5)
    # a barrier without the WORK_GROUP_SERIAL marker: its work-items must run as a work-group
    op = ctx.nodes[2].gpu_op
    op.code = op.code.replace("MAIN_FUNCTION($0) {", "MAIN_FUNCTION($0) {\n  barrier(CLK_LOCAL_MEM_FENCE);", 1)
    assert "barrier" in op.code
    with Runtime.load(ctx, cache_dir=tmp_path) as rt:
        assert rt.launch_names == ["persistent input 0 .. inc1", "inc2", "persistent inc3 .. output 6"]
        x = np.random.default_rng(4).standard_normal(rt.input_shapes[0]).astype(np.float32)
        np.testing.assert_allclose(rt.run([x])[0], x + 5.0 + (x + 1.0), rtol=1e-6)


def test_tuning_rebuilds_the_persistent_kernel_with_the_chosen_sizes(tmp_path):
    ctx = chain(3)
    with Runtime.load(ctx, cache_dir=tmp_path) as rt:
        x = np.random.default_rng(0).random(rt.input_shapes[0], dtype=np.float32)
        before = rt.run([x])[0]
        report = rt.tune("fast", repeats=1)
        assert [n.name for n in report.nodes] == ["inc0", "inc1", "inc2", "residual"]
        assert rt.persistent
        np.testing.assert_array_equal(rt.run([x])[0], before)


def test_profiling_and_persistent_false_launch_node_by_node(tmp_path):
    ctx = chain(2)
    for kwargs in ({"profiling": True}, {"persistent": False}):
        with Runtime.load(ctx, cache_dir=tmp_path, **kwargs) as rt:
            assert not rt.persistent
            assert rt.launch_names == ["input 0", "inc0", "inc1", "residual", "output 3"]


def _node(code: str, params: list[Param]) -> KernelSource:
    body = f"__kernel void main_function({', '.join(p.decl for p in params)}) {{\n{code}\n}}\n"
    return KernelSource(body, params, body=body)


def test_which_kernels_a_persistent_kernel_can_take():
    buffer = Param("__global float4* t_buf", "tensor_buffer", "t")
    image = Param("__read_only image2d_t t_img", "tensor_image", "t")
    assert persistent.eligible(_node("  t_buf[get_global_id(0)] = (float4)(1.0f);", [buffer]))
    assert not persistent.eligible(_node("  ;", [buffer, image]))  # images are not passed in
    assert not persistent.eligible(_node("  barrier(CLK_LOCAL_MEM_FENCE);", [buffer]))
    assert not persistent.eligible(_node("  __local float s[8];\n  s[0] = 1.0f;", [buffer]))
    serial = "  /* WORK_GROUP_SERIAL */\n  __local float8 s[8];\n  s[0] = 1.0f;\n  barrier(CLK_LOCAL_MEM_FENCE);"
    assert persistent.eligible(_node(serial, [buffer]))
    assert not persistent.eligible(_node(serial.replace("float8", "double"), [buffer]))  # a type it cannot size


def test_each_node_is_a_function_of_its_own_with_its_scalars_as_constants():
    # Two nodes of one kernel source: each gets its own functions with its shapes declared inside,
    # so the compiler specialises it (loop bounds, index arithmetic); only buffers are passed. The
    # work-item code is inlined into an out-of-line function per work-group (what perf names).
    out = Param("__global float4* t_buf", "tensor_buffer", "t")
    shape = Param("int4 shape", "int4", "shape")
    src = _node("  t_buf[get_global_id(0)] = (float4)((float)shape.x);", [out, shape])
    buffer = object()
    sizes = (3, 5)
    nodes = [persistent.NodeKernel(src, [buffer, np.array([n, 0, 0, 0], np.int32)], (8,), (8,)) for n in sizes]
    kernel = persistent.build(nodes, ["first", "second"])
    groups = kernel.source.split("__attribute__((noinline)) void ")[1:]
    items = kernel.source.split("__attribute__((always_inline)) void ")[1:]
    assert [f.split("(", 1)[0] for f in groups] == ["n0", "n1"]
    assert [f.split("(", 1)[0] for f in items] == ["n0_item", "n1_item"]
    for group, item, n in zip(groups, items, sizes, strict=True):
        for function in (group, item):
            signature = function.split("{", 1)[0]
            assert "int4 shape" not in signature and "__global float4* t_buf" in signature
        assert f"int4 shape = (int4)({n}, 0, 0, 0);" in item.split("{", 1)[1]
        assert "(int4)(" not in group.split("{", 1)[1].split("_item(", 1)[1].split(";", 1)[0]  # not passed on
    assert kernel.tensor_buffers == [buffer]
    assert "(int4)(3, 0, 0, 0)" not in kernel.source.split("void dlg_persistent", 1)[1]  # not passed in calls


def test_nodes_alike_but_for_where_their_tensors_lie_share_one_function():
    # A network's repeated blocks: the same source, shapes and launch, their tensors elsewhere in
    # the arena. The shape's offset (s6) goes into the buffer pointer of the call, so they call
    # the first one's function; a node of another shape keeps its own.
    out = Param("__global float4* t_buf", "tensor_buffer", "t")
    shape = Param("int8 t_shape", "tensor_shape", "t")
    code = "  ((__global float4*)((__global char*)t_buf + t_shape.s6))[get_global_id(0)] = (float4)(1.0f);"
    src = _node(code, [out, shape])
    buffer = object()

    def node(width: int, offset: int) -> persistent.NodeKernel:
        return persistent.NodeKernel(src, [buffer, np.array([width, 1, 1, 1, 1, 4, offset, 8], np.int32)], (8,), (8,))

    nodes = [node(8, 64), node(8, 192), node(9, 64)]
    kernel = persistent.build(nodes, ["a", "b", "c"])
    groups = kernel.source.split("__attribute__((noinline)) void ")[1:]
    assert [f.split("(", 1)[0] for f in groups] == ["n0", "n2"]
    assert kernel.source.count("int8 t_shape = (int8)(8, 1, 1, 1, 1, 4, 0, 8);") == 1
    assert "int8 t_shape = (int8)(9, 1, 1, 1, 1, 4, 0, 8);" in kernel.source
    calls = kernel.source.split("void dlg_persistent", 1)[1]
    assert "n0(dlg_local, (int4)(s, o % 1u, o / 1u, 0), (__global float4*)(dlg_t0 + 64));" in calls
    assert "n0(dlg_local, (int4)(s, o % 1u, o / 1u, 0), (__global float4*)(dlg_t0 + 192));" in calls
    assert "n2(dlg_local, (int4)(s, o % 1u, o / 1u, 0), (__global float4*)(dlg_t0 + 64));" in calls
    assert kernel.tensor_buffers == [buffer]
    assert kernel.functions == ("n0", "n0", "n2")
    # what the build of a program of them follows: the repeat brings only its step
    body = len(src.body)
    assert persistent.source_sizes(nodes) == [body, persistent.STEP_BYTES, body]


def test_a_persistent_kernel_of_repeated_blocks_compiles_each_once_and_runs_as_one_by_one(tmp_path, built_sources):
    # chain(): five "+1" nodes alike but for their tensors' places, between the conversions
    ctx = chain(5)
    with Runtime.load(ctx, cache_dir=tmp_path, persistent=False) as one_by_one:
        x = np.random.default_rng(8).standard_normal(one_by_one.input_shapes[0]).astype(np.float32)
        (expected,) = one_by_one.run([x])
    with Runtime.load(ctx, cache_dir=tmp_path) as rt:
        assert rt.persistent
        for _ in range(2):
            np.testing.assert_array_equal(rt.run([x])[0], expected)
    (source,) = built_sources
    functions = [f.split("(", 1)[0] for f in source.split("__attribute__((noinline)) void ")[1:]]
    calls = re.findall(r"^\s+(n\d+)\(dlg_local", source, flags=re.M)
    # the input conversion, the five incs, the residual add, the output conversion
    assert functions == ["n0", "n1", "n6", "n7"]
    assert calls == ["n0", "n1", "n1", "n1", "n1", "n1", "n6", "n7"]
    np.testing.assert_allclose(expected, x + 5.0 + (x + 1.0), rtol=1e-6)


def test_work_items_past_a_nodes_grid_are_skipped_not_called():
    # A node whose 61 work-items launch as 8 work-groups of 8: the last 3 are not called, when the
    # runtime says any local size serves it (grid given); without a grid all 64 are called.
    out = Param("__global float4* t_buf", "tensor_buffer", "t")
    src = _node("  t_buf[get_global_id(0)] = (float4)(1.0f);", [out])
    buffer = object()
    guarded = persistent.build([persistent.NodeKernel(src, [buffer], (64,), (8,), (61,))], ["a"]).source
    assert "if (dlg_g.x * 8 + dl.x < 61) n0_item(" in guarded
    plain = persistent.build([persistent.NodeKernel(src, [buffer], (64,), (8,))], ["a"]).source
    assert "dl.x < 61" not in plain and "    n0_item(dlg_local, dlg_g, dl, t_buf);" in plain


def test_a_node_of_few_work_groups_takes_smaller_ones_where_any_local_size_serves():
    # 37 work-items in 5 groups of 8: on 2 work-groups one would wait for a fifth of the node, so
    # the groups get smaller (4 items: 10 groups, at least GROUPS_PER_UNIT per work-group); on 1
    # they stay; a node that needs its launched local size (no grid) keeps it.
    out = Param("__global float4* t_buf", "tensor_buffer", "t")
    src = _node("  t_buf[get_global_id(0)] = (float4)(1.0f);", [out])
    buffer = object()
    node = persistent.NodeKernel(src, [buffer], (40,), (8,), (37,))
    finer = persistent.build([node], ["a"], units=2).source
    assert "const uint n = 10u;" in finer and "if (dlg_g.x * 4 + dl.x < 37) n0_item(" in finer
    assert "int4 dlg_st = (int4)(4, 1, 1, 0)" in finer and "int4 dlg_gs = (int4)(40, 1, 1, 0)" in finer
    assert "const uint n = 5u;" in persistent.build([node], ["a"], units=1).source
    fixed = persistent.NodeKernel(src, [buffer], (40,), (8,))
    assert "const uint n = 5u;" in persistent.build([fixed], ["a"], units=2).source


_REVERSE_TILES = """
__attribute__((reqd_work_group_size(4, 4, 1))) MAIN_FUNCTION($0) {
  /* WORK_GROUP_SERIAL: the 4x4 tile's pixels are shared among the work-group's work-items */
  __local FLT4 tile[16];
  int lanes = GROUP_SIZE_0 * GROUP_SIZE_1;
  int lane = LOCAL_ID_1 * GROUP_SIZE_0 + LOCAL_ID_0;
  int X0 = GLOBAL_ID_0 - LOCAL_ID_0;
  int Y0 = GLOBAL_ID_1 - LOCAL_ID_1;
  int S = GLOBAL_ID_2;
  for (int i = lane; i < 16; i += lanes) {
    tile[i] = args.src_tensor.Read(X0 + i % 4, Y0 + i / 4, S);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int i = lane; i < 16; i += lanes) {
    args.dst_tensor.Write(tile[15 - i] + (FLT)(1.0f), X0 + i % 4, Y0 + i / 4, S);
  }
}
"""


def test_a_serial_work_group_sees_its_first_work_items_ids(tmp_path):
    # A WORK_GROUP_SERIAL kernel run as one work-item per work-group: GLOBAL_ID is the group's first
    # work-item's (group id x launched local size), so the tile it covers is the launched one.
    ctx = chain(5)
    ctx.nodes[2].gpu_op.code = _REVERSE_TILES
    x = np.random.default_rng(6).standard_normal((1, 16, 16, 8)).astype(np.float32)
    tiles = x.reshape(1, 4, 4, 4, 4, 8)[:, :, ::-1, :, ::-1, :].reshape(x.shape)  # each 4x4 tile reversed
    expected = (x + 1.0) + (tiles + 5.0)
    for flag in (False, True):
        with Runtime.load(ctx, cache_dir=tmp_path, persistent=flag) as rt:
            assert rt.persistent is flag
            np.testing.assert_allclose(rt.run([x])[0], expected, rtol=1e-6)


def test_each_run_resets_the_counters_it_used_and_no_others(tmp_path, units, monkeypatch):
    # A run takes P range counters and a done counter per node (one 64-byte line each, laid out
    # for up to MAX_UNITS work-groups); the last work-group out sets those back to zero. Resetting
    # every line instead cost that work-group about 4 KB of stores per node on each run, past the
    # end of the kernel's work (DenseNet121: 1 MB per call).
    kept: list[np.ndarray] = []

    def counters_in_view(context, words):
        host = np.zeros(words, np.uint32)
        kept.append(host)
        return driver.buffer_over(context, driver.CL_MEM_READ_WRITE, host.nbytes, driver.ffi.from_buffer(host))

    monkeypatch.setattr(launches, "counter_buffer", counters_in_view)
    units(3)
    ctx = chain(5)
    with Runtime.load(ctx, cache_dir=tmp_path) as rt:
        if not rt.device_info.host_memory_in_place:
            pytest.skip("the counters are read in place: this device keeps buffers in memory of its own")
        x = np.random.default_rng(4).standard_normal(rt.input_shapes[0]).astype(np.float32)
        (counters,) = kept
        line = 16
        lines = counters.reshape(-1, line)
        nodes = (len(lines) - 1) // (persistent.MAX_UNITS + 1)
        per_node = lines[:-1].reshape(nodes, persistent.MAX_UNITS + 1, line)
        per_node[:, 3 : persistent.MAX_UNITS, 0] = 0xDEAD  # lines of work-groups that do not run
        expected = x + 5.0 + (x + 1.0)
        for _ in range(3):
            np.testing.assert_allclose(rt.run([x])[0], expected, rtol=1e-6)
            assert not per_node[:, :3].any() and not per_node[:, persistent.MAX_UNITS].any()
            assert not lines[-1].any()  # the exit counter
            assert (per_node[:, 3 : persistent.MAX_UNITS, 0] == 0xDEAD).all()


@pytest.mark.parametrize("n", [2, 3])
def test_a_node_of_few_rows_is_taken_in_runs_of_groups_across_them(n, units, tmp_path, built_sources):
    # 16x16 pixels of 7 slices in 4x4 work-groups: 7 slices (the longest axis) of 16 groups. Taken
    # row by row, 2 work-groups would split it 4:3; in runs of 112 / (16 * n) groups (not whole
    # numbers of them), no piece is more than a few groups, and every group runs once.
    ctx = chain(3, c=28)
    with Runtime.load(ctx, cache_dir=tmp_path, persistent=False) as one_by_one:
        x = np.random.default_rng(5).standard_normal(one_by_one.input_shapes[0]).astype(np.float32)
        (expected,) = one_by_one.run([x])
    units(n)
    with Runtime.load(ctx, cache_dir=tmp_path) as rt:
        assert rt.persistent
        for _ in range(3):
            np.testing.assert_array_equal(rt.run([x])[0], expected)
    (source,) = built_sources
    step = source.split("/* inc0 */", 1)[1]
    assert f"const uint n = {persistent.PIECES_PER_UNIT * n}u;" in step.split("DLG_DONE", 1)[0]
    np.testing.assert_allclose(expected, x + 3.0 + (x + 1.0), rtol=1e-6)
