"""The TFLite delegate plugin in the host runtime (tflite-runtime, or ai-edge-litert), checked against
the host's own CPU kernels."""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import warnings

import numpy as np
import pytest
from delegate._native import ffi

import delegate
from delegate.api import host_runtime
from delegate.plugin import live_kernels
from delegate.runtime.device import describe, select_device

from .helpers import shared_path

pytestmark = pytest.mark.opencl
# F32 results within this fraction of the largest |CPU output| (the F32 tolerance of the tests).
F32_TOLERANCE = 1e-4
F16_TOLERANCE = 2e-2


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    return str(tmp_path_factory.mktemp("programs"))


def _model(name: str) -> str:
    return str(shared_path("models", f"{name}.tflite"))


def _feed(interpreter, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    values = []
    for d in interpreter.get_input_details():
        x = rng.random(tuple(d["shape"]), dtype=np.float32)
        interpreter.set_tensor(d["index"], x)
        values.append(x)
    return values


def _reference(path: str, inputs: list[np.ndarray], shape: list[int] | None = None, **kw) -> list[np.ndarray]:
    cpu = host_runtime().Interpreter(model_path=path, **kw)
    if shape is not None:
        cpu.resize_tensor_input(cpu.get_input_details()[0]["index"], shape)
    cpu.allocate_tensors()
    for d, x in zip(cpu.get_input_details(), inputs, strict=True):
        cpu.set_tensor(d["index"], x)
    cpu.invoke()
    return [cpu.get_tensor(d["index"]) for d in cpu.get_output_details()]


def _outputs(interpreter) -> list[np.ndarray]:
    return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]


def _assert_close(outputs, reference, tolerance=F32_TOLERANCE) -> None:
    for got, want in zip(outputs, reference, strict=True):
        scale = float(np.abs(want).max())
        assert scale > 0
        assert float(np.abs(got - want).max()) <= tolerance * scale


def test_struct_layouts_match_the_runtime_abi():
    sizes = {
        "TfLiteTensor": 112,
        "TfLiteNode": 80,
        "TfLiteRegistration": 88,
        "TfLiteContext": 200,
        "TfLiteDelegate": 56,
        "TfLiteDelegateParams": 32,
        "TfLiteConvParams": 24,
        "TfLiteDepthwiseConvParams": 28,
        "TfLiteFullyConnectedParams": 12,
        "TfLitePoolParams": 40,
    }
    for name, size in sizes.items():
        assert ffi.sizeof(name) == size, name
    assert ffi.offsetof("TfLiteTensor", "quantization") == 80
    assert ffi.offsetof("TfLiteTensor", "dims_signature") == 104
    assert ffi.offsetof("TfLiteNode", "delegate") == 64
    assert ffi.offsetof("TfLiteRegistration", "inplace_operator") == 80
    assert ffi.offsetof("TfLiteContext", "PreviewDelegatePartitioning") == 152
    assert ffi.offsetof("TfLiteContext", "ReleaseSubgraphContext") == 192


@pytest.mark.parametrize(
    "name,delegated,cpu_ops",
    [
        ("small_cnn", 10, set()),
        ("mobilenet_v2", 65, set()),
        ("unet_small", 13, set()),
        ("elementwise_mix", 7, set()),
        ("mobilenet_v2_fp16", 131, set()),
    ],
)
def test_shared_models_match_cpu(name, delegated, cpu_ops, programs):
    path = _model(name)
    interpreter = delegate.Interpreter(path, program_cache=programs)
    interpreter.allocate_tensors()
    inputs = _feed(interpreter)
    interpreter.invoke()
    _assert_close(_outputs(interpreter), _reference(path, inputs))
    state = interpreter.opencl
    assert len(state.delegated_nodes) == delegated
    assert {reason.split(" ")[0] for reason in state.unsupported.values()} == cpu_ops
    assert state.device and state.precision == "F32"


