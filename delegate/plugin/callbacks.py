"""The plugin's Python half: delegate creation, Prepare (which nodes to claim) and kernel init (compile).

csrc/plugin.c calls these through cffi ``extern "Python+C"``. Every callback catches its own
exceptions: an error becomes a message the user sees (report_error / ReportError) and a failure
status, never a traceback lost inside C.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

from .. import cancel
from .._native import ffi, lib
from .._warnings import warn
from ..cache import SerializationCache, entry_seal, partition_key, program_cache_dir
from ..compiler.claim import NO_KERNEL, claimed_nodes
from ..compiler.device_policy import compile_options, cpu_when_faster
from ..compiler.fingerprint import compiler_fingerprint
from ..compiler.kernel_names import fused_ops
from ..compiler.partition import CompileOptions, compile_partition
from ..compiler.shapes import StaticShapes, resolve
from ..errors import (
    CacheIntegrityError,
    CompileCancelled,
    ContextFormatError,
    DelegateError,
    PartitionTooLargeError,
)
from ..progress import report_progress
from ..runtime import Runtime, Tuning
from ..runtime.device import DeviceInfo, describe, select_device
from .binding import bind_kernel, tensor_dims
from .cache_keys import weights_sample
from .capture import (
    capture_graph,
    capture_tensors,
    execution_plan,
    hash_constants,
    int_array,
    largest_partitions,
    partition_graph,
    preview_partitions,
    undo_unsafe_reason,
)
from .choice_record import decide
from .claim_rules import float_edges, propagation_blocker
from .options import DelegateOptions
from .report import DelegateState, PartitionInfo, SubgraphReport

log = logging.getLogger(__name__)

_PLUGIN = "tflite-opencl-delegate"
_INTERRUPTS = (KeyboardInterrupt, SystemExit, CompileCancelled)  # not errors: Ctrl-C, exit, a cancelled build


@dataclass
class Preparing:
    """One Prepare in progress (kernel inits run inside it)."""

    graph: Any
    report: SubgraphReport
    #: the execution plan Prepare saw, and the shapes it resolved (compiler/shapes.py)
    plan: list[int] = field(default_factory=list)
    static: StaticShapes | None = None
    #: partitions compiled by Prepare, waiting for their kernel's init: nodes -> (runtime, cache, start)
    pending: dict[frozenset[int], tuple[Any, str, float]] = field(default_factory=dict)
    #: partitions claimed only to report why they failed (see ``_defer``): nodes -> message
    deferred: dict[frozenset[int], str] = field(default_factory=dict)
    #: SHA-256 of the model's constants (cache keys without model_token), hashed once per Prepare
    _constants_digest: bytes | None = None

    def constants_digest(self, context: Any) -> bytes:
        if self._constants_digest is None:
            h = hashlib.sha256()
            hash_constants(context, self.graph, h.update)
            self._constants_digest = h.digest()
        return self._constants_digest


def _address(context: Any) -> int:
    return int(ffi.cast("uintptr_t", context))


@dataclass
class _Kernel:
    """A delegate kernel's runtime and the cffi arrays its C side points at."""

    runtime: Runtime
    arrays: list[Any]  # cffi arrays the C kernel points at
    #: what recompiling after a resize needs: the delegate, the subgraph's nodes (as Prepare
    #: captured them: kernel callbacks may not ask TFLite for nodes) and plan, the partition's tensors
    state: DelegateState | None = None
    nodes: dict[int, Any] = field(default_factory=dict)
    plan: list[int] = field(default_factory=list)
    partition: tuple[list[int], list[int], list[int]] = ((), (), ())  # type: ignore[assignment]
    #: the TFLite dims of the bound inputs and outputs it was compiled for
    dims: list[tuple[int, ...]] = field(default_factory=list)
    report: SubgraphReport | None = None


_lock = threading.Lock()
_ids = itertools.count(1)
_delegates: dict[int, DelegateState] = {}
_kernels: dict[int, _Kernel] = {}


def state_of_pointer(pointer: int) -> DelegateState | None:
    """The state of the delegate at a native ``TfLiteDelegate*`` address (as the host runtime holds it)."""
    if not pointer:
        return None
    native = ffi.cast("TfLiteDelegate *", pointer)
    data = ffi.cast("int64_t *", native.data_)
    return _delegates.get(int(data[0]))


