"""Caches are an optimisation, never a condition for running.

A serialization or program cache folder that is read-only, full or cannot be created, a model token
too long for a file name, special files (FIFOs, links to devices) in place of entries, entries
copied over from another model, another graph or another program, and PoCL's kernel cache under a
read-only XDG_CACHE_HOME: each run ends with exit 0, outputs equal to TFLite's CPU kernels', and
exactly one warning naming the cause. Runs that could hang are subprocesses with timeouts
(tests/cache_fault_worker.py); mounts need root and are undone in a ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import delegate
from delegate import CacheIntegrityError
from delegate._integrity import entry_key, read_sealed, seal, unseal
from delegate.cache import SerializationCache

from .helpers import shared_path

ROOT = Path(__file__).resolve().parent.parent
#: the largest difference from TFLite's CPU output, relative to its largest magnitude
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def small_cnn() -> str:
    return str(shared_path("models", "small_cnn.tflite"))


def _worker(model: str, env: dict[str, str] | None = None, timeout: float = 60, **options: object) -> dict:
    """Run ``model`` in a fresh process (see cache_fault_worker.py; ``env`` its whole environment,
    else this one's); its report, after checking that it exited 0 in time."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.cache_fault_worker", model, json.dumps(options)],
            cwd=ROOT,
            env=os.environ if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the run with {options} did not finish within {timeout} s")
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _one_warning(report: dict, *fragments: str) -> str:
    """The run's only warning, checked to contain every one of ``fragments``."""
    assert report["relative_error"] <= TOLERANCE, report
    assert len(report["warnings"]) == 1, report["warnings"]
    (message,) = report["warnings"]
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


@contextlib.contextmanager
def _mounted(folder: Path, *how: str) -> Iterator[Path]:
    """``folder`` with a file system mounted on it (``how``: mount's arguments before the target);
    skipped where mounting is not allowed, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a read-only or full file system needs root")
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", *how, str(folder)], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"mount {' '.join(how)} is not allowed here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


@contextlib.contextmanager
def _read_only(folder: Path) -> Iterator[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    with _mounted(folder, "--bind", "-o", "ro", str(folder)) as mounted:
        if os.access(mounted, os.W_OK) and not os.statvfs(mounted).f_flag & os.ST_RDONLY:
            pytest.skip("this kernel does not make read-only bind mounts")
        yield mounted


# -- entries on disk: keys in seals, and only regular files of bounded size are read --------------


def test_the_seal_holds_the_key_and_an_entry_of_another_key_is_refused():
    sealed = seal(b"payload", {"kind": "partition", "key": "a" * 64, "weights": "1"})
    assert bytes(unseal(sealed, "e", {"kind": "partition", "key": "a" * 64, "weights": "1"})) == b"payload"
    assert entry_key(sealed) == {"kind": "partition", "key": "a" * 64, "weights": "1"}
    with pytest.raises(CacheIntegrityError, match=r"e was made for another entry \(its weights .*differs\)"):
        unseal(sealed, "e", {"kind": "partition", "key": "a" * 64, "weights": "2"})
    with pytest.raises(CacheIntegrityError, match="model, graph, options, device or driver differs"):
        unseal(sealed, "e", {"kind": "partition", "key": "b" * 64, "weights": "1"})
    forged = bytearray(sealed)
    forged[len(b"payload") + 10] ^= 1  # the key is inside the hash: changing it breaks the seal
    with pytest.raises(CacheIntegrityError, match="does not match its SHA-256"):
        unseal(bytes(forged), "e")


_BOUNDED_READ = """
import sys
from pathlib import Path
from delegate._integrity import read_sealed
try:
    read_sealed(Path(sys.argv[1]), sys.argv[1], None, limit=1000)
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def _limit_memory() -> None:
    import resource

    # a reader of /dev/zero stops at 1 GiB; under AddressSanitizer (scripts/sanitize.sh), whose
    # shadow memory cannot live under an address-space cap, its own allocation bound does it
    if "libasan" not in os.environ.get("LD_PRELOAD", ""):
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def _bounded_env() -> dict[str, str]:
    env = dict(os.environ)
    if "libasan" in env.get("LD_PRELOAD", ""):  # the allocation bound _limit_memory leaves to ASan
        env["ASAN_OPTIONS"] = env.get("ASAN_OPTIONS", "") + ":max_allocation_size_mb=1024"
    return env


@pytest.mark.parametrize("kind", ["fifo", "link to /dev/zero", "link to a valid entry", "too large"])
def test_only_regular_files_of_bounded_size_are_read(kind, tmp_path):
    good = tmp_path / "good.bin"
    good.write_bytes(seal(b"x" * 100))
    path = tmp_path / "entry.bin"
    if kind == "fifo":
        os.mkfifo(path)  # opened without O_NONBLOCK, a read would wait for a writer forever
    elif kind == "link to /dev/zero":
        path.symlink_to("/dev/zero")  # read to the end, it never ends
    elif kind == "link to a valid entry":
        path.symlink_to(good)
    else:
        path.write_bytes(seal(b"x" * 2000))
    if kind in ("fifo", "link to /dev/zero"):  # a reader that blocks or reads on must not hang the suite
        done = subprocess.run(
            [sys.executable, "-c", _BOUNDED_READ, str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            preexec_fn=_limit_memory,
            env=_bounded_env(),
        )
        assert done.returncode == 0 and "CacheIntegrityError" in done.stdout and "entry.bin" in done.stdout, done
    else:
        with pytest.raises(CacheIntegrityError, match=r"entry\.bin"):
            read_sealed(path, str(path), None, limit=1000)
    assert bytes(read_sealed(good, "good", None, limit=1000)) == b"x" * 100
    assert read_sealed(tmp_path / "missing.bin", "missing", None, limit=1000) is None


def test_a_long_model_token_is_hashed_into_a_short_file_name(tmp_path):
    long = "t" * 100_000
    cache = SerializationCache.open(str(tmp_path), long)
    assert cache is not None
    name = cache.entry("0" * 64).name
    assert len(name) < 120
    other = SerializationCache.open(str(tmp_path), "t" * 99_999 + "u")
    assert other is not None and other.entry("0" * 64).name != name
    short = SerializationCache.open(str(tmp_path), "m.v2")
    assert short is not None and short.entry("0" * 64).name == f"m_v2-{'0' * 40}.ctx"


# -- the delegate with faulty caches: exit 0, correct outputs, one warning -------------------------


@pytest.mark.opencl
def test_a_read_only_serialization_dir_runs_without_the_cache(small_cnn, tmp_path):
    with _read_only(tmp_path / "ro") as folder:
        report = _worker(small_cnn, serialization_dir=str(folder), model_token="m")
        assert report["caches"] == ["miss"]
        _one_warning(report, f"cache folder {folder} cannot be used", "Read-only file system", "running without it")
        # a folder that cannot be created (inside the read-only one): the same, one warning
        inside = folder / "sub"
        report = _worker(small_cnn, serialization_dir=str(inside), model_token="m")
        _one_warning(report, f"serialization_dir {inside} cannot be used", "Read-only file system")
        assert not inside.exists()


@pytest.mark.opencl
def test_a_read_only_program_cache_runs_without_it(small_cnn, tmp_path):
    with _read_only(tmp_path / "ro") as folder:
        report = _worker(small_cnn, program_cache=str(folder))
        _one_warning(report, f"cache folder {folder} cannot be used", "Read-only file system")


@pytest.mark.opencl
def test_a_full_serialization_dir_runs_without_the_cache(small_cnn, tmp_path):
    with _mounted(tmp_path / "full", "-t", "tmpfs", "-o", "size=64k", "tmpfs") as folder:
        (folder / "filler").write_bytes(b"\0" * (60 << 10))  # the rest is smaller than one entry
        report = _worker(small_cnn, serialization_dir=str(folder), model_token="m")
        assert report["caches"] == ["miss"]
        # the first write that fails may be a program binary's, in programs/ inside it
        message = _one_warning(report, f"cache folder {folder}", "No space left on device", "running without it")
        assert f"{folder} cannot be used" in message or f"{folder / 'programs'} cannot be used" in message
        assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]  # no temporaries left behind


@pytest.mark.opencl
def test_a_model_token_of_100000_characters_is_cached(small_cnn, tmp_path):
    token = "m" * 100_000
    first = _worker(small_cnn, serialization_dir=str(tmp_path), model_token=token)
    second = _worker(small_cnn, serialization_dir=str(tmp_path), model_token=token)
    assert (first["caches"], second["caches"]) == (["miss"], ["hit"])
    assert first["warnings"] == second["warnings"] == []
    assert second["relative_error"] <= TOLERANCE
    assert all(len(p.name) < 120 for p in tmp_path.iterdir())


def _special(path: Path, kind: str) -> None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")


@pytest.mark.opencl
@pytest.mark.parametrize("kind", ["fifo", "symlink to /dev/zero"])
def test_a_special_file_in_place_of_a_context_entry_is_rebuilt(kind, small_cnn, tmp_path):
    options = {"serialization_dir": str(tmp_path), "model_token": "m"}
    _worker(small_cnn, **options)
    (entry,) = tmp_path.glob("*.ctx")
    original = entry.read_bytes()
    _special(entry, kind)
    report = _worker(small_cnn, timeout=30, **options)
    assert report["caches"] == ["miss"]
    _one_warning(report, str(entry), "symbolic link" if kind != "fifo" else "not a regular file", "rebuilding it")
    assert entry.is_file() and not entry.is_symlink() and entry.read_bytes() == original  # replaced


@pytest.mark.opencl
def test_a_fifo_in_place_of_a_program_binary_is_rebuilt(small_cnn, tmp_path):
    _worker(small_cnn, program_cache=str(tmp_path))
    entry = sorted(tmp_path.glob("*.bin"))[0]
    _special(entry, "fifo")
    report = _worker(small_cnn, timeout=30, program_cache=str(tmp_path))
    _one_warning(report, str(entry), "not a regular file", "rebuilding it from source")
    assert entry.is_file()
    unseal(entry.read_bytes(), "rebuilt", entry_key(entry.read_bytes()))


def _other_weights(model: Path, folder: Path) -> Path:
    """``model`` with the same graph and other weights: every float of its largest buffer scaled."""
    import tflite

    data = bytearray(model.read_bytes())
    root = tflite.Model.GetRootAsModel(data, 0)
    buffers = [root.Buffers(i).DataAsNumpy() for i in range(root.BuffersLength())]
    weights = max((b for b in buffers if not isinstance(b, int)), key=len).tobytes()
    at = bytes(data).find(weights)
    assert at > 0 and bytes(data).find(weights, at + 1) < 0
    scaled = (np.frombuffer(weights, np.float32) * np.float32(1.7)).astype(np.float32).tobytes()
    data[at : at + len(weights)] = scaled
    path = folder / "other_weights.tflite"
    path.write_bytes(bytes(data))
    return path


def _run(model: str, **options: object) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """Caches, warnings, and the delegate's and the CPU's outputs, in this process."""
    from delegate.api import host_runtime

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gpu = delegate.Interpreter(model, background_compile="off", cpu_when_faster="false", **options)
        gpu.allocate_tensors()
    host = host_runtime()
    cpu = host.Interpreter(
        model_path=model, experimental_op_resolver_type=host.OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    )
    cpu.allocate_tensors()
    outputs = []
    for interpreter in (gpu, cpu):
        d = interpreter.get_input_details()[0]
        interpreter.set_tensor(d["index"], np.random.default_rng(0).random(tuple(d["shape"]), dtype=np.float32))
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
    return [p.cache for p in gpu.opencl.partitions], [str(w.message) for w in caught], outputs[0], outputs[1]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=0, atol=TOLERANCE * float(np.abs(want).max()))