@pytest.mark.parametrize("precision,tolerance", [("F32", F32_TOLERANCE), ("F16", 2e-2)])
@pytest.mark.parametrize("name,delegated", [("mobilenet_v2", 64), ("mobilenet_v2_fp16", 130)])
def test_mobilenet_logits_match_cpu(name, delegated, precision, tolerance, programs):
    # The random-weight classifier's softmax is uniform to float precision; check the logits instead,
    # keeping SOFTMAX on CPU so that the logits tensor is the partition's output.
    path = _model(name)
    interpreter = delegate.Interpreter(
        path, program_cache=programs, exclude_ops="SOFTMAX", experimental_preserve_all_tensors=True
    )
    interpreter.allocate_tensors()
    inputs = _feed(interpreter)
    interpreter.invoke()
    assert len(interpreter.opencl.delegated_nodes) == delegated
    cpu = host_runtime().Interpreter(model_path=path, experimental_preserve_all_tensors=True)
    cpu.allocate_tensors()
    cpu.set_tensor(cpu.get_input_details()[0]["index"], inputs[0])
    cpu.invoke()
    ops = cpu._get_ops_details()
    logits = next(o for o in ops if o["op_name"] == "FULLY_CONNECTED")["outputs"][0]
    _assert_close([interpreter.get_tensor(logits)], [cpu.get_tensor(logits)], tolerance)


def test_f16_precision_within_its_tolerance(programs):
    path = _model("small_cnn")
    interpreter = delegate.Interpreter(path, program_cache=programs, precision="F16")
    interpreter.allocate_tensors()
    inputs = _feed(interpreter)
    interpreter.invoke()
    assert interpreter.opencl.precision in ("F16", "F32_F16")
    _assert_close(_outputs(interpreter), _reference(path, inputs), F16_TOLERANCE)


def test_one_delegate_several_interpreters_and_deletion_order(programs):
    path = _model("small_cnn")
    d = delegate.load_delegate(program_cache=programs)
    host = host_runtime()
    first = host.Interpreter(model_path=path, experimental_delegates=[d])
    second = host.Interpreter(model_path=path, experimental_delegates=[d])
    for interpreter, seed in ((first, 1), (second, 2)):
        interpreter.allocate_tensors()
        inputs = _feed(interpreter, seed)
        interpreter.invoke()
        _assert_close(_outputs(interpreter), _reference(path, inputs))
    assert delegate.delegate_state(d).prepares == 2
    gc.collect()  # interpreters earlier tests left in reference cycles go first, not counted below
    before = live_kernels()
    del first  # the interpreter goes before the delegate it used
    gc.collect()
    assert live_kernels() == before - 1
    second.invoke()
    del second, d, interpreter
    gc.collect()
    assert live_kernels() == before - 2


def test_resize_re_prepares_and_stays_correct(programs):
    path = _model("mobilenet_v2")
    interpreter = delegate.Interpreter(path, program_cache=programs)
    interpreter.allocate_tensors()
    interpreter.resize_tensor_input(interpreter.get_input_details()[0]["index"], [2, 224, 224, 3])
    interpreter.allocate_tensors()
    inputs = _feed(interpreter, 3)
    interpreter.invoke()
    # The graph stays mutable (the delegate allows dynamic tensors): TFLite propagates the new shapes
    # and the kernel's prepare compiles the partition again, without a second delegate Prepare.
    assert interpreter.opencl.prepares == 1
    assert [p.recompiles for p in interpreter.opencl.partitions] == [1]
    assert interpreter.get_output_details()[0]["shape"].tolist() == [2, 1000]
    _assert_close(_outputs(interpreter), _reference(path, inputs, shape=[2, 224, 224, 3]))


def test_max_delegated_partitions_keeps_the_largest(programs):
    path = _model("unet_small")
    # Keeping CONCATENATION on CPU splits the graph into partitions of 6, 2 and 3 nodes.
    interpreter = delegate.Interpreter(
        path, program_cache=programs, max_delegated_partitions=1, exclude_ops="CONCATENATION"
    )
    interpreter.allocate_tensors()
    inputs = _feed(interpreter)
    interpreter.invoke()
    state = interpreter.opencl
    assert len(state.partitions) == 1 and len(state.delegated_nodes) == 6
    assert "outside the largest" in " ".join(state.unsupported.values())
    _assert_close(_outputs(interpreter), _reference(path, inputs))