def live_kernels() -> int:
    """Compiled partitions currently alive (for leak checks)."""
    return len(_kernels)


def live_runtimes() -> list[Runtime]:
    """The Runtimes of the compiled partitions currently alive, oldest first (for tools and tests)."""
    with _lock:
        return [k.runtime for k in _kernels.values()]


def _copy_error(message: str, buffer: Any, size: int) -> None:
    raw = message.encode("utf-8", "replace")[: size - 1]
    ffi.memmove(buffer, raw + b"\0", len(raw) + 1)


@ffi.def_extern()
def dlg_py_create(keys: Any, values: Any, count: int, error: Any, error_size: int) -> int:
    try:
        pairs = {ffi.string(keys[i]).decode(): ffi.string(values[i]).decode() for i in range(count)}
        options = DelegateOptions.parse(pairs)
        if options.device:
            select_device(options.device)  # fail now, with the device list, rather than at the first model
        with _lock:
            ident = next(_ids)
            _delegates[ident] = DelegateState(options)
        return ident
    except DelegateError as exc:
        _copy_error(f"{_PLUGIN}: {exc}", error, error_size)
    except Exception as exc:
        _copy_error(f"{_PLUGIN}: unexpected {type(exc).__name__}: {exc}", error, error_size)
    return 0


@ffi.def_extern()
def dlg_py_destroy(ident: int) -> None:
    with _lock:
        _delegates.pop(ident, None)


def _interrupted(exc: BaseException, error: Any = None) -> int:
    """Fail without fallback; ``exc`` cannot pass through C: the host's caller raises it (cancel.host_call)."""
    cancel.remember(exc)
    if error is not None:
        _copy_error(f"{_PLUGIN}: interrupted ({type(exc).__name__})", error, ffi.sizeof(error))
    return 1


def _report(context: Any, message: str) -> None:
    lib.dlg_report(context, message.encode("utf-8", "replace"))


def _supported_nodes(
    graph: Any, plan: list[int], options: DelegateOptions, static: StaticShapes
) -> tuple[list[int], dict[str, str]]:
    """The nodes to claim, in plan order, and why each other one stays on CPU (compiler/claim.py)."""
    return claimed_nodes(
        graph, plan, static, exclude_ops=options.exclude_ops, dequantize=options.enable_quantized_inference
    )