@pytest.mark.opencl
def test_another_models_entry_copied_over_an_entry_is_rebuilt(small_cnn, tmp_path):
    other = str(_other_weights(Path(small_cnn), tmp_path))
    folder = tmp_path / "ser"
    _run(small_cnn, serialization_dir=str(folder), model_token="a")
    _run(other, serialization_dir=str(folder), model_token="b")
    (mine,) = folder.glob("a-*.ctx")
    (theirs,) = folder.glob("b-*.ctx")
    original = mine.read_bytes()
    shutil.copyfile(theirs, mine)  # validly sealed, for the same graph, with other weights
    caches, caught, got, want = _run(small_cnn, serialization_dir=str(folder), model_token="a")
    assert caches == ["miss"]
    assert len(caught) == 1 and str(mine) in caught[0] and "made for another entry" in caught[0], caught
    _close(got, want)
    assert mine.read_bytes() == original  # rebuilt and replaced


@pytest.mark.opencl
def test_a_stale_model_token_is_caught_by_the_weights_sample(small_cnn, tmp_path):
    """The same token for other weights (the caller's promise broken): rebuilt, not a wrong answer."""
    other = str(_other_weights(Path(small_cnn), tmp_path))
    folder = tmp_path / "ser"
    _run(small_cnn, serialization_dir=str(folder), model_token="m")
    caches, caught, got, want = _run(other, serialization_dir=str(folder), model_token="m")
    assert caches == ["miss"]
    assert len(caught) == 1 and "weights (the same model_token, another model) differs" in caught[0], caught
    _close(got, want)
    assert _run(other, serialization_dir=str(folder), model_token="m")[0] == ["hit"]  # replaced


