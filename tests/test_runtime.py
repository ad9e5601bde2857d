"""The runtime on the embedded default device (PoCL): hand-built contexts checked against numpy."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest
from delegate._native import ffi

from delegate import (
    ContextFormatError,
    DeviceNotFoundError,
    DeviceResourceError,
    ProgramBuildError,
    Runtime,
    serialize_context,
    write_context,
)
from delegate.context import model as m
from delegate.runtime import select_device
from delegate.runtime.driver import MemObject
from delegate.runtime.memory import PLANE_PAD_LINES

from .runtime_helpers import SCALE_BIAS, STORAGES, T, chain, desc, scale_bias_op, single_node

# Kernels on the default device (PoCL): the `opencl` marker selects or deselects them (-m opencl).
pytestmark = pytest.mark.opencl

F32, F32_F16, F16 = m.CalculationsPrecision.F32, m.CalculationsPrecision.F32_F16, m.CalculationsPrecision.F16
# Tolerances per precision: F32 is exact for a*b+c; half storage rounds to 11 significant bits.
TOLERANCE = {F32: 1e-6, F32_F16: 2e-3, F16: 4e-3}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("programs")


def _bias(c: int) -> np.ndarray:
    return np.linspace(-1, 1, (c + 3) // 4 * 4, dtype=np.float32)


@pytest.mark.parametrize("precision", [F32, F32_F16, F16], ids=lambda p: p.name)
@pytest.mark.parametrize("storage", STORAGES, ids=lambda s: s.name)
def test_elementwise_kernel_on_every_storage_and_precision(storage, precision, cache):
    c = 3 if storage == T.SINGLE_TEXTURE_2D else 6
    dt = m.DataType.FLOAT32 if precision == F32 else m.DataType.FLOAT16
    bias = _bias(c)
    ctx = single_node(scale_bias_op(1.5, bias.tobytes()), desc(c, storage, dt), desc(c, storage, dt),
                      precision=precision)  # fmt: skip
    rng = np.random.default_rng(0)
    with Runtime.load(serialize_context(ctx), cache_dir=cache) as rt:
        assert rt.input_shapes == [(1, 3, 5, c)] and rt.output_shapes == [(1, 3, 5, c)]
        x = rng.uniform(-4, 4, size=rt.input_shapes[0]).astype(np.float32)
        (y,) = rt.run([x])
    expected = x * 1.5 + bias[:c]
    np.testing.assert_allclose(y, expected, atol=TOLERANCE[precision] * 8, rtol=TOLERANCE[precision])
    if precision == F32:
        assert np.abs(y - expected).max() <= 1e-5


@pytest.mark.parametrize("c", [1, 3, 6, 9, 17])
@pytest.mark.parametrize("storage", STORAGES, ids=lambda s: s.name)
def test_image_inputs_and_outputs_convert_by_rows(storage, c, cache):
    # Batch 1, depth 1 tensors convert 8 pixels of a row per work-item: rows of 19 pixels take two
    # whole blocks and a partial one; 1 to 3 slices, the last one partial or whole (17 channels, 5
    # slices, take the per-element kernels).
    if storage == T.SINGLE_TEXTURE_2D and c > 4:
        pytest.skip("a single 2D texture holds at most 4 channels")
    bias = _bias(c)
    ctx = single_node(scale_bias_op(1.5, bias.tobytes()), desc(c, storage, h=2, w=19), desc(c, storage, h=2, w=19))
    with Runtime.load(serialize_context(ctx), cache_dir=cache) as rt:
        x = np.random.default_rng(c).uniform(-4, 4, size=rt.input_shapes[0]).astype(np.float32)
        (y,) = rt.run([x])
    np.testing.assert_allclose(y, x * 1.5 + bias[:c], rtol=1e-6, atol=1e-6)


def test_batch_and_depth_shapes(cache):
    ctx = single_node(scale_bias_op(-2.0, _bias(5).tobytes()), desc(5, b=2, d=3), desc(5, b=2, d=3))
    # The scale/bias kernel addresses (X, Y, S) only: give it X over W*B and Y over H*D via 5-arg selectors.
    ctx.nodes[0].gpu_op.code = """