def _cause(exc: BaseException) -> str:
    """The first line of an error (and the line it introduces, such as a build log's first error),
    or its type when it has no text: never an empty message."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].endswith(":") and len(lines) > 1:
        detail = next((line for line in lines[1:] if "error" in line.lower()), lines[1])
        return f"{lines[0]} {detail[:300]}"
    return lines[0]


def _shown(names: list[str]) -> str:
    return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def _precompile(context: Any, prep: Preparing, chosen: list[int], state: DelegateState, unsafe: bool) -> list[int]:
    """Compile every partition now, so that a failure can leave just that partition on CPU
    (``compile_fallback``) or fail Prepare with the nodes and the cause; the delegated nodes left.

    ``unsafe``: TFLite could not restore its plan after a failed Prepare (``undo_unsafe_reason``),
    so without fallback a failing partition is claimed with a kernel that reports the cause when
    the interpreter allocates its tensors (``_defer``) instead of failing Prepare."""
    if not chosen:
        return chosen
    keep = set(chosen)
    previews = preview_partitions(context, chosen)
    for number, (nodes, inputs, outputs) in enumerate(previews):
        start = time.perf_counter()
        report_progress("compiling partitions", number, len(previews), f"{len(nodes)} nodes")
        cancel.checkpoint()
        try:
            runtime, cache_state = _load_partition(context, nodes, inputs, outputs, state, prep)
        except PartitionTooLargeError as exc:  # over the runtime's bounds (compiler/bounds.py)
            if exc.node not in nodes:
                raise DelegateError(f"compiling a partition failed: {exc}") from exc
            keep.discard(exc.node)  # that node on CPU: the rest is partitioned and compiled again
            prep.report.unsupported[prep.graph.nodes[exc.node].name] = exc.reason
            previews += preview_partitions(context, [n for n in nodes if n != exc.node])
            continue
        except Exception as exc:  # any stage: capture of weights, compile, build, allocation
            names = [prep.graph.nodes[n].name for n in nodes]
            cause = _cause(exc)
            if not isinstance(exc, (DelegateError, ValueError, OSError)):
                cause = f"{type(exc).__name__}: {cause}"
            message = f"compiling the partition of {_shown(names)} failed: {cause}"
            if not state.options.compile_fallback:
                if unsafe:
                    prep.deferred[frozenset(nodes)] = f"{_PLUGIN}: {message}"
                    continue
                raise DelegateError(message) from exc
            log.warning("%s fall back to CPU: %s", _shown(names), cause)
            warn(f"{_PLUGIN}: {_shown(names)} fall back to CPU: {cause}")
            prep.report.fallbacks.append({"nodes": names, "cause": cause})
            for name in names:
                prep.report.unsupported[name] = f"compile fallback: {cause}"
            keep -= set(nodes)
            continue
        prep.pending[frozenset(nodes)] = (runtime, cache_state, start)
        log.info(
            "partition %d of %d: %d nodes, %d kernels, ready in %.0f ms (serialization cache: %s)",
            number + 1,
            len(previews),
            len(nodes),
            len(runtime.node_names),
            (time.perf_counter() - start) * 1e3,
            cache_state,
        )
    report_progress("compiling partitions", len(previews), len(previews))
    return [n for n in chosen if n in keep]


def _faster_on_cpu(
    context: Any, prep: Preparing, nodes: list[int], options: DelegateOptions, unsupported: dict[str, str]
) -> list[int]:
    """``nodes`` less the partitions the delegate cannot run faster than TFLite's CPU kernels
    (option cpu_when_faster; compiler/cpu_choice.py); every partition's figures go in the report,
    and in its record in the serialization folder (choice_record.py)."""
    if not nodes:
        return nodes
    info = describe(select_device(options.device or None))
    requested = options.cpu_when_faster
    applied = requested if requested is not None else cpu_when_faster(info, None)
    store = SerializationCache.open(options.serialization_dir, options.model_token)

    def model_id() -> bytes:
        return options.model_token.encode() if options.model_token else prep.constants_digest(context)

    kept: set[int] = set()
    for members, _, _ in preview_partitions(context, nodes):
        choice = decide(store, prep.graph, members, applied=applied, device_key=info.key, model_id=model_id)
        prep.report.cpu_choices.append(choice)
        if choice.on_cpu:
            kept.update(members)
            for name in choice.names:
                unsupported[name] = choice.reason()
    return [n for n in nodes if n not in kept]


def _claim(context: Any, native_delegate: Any, state: DelegateState, prep: Preparing) -> int:
    """Prepare's work on one subgraph: capture, choose, compile, and replace the chosen nodes."""
    report, options = prep.report, state.options
    plan = prep.plan
    graph = prep.graph = capture_graph(context, plan)
    if propagation_blocker(graph, plan) is not None:  # for this delegate: TFLite reads the flag per allocation
        native_delegate.flags &= ~lib.kTfLiteDelegateFlagsRequirePropagatedShapes
    prep.static = resolve(graph, plan)
    supported, unsupported = _supported_nodes(graph, plan, options, prep.static)
    supported = float_edges(context, graph, supported, unsupported)
    chosen = largest_partitions(context, supported, options.max_delegated_partitions)
    for index in set(supported) - set(chosen):
        unsupported[graph.nodes[index].name] = "outside the largest max_delegated_partitions partitions"
    chosen = _faster_on_cpu(context, prep, chosen, options, unsupported)
    report.total_nodes = len(plan)
    report.unsupported = unsupported
    for name, why in unsupported.items():
        if NO_KERNEL in why:
            warn(f"{_PLUGIN}: {name} stays on CPU: {why}")
    chosen = _precompile(context, prep, chosen, state, undo_unsafe_reason(context, plan) is not None)
    report.delegated_nodes = [n for n in chosen if not any(n in d for d in prep.deferred)]
    shown = list(report.unsupported.items())[:5]
    log.info(
        "subgraph %d: %d of %d nodes delegated in %d partition(s); on CPU: %s%s",
        report.index,
        len(report.delegated_nodes),
        len(plan),
        len(prep.pending),
        ", ".join(f"{name} ({why})" for name, why in shown) or "nothing",
        f" and {len(report.unsupported) - len(shown)} more" if len(report.unsupported) > len(shown) else "",
    )
    if not chosen:
        return 0
    return _replace(context, native_delegate, chosen)