@pytest.mark.opencl
def test_an_entry_of_another_graph_is_rebuilt(small_cnn, tmp_path):
    folder = tmp_path / "ser"
    _run(small_cnn, serialization_dir=str(folder), model_token="m")
    (mine,) = folder.glob("*.ctx")
    original = mine.read_bytes()
    elsewhere = tmp_path / "other"
    _run(str(shared_path("models", "elementwise_mix.tflite")), serialization_dir=str(elsewhere), model_token="m")
    shutil.copyfile(max(elsewhere.glob("*.ctx"), key=lambda p: p.stat().st_size), mine)
    caches, caught, got, want = _run(small_cnn, serialization_dir=str(folder), model_token="m")
    assert caches == ["miss"]
    assert len(caught) == 1 and "made for another entry" in caught[0], caught
    _close(got, want)
    assert mine.read_bytes() == original


@pytest.mark.opencl
def test_a_program_binary_of_another_source_is_rebuilt(small_cnn, tmp_path):
    _run(small_cnn, program_cache=str(tmp_path))
    mine = set(tmp_path.glob("*.bin"))  # on a CPU device one program: the persistent kernel
    _run(str(shared_path("models", "elementwise_mix.tflite")), program_cache=str(tmp_path))
    others = set(tmp_path.glob("*.bin")) - mine
    assert mine and others, (mine, others)
    victim, donor = min(mine), min(others)
    shutil.copyfile(donor, victim)
    _, caught, got, want = _run(small_cnn, program_cache=str(tmp_path))
    assert len(caught) == 1 and str(victim) in caught[0] and "made for another entry" in caught[0], caught
    _close(got, want)
    rebuilt = victim.read_bytes()
    assert entry_key(rebuilt)["key"] == victim.stem and rebuilt != donor.read_bytes()  # replaced