def test_serialization_cache_hit_and_corrupt_entry(tmp_path):
    path = _model("small_cnn")
    options = {"serialization_dir": str(tmp_path), "model_token": "small cnn/v1"}
    cold = delegate.Interpreter(path, **options)
    cold.allocate_tensors()
    inputs = _feed(cold)
    cold.invoke()
    expected = _outputs(cold)
    assert [p.cache for p in cold.opencl.partitions] == ["miss"]
    entries = sorted(tmp_path.glob("*.ctx"))
    assert len(entries) == 1 and entries[0].name.startswith("small_cnn_v1-")
    assert any((tmp_path / "programs").glob("*.bin"))
    warm = delegate.Interpreter(path, **options)
    warm.allocate_tensors()
    _feed(warm)
    warm.invoke()
    assert [p.cache for p in warm.opencl.partitions] == ["hit"]
    np.testing.assert_array_equal(_outputs(warm)[0], expected[0])
    entries[0].write_bytes(entries[0].read_bytes()[:100])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rebuilt = delegate.Interpreter(path, **options)
        rebuilt.allocate_tensors()
    assert any("has no integrity trailer" in str(w.message) for w in caught)
    assert [p.cache for p in rebuilt.opencl.partitions] == ["miss"]
    _feed(rebuilt)
    rebuilt.invoke()
    np.testing.assert_array_equal(_outputs(rebuilt)[0], expected[0])
    _assert_close(expected, _reference(path, inputs))


_COLD_THEN_WARM = """
import json, sys
import delegate
caches = []
for _ in range(2):
    interpreter = delegate.Interpreter(
        sys.argv[1], serialization_dir=sys.argv[2], experimental_preserve_all_tensors=sys.argv[3] == "1",
        cpu_when_faster="false",  # small_cnn's partition is delegated whatever its size
    )
    interpreter.allocate_tensors()
    interpreter.invoke()
    caches.append([p.cache for p in interpreter.opencl.partitions])
print(json.dumps(caches))
"""


@pytest.mark.parametrize("name,preserve", [("small_cnn", "0"), ("mobilenet_v2_fp16", "0"), ("mobilenet_v2_fp16", "1")])
def test_serialization_cache_keyed_by_the_weights_without_a_model_token(name, preserve, tmp_path):
    # Without model_token the weights are hashed into the key. The fp16 model's float weights are
    # outputs of folded DEQUANTIZE nodes: TFLite has no data for them during Prepare, and hashing
    # its pointer crashed the process (so this runs in a child process). With every tensor kept,
    # ai-edge-litert makes one partition per node, and a folded weight read by another partition
    # has no value in this one. A second start must hit, in every partition.
    run = subprocess.run(
        [sys.executable, "-c", _COLD_THEN_WARM, _model(name), str(tmp_path), preserve],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    cold, warm = json.loads(run.stdout.strip().splitlines()[-1])
    assert cold and set(cold) == {"miss"} and warm == ["hit"] * len(cold)
    assert len(list(tmp_path.glob("*.ctx"))) == len(cold)


_WARM_START_MODULES = """
import json, sys
import delegate
interpreter = delegate.Interpreter(sys.argv[1], serialization_dir=sys.argv[2], model_token="m", cpu_when_faster="false")
interpreter.allocate_tensors()
interpreter.invoke()
print(json.dumps({"cache": [p.cache for p in interpreter.opencl.partitions],
                  "writer": "delegate.context.writer" in sys.modules, "flatbuffers": "flatbuffers" in sys.modules}))
"""


def test_a_warm_start_does_not_load_the_context_writer(tmp_path):
    # A warm start reads contexts natively; the writer (and flatbuffers) is for cache misses.
    runs = []
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", _WARM_START_MODULES, _model("small_cnn"), str(tmp_path)],
                             capture_output=True, text=True, timeout=600)  # fmt: skip
        assert run.returncode == 0, run.stderr[-3000:]
        runs.append(json.loads(run.stdout.strip().splitlines()[-1]))
    cold, warm = runs
    assert cold == {"cache": ["miss"], "writer": True, "flatbuffers": True}
    assert warm == {"cache": ["hit"], "writer": False, "flatbuffers": False}