def _replace(context: Any, native_delegate: Any, nodes: list[int]) -> int:
    array = ffi.new("int[]", nodes)
    return 0 if lib.dlg_replace_nodes(context, native_delegate, array, len(nodes)) == lib.kTfLiteOk else 1


@ffi.def_extern()
def dlg_py_prepare(context: Any, native_delegate: Any, ident: int) -> int:
    state = _delegates.get(ident)
    if state is None:
        _report(context, f"{_PLUGIN}: this delegate was already destroyed")
        return 1
    prep: Preparing | None = None
    try:
        with _lock:  # interpreters sharing the delegate prepare at once: += is a read and a write
            state.prepares += 1
        plan = execution_plan(context)
        prep = Preparing(None, state.report_for(_address(context)), plan)
        with _lock:
            state.preparing[_address(context)] = prep
        return _claim(context, native_delegate, state, prep)
    except _INTERRUPTS as exc:
        return _interrupted(exc)
    except Exception as exc:
        return _failed_prepare(context, native_delegate, state, prep, exc)
    finally:
        with _lock:  # only valid inside this Prepare; do not keep the constants alive
            state.preparing.pop(_address(context), None)
        if prep is not None:
            for runtime, _, _ in prep.pending.values():
                runtime.close()


def _failed_prepare(
    context: Any, native_delegate: Any, state: DelegateState, prep: Preparing | None, exc: Exception
) -> int:
    """Prepare failed outside a partition's compile (or a partition failed without fallback).

    Returning an error makes TFLite undo the delegation and prepare its original plan again; on
    graphs where that undo corrupts the plan (``undo_unsafe_reason``: tflite-runtime 2.14 then
    crashes in DENSIFY's Prepare), the delegate instead claims nothing (with compile fallback:
    TFLite's CPU kernels run the graph, with a warning) or claims the plan with kernels that report
    the cause when the interpreter allocates its tensors.
    """
    cause = _cause(exc)
    if not isinstance(exc, DelegateError):
        cause = f"{type(exc).__name__}: {cause}"
    message = f"{_PLUGIN}: Prepare failed: {cause}"
    plan = prep.plan if prep is not None else []
    if prep is not None:
        for runtime, _, _ in prep.pending.values():
            runtime.close()
        prep.pending.clear()
        prep.report.delegated_nodes = []
    if state.options.compile_fallback:
        log.warning("%s; the graph runs on TFLite's CPU kernels", message)
        warn(f"{message}; the graph runs on TFLite's CPU kernels")
        if prep is not None:
            prep.report.fallbacks.append({"nodes": ["(all)"], "cause": cause})
        return 0
    try:
        unsafe = bool(plan) and undo_unsafe_reason(context, plan) is not None
    except Exception:
        unsafe = False
    if not unsafe or prep is None:
        _report(context, message)
        return 1
    prep.deferred = {frozenset(plan): message}
    return _replace(context, native_delegate, plan)


def _compile_options(info: DeviceInfo, options: DelegateOptions) -> CompileOptions:
    """How the partition is compiled for the device (compiler/device_policy.py)."""
    return compile_options(
        info,
        options.precision,
        options.storage_type,
        fuse=options.fuse,
        requested_vector_width=options.vector_width,
        requested_family=options.kernel_family,
    )