@pytest.mark.opencl
def test_a_program_binary_the_driver_cannot_make_kernels_of_is_rebuilt(tmp_path):
    """A binary sealed with the right key but without the source's kernels (as a driver that
    rejects it at clCreateKernel time would leave it) is rebuilt from source and replaced."""
    from delegate.runtime import driver
    from delegate.runtime.device import describe, select_device
    from delegate.runtime.programs import ProgramBuilder

    device = select_device()
    context = driver.Context(device)
    info = describe(device)
    source = "__kernel void main_function(__global float* x) { x[get_global_id(0)] += 1.0f; }"
    other = "__kernel void another(__global float* x) { x[get_global_id(0)] -= 1.0f; }"
    ProgramBuilder(context, info, tmp_path).build(other, "", "n")
    (donor,) = tmp_path.glob("*.bin")
    builder = ProgramBuilder(context, info, tmp_path)
    key = builder._key(source, "")
    entry = tmp_path / f"{key}.bin"
    entry.write_bytes(seal(unseal(donor.read_bytes(), "donor"), entry_key(donor.read_bytes()) | {"key": key}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program = builder.build(source, "", "n")
    assert len(caught) == 1 and "rejected by the driver" in str(caught[0].message), caught
    assert "no kernel main_function" in str(caught[0].message)
    assert builder.stats.built_from_source == 1 and "main_function" in program.kernel_names()
    again = ProgramBuilder(context, info, tmp_path)
    again.build(source, "", "n")
    assert again.stats.loaded_from_cache == 1  # the rebuilt binary replaced the bad one


@pytest.mark.opencl
def test_a_read_only_xdg_cache_home_keeps_pocl_working(small_cnn, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "POCL_CACHE_DIR"}
    with _read_only(tmp_path / "xdg") as xdg:
        env["XDG_CACHE_HOME"] = str(xdg)
        done = subprocess.run(
            [sys.executable, "-W", "always", "-m", "delegate", "devices"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert "Portable Computing Language" in done.stdout, done.stdout
        assert done.stderr.count("Warning:") == 1, done.stderr
        assert f"PoCL's kernel cache folder {xdg} cannot be used" in done.stderr
        # a model with the default program cache (under the same folder): one warning covers both
        report = _worker(small_cnn, env=env)
        _one_warning(report, f"PoCL's kernel cache folder {xdg} cannot be used", "Read-only file system")