def test_paths_in_options_expand_the_home_folder(tmp_path, monkeypatch):
    from delegate.plugin import DelegateOptions

    monkeypatch.setenv("HOME", str(tmp_path))
    opts = DelegateOptions.parse({"serialization_dir": "~/cache", "program_cache": "~/programs"})
    assert opts.serialization_dir == str(tmp_path / "cache") and (tmp_path / "cache").is_dir()
    assert opts.program_cache == str(tmp_path / "programs")
    assert DelegateOptions.parse({"program_cache": "none"}).program_cache == "none"


def test_bad_options_give_clear_errors():
    with pytest.raises(ValueError, match="unknown option"):
        delegate.load_delegate(precison="F16")
    with pytest.raises(ValueError, match="precision must be one of F32, F32_F16, F16"):
        delegate.load_delegate(precision="F8")
    with pytest.raises(ValueError, match="exclude_ops: unknown op name"):
        delegate.load_delegate(exclude_ops="NOT_AN_OP")
    # The host runtime's own loader shows the plugin's message (never an empty ValueError).
    with pytest.raises(ValueError, match="no OpenCL device matches 'no-such-gpu'"):
        host_runtime().load_delegate(delegate.api.plugin_path(), {"device": "no-such-gpu"})


def test_vector_width_option_and_its_default_per_device():
    import dataclasses

    from delegate.compiler.device_policy import vector_width
    from delegate.plugin.options import DelegateOptions

    assert DelegateOptions.parse({"vector_width": "auto"}).vector_width == 0
    assert DelegateOptions.parse({"vector_width": "16"}).vector_width == 16
    assert DelegateOptions().vector_width == 0
    with pytest.raises(ValueError, match="vector_width must be auto, 8 or 16, not '4'"):
        delegate.load_delegate(vector_width="4")
    info = describe(select_device())
    avx512 = dataclasses.replace(info, is_gpu=False, compiler_cpu="skx")
    avx2 = dataclasses.replace(info, is_gpu=False, compiler_cpu="znver3")
    gpu = dataclasses.replace(info, is_gpu=True, compiler_cpu="")
    auto, eight, sixteen = (DelegateOptions.parse({"vector_width": v}).vector_width for v in ("auto", "8", "16"))
    assert [vector_width(i, auto) for i in (avx512, avx2, gpu)] == [16, 8, 8]
    assert vector_width(avx512, eight) == 8
    assert vector_width(avx512, sixteen) == 16
    for other in (avx2, gpu):
        with pytest.raises(delegate.DelegateError, match="vector_width=16 needs a CPU device compiling for AVX-512"):
            vector_width(other, sixteen)


def test_plugin_entry_points_tolerate_null_and_report_errors():
    from delegate._native import lib

    lib.tflite_plugin_destroy_delegate(ffi.NULL)  # the host calls this after a failed create
    messages = []

    @ffi.callback("void(char *)")
    def report(message):
        messages.append(ffi.string(message).decode())

    keys = [ffi.new("char[]", b"precision")]
    values = [ffi.new("char[]", b"F8")]
    created = lib.tflite_plugin_create_delegate(ffi.new("char *[]", keys), ffi.new("char *[]", values), 1, report)
    assert created == ffi.NULL
    assert messages and "precision must be one of" in messages[0]
    # A NULL report_error callback (the C++ external-delegate loader passes one) is accepted.
    assert (
        lib.tflite_plugin_create_delegate(ffi.new("char *[]", keys), ffi.new("char *[]", values), 1, ffi.NULL)
        == ffi.NULL
    )
    ok = lib.tflite_plugin_create_delegate(ffi.NULL, ffi.NULL, 0, ffi.NULL)
    assert ok != ffi.NULL and ok.Prepare != ffi.NULL and ok.opaque_delegate_builder == ffi.NULL
    lib.tflite_plugin_destroy_delegate(ok)