def _load_partition(
    context: Any, nodes: list[int], inputs: list[int], outputs: list[int], state: DelegateState, prep: Preparing
) -> tuple[Runtime, str]:
    """Compile (or load from the serialization cache, delegate/cache.py) and load one partition of
    ``prep``'s graph."""
    options = state.options
    graph = partition_graph(context, nodes, prep.graph, dequantize=options.enable_quantized_inference)
    device = select_device(options.device or None)
    info = describe(device)
    compile_opts = _compile_options(info, options)
    programs = program_cache_dir(options.serialization_dir, options.program_cache)
    store = SerializationCache.open(options.serialization_dir, options.model_token)

    def compiled() -> Runtime:
        ctx_model = compile_partition(graph, nodes, inputs, outputs, compile_opts)
        return _ready(_load_runtime(ctx_model, device, programs, options), options, tune=True)

    if store is None:
        log.debug("no serialization_dir: compiling the partition of %d nodes", len(nodes))
        return compiled(), "off"
    model_id = options.model_token.encode() if options.model_token else prep.constants_digest(context)
    extra = [options.enable_quantized_inference, options.tuning.value, compiler_fingerprint()]
    key = partition_key(graph, nodes, compile_opts, device_key=info.key, extra=extra, model_id=model_id)
    path = store.entry(key)
    # the token stands for the weights: a sample of them turns a stale token into a rebuild (cache_keys.py)
    sealed = entry_seal(
        "partition", key, **({"weights": weights_sample(context, graph)} if options.model_token else {})
    )
    try:
        payload = store.read(path, sealed)
        if payload is not None:
            log.info("serialization cache hit: %s", path)
            return _ready(_load_runtime(payload, device, programs, options), options, tune=False), "hit"
        log.info("serialization cache miss: no entry %s (model, options, device or package version differ)", path)
    except ContextFormatError as exc:
        log.warning("cache entry %s is unreadable (%s); rebuilding it", path, exc.detail)
        warn(f"{_PLUGIN}: cache entry {path} is unreadable ({exc.detail}); rebuilding it")
    except CacheIntegrityError as exc:
        log.warning("%s; rebuilding it", exc)
        warn(f"{_PLUGIN}: {exc}; rebuilding it")
    runtime = compiled()
    try:
        store.write_context(runtime.model, path, sealed)  # with the tuned work-group sizes
    except BaseException:
        runtime.close()
        raise
    return runtime, "miss"


def _load_runtime(source: Any, device: Any, program_cache: Any, options: DelegateOptions) -> Runtime:
    return Runtime.load(source, device=device, cache_dir=program_cache, persistent=options.persistent)


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


@ffi.def_extern()
def dlg_py_kernel_init(context: Any, params: Any, kernel: Any) -> int:
    start = time.perf_counter()
    try:
        ident = int(ffi.cast("int64_t *", params.delegate.data_)[0])
        state = _delegates.get(ident)
        if state is None:
            raise DelegateError("the delegate was destroyed before its kernel was created")
        nodes = list(int_array(params.nodes_to_replace))
        prep = state.preparing.get(_address(context))
        if prep is None:
            raise DelegateError("a delegate kernel was created outside the delegate's Prepare")
        deferred = next((m for part, m in prep.deferred.items() if set(nodes) <= part), None)
        if deferred is not None:
            _copy_error(deferred, kernel.error, ffi.sizeof(kernel.error))
            return 1
        inputs_ = list(int_array(params.input_tensors))
        outputs_ = list(int_array(params.output_tensors))
        pending = prep.pending.pop(frozenset(nodes), None)
        if pending is not None:
            runtime, cache_state, start = pending
        else:
            runtime, cache_state = _load_partition(context, nodes, inputs_, outputs_, state, prep)
        entry = _Kernel(runtime, [], state, dict(prep.graph.nodes), list(prep.plan), (nodes, inputs_, outputs_))
        entry.report = prep.report
        with _lock:
            handle = next(_ids)
            _kernels[handle] = entry
        entry.dims, entry.arrays = bind_kernel(context, entry.runtime, kernel)
        kernel.handle = handle
        state.device = f"{runtime.device_info.platform} / {runtime.device_info.name}"
        state.worker_affinity = runtime.device_info.worker_affinity
        state.precision = runtime.precision.name
        state.storage_type = state.options.storage_type.name
        prep.report.partitions.append(_partition_info(runtime, nodes, cache_state, start))
        return 0
    except _INTERRUPTS as exc:
        return _interrupted(exc, kernel.error)
    except Exception as exc:
        detail = str(exc) if isinstance(exc, DelegateError) else f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, DelegateError):
            detail += "\n" + "".join(traceback.format_exception(exc)[-3:])
        _copy_error(f"{_PLUGIN}: compiling a partition failed: {detail}", kernel.error, ffi.sizeof(kernel.error))
        return 1


