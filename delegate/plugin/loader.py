"""Loading one partition: its cache key, the sealed entry read and verified, or the partition
compiled, loaded on the device, tuned and written back (delegate/cache.py).

A PartitionLoader is given its collaborators (the compiler entry, the cache, the runtime loader,
the device): the plugin uses the real ones, tests pass fakes. It knows nothing of TFLite: what it
loads is a PartitionRequest (the partition's graph and tensors, and how to identify the model's
weights), so anything holding a compiler graph can load partitions through it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .._warnings import warn
from ..cache import SerializationCache, entry_seal, partition_key, program_cache_dir
from ..compiler.device_policy import compile_options
from ..compiler.fingerprint import compiler_fingerprint, partition_fingerprint
from ..compiler.graph import Graph
from ..compiler.partition import CompileOptions, compile_partition
from ..errors import CacheIntegrityError, ContextFormatError
from ..runtime import Runtime, Tuning
from ..runtime.device import DeviceInfo, describe, select_device
from .messages import PLUGIN, log
from .options import DelegateOptions

#: how a partition's context was obtained: from the serialization cache, compiled and written
#: there, compiled without one (PartitionInfo.cache), or compiled earlier in this process ("memory":
#: report.py, Selection)
CacheState = Literal["hit", "miss", "off", "memory"]


@dataclass(frozen=True)
class Target:
    """The OpenCL device a partition is compiled for and loaded on, and its facts."""

    device: Any
    info: DeviceInfo


def open_target(request: str) -> Target:
    """The device the option ``device`` names (the default device for "")."""
    device = select_device(request or None)
    return Target(device, describe(device))


def compile_options_for(info: DeviceInfo, options: DelegateOptions) -> CompileOptions:
    """How the partition is compiled for the device (compiler/device_policy.py)."""
    return compile_options(
        info,
        options.precision,
        options.storage_type,
        fuse=options.fuse,
        requested_vector_width=options.vector_width,
        requested_family=options.kernel_family,
        integer_products=options.integer_products,
    )


@dataclass(frozen=True)
class CompilerEntry:
    """The compiler as the loader calls it: the compile itself, the device policy that picks its
    options, the partition's fingerprint for the cache key and the compiler's own version."""

    compile: Callable[[Graph, list[int], list[int], list[int], CompileOptions], Any] = compile_partition
    options: Callable[[DeviceInfo, DelegateOptions], CompileOptions] = compile_options_for
    fingerprint: Callable[[Graph, Sequence[int]], str] = partition_fingerprint
    version: Callable[[], str] = compiler_fingerprint


def load_runtime(source: Any, target: Target, program_cache: Path | Literal[False] | None, persistent: bool) -> Runtime:
    """A Runtime of a compiled context or a serialized one (Runtime.load)."""
    return Runtime.load(source, device=target.device, cache_dir=program_cache, persistent=persistent)


@dataclass(frozen=True)
class PartitionRequest:
    """One partition to load: its graph (compiler.graph.Graph, its constants included), nodes and
    edge tensors, and what identifies the model's weights in the cache, asked only when there is one."""

    graph: Graph
    nodes: list[int]
    inputs: list[int]
    outputs: list[int]
    #: SHA-256 of the model's constants (the key's model identity without a model_token)
    constants_digest: Callable[[], bytes]
    #: a sample of the weights, sealed with an entry keyed by model_token (cache_keys.py)
    weights_sample: Callable[[], str] = field(default=lambda: "")