def test_create_destroy_cycles_do_not_grow(programs):
    path = _model("small_cnn")

    def cycle() -> None:
        interpreter = delegate.Interpreter(path, program_cache=programs)
        interpreter.allocate_tensors()
        _feed(interpreter)
        interpreter.invoke()
        del interpreter
        gc.collect()

    for _ in range(20):
        cycle()
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(int(os.environ.get("DELEGATE_CYCLES", "200"))):
        cycle()
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - baseline
    assert live_kernels() == 0
    assert grown_kib < 32 * 1024, f"max RSS grew by {grown_kib} KiB over the cycles"


def test_fusion_reduces_mobilenet_kernels(programs):
    # (The logits check above runs with fusion on, the default; ai-edge-litert splits partitions
    # per node when all tensors are preserved, so this count runs on the plain model.)
    path = _model("mobilenet_v2")
    counts = {}
    for fuse in ("true", "false"):
        interpreter = delegate.Interpreter(path, program_cache=programs, fuse=fuse)
        interpreter.allocate_tensors()
        inputs = _feed(interpreter)
        interpreter.invoke()
        _assert_close(_outputs(interpreter), _reference(path, inputs))
        state = interpreter.opencl
        counts[fuse] = (state.partitions[0].kernels, state.partitions[0].fused_ops)
    # The ten residual ADDs run inside the convolutions that feed them; on a CPU device 13 of the
    # 17 depthwise layers also run with the 1x1 convolution after them, in one kernel (the four
    # with 7x7 outputs stay apart: compiler/selectors/pair.py).
    on_cpu = not describe(select_device()).is_gpu
    fused = (42, 23) if on_cpu else (55, 10)
    assert counts == {"true": fused, "false": (65, 0)}


@pytest.mark.parametrize("precision", ["F32_F16", "F16"])
@pytest.mark.parametrize("name", ["small_cnn", "elementwise_mix", "unet_small", "mobilenet_v2", "mobilenet_v2_fp16"])
def test_shared_models_in_half_precisions(name, precision, programs):
    path = _model(name)
    interpreter = delegate.Interpreter(path, program_cache=programs, precision=precision)
    interpreter.allocate_tensors()
    inputs = _feed(interpreter)
    interpreter.invoke()
    state = interpreter.opencl
    assert len(state.delegated_nodes) == state.total_nodes
    # On a device without cl_khr_fp16 (PoCL) F16 runs as F32_F16: half storage, float math.
    assert state.precision in (precision, "F32_F16")
    _assert_close(_outputs(interpreter), _reference(path, inputs), 2e-2)


def test_quantized_inference_off_keeps_dequantized_weights_on_cpu(programs):
    path = _model("mobilenet_v2_fp16")
    interpreter = delegate.Interpreter(path, program_cache=programs, enable_quantized_inference="false")
    interpreter.allocate_tensors()
    inputs = _feed(interpreter)
    interpreter.invoke()
    state = interpreter.opencl
    reasons = " ".join(state.unsupported.values())
    assert "enable_quantized_inference is off" in reasons
    assert len(state.delegated_nodes) < state.total_nodes
    _assert_close(_outputs(interpreter), _reference(path, inputs))