def _partition_info(runtime: Runtime, nodes: list[int], cache_state: str, start: float) -> PartitionInfo:
    names = runtime.node_names
    fused = sum(fused_ops(name) for name in names)
    return PartitionInfo(nodes, cache_state, (time.perf_counter() - start) * 1e3, len(names), fused)


@ffi.def_extern()
def dlg_py_kernel_prepare(context: Any, kernel: Any, propagated: int) -> int:
    """The kernel's prepare: nothing to do while the partition's tensors keep the shapes it was
    compiled for; after a resize (TFLite has propagated the new shapes through the original nodes,
    kTfLiteDelegateFlagsRequirePropagatedShapes), the partition is compiled again for them. Where
    TFLite could not propagate them (``propagated`` 0: the delegate cleared the flag, see
    ``claim_rules.propagation_blocker``) the shapes inside the partition are stale, and it refuses."""
    try:
        entry = _kernels.get(int(kernel.handle))
        if entry is None:
            raise DelegateError("the delegate kernel was already freed")
        runtime = entry.runtime
        ids = [*runtime.input_ids, *runtime.output_ids]
        if [tensor_dims(context, i) for i in ids] == entry.dims:
            return 0
        if not propagated:
            raise DelegateError(
                "TFLite does not propagate shapes through this graph for the delegate (it has a custom op that "
                "only a delegate runs, or nodes that run other subgraphs: IF, WHILE, CALL_ONCE), and the delegate "
                "is applied when the interpreter is created, so this model's inputs keep the shapes it was "
                "converted with: convert it with the input shape you need"
            )
        _recompile(context, entry, kernel)
        return 0
    except _INTERRUPTS as exc:
        return _interrupted(exc, kernel.error)
    except Exception as exc:
        cause = _cause(exc) if isinstance(exc, DelegateError) else f"{type(exc).__name__}: {_cause(exc)}"
        message = f"{_PLUGIN}: the partition's tensors changed shape and it could not be compiled again: {cause}"
        _copy_error(message, kernel.error, ffi.sizeof(kernel.error))
        return 1


def _recompile(context: Any, entry: _Kernel, kernel: Any) -> None:
    """Compile ``entry``'s partition for the shapes its tensors have now, and swap it in."""
    state = entry.state
    assert state is not None and entry.report is not None
    nodes, inputs, outputs = entry.partition
    graph = capture_tensors(context, entry.nodes)
    static = resolve(graph, entry.plan)
    # The partition's nodes must still be the ones Prepare would claim with these shapes.
    supported, unsupported = _supported_nodes(graph, entry.plan, state.options, static)
    lost = [graph.nodes[i].name for i in nodes if i not in supported]
    if lost:
        why = unsupported.get(lost[0], "not claimed")
        raise DelegateError(f"{lost[0]} cannot run on the delegate with the new shapes: {why}")
    prep = Preparing(graph, entry.report, entry.plan, static)
    start = time.perf_counter()
    runtime, cache_state = _load_partition(context, nodes, inputs, outputs, state, prep)
    if (runtime.input_ids, runtime.output_ids) != (entry.runtime.input_ids, entry.runtime.output_ids):
        runtime.close()
        raise DelegateError("the recompiled partition binds other tensors than before")
    old = entry.runtime
    entry.runtime = runtime
    entry.dims, entry.arrays = bind_kernel(context, entry.runtime, kernel)
    old.close()
    info = _partition_info(runtime, nodes, cache_state, start)
    with _lock:
        partitions = entry.report.partitions
        for k, p in enumerate(partitions):
            if p.nodes == nodes:
                info.recompiles = p.recompiles + 1
                partitions[k] = info


@ffi.def_extern()
def dlg_py_kernel_free(handle: int) -> None:
    with _lock:
        entry = _kernels.pop(handle, None)
    if entry is not None:
        entry.runtime.close()


__all__ = ["live_kernels", "live_runtimes", "state_of_pointer"]