MAIN_FUNCTION($0) {
  int gx = GLOBAL_ID_0; int gy = GLOBAL_ID_1; int S = GLOBAL_ID_2;
  int B = args.dst_tensor.Batch(); int D = args.dst_tensor.Depth();
  if (gx >= args.dst_tensor.Width() * B || gy >= args.dst_tensor.Height() * D || S >= args.dst_tensor.Slices()) return;
  int X = gx / B; int b = gx % B; int Y = gy / D; int Z = gy % D;
  FLT4 v = args.src_tensor.Read(X, Y, Z, S, b) * (FLT)(args.scale) + args.bias.Read(S);
  args.dst_tensor.Write(v, X, Y, Z, S, b);
}
"""
    with Runtime.load(ctx, cache_dir=cache) as rt:
        assert rt.input_shapes == [(2, 3, 5, 3, 5)]
        x = np.random.default_rng(1).standard_normal(rt.input_shapes[0]).astype(np.float32)
        (y,) = rt.run([x])
    np.testing.assert_allclose(y, x * -2.0 + _bias(5)[:5], rtol=1e-6, atol=1e-6)


#: an element-wise kernel's start: the pixel (X, Y, S, b) of its work-item and its linear index
_ELEMENT_START = """
MAIN_FUNCTION($0) {
  int gx = GLOBAL_ID_0; int Y = GLOBAL_ID_1; int S = GLOBAL_ID_2;
  int B = args.dst_tensor.Batch();
  if (gx >= args.dst_tensor.Width() * B || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  int X = gx / B; int b = gx % B;
  int at = args.src_tensor.Offset(X, Y, S, b);
"""

_LINEAR_SELECTORS = (
    _ELEMENT_START
    + """\
  args.src_tensor.PrefetchAt(at + args.src_tensor.Offset(0, 0, 4, 0));
  args.dst_tensor.WriteAt(args.src_tensor.ReadAt(at) * (FLT)(args.scale) + args.bias.Read(S), at);
}
"""
)


def _check_scale_bias(code: str, storage: T, precision: m.CalculationsPrecision, cache, seed: int) -> None:
    """Run ``code`` as a scale-and-bias node over a 2-batch, 6-channel tensor in ``storage`` and
    compare with numpy."""
    dt = m.DataType.FLOAT32 if precision == F32 else m.DataType.FLOAT16
    op = scale_bias_op(3.0, _bias(6).tobytes(), code=code)
    ctx = single_node(op, desc(6, storage, dt, b=2), desc(6, storage, dt, b=2), precision=precision)
    with Runtime.load(ctx, cache_dir=cache) as rt:
        x = np.random.default_rng(seed).standard_normal(rt.input_shapes[0]).astype(np.float32)
        (y,) = rt.run([x])
    np.testing.assert_allclose(y, x * 3.0 + _bias(6)[:6], rtol=TOLERANCE[precision], atol=TOLERANCE[precision] * 8)


def _cpu_device_info():
    """A CPU OpenCL device's description, for assembling kernel source without one."""
    from delegate.runtime.device import DeviceInfo

    return DeviceInfo("p", "d", "v", "1", "OpenCL 3.0", True, True, True, True, 256, (256, 256, 64),
                      1 << 30, 1 << 32, 1 << 16, 128, (16384, 16384), (2048, 2048, 2048), 2048, 1 << 27)  # fmt: skip


@pytest.mark.parametrize("precision", [F32, F32_F16], ids=lambda p: p.name)
@pytest.mark.parametrize("storage", [T.BUFFER, T.IMAGE_BUFFER], ids=lambda s: s.name)
def test_linear_selectors_on_buffer_storages(storage, precision, cache):
    """Offset, ReadAt and WriteAt, and PrefetchAt's hint (past the tensor's end here: harmless)."""
    _check_scale_bias(_LINEAR_SELECTORS, storage, precision, cache, seed=4)


# each element read through a handle two FLT4s before it (one slice plane before it in
# the first slices): the handle's step and the read's offset both count in FLT4s
_HANDLE_SELECTORS = (
    _ELEMENT_START
    + """\
  int back = S > 0 ? args.src_tensor.Offset(0, 0, 1, 0) : 2;
  args.src_tensor.Handle() h = args.src_tensor.HandleAt(at - back);
  FLT4 v = S > 0 ? args.src_tensor.ReadFrom(h, args.src_tensor.Offset(0, 0, 1, 0)) : args.src_tensor.ReadFrom(h, 2);
  args.dst_tensor.WriteAt(v * (FLT)(args.scale) + args.bias.Read(S), at);
}
"""
)


@pytest.mark.parametrize("precision", [F32, F32_F16], ids=lambda p: p.name)
@pytest.mark.parametrize("storage", [T.BUFFER, T.IMAGE_BUFFER], ids=lambda s: s.name)
def test_handle_selectors_on_buffer_storages(storage, precision, cache):
    """HandleAt and ReadFrom address the same FLT4s as ReadAt: pointers on buffers (half ones
    under vload_half four halves a step), indices on image buffers."""
    _check_scale_bias(_HANDLE_SELECTORS, storage, precision, cache, seed=5)


def test_handle_macros_only_where_used():
    """The handle macros are assembled for a tensor only when its kernel uses them: a persistent
    program names every tensor, and unused macros there made DenseNet121 1.4x slower on PoCL."""
    from delegate.runtime.source import assemble

    info = _cpu_device_info()
    tensors = {"src_tensor": desc(6, T.BUFFER), "dst_tensor": desc(6, T.BUFFER)}
    plain = assemble(scale_bias_op(3.0, _bias(6).tobytes(), code=_LINEAR_SELECTORS), tensors, info, F32).text
    assert "_HandleAt1" not in plain and "_ReadFrom2" not in plain
    handled = assemble(scale_bias_op(3.0, _bias(6).tobytes(), code=_HANDLE_SELECTORS), tensors, info, F32).text
    assert "#define src_tensor_HandleAt1" in handled and "#define src_tensor_ReadFrom2" in handled


@pytest.mark.skipif(shutil.which("cpp") is None, reason="no C preprocessor (cpp) on this machine")
@pytest.mark.parametrize("clang", [True, False], ids=["clang", "other"])
def test_prefetch_hint_is_clang_only(clang):
    """PrefetchAt is clang's ``__builtin_prefetch`` where the kernel compiler is clang (PoCL), and
    nothing elsewhere (a GPU driver's compiler given the cpu kernel family): the assembled
    macros, run through a C preprocessor with and without ``__clang__``."""
    from delegate.runtime.source import assemble

    info = _cpu_device_info()
    op = scale_bias_op(3.0, _bias(6).tobytes(), code=_LINEAR_SELECTORS)
    tensors = {"src_tensor": desc(6, T.BUFFER), "dst_tensor": desc(6, T.BUFFER)}
    text = assemble(op, tensors, info, F32).text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "src_tensor_PrefetchAt1" in line) - 1
    block = "\n".join(lines[start : start + 5]) + "\nHINT: src_tensor_PrefetchAt1(7);\n"
    flags = ["-D__clang__=1"] if clang else ["-U__clang__"]
    out = subprocess.run(["cpp", "-P", *flags], input=block, capture_output=True, text=True, check=True).stdout
    hint = next(line for line in out.splitlines() if line.startswith("HINT:"))
    assert ("__builtin_prefetch" in hint) == clang, hint


