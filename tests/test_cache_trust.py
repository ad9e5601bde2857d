"""Cache trust: entries of another device, driver, options or version are never used, and entries
modified after they were written (still valid files) are caught by their SHA-256 and rebuilt."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import numpy as np
import pytest

import delegate
from delegate import CacheIntegrityError
from delegate._integrity import TRAILER, seal, unseal
from delegate.context import ContextFile
from delegate.runtime.device import DeviceInfo

from .helpers import shared_path

INFO = DeviceInfo("plat", "dev", "vendor", "drv 1.0", "OpenCL 3.0", True, True, True, True, 256, (256, 256, 64),
                  1 << 30, 1 << 32, 1 << 16, 128, (16384, 16384), (2048, 2048, 2048), 2048, 1 << 27)  # fmt: skip


def test_seal_round_trip_and_every_single_byte_change_is_caught():
    payload = bytes(range(256)) * 3
    sealed = seal(payload)
    assert bytes(unseal(sealed, "entry")) == payload
    for i in range(0, len(sealed), 7):
        bad = bytearray(sealed)
        bad[i] ^= 0x01
        with pytest.raises(CacheIntegrityError, match="entry"):
            unseal(bytes(bad), "entry")
    with pytest.raises(CacheIntegrityError, match="no integrity trailer"):
        unseal(payload, "entry")  # written without a trailer (another version), or truncated
    with pytest.raises(CacheIntegrityError, match="no integrity trailer"):
        unseal(sealed[: TRAILER - 1], "entry")


def test_program_key_covers_device_driver_version_options_and_source(monkeypatch):
    from delegate.runtime import programs
    from delegate.runtime.programs import ProgramBuilder

    def key(info: DeviceInfo = INFO, options: str = "-cl-std=CL1.2", source: str = "k") -> str:
        return ProgramBuilder(None, info, None)._key(source, options)  # type: ignore[arg-type]

    base = key()
    assert key() == base  # deterministic
    variants = [
        key(dataclasses.replace(INFO, name="other device")),
        key(dataclasses.replace(INFO, platform="other platform")),
        key(dataclasses.replace(INFO, vendor="other vendor")),
        key(dataclasses.replace(INFO, driver_version="drv 1.1")),
        key(dataclasses.replace(INFO, version="OpenCL 2.0")),
        key(options="-cl-std=CL2.0"),
        key(source="k "),
    ]
    monkeypatch.setattr(programs, "__version__", "9.9.9")
    variants.append(key())
    assert len({base, *variants}) == len(variants) + 1


def _flip_inside(data: bytearray, needle: bytes, offset: int, new: int) -> None:
    at = bytes(data).find(needle)
    assert at >= 0, needle
    assert data[at + offset] != new
    data[at + offset] = new


def _start(model: str, **options):
    interpreter = delegate.Interpreter(model, **options)
    interpreter.allocate_tensors()
    d = interpreter.get_input_details()[0]
    interpreter.set_tensor(d["index"], np.random.default_rng(0).random(tuple(d["shape"]), dtype=np.float32))
    interpreter.invoke()
    out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    return interpreter.opencl, out


@pytest.fixture(scope="module")
def small_cnn() -> str:
    return str(shared_path("models", "small_cnn.tflite"))


@pytest.mark.opencl
@pytest.mark.parametrize("where", ["kernel source", "weights"])
def test_tampered_but_valid_context_entry_is_rebuilt_with_a_warning(where, small_cnn, tmp_path):
    options = {"serialization_dir": str(tmp_path), "model_token": "m"}
    _, expected = _start(small_cnn, **options)
    (entry,) = tmp_path.glob("*.ctx")
    original = entry.read_bytes()
    data = bytearray(original)
    with ContextFile(unseal(original, "entry")) as f:
        ctx = f.to_model()
        if where == "kernel source":
            code = ctx.nodes[0].gpu_op.code.encode()
            _flip_inside(data, code[:64], code.index(b"MAIN_FUNCTION"), ord("X"))  # still ASCII: still parses
        else:
            weights = next(v.value.data for n in ctx.nodes for v in n.gpu_op.arguments.buffer_objects if v.value.data)
            _flip_inside(data, bytes(weights[:32]), 5, weights[5] ^ 0x40)
    entry.write_bytes(bytes(data))
    with ContextFile(memoryview(data)[: len(data) - TRAILER]):
        pass  # the tampered entry is still a structurally valid InferenceContext
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state, out = _start(small_cnn, **options)
    assert any("does not match its SHA-256" in str(w.message) and str(entry) in str(w.message) for w in caught)
    assert [p.cache for p in state.partitions] == ["miss"]
    assert entry.read_bytes() == original  # rebuilt and replaced
    np.testing.assert_array_equal(out, expected)


@pytest.mark.opencl
def test_context_entries_of_other_options_devices_or_versions_are_not_used(small_cnn, tmp_path, monkeypatch):
    from delegate import cache
    from delegate.plugin.loader import Target, open_target
    from tests.plugin_testing import inject

    options = {"serialization_dir": str(tmp_path), "model_token": "m"}
    assert [p.cache for p in _start(small_cnn, **options)[0].partitions] == ["miss"]
    assert [p.cache for p in _start(small_cnn, **options)[0].partitions] == ["hit"]
    for changed in ({"precision": "F32_F16"}, {"fuse": "false"}, {"storage_type": "IMAGE_BUFFER"}):
        assert [p.cache for p in _start(small_cnn, **options, **changed)[0].partitions] == ["miss"], changed
    entries = len(list(tmp_path.glob("*.ctx")))
    assert entries == 4
    monkeypatch.setattr(cache, "__version__", "9.9.9")
    assert [p.cache for p in _start(small_cnn, **options)[0].partitions] == ["miss"]
    monkeypatch.undo()

    def other_driver(request):
        real = open_target(request)
        return Target(real.device, dataclasses.replace(real.info, driver_version="another driver"))

    inject(monkeypatch, target=other_driver)
    assert [p.cache for p in _start(small_cnn, **options)[0].partitions] == ["miss"]
    monkeypatch.undo()
    # another compiler (its sources changed within one package version)
    inject(monkeypatch, compiler_version=lambda: "another compiler")
    assert [p.cache for p in _start(small_cnn, **options)[0].partitions] == ["miss"]
    assert len(list(tmp_path.glob("*.ctx"))) == entries + 3


@pytest.mark.opencl
def test_conv_kernel_families_run_and_are_keyed_apart(small_cnn, tmp_path, monkeypatch):
    """CompileOptions.conv_kernels (set only by tests and benchmarks) reaches the generators and,
    like every compile option, the serialization cache key: one family's entry never serves another."""
    from delegate.plugin.registry import REGISTRY
    from tests.plugin_testing import inject

    options = {"serialization_dir": str(tmp_path), "model_token": "m"}
    _, expected = _start(small_cnn, **options)
    real = REGISTRY.plan.loader.compiler.options
    codes = []
    for family in ("gemm", "blocked", "plain"):
        inject(monkeypatch, compile_options=lambda *a, f=family: dataclasses.replace(real(*a), conv_kernels=f))
        state, out = _start(small_cnn, **options)
        assert [p.cache for p in state.partitions] == ["hit" if family == "gemm" else "miss"], family
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
        (entry,) = set(tmp_path.glob("*.ctx")) - {e for e, _ in codes}
        with ContextFile(unseal(entry.read_bytes(), "entry")) as f:
            codes.append((entry, {n.gpu_op.code for n in f.to_model().nodes}))
    assert len({frozenset(c) for _, c in codes}) == 3  # three families, three sets of kernels