@dataclass(frozen=True)
class PartitionLoader:
    """Compile (or read from the serialization cache) and load partitions with these collaborators."""

    compiler: CompilerEntry = field(default_factory=CompilerEntry)
    open_cache: Callable[[str, str], SerializationCache | None] = SerializationCache.open
    load_runtime: Callable[[Any, Target, Path | Literal[False] | None, bool], Runtime] = load_runtime
    target: Callable[[str], Target] = open_target

    def load(self, request: PartitionRequest, options: DelegateOptions) -> tuple[Runtime, CacheState]:
        """The partition's Runtime, tuned and warmed up as ``options`` say, and where it came from."""
        target = self.target(options.device)
        compile_opts = self.compiler.options(target.info, options)
        programs = program_cache_dir(options.serialization_dir, options.program_cache)
        store = self.open_cache(options.serialization_dir, options.model_token)

        def compiled() -> Runtime:
            r = request
            ctx_model = self.compiler.compile(r.graph, r.nodes, r.inputs, r.outputs, compile_opts)
            return self._ready(self.load_runtime(ctx_model, target, programs, options.persistent), options, tune=True)

        if store is None:
            log.debug("no serialization_dir: compiling the partition of %d nodes", len(request.nodes))
            return compiled(), "off"
        key = self.key(request, options, target.info, compile_opts)
        path = store.entry(key)
        # the token stands for the weights: a sample of them turns a stale token into a rebuild (cache_keys.py)
        sealed = entry_seal("partition", key, **({"weights": request.weights_sample()} if options.model_token else {}))
        cached = self._cached(store, path, sealed, lambda payload: self._loaded(payload, target, programs, options))
        if cached is not None:
            return cached, "hit"
        runtime = compiled()
        try:
            store.write_context(runtime.model, path, sealed)  # with the tuned work-group sizes
        except BaseException:
            runtime.close()
            raise
        return runtime, "miss"

    def load_compiled(self, ctx_model: Any, options: DelegateOptions) -> Runtime:
        """A Runtime of a context compiled earlier in this process (tuned then: not tuned again)."""
        target = self.target(options.device)
        programs = program_cache_dir(options.serialization_dir, options.program_cache)
        return self._loaded(ctx_model, target, programs, options)

    def key(
        self, request: PartitionRequest, options: DelegateOptions, info: DeviceInfo, compile_opts: CompileOptions
    ) -> str:
        """The partition's serialization cache key: the compiler's fingerprint of its nodes, the
        device, the compile options, the plugin's other choices and the model's identity."""
        model_id = options.model_token.encode() if options.model_token else request.constants_digest()
        extra = [options.enable_quantized_inference, options.tuning.value, self.compiler.version()]
        nodes = self.compiler.fingerprint(request.graph, request.nodes)
        return partition_key(nodes, compile_opts, device_key=info.key, extra=extra, model_id=model_id)

    def _loaded(
        self, source: Any, target: Target, programs: Path | Literal[False] | None, options: DelegateOptions
    ) -> Runtime:
        """A serialized partition loaded, warmed up as ``options`` say (its tuning was stored with it)."""
        return self._ready(self.load_runtime(source, target, programs, options.persistent), options, tune=False)

    @staticmethod
    def _cached(
        store: SerializationCache, path: Path, sealed: dict[str, str], load: Callable[[memoryview], Runtime]
    ) -> Runtime | None:
        """The entry at ``path``, verified and loaded; None without one, or for a bad one (reported:
        the caller rebuilds it)."""
        try:
            payload = store.read(path, sealed)
            if payload is not None:
                log.info("serialization cache hit: %s", path)
                return load(payload)
            log.info("serialization cache miss: no entry %s (model, options, device or package version differ)", path)
        except ContextFormatError as exc:
            log.warning("cache entry %s is unreadable (%s); rebuilding it", path, exc.detail)
            warn(f"{PLUGIN}: cache entry {path} is unreadable ({exc.detail}); rebuilding it")
        except CacheIntegrityError as exc:
            log.warning("%s; rebuilding it", exc)
            warn(f"{PLUGIN}: {exc}; rebuilding it")
        return None

    @staticmethod
    def _ready(runtime: Runtime, options: DelegateOptions, *, tune: bool) -> Runtime:
        """Tune a freshly compiled partition (when asked) and warm it up (see DelegateOptions)."""
        try:
            if tune and options.tuning != Tuning.NONE:
                runtime.tune(options.tuning)
            if options.warm_up:
                runtime.warm_up()
        except BaseException:
            runtime.close()
            raise
        return runtime