# Lanes read one at a time and written back in reverse order (w, z, y, x).
_LANE_SELECTOR = (
    _ELEMENT_START
    + """\
  FLT4 v = (FLT4)(args.src_tensor.ReadLaneAt(at, 3), args.src_tensor.ReadLaneAt(at, 2),
                  args.src_tensor.ReadLaneAt(at, 1), args.src_tensor.ReadLaneAt(at, 0));
  args.dst_tensor.WriteAt(v * (FLT)(args.scale) + args.bias.Read(S), at);
}
"""
)


@pytest.mark.parametrize("precision", [F32, F32_F16], ids=lambda p: p.name)
@pytest.mark.parametrize("storage", [T.BUFFER, T.IMAGE_BUFFER], ids=lambda s: s.name)
def test_lane_reads_on_buffer_storages(storage, precision, cache):
    dt = m.DataType.FLOAT32 if precision == F32 else m.DataType.FLOAT16
    op = scale_bias_op(1.0, np.zeros(8, np.float32).tobytes(), code=_LANE_SELECTOR)
    ctx = single_node(op, desc(8, storage, dt, b=2), desc(8, storage, dt, b=2), precision=precision)
    with Runtime.load(ctx, cache_dir=cache) as rt:
        x = np.random.default_rng(5).standard_normal(rt.input_shapes[0]).astype(np.float32)
        (y,) = rt.run([x])
    want = x.reshape(*x.shape[:-1], 2, 4)[..., ::-1].reshape(x.shape)
    np.testing.assert_allclose(y, want, rtol=TOLERANCE[precision], atol=TOLERANCE[precision])


@pytest.mark.parametrize("lane", ["4", "S", "-1"])
def test_a_lane_that_is_not_a_literal_0_to_3_is_a_build_error(lane, cache):
    code = f"MAIN_FUNCTION($0) {{ int S = 0; FLT v = args.src_tensor.ReadLaneAt(0, {lane}); }}"
    ctx = single_node(scale_bias_op(1.0, _bias(4).tobytes(), code=code), desc(4), desc(4))
    with pytest.raises(ProgramBuildError, match=rf"ReadLaneAt: the lane must be a literal 0-3, not '{lane}'"):
        Runtime.load(ctx, cache_dir=cache)


@pytest.mark.parametrize(
    ("statement", "tensor", "selector"),
    [
        ("args.dst_tensor.Write(args.src_tensor.ReadAt(0), 0, 0, 0, 0);", "src_tensor", "ReadAt"),
        ("args.dst_tensor.WriteAt(args.src_tensor.Read(0, 0, 0, 0), 0);", "dst_tensor", "WriteAt"),
        ("args.dst_tensor.Write(args.src_tensor.Read(args.src_tensor.Offset(0, 0, 0, 0), 0, 0, 0), 0, 0, 0, 0);",
         "src_tensor", "Offset"),
    ],
)  # fmt: skip
def test_linear_selectors_on_a_texture_are_build_errors(statement, tensor, selector, cache):
    op = scale_bias_op(1.0, _bias(4).tobytes(), code=f"MAIN_FUNCTION($0) {{ {statement} }}")
    ctx = single_node(op, desc(4, T.TEXTURE_2D), desc(4, T.TEXTURE_2D))
    with pytest.raises(ProgramBuildError, match=rf"tensor '{tensor}' uses {selector}, which need BUFFER or IMAGE_BUF"):
        Runtime.load(ctx, cache_dir=cache)


def _driver_parent(obj) -> int | None:
    """The memory object the driver says ``obj`` was made from (asked through pyopencl, which
    wraps the runtime's handle: an independent view of the driver's state)."""
    import pyopencl as cl

    parent = cl.Buffer.from_int_ptr(obj.int_ptr, retain=True).get_info(cl.mem_info.ASSOCIATED_MEMOBJECT)
    return None if parent is None else parent.int_ptr


def _children_released_first(objects: list) -> int:
    """Checks that each memory object comes before the one it was made from; returns how many were."""
    first: dict[int, int] = {}
    for i, o in enumerate(objects):
        if isinstance(o, MemObject):
            first.setdefault(o.int_ptr, i)
    children = 0
    for o in objects:
        parent = _driver_parent(o) if isinstance(o, MemObject) else None
        if parent is not None:
            children += 1
            assert first[o.int_ptr] < first[parent], f"{o} is released after its parent {parent:#x}"
    return children