@pytest.mark.opencl
def test_kernel_families_are_keyed_apart(small_cnn, tmp_path):
    """Option kernel_family reaches the cache key (CompileOptions.kernel_family): a cpu entry never
    serves kernel_family=gpu, nor the reverse; each is a hit for its own family."""
    options = {"serialization_dir": str(tmp_path), "model_token": "m"}
    outputs, caches = {}, []
    for family in ("cpu", "gpu", "cpu", "gpu"):
        state, outputs[family] = _start(small_cnn, kernel_family=family, **options)
        caches += [p.cache for p in state.partitions]
    assert caches == ["miss", "miss", "hit", "hit"]
    assert len(list(tmp_path.glob("*.ctx"))) == 2
    np.testing.assert_allclose(outputs["gpu"], outputs["cpu"], rtol=1e-4, atol=1e-5)


def test_compiler_fingerprint_follows_the_compiler_sources(tmp_path):
    import shutil
    from pathlib import Path

    import delegate.compiler
    from delegate.compiler.fingerprint import compiler_fingerprint, source_fingerprint

    copy = tmp_path / "compiler"
    shutil.copytree(Path(delegate.compiler.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert source_fingerprint(copy) == compiler_fingerprint()
    kernel = copy / "kernels" / "cpu" / "gemm_conv.py"
    kernel.write_text(kernel.read_text() + "\n# changed\n")
    assert source_fingerprint(copy) != compiler_fingerprint()


def test_partition_keys_are_stable_and_an_older_key_layout_is_never_used(tmp_path, monkeypatch):
    """The compiler fingerprints a partition's nodes, the cache keys the fingerprint as an opaque
    string: identical inputs give identical keys, any change (nodes, shapes, options, device,
    model, the key's layout) another key, and an entry sealed with another key is refused."""
    from delegate import cache
    from delegate.compiler.fingerprint import partition_fingerprint
    from delegate.compiler.graph import Builtin, Graph, Node, Tensor
    from delegate.compiler.partition import CompileOptions

    def graph(size: int = 8) -> Graph:
        tensors = {i: Tensor(i, 1, (1, size, size, 4)) for i in range(3)}
        nodes = {0: Node(0, Builtin.RELU, 1, (0,), (1,)), 1: Node(1, Builtin.TANH, 1, (1,), (2,))}
        return Graph(tensors, nodes)

    def key(g: Graph | None = None, options: CompileOptions | None = None, device: str = "dev", model: bytes = b"m"):
        fingerprint = partition_fingerprint(g or graph(), [0, 1])
        options = options or CompileOptions()
        return cache.partition_key(fingerprint, options, device_key=device, extra=["x"], model_id=model)

    base = key()
    assert key() == base and len(base) == 64  # deterministic for identical inputs
    variants = [key(graph(16)), key(options=CompileOptions(fuse=False)), key(device="other"), key(model=b"n")]
    assert partition_fingerprint(graph(), [1, 0]) != partition_fingerprint(graph(), [0, 1])
    monkeypatch.setattr(cache, "KEY_FORMAT", "partition-key/older")
    variants.append(key())
    monkeypatch.undo()
    assert len({base, *variants}) == len(variants) + 1
    store = cache.SerializationCache.open(str(tmp_path), "m")
    assert store is not None
    older = variants[-1]
    assert store.write(store.entry(older), cache.entry_seal("partition", older), lambda: b"payload")
    # the same file name (an older layout's key sharing the name's digits) would still be refused
    with pytest.raises(CacheIntegrityError):
        store.read(store.entry(older), cache.entry_seal("partition", base))
    assert store.read(store.entry(base), cache.entry_seal("partition", base)) is None  # not found


def test_typed_compile_choices_key_as_the_strings_the_options_spell():
    """CompileOptions' kernel choices are enums whose values are the strings the keys always held,
    so a typed option makes the key it made as a string."""
    from delegate import cache
    from delegate.compiler.options import CompileOptions, ConvKernels, KernelFamily

    typed = CompileOptions(kernel_family=KernelFamily.GPU, conv_kernels=ConvKernels.PLAIN)
    assert cache.options_fields(typed) == {
        "precision": "F32", "storage": "BUFFER", "fuse": True, "pair_local_bytes": 0, "vector_width": 8,
        "conv_kernels": "plain", "kernel_family": "gpu", "gpu_work_group": 64, "widen_sensitive": True,
        "int8_dot": False, "byte_lookup": False,
    }  # fmt: skip
    spelled = CompileOptions(kernel_family="gpu", conv_kernels="plain")  # type: ignore[arg-type]
    assert spelled == typed
    key = cache.partition_key("f", typed, device_key="d", extra=["x"], model_id=b"m")
    assert key == cache.partition_key("f", spelled, device_key="d", extra=["x"], model_id=b"m")


@pytest.mark.opencl
def test_modified_program_binary_is_rebuilt_with_a_warning(tmp_path):
    from delegate.runtime import driver
    from delegate.runtime.device import describe, select_device
    from delegate.runtime.programs import ProgramBuilder

    device = select_device()
    context = driver.Context(device)
    source = "__kernel void main_function(__global float* x) { x[get_global_id(0)] += 1.0f; }"
    first = ProgramBuilder(context, describe(device), tmp_path)
    first.build(source, "", "n")
    (entry,) = tmp_path.glob("*.bin")
    original = entry.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0x10
    entry.write_bytes(bytes(data))
    second = ProgramBuilder(context, describe(device), tmp_path)
    with pytest.warns(UserWarning, match=r"does not match its SHA-256 .*: rebuilding it from source"):
        second.build(source, "", "n")
    assert second.stats.built_from_source == 1 and second.stats.loaded_from_cache == 0
    unseal(entry.read_bytes(), "rebuilt entry")
    third = ProgramBuilder(context, describe(device), tmp_path)
    third.build(source, "", "n")
    assert third.stats.loaded_from_cache == 1
    # Same source and options on a "different driver": the entry is not used.
    other = ProgramBuilder(context, dataclasses.replace(describe(device), driver_version="x"), tmp_path)
    other.build(source, "", "n")
    assert other.stats.built_from_source == 1 and other.stats.loaded_from_cache == 0
    assert len(list(tmp_path.glob("*.bin"))) == 2


def test_cache_writers_seal_what_they_write(tmp_path):
    from delegate.cache import write_cache_entry
    from delegate.context.synthetic import synthetic_mobilenet

    path = write_cache_entry(synthetic_mobilenet(image_size=8, weight_scale=0), Path(tmp_path) / "e.ctx")
    with ContextFile(unseal(path.read_bytes(), "e")) as f:
        assert f.to_model().nodes
