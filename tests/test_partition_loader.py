"""The plugin's partition loader with fake collaborators (compiler entry, cache, runtime loader,
device): no TFLite, no OpenCL. Which step runs when: a miss compiles, tunes and writes; a hit
loads what was written; a bad entry is reported and rebuilt; without a cache it only compiles."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest

from delegate.compiler.graph import Builtin, Graph, Node, Tensor
from delegate.compiler.partition import CompileOptions
from delegate.errors import CacheIntegrityError
from delegate.plugin.loader import CompilerEntry, PartitionLoader, PartitionRequest, Target
from delegate.plugin.options import DelegateOptions
from delegate.runtime import Tuning
from delegate.runtime.device import DeviceInfo

_INFO = DeviceInfo("plat", "dev", "vendor", "drv 1.0", "OpenCL 3.0", True, True, True, True, 256, (256, 256, 64),
                   1 << 30, 1 << 32, 1 << 16, 128, (16384, 16384), (2048, 2048, 2048), 2048, 1 << 27)  # fmt: skip


class FakeRuntime:
    def __init__(self, source: Any) -> None:
        self.model, self.tuned, self.closed = source, None, False

    def tune(self, mode: Tuning) -> None:
        self.tuned = mode

    def warm_up(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class FakeStore:
    """A serialization cache in memory: entry -> (seal, payload)."""

    def __init__(self) -> None:
        self.entries: dict[Path, tuple[dict[str, str], Any]] = {}

    def entry(self, key: str) -> Path:
        return Path(f"m-{key[:40]}.ctx")

    def read(self, path: Path, sealed: dict[str, str]) -> Any:
        if path not in self.entries:
            return None
        seal, payload = self.entries[path]
        if seal != sealed:
            raise CacheIntegrityError(f"cache entry {path} was sealed for another key")
        return payload

    def write_context(self, model: Any, path: Path, sealed: dict[str, str]) -> bool:
        self.entries[path] = (sealed, model)
        return True


def _request() -> PartitionRequest:
    tensors = {i: Tensor(i, 1, (1, 4, 4, 4)) for i in range(2)}
    graph = Graph(tensors, {0: Node(0, Builtin.RELU, 1, (0,), (1,))})
    return PartitionRequest(graph, [0], [0], [1], constants_digest=lambda: b"weights")


def _loader(store: FakeStore | None, compiled: list[list[int]]) -> PartitionLoader:
    def compile_partition(graph: Graph, nodes: list[int], *args: Any) -> str:
        compiled.append(nodes)
        return f"context of {nodes}"

    return PartitionLoader(
        CompilerEntry(compile=compile_partition, options=lambda info, options: CompileOptions(), version=lambda: "c1"),
        open_cache=lambda folder, token: store,
        load_runtime=lambda source, target, programs, persistent: FakeRuntime(source),  # type: ignore[arg-type,return-value]
        target=lambda request: Target(None, dataclasses.replace(_INFO)),
    )


_OPTIONS = DelegateOptions(serialization_dir="unused", tuning=Tuning.FAST)


def test_a_miss_compiles_tunes_and_writes_and_a_hit_only_loads():
    store, compiled = FakeStore(), []
    loader = _loader(store, compiled)
    runtime, state = loader.load(_request(), _OPTIONS)
    assert (state, runtime.model, runtime.tuned, compiled) == ("miss", "context of [0]", Tuning.FAST, [[0]])
    assert [payload for _, payload in store.entries.values()] == ["context of [0]"]
    runtime, state = loader.load(_request(), _OPTIONS)
    assert (state, runtime.model, runtime.tuned, compiled) == ("hit", "context of [0]", None, [[0]])


def test_without_a_cache_it_compiles_each_time():
    compiled: list[list[int]] = []
    loader = _loader(None, compiled)
    assert [loader.load(_request(), _OPTIONS)[1] for _ in range(2)] == ["off", "off"]
    assert compiled == [[0], [0]]


def test_a_bad_entry_is_reported_and_rebuilt():
    store, compiled = FakeStore(), []
    loader = _loader(store, compiled)
    loader.load(_request(), _OPTIONS)
    ((path, (seal, payload)),) = store.entries.items()
    store.entries[path] = ({**seal, "key": "another"}, payload)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, state = loader.load(_request(), _OPTIONS)
    assert state == "miss" and compiled == [[0], [0]]
    assert any("sealed for another key; rebuilding it" in str(w.message) for w in caught)


def test_the_key_follows_the_compiler_the_device_and_the_model():
    compiled: list[list[int]] = []
    loader = _loader(FakeStore(), compiled)
    options, info = CompileOptions(), dataclasses.replace(_INFO)
    base = loader.key(_request(), _OPTIONS, info, options)
    assert loader.key(_request(), _OPTIONS, info, options) == base
    other_compiler = dataclasses.replace(loader, compiler=dataclasses.replace(loader.compiler, version=lambda: "c2"))
    assert other_compiler.key(_request(), _OPTIONS, info, options) != base
    assert loader.key(_request(), _OPTIONS, dataclasses.replace(info, driver_version="2"), options) != base
    tokened = dataclasses.replace(_OPTIONS, model_token="t")
    assert loader.key(_request(), tokened, info, options) != base


def test_a_failing_compile_raises_and_writes_nothing():
    store = FakeStore()

    def broken(*args: Any) -> Any:
        raise ValueError("compile failed")

    loader = dataclasses.replace(
        _loader(store, []), compiler=CompilerEntry(compile=broken, options=lambda info, options: CompileOptions())
    )
    with pytest.raises(ValueError, match="compile failed"):
        loader.load(_request(), _OPTIONS)
    assert store.entries == {}