def test_threads_with_own_and_shared_delegates(programs):
    import threading

    path = _model("small_cnn")
    shared = delegate.load_delegate(program_cache=programs)
    errors: list[BaseException] = []
    rng = np.random.default_rng(10)
    feeds = [rng.random((1, 32, 32, 3), dtype=np.float32) for _ in range(4)]
    expected = [_reference(path, [x])[0] for x in feeds]
    start = threading.Barrier(6)

    def work(k: int, d) -> None:
        try:
            start.wait()  # interpreters are created (and prepared) at the same time too
            d = d or delegate.load_delegate(program_cache=programs)
            interpreter = host_runtime().Interpreter(model_path=path, experimental_delegates=[d])
            interpreter.allocate_tensors()
            index = interpreter.get_input_details()[0]["index"]
            out = interpreter.get_output_details()[0]["index"]
            for i in range(int(os.environ.get("DELEGATE_THREAD_INVOKES", "1000"))):
                x = feeds[(k + i) % 4]
                interpreter.set_tensor(index, x)
                interpreter.invoke()
                _assert_close([interpreter.get_tensor(out)], [expected[(k + i) % 4]])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k, shared if k % 2 else None)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def _live_local_sizes() -> list[list[tuple[int, ...]]]:
    from delegate.plugin import live_runtimes

    # every launch one by one (a persistent kernel runs the nodes with these sizes on CPU devices)
    return [[launch.local_size for launch in rt.one_by_one_launches] for rt in live_runtimes()]


def test_tuning_is_stored_with_the_serialized_partition(tmp_path, programs):
    from delegate.context import ContextFile

    path = _model("small_cnn")
    options = {"serialization_dir": str(tmp_path), "model_token": "small_cnn", "program_cache": programs}
    gc.collect()
    before = live_kernels()
    tuned = delegate.Interpreter(path, tuning="fast", **options)
    tuned.allocate_tensors()
    assert [p.cache for p in tuned.opencl.partitions] == ["miss"]
    (entry,) = tmp_path.glob("*.ctx")
    stored = [n.gpu_op.work_group_size for n in ContextFile.open(str(entry)).to_model().nodes]
    assert live_kernels() == before + 1
    (live,) = _live_local_sizes()[-1:]
    # the sizes the tuned runtime launches are the ones written (node launches sit between conversions)
    node_sizes = live[1:-1]
    assert [(w.x, w.y, w.z)[: len(size)] for w, size in zip(stored, node_sizes, strict=True)] == node_sizes
    inputs = _feed(tuned)
    tuned.invoke()
    _assert_close(_outputs(tuned), _reference(path, inputs))
    again = delegate.Interpreter(path, tuning="fast", **options)
    again.allocate_tensors()
    assert [p.cache for p in again.opencl.partitions] == ["hit"]
    assert _live_local_sizes()[-1] == live
    untuned = delegate.Interpreter(path, **options)  # tuning is part of the cache key
    untuned.allocate_tensors()
    assert [p.cache for p in untuned.opencl.partitions] == ["miss"]
    assert len(list(tmp_path.glob("*.ctx"))) == 2
    with pytest.raises(ValueError, match="tuning must be none, fast or exhaustive"):
        delegate.load_delegate(tuning="always")


def test_the_persistent_option_switches_persistent_kernels(programs):
    from delegate.plugin import live_runtimes

    path = _model("small_cnn")
    outputs, modes = [], []
    for value in ("true", "false"):
        interpreter = delegate.Interpreter(path, persistent=value, program_cache=programs)
        interpreter.allocate_tensors()
        _feed(interpreter, seed=3)
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).copy())
        modes.append(live_runtimes()[-1].persistent)
        del interpreter
        gc.collect()
    assert modes == [True, False]
    np.testing.assert_array_equal(outputs[0], outputs[1])
    with pytest.raises(ValueError, match="persistent must be true or false"):
        delegate.load_delegate(persistent="sometimes")


def test_a_missing_model_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        delegate.Interpreter(str(tmp_path / "absent.tflite"))
    assert info.value.filename == str(tmp_path / "absent.tflite")
    with pytest.raises(IsADirectoryError):
        delegate.Interpreter(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "delegate", "run", str(tmp_path / "absent.tflite")], capture_output=True, text=True
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "absent.tflite" in result.stderr