def test_tensors_share_the_arena_at_offsets_without_sub_buffers(cache):
    # NVIDIA's driver crashed (SIGSEGV in clReleaseMemObject) releasing the arena's sub-buffers:
    # each tensor is the arena itself plus its offset, a kernel argument.
    # (persistent kernels, on CPU devices only, read constants from sub-buffers of their own arena)
    with Runtime.load(chain(6), cache_dir=cache, persistent=False) as rt:
        x = np.random.default_rng(5).standard_normal(rt.input_shapes[0]).astype(np.float32)
        (y,) = rt.run([x])
        buffers = [o for o in rt._release_order() if isinstance(o, MemObject)]
        assert buffers and all(_driver_parent(o) is None for o in buffers)
        assert len(set(rt.allocation.offsets.values())) >= 2  # the tensors really sit at different offsets
    expected = x + 6.0 + (x + 1.0)  # chain: six +1 nodes and the residual add of the first and last
    np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_device_diag_script_walks_a_model_launch_by_launch():
    # scripts/device_diag.py places failures seen on one driver only (it found NVIDIA's sub-buffer
    # crash); on the default device every step of it must pass.
    import subprocess
    import sys
    from pathlib import Path

    from .helpers import shared_path

    script = Path(__file__).resolve().parent.parent / "scripts" / "device_diag.py"
    run = subprocess.run([sys.executable, str(script), str(shared_path("models", "small_cnn.tflite"))],
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    out = run.stdout
    assert "small_cnn.tflite: compile exit 0" in out
    assert "launches, one at a time: ok" in out and "run: ok" in out and "release: ok" in out
    assert "finite [True]" in out and " parent " not in out  # no sub-buffers left to release


def test_images_over_buffers_are_released_before_their_buffers(cache):
    op = scale_bias_op(1.0, _bias(4).tobytes())
    with Runtime.load(single_node(op, desc(4, T.IMAGE_BUFFER), desc(4, T.IMAGE_BUFFER)), cache_dir=cache) as rt:
        assert _children_released_first(rt._release_order()) >= 2


@pytest.mark.parametrize("shown", [False, True])
def test_a_drivers_remarks_on_a_good_build_are_shown_only_on_request(shown, monkeypatch, tmp_path):
    # NVIDIA's compiler remarks on every context's program (a non-empty build log on success); they
    # become a CompilerWarning only with PYOPENCL_COMPILER_OUTPUT set. A '#warning' makes PoCL's
    # log non-empty the same way.
    import warnings

    from delegate.errors import CompilerWarning
    from delegate.runtime import driver
    from delegate.runtime.device import describe
    from delegate.runtime.programs import ProgramBuilder

    if shown:
        monkeypatch.setenv("PYOPENCL_COMPILER_OUTPUT", "1")
    else:
        monkeypatch.delenv("PYOPENCL_COMPILER_OUTPUT", raising=False)
    device = select_device()
    context = driver.Context(device)
    builder = ProgramBuilder(context, describe(device), None)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            builder.build("#warning a remark of the compiler\n__kernel void k(__global float* x) { x[0] = 1.0f; }",
                          "-cl-std=CL1.2", "node")  # fmt: skip
    finally:
        builder.release()
        context.release()
    remarks = [w for w in caught if issubclass(w.category, CompilerWarning)]
    assert bool(remarks) == shown, [str(w.message) for w in caught]
    if shown:
        assert "a remark of the compiler" in str(remarks[0].message)


def test_inactive_scalars_become_literals(cache):
    ctx = single_node(scale_bias_op(0.25, _bias(4).tobytes(), active=False), desc(4), desc(4))
    with Runtime.load(ctx, cache_dir=cache) as rt:
        x = np.ones(rt.input_shapes[0], np.float32)
        np.testing.assert_allclose(rt.run([x])[0], np.broadcast_to(0.25 + _bias(4), x.shape), rtol=1e-6)


def test_slice_planes_of_whole_4k_are_padded_when_asked():
    from delegate.runtime import memory

    plane64 = desc(8, h=64, w=64)  # 64 KiB planes of FLT4
    assert memory.slice_pitch(plane64) == 64 * 64
    assert memory.slice_pitch(plane64, padded=True) == 64 * 64 + PLANE_PAD_LINES * 64 // 16
    assert memory.storage_bytes(plane64, padded=True) == 2 * (64 * 64 + PLANE_PAD_LINES * 4) * 16
    half = desc(8, dt=m.DataType.FLOAT16, h=16, w=32)  # 4 KiB planes of half FLT4
    assert memory.slice_pitch(half, padded=True) == 16 * 32 + PLANE_PAD_LINES * 64 // 8
    odd = desc(8, h=56, w=56)  # 49 KiB: not on the 4 KiB grid
    assert memory.slice_pitch(odd, padded=True) == 56 * 56
    image = desc(8, T.IMAGE_BUFFER, h=64, w=64)
    assert memory.image_dims(image, padded=True) == (2 * memory.slice_pitch(image, padded=True),)
    texture = desc(8, T.TEXTURE_2D, h=64, w=64)
    assert memory.storage_bytes(texture, padded=True) == memory.storage_bytes(texture)


@pytest.mark.parametrize("storage", [T.BUFFER, T.IMAGE_BUFFER], ids=lambda s: s.name)
def test_padded_slice_planes_run_every_selector(storage, cache):
    # 16x16 planes are 4 KiB: on a CPU device every slice after the first sits past padding, which
    # Read/Write, Offset/ReadAt/WriteAt and the conversions must all step over (three slices).
    for code in (SCALE_BIAS, _LINEAR_SELECTORS):
        op = scale_bias_op(2.0, _bias(12).tobytes(), code=code)
        ctx = single_node(op, desc(12, storage, h=16, w=16), desc(12, storage, h=16, w=16))
        with Runtime.load(ctx, cache_dir=cache) as rt:
            x = np.random.default_rng(3).standard_normal(rt.input_shapes[0]).astype(np.float32)
            (y,) = rt.run([x])
        np.testing.assert_allclose(y, x * 2.0 + _bias(12)[:12], rtol=1e-6, atol=1e-6)


def test_chain_shares_memory_and_is_correct(cache):
    n = 6
    with Runtime.load(chain(n), cache_dir=cache) as rt:
        x = np.random.default_rng(2).standard_normal(rt.input_shapes[0]).astype(np.float32)
        (y,) = rt.run([x])
        report = rt.memory
        assert rt.node_names == [*(f"inc{i}" for i in range(n)), "residual"]
        padded = not rt.device_info.is_gpu
    np.testing.assert_allclose(y, (x + 1) + (x + n), rtol=1e-6)
    # two slice planes of 16x16 FLT4s: 4 KiB each, padded by PLANE_PAD_LINES cache lines on a CPU device
    one = 2 * (16 * 16 * 16 + (PLANE_PAD_LINES * 64 if padded else 0))
    assert report.unshared_bytes == (n + 2) * one
    # Tensor 1 lives until the residual add, so three tensors are live at once at most.
    assert report.lower_bound_bytes == 3 * one
    assert report.lower_bound_bytes <= report.tensor_bytes <= report.lower_bound_bytes * 1.1
    assert report.constant_bytes == n * 16 * 2


def test_variable_tensor_accumulates_across_runs(cache):
    accumulate = """
MAIN_FUNCTION($0) {
  int X = GLOBAL_ID_0; int Y = GLOBAL_ID_1; int S = GLOBAL_ID_2;
  if (X >= args.dst_tensor.Width() || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  args.dst_tensor.Write(args.state.Read(X, Y, S) + args.x.Read(X, Y, S), X, Y, S);
}
"""
    copy = scale_bias_op(1.0, np.zeros(4, np.float32).tobytes())
    op = m.GPUOperation(code=accumulate, tensor_to_grid=m.TensorToGrid.WB_TO_X_HD_TO_Y_S_TO_Z,
                        src_tensors_names=["x", "state"], dst_tensors_names=["dst_tensor"])  # fmt: skip
    ctx = m.InferenceContext(
        nodes=[
            m.CLNode(gpu_op=op, input_ids=[0, 1], output_ids=[2], name="accumulate"),
            m.CLNode(gpu_op=copy, input_ids=[2], output_ids=[3], name="copy_out"),
        ],
        tensors=[m.TensorDescWithId(desc(4), i) for i in range(4)],
        input_ids=[0],
        output_ids=[3],
        variable_ids_and_refs=[m.PairOfValueIds(1, 7), m.PairOfValueIds(2, 7)],
    )
    with Runtime.load(ctx, cache_dir=cache) as rt:
        x = np.random.default_rng(3).standard_normal(rt.input_shapes[0]).astype(np.float32)
        # neither warm-up nor tuning may run a stateful context: the state would move
        rt.warm_up()
        assert rt.tune("fast").skipped == "the context has variable tensors"
        for k in range(1, 5):
            (y,) = rt.run([x])
            np.testing.assert_allclose(y, k * x, rtol=1e-5, atol=1e-6)


def test_second_load_compiles_nothing(tmp_path):
    data = serialize_context(chain(3))
    with Runtime.load(data, cache_dir=tmp_path, persistent=False) as first:
        # One program holds the four distinct kernels: scale/bias, add, input and output conversions.
        assert first.build_stats.built_from_source == 1
        assert first.build_stats.reused_in_context == 2
        x = np.ones(first.input_shapes[0], np.float32)
        expected = first.run([x])[0]
    with Runtime.load(data, cache_dir=tmp_path, persistent=False) as second:
        assert second.build_stats.built_from_source == 0
        assert second.build_stats.loaded_from_cache == 1
        np.testing.assert_array_equal(second.run([x])[0], expected)
    for entry in tmp_path.glob("*.bin"):
        entry.write_bytes(b"corrupt")
    with (
        pytest.warns(UserWarning, match="no integrity trailer"),
        Runtime.load(data, cache_dir=tmp_path, persistent=False) as third,
    ):
        assert third.build_stats.built_from_source == 1
        np.testing.assert_array_equal(third.run([x])[0], expected)


_WITH_HELPER = """
#define SCALE(v) ((v) * (FLT)({factor}))
FLT4 helper(FLT4 v) {{
  return SCALE(v);
}}
MAIN_FUNCTION($0) {{
  int X = GLOBAL_ID_0; int Y = GLOBAL_ID_1; int S = GLOBAL_ID_2;
  if (X >= args.dst_tensor.Width() || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  args.dst_tensor.Write(helper(args.src_tensor.Read(X, Y, S)), X, Y, S);
}}
"""


def test_kernels_share_one_program_with_private_helpers_and_macros(tmp_path):
    # Both kernels define a function `helper` and a macro SCALE, differently: in the one program
    # each must keep its own.
    ctx = chain(2)
    ctx.nodes[0].gpu_op.code = _WITH_HELPER.format(factor=2.0)
    ctx.nodes[1].gpu_op.code = _WITH_HELPER.format(factor=-3.0)
    with Runtime.load(ctx, cache_dir=tmp_path, persistent=False) as rt:
        assert rt.build_stats.built_from_source == 1
        x = np.random.default_rng(3).standard_normal(rt.input_shapes[0]).astype(np.float32)
        (y,) = rt.run([x])
    np.testing.assert_allclose(y, 2 * x + (-6 * x), rtol=1e-6, atol=1e-6)


def test_a_failing_kernel_in_the_shared_program_is_named(tmp_path):
    ctx = chain(3)
    ctx.nodes[2].gpu_op.code = "MAIN_FUNCTION($0) { undeclared_in_inc2 += 1; }"
    with pytest.raises(ProgramBuildError) as info:
        Runtime.load(ctx, cache_dir=tmp_path)
    assert info.value.node == "inc2"
    assert "undeclared_in_inc2" in info.value.log


def test_load_from_a_file_path(tmp_path, cache):
    path = write_context(chain(2), tmp_path / "chain.ctx")
    with Runtime.load(path, cache_dir=cache) as rt:
        x = np.zeros(rt.input_shapes[0], np.float32)
        np.testing.assert_allclose(rt.run([x])[0], 1.0 + 2.0)


def test_build_failure_names_the_node_and_carries_the_log(cache):
    op = scale_bias_op(1.0, _bias(4).tobytes(), code="MAIN_FUNCTION($0) { undeclared_thing += 1; }")
    with pytest.raises(ProgramBuildError) as info:
        Runtime.load(single_node(op, desc(4), desc(4)), cache_dir=cache)
    assert info.value.node == "node0"
    assert "undeclared_thing" in info.value.log
    assert "undeclared_thing" in str(info.value)


def test_unknown_arguments_are_build_errors(cache):
    op = scale_bias_op(1.0, _bias(4).tobytes(), code="MAIN_FUNCTION($0) { float a = args.nothing; }")
    with pytest.raises(ProgramBuildError, match=r"args\.nothing: no argument of that name"):
        Runtime.load(single_node(op, desc(4), desc(4)), cache_dir=cache)
    op.code = "MAIN_FUNCTION($0) { FLT4 v = args.src_tensor.Read(1, 2); }"
    with pytest.raises(ProgramBuildError, match="Read with 2 arguments is not supported"):
        Runtime.load(single_node(op, desc(4), desc(4)), cache_dir=cache)


def test_scalars_are_substituted_only_where_args_starts_a_name(cache):
    # "xargs.scale" and "v.args.scale" are not the argument scale; "args.scale" in a call is.
    from .runtime_helpers import SCALE_BIAS

    code = SCALE_BIAS.replace("MAIN_FUNCTION($0) {", "MAIN_FUNCTION($0) {\n  // xargs.nothing, v.args.nothing", 1)
    assert code != SCALE_BIAS
    with Runtime.load(single_node(scale_bias_op(2.0, _bias(4).tobytes(), code=code), desc(4), desc(4)),
                      cache_dir=cache) as rt:  # fmt: skip
        x = np.random.default_rng(6).standard_normal(rt.input_shapes[0]).astype(np.float32)
        np.testing.assert_allclose(rt.run([x])[0], x * 2.0 + _bias(4)[:4], rtol=1e-6)


def test_tensors_that_do_not_fit_the_device(cache):
    huge = desc(4, h=40_000, w=40_000)  # 25.6 GB of float32
    with pytest.raises(DeviceResourceError, match="allows at most"):
        Runtime.load(single_node(scale_bias_op(1.0, _bias(4).tobytes()), huge, huge), cache_dir=cache)
    wide = desc(4, st=T.TEXTURE_2D, h=1, w=100_000)
    with pytest.raises(DeviceResourceError, match="TEXTURE_2D of 100000x1 pixels"):
        Runtime.load(single_node(scale_bias_op(1.0, _bias(4).tobytes()), wide, wide), cache_dir=cache)


def test_semantic_errors_are_reported(cache):
    ctx = chain(1)
    ctx.nodes[0].input_ids = [42]
    with pytest.raises(ContextFormatError, match=r"node 0 \(inc0\): input_ids\[0\] is 42; no tensor declares that id"):
        Runtime.load(ctx, cache_dir=cache)
    ctx = chain(1)
    ctx.nodes[0].gpu_op.src_tensors_names = []
    with pytest.raises(ContextFormatError, match=r"gpu_op.src_tensors_names is 0 names; the node has 1 input_ids"):
        Runtime.load(ctx, cache_dir=cache)


def test_input_validation(cache):
    with Runtime.load(chain(1), cache_dir=cache) as rt:
        with pytest.raises(ValueError, match="expected 1 inputs"):
            rt.run([])
        with pytest.raises(ValueError, match="must have shape"):
            rt.run([np.zeros((1, 2, 3, 4), np.float32)])
        # float64 and non-contiguous inputs are converted
        x = np.zeros((1, 16, 16, 16), np.float64)[..., ::2]
        assert rt.run([x])[0].dtype == np.float32
    with pytest.raises(Exception, match="closed"):
        rt.run([x])


def test_profiling_times_every_node(cache):
    with Runtime.load(chain(3), cache_dir=cache, profiling=True) as rt:
        x = np.ones(rt.input_shapes[0], np.float32)
        outputs, times = rt.run_profiled([x])
        assert [name for name, _ in times] == ["inc0", "inc1", "inc2", "residual"]
        assert all(seconds > 0 for _, seconds in times)
        np.testing.assert_allclose(outputs[0], 2.0 + 4.0)
    with Runtime.load(chain(1), cache_dir=cache) as rt, pytest.raises(Exception, match="profiling=True"):
        rt.run_profiled([np.ones(rt.input_shapes[0], np.float32)])


def test_flush_policies_and_launch_geometry(cache):
    ctx = chain(4)
    ctx.need_flush, ctx.flush_periodically, ctx.flush_period = True, True, 2
    op = ctx.nodes[1].gpu_op
    # A custom 3-D grid with a launch order: groups of axis order[i] are launched along axis i.
    op.tensor_to_grid = m.TensorToGrid.CUSTOM
    op.grid_size = m.Int3(16, 16, 2)
    op.work_group_size = m.Int3(4, 4, 2)
    op.work_group_launch_order = m.Int3(0, 1, 2)
    with Runtime.load(ctx, cache_dir=cache, persistent=False) as rt:
        x = np.ones(rt.input_shapes[0], np.float32)
        np.testing.assert_allclose(rt.run([x])[0], 2.0 + 5.0)
        launches = rt.launches()
        assert launches[2][1:] == ((16, 16, 2), (4, 4, 2))


def test_device_selection():
    default = select_device()
    assert select_device(0) == default or select_device(0) is not None
    assert select_device("0:0") is not None
    assert select_device("pthread") is not None or select_device("pocl") is not None
    with pytest.raises(DeviceNotFoundError, match="available devices:\n  0:0"):
        select_device("no such device anywhere")
    with pytest.raises(DeviceNotFoundError, match="no OpenCL device matches '7:3'"):
        select_device("7:3")


def test_tuning_picks_sizes_keeps_results_and_records_them(cache):
    ctx = chain(3)
    with Runtime.load(ctx, cache_dir=cache, persistent=False) as rt:
        x = np.random.default_rng(0).random(rt.input_shapes[0], dtype=np.float32)
        before = rt.run([x])[0]
        assert rt.tune("none").skipped == "tuning is off"
        report = rt.tune("fast", repeats=1)
        assert [n.name for n in report.nodes] == ["inc0", "inc1", "inc2", "residual"]
        for node, (_, global_size, local_size), op in zip(
            report.nodes, rt.launches()[1:-1], [n.gpu_op for n in rt.model.nodes], strict=True
        ):
            assert node.tried > 1 and node.after_seconds <= node.before_seconds
            # the plan launches the chosen size, and the model (what a writer would store) holds it
            assert local_size == node.after[: len(local_size)]
            assert (op.work_group_size.x, op.work_group_size.y, op.work_group_size.z) == node.after
            assert all(g % size == 0 for g, size in zip(global_size, local_size, strict=True))
        np.testing.assert_array_equal(rt.run([x])[0], before)
        with pytest.raises(ValueError):
            rt.tune("slow")
        tuned_sizes = [launch[2] for launch in rt.launches()]
        written = serialize_context(rt.model)
    with Runtime.load(written, cache_dir=cache, persistent=False) as again:  # a written context starts tuned
        assert [launch[2] for launch in again.launches()] == tuned_sizes


def test_tuning_candidates():
    from delegate.runtime.geometry import Grid, Tuning, candidates

    info = select_device_info()
    grid = Grid((100, 7, 1), 2, (0, 1, 2))
    fast = candidates(grid, Tuning.FAST, info, 256)
    exhaustive = candidates(grid, Tuning.EXHAUSTIVE, info, 256)
    assert len(set(fast)) == len(fast) and len(set(exhaustive)) == len(exhaustive)
    assert set(fast) <= set(exhaustive) and len(fast) < len(exhaustive)
    for x, y, z in exhaustive:
        assert x * y * z <= min(256, info.max_work_group_size)
        assert x <= 128 and y <= 8 and z == 1  # never past the next power of two above the grid
    assert (1, 1, 1) in exhaustive and (128, 2, 1) in exhaustive
    # a kernel's own limit caps every candidate
    assert all(x * y * z <= 16 for x, y, z in candidates(grid, Tuning.EXHAUSTIVE, info, 16))
    assert candidates(grid, Tuning.NONE, info, 256) == []


def select_device_info():
    from delegate.runtime import describe

    return describe(select_device())


@pytest.mark.parametrize("zero_copy", [True, False])
def test_zero_copy_and_copy_transfers_agree(zero_copy, cache):
    rng = np.random.default_rng(5)
    with Runtime.load(chain(3), cache_dir=cache, zero_copy=zero_copy) as rt:
        assert rt.zero_copy is zero_copy
        for _ in range(3):  # a new input and a new output array every run: buffers are re-made over them
            x = rng.random(rt.input_shapes[0], dtype=np.float32)
            np.testing.assert_allclose(rt.run([x])[0], 2 * x + 4.0, rtol=1e-6)
        x = rng.random(rt.input_shapes[0], dtype=np.float32)
        first = rt.run([x])[0]
        x[...] = 0.5  # the same array, new contents: the device must see them
        np.testing.assert_allclose(rt.run([x])[0], 5.0, rtol=1e-6)
        assert not np.array_equal(first, rt.run([x])[0])


def test_kept_host_buffers_see_every_write_of_the_caller_and_the_device(cache):
    """The plugin's way: the caller's arrays stay where they are from run to run and the buffers made
    over them are kept (keep_host_buffers). Where the driver's buffer is the caller's memory itself
    (PoCL's CPU device: host_memory_in_place, no map and unmap around a run), every run must still
    read what the caller wrote into the same input array and write into the same output array."""
    with Runtime.load(chain(3), cache_dir=cache, zero_copy=True) as rt:
        rt.keep_host_buffers()
        info = rt.device_info
        in_place = info.host_unified_memory and info.platform_rules.host_memory_in_place(info.is_gpu)
        assert rt.native_plan.host_memory_in_place == in_place
        # a device of the platform that does not share the host's memory (PoCL's remote driver) maps
        assert not dataclasses.replace(info, host_unified_memory=False).host_memory_in_place
        x = np.zeros(rt.input_shapes[0], np.float32)
        out = np.zeros(rt.output_shapes[0], np.float32)
        for value in (0.5, -1.25, 3.0):
            x[...] = value  # new contents in the same array
            out[...] = np.nan  # and the device must overwrite the same output array
            assert rt._plan.run([x], [out], ffi.NULL) is None
            np.testing.assert_allclose(out, 2 * value + 4.0, rtol=1e-6)


def test_zero_copy_is_the_default_on_a_host_memory_device(cache):
    device = select_device()
    with Runtime.load(chain(1), cache_dir=cache) as rt:
        assert rt.zero_copy == bool(device.get("host_unified_memory"))


def test_launches_after_a_zero_copy_run_do_not_reach_the_callers_memory(cache):
    """A run's arrays are the caller's temporaries: after run() returns, the conversion kernels are
    bound to the staging buffers again, so launching them (benchmarks do) cannot write freed memory."""
    with Runtime.load(chain(2), cache_dir=cache, zero_copy=True) as rt:
        x = np.ones(rt.input_shapes[0], np.float32)
        out = rt.run([x])[0]
        before = out.copy()
        x[...] = 5.0  # were the kernels still bound to x and out, these launches would rewrite out
        rt.enqueue_launches_only(3)
        rt.queue.finish()
        np.testing.assert_array_equal(out, before)  # the output array was not written by those launches
        np.testing.assert_allclose(rt.run([x * 2])[0], 2 * 10.0 + 3.0, rtol=1e-6)


# A float32 tensor's value above half's integers (2049) read both ways.
_READ_FLOAT = """
MAIN_FUNCTION($0) {
  float4 exact = args.src_tensor.ReadFloat(0, 0, 0, 0);
  FLT4 rounded = args.src_tensor.Read(0, 0, 0, 0);
  args.dst_tensor.Write(rounded + TO_FLT4(exact), 0, 0, 0);
}
"""


@pytest.mark.parametrize("storage", [T.BUFFER, T.IMAGE_BUFFER, T.TEXTURE_2D], ids=lambda s: s.name)
def test_read_float_keeps_float32_values_under_half_math(storage):
    """ReadFloat gives a float4 whatever the kernel's precision: integer values held as floats
    (gather indices) must not pass through half, whose integers stop at 2048."""
    from delegate.runtime.source import assemble

    info = _cpu_device_info()
    op = scale_bias_op(1.0, _bias(4).tobytes(), code=_READ_FLOAT)
    tensors = {"src_tensor": desc(4, storage), "dst_tensor": desc(4, storage, m.DataType.FLOAT16)}
    text = assemble(op, tensors, info, F16).text
    read = next(line for line in text.splitlines() if line.startswith("#define src_tensor_Read5"))
    exact = next(line for line in text.splitlines() if line.startswith("#define src_tensor_ReadFloat5"))
    assert "TO_FLT4" in read and "TO_FLT4" not in exact and "half" not in exact


_READ_FLOAT_COPY = """
MAIN_FUNCTION($0) {
  int X = GLOBAL_ID_0; int Y = GLOBAL_ID_1; int S = GLOBAL_ID_2;
  if (X >= args.dst_tensor.Width() || Y >= args.dst_tensor.Height() || S >= args.dst_tensor.Slices()) return;
  args.dst_tensor.Write(TO_FLT4(args.src_tensor.ReadFloat(X, Y, S, 0)), X, Y, S);
}
"""


@pytest.mark.parametrize("storage", STORAGES, ids=lambda s: s.name)
def test_read_float_runs_on_every_storage(storage, cache):
    c = 3 if storage == T.SINGLE_TEXTURE_2D else 6
    op = scale_bias_op(1.0, _bias(c).tobytes(), code=_READ_FLOAT_COPY)
    ctx = single_node(op, desc(c, storage), desc(c, storage), precision=F32)
    with Runtime.load(ctx, cache_dir=cache) as rt:
        x = np.random.default_rng(6).standard_normal(rt.input_shapes[0]).astype(np.float32)
        np.testing.assert_array_equal(rt.run([x])[0], x)
